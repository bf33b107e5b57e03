"""A decoder-only language model (DecoderOnly), pre-LN as GPT-style models train it.

On the embedded synthetic task each example becomes one sequence, inputs then targets:
  python scripts/train.py --config=configs/lm.py --workdir=/tmp/transformer-lm
"""

from transformer.training.experiment import base_config, model_fields


def get_config():
  config = base_config()
  config.model_type = "lm"
  config.model = model_fields("vaswani2017", d_model=64, num_heads=4, d_ff=256,
                              num_encoder_layers=0, num_decoder_layers=2, norm_position="pre",
                              dropout_rate=0.1)
  config.synthetic.update(task="reverse", vocab_size=32, min_len=4, max_len=16)
  config.max_len = 34  # inputs (16 + eos) then targets (16 + eos)
  config.batch_size = 64
  config.num_train_steps = 2000
  config.learning_rate = 2e-3
  config.warmup_steps = 200
  config.label_smoothing = 0.0
  return config
