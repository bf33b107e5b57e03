"""The paper's big model (Table 3 "big"): d_model 1024, 16 heads, d_ff 4096, 300k steps.

Dropout 0.3 as for EN-DE (the paper used 0.1 for EN-FR); otherwise the base training recipe.
"""

import os

from transformer.training.experiment import load_module
from transformer.training.optimizer_settings import paper_peak_learning_rate

# configs/base.py, loaded by its path as every config file is: configs/ is no package.
base = load_module(os.path.join(os.path.dirname(os.path.abspath(__file__)), "base.py"))


def get_config():
  config = base.get_config()
  config.model.update(d_model=1024, num_heads=16, d_ff=4096, dropout_rate=0.3)
  config.num_train_steps = 300_000
  config.learning_rate = paper_peak_learning_rate(1024, 4000)  # 4.94e-4
  return config
