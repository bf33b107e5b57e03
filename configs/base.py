"""The paper's base model and training (Vaswani et al. 2017, Table 3 "base", Section 5).

d_model 512, 6+6 layers, 8 heads, d_ff 2048, dropout 0.1, label smoothing 0.1, shared
32k vocabulary, Adam(0.9, 0.98, 1e-9), lrate = d^-0.5 min(step^-0.5, step warmup^-1.5) with
4000 warmup steps, 100k steps. The paper's batches held ~25k source and ~25k target tokens:
128 rows of 256 tokens (32k slots per side) comes close once padding is counted.
"""

from transformer.training.experiment import base_config, model_fields
from transformer.training.optimizer_settings import paper_peak_learning_rate


def get_config():
  config = base_config()
  config.model = model_fields("vaswani2017", vocab_size=32000, d_model=512, num_heads=8,
                              d_ff=2048, num_encoder_layers=6, num_decoder_layers=6,
                              dropout_rate=0.1)
  config.dataset = "synthetic"  # a translation corpus goes here: --config.dataset=NAME
  config.batch_size = 128
  config.max_len = 256
  config.num_train_steps = 100_000
  config.optimizer = "adam"
  config.adam_b1, config.adam_b2, config.adam_eps = 0.9, 0.98, 1e-9
  config.schedule = "rsqrt"
  config.warmup_steps = 4000
  config.learning_rate = paper_peak_learning_rate(512, 4000)  # 6.99e-4: the paper's formula
  config.label_smoothing = 0.1
  config.log_every_steps = 100
  config.eval_every_steps = 5000
  config.checkpoint_every_steps = 5000
  return config
