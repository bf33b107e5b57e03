"""E2 (continued): the balance itself. The paper's embedding (N(0, 1/d) times sqrt(d), tied)
with the sinusoidal encoding scaled by 1/8, 1/2, 1, 2, 8 (token/PE RMS ratio sqrt(2) * 8 ...
sqrt(2) / 8 at init), each at its own best learning rate, 3 seeds (5 at the chosen rates). If
the token/PE balance is what sqrt(d) buys, the loss should worsen as the PE grows past the
token and change little below it.
  python scripts/sweep.py --sweep=configs/sweeps/e2_posemb_scale.py \
      --workdir=docs/sweeps/e2_posemb_scale
"""

from transformer.research.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(
      name="e2_posemb_scale",
      question="Test NLL of the paper's model with the positional encoding scaled by 1/8 to 8, "
               "each at its own best learning rate.",
      base="configs/lm_tiny.py",
      # Factor-4 steps (1/4 and 4 cut to fit the budget), the paper's 1 first: the baseline.
      axes=({"model.posemb_scale": [1.0, 0.125, 0.5, 2.0, 8.0]},),
      fixed={"test_fraction": 0.02},
      tune={"learning_rate": [5e-3, 1e-2, 2e-2]},
      confirm_seeds=(3, 4),  # 5 seeds at each chosen rate, where differences are read
      extend_edges=2,
      metrics=("eval/loss", "test/loss", "init/decoder/embed/ratio", "final/decoder/embed/ratio"),
      curves=("eval/loss",),
  )
