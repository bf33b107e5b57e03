"""The main job: the paper's Transformer, small, learning to reverse sequences (embedded data).

Trains in a few minutes on 2 CPU cores:
  python scripts/train.py --config=configs/default.py --workdir=/tmp/transformer-default
"""

from transformer.training.experiment import base_config, model_fields


def get_config():
  config = base_config()
  config.model = model_fields(
      "vaswani2017", d_model=64, num_heads=4, d_ff=256, num_encoder_layers=2,
      num_decoder_layers=2, dropout_rate=0.1)
  config.synthetic.update(task="reverse", vocab_size=32, min_len=4, max_len=16,
                          num_train=20000, num_eval=1000)
  config.max_len = 17  # 16 symbols + eos
  config.batch_size = 64
  config.num_train_steps = 2000
  config.learning_rate = 2e-3
  config.warmup_steps = 200
  config.schedule = "rsqrt"
  config.log_every_steps = 50
  config.eval_every_steps = 500
  config.checkpoint_every_steps = 500
  return config
