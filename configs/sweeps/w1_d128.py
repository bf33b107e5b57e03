"""W1 at d_model 128, 4 layers: the declaration, its reading and its budget are in
configs/sweeps/w1_d64.py.
  python scripts/sweep.py --sweep=configs/sweeps/w1_d128.py --workdir=docs/sweeps/w1_d128
"""

import os

from transformer.research.sweeps import Sweep
from transformer.training.experiment import load_module

W1 = load_module(os.path.join(os.path.dirname(os.path.abspath(__file__)), "w1_d64.py"))


def get_sweep() -> Sweep:
  return W1.width_sweep(128, "w1_d128")
