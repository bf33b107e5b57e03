set -x
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
python3 -m pip install -q --no-deps --no-index --target /tmp/pydeps .gpuwheels/*.whl
NEW=$PWD; OLD=$PWD/.gpuold
export PYTHONPATH=/tmp/pydeps
(python3 -c "import jax,flax,optax,grain,tensorflow_datasets as t, orbax.checkpoint as o; print('jax',jax.__version__,'flax',flax.__version__,'optax',optax.__version__,'tfds',t.__version__, jax.devices())"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; git log -1 --format=%H) > $OUT/env.txt 2>&1
mkdir -p /tmp/logs
for m in base big; do for tree in old new; do
  dir=$NEW; [ $tree = old ] && dir=$OLD
  (cd $dir && PYTHONPATH=$dir:/tmp/pydeps timeout 150 python3 scripts/benchmark.py --config=configs/$m.py --config.model.dtype=bfloat16 --steps=10 --repeats=3 --output=$OUT/${m}_${tree}.json > /tmp/logs/${m}_${tree}.log 2>&1)
  grep -E '"(train_step_seconds|mfu|train_tokens_per_sec)"' $OUT/${m}_${tree}.json
done; done
tar -czf $OUT/logs.tgz -C /tmp logs
