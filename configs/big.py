"""The paper's big model (Table 3 "big"): d_model 1024, 16 heads, d_ff 4096, 300k steps.

Dropout 0.3 as for EN-DE (the paper used 0.1 for EN-FR); otherwise the base training recipe.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import base  # noqa: E402  (configs/base.py)

from transformer.training.optimizer_settings import paper_peak_learning_rate  # noqa: E402


def get_config():
  config = base.get_config()
  config.model.update(d_model=1024, num_heads=16, d_ff=4096, dropout_rate=0.3)
  config.num_train_steps = 300_000
  config.learning_rate = paper_peak_learning_rate(1024, 4000)  # 4.94e-4
  return config
