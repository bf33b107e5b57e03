#!/bin/bash
# base and big, bf16, train step on one GPU: before (ac7fac1) and after (HEAD), interleaved.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export JAX_PLATFORMS=cuda PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/env.txt
python3 -c 'import jax,flax,sys;print(sys.version.split()[0],"jax",jax.__version__,"flax",flax.__version__)' >> $OUT/env.txt 2>&1
ROOT=$PWD
for cfg in base big; do
  for which in ${ORDER:-before after}; do
    if [ $which = before ]; then cd $ROOT/.gpu/before; else cd $ROOT; fi
    s=$(date +%s)
    PYTHONPATH=$PWD:/tmp/site timeout 140 python3 scripts/benchmark.py --steps=10 --repeats=3 \
      --config=configs/$cfg.py --config.model.dtype=bfloat16 --output=$OUT/${cfg}_${which}.json \
      > $OUT/${cfg}_${which}.log 2>&1
    echo "$cfg $which rc $? $(( $(date +%s)-s )) s" | tee -a $OUT/env.txt
    grep -E '"(train_step_seconds|mfu|train_tokens_per_sec|attention_kernel|peak_memory_gib|compile_seconds)"' $OUT/${cfg}_${which}.json 2>/dev/null
  done
done
cd $OUT && tar czf logs.tgz *.log && rm *.log
