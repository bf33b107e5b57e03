#!/bin/bash
# base and big, bf16, train step on one GPU: before (5f21299) and after (HEAD): pass 1
# before then after, pass 2 after then before (pass 2 only while time is left).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export JAX_PLATFORMS=cuda PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/env.txt
python3 -c 'import jax,flax,sys;print(sys.version.split()[0],"jax",jax.__version__,"flax",flax.__version__)' >> $OUT/env.txt 2>&1
ROOT=$PWD; START=$(date +%s)
for pass in ${PASSES:-1 2}; do
  [ $pass = 1 ] && ORDER="before after" || ORDER="after before"
  if [ $pass = 2 ] && [ $(( $(date +%s)-START )) -gt 290 ]; then echo "pass 2 skipped: time" >> $OUT/env.txt; break; fi
  for cfg in base big; do
    for which in $ORDER; do
      if [ $which = before ]; then cd $ROOT/.gpu/before; else cd $ROOT; fi
      s=$(date +%s)
      PYTHONPATH=$PWD:/tmp/site timeout 140 python3 scripts/benchmark.py --steps=10 --repeats=3 \
        --config=configs/$cfg.py --config.model.dtype=bfloat16 --output=$OUT/pass${pass}_${cfg}_${which}.json \
        > $OUT/pass${pass}_${cfg}_${which}.log 2>&1
      echo "pass$pass $cfg $which rc $? $(( $(date +%s)-s )) s" | tee -a $OUT/env.txt
    done
  done
done
cd $OUT && tar czf logs.tgz *.log && rm *.log
