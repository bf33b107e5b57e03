"""M5: the Answers' effects under 0.05 nats on a finer rate grid and five new seeds.

A factor-2 rate grid leaves up to about 0.015 nats of grid error, the size of several small
effects the findings quote, and E1, E2 and E6 reported on the seeds that chose their rates.
Here each arm is searched at sqrt(2) steps around the optimum those sweeps found (1e-2 for
every arm at d_model 64), one step further at an edge, on seeds 0-2; five seeds that took no
part in any choice (6-10) are run at each arm's chosen rate and are the only seeds reported
(fresh_report). One data split for every seed (split_seed=0).

Arms, each against the paper by seed:
  paper      N(0, 1/d), sqrt(d) on the token, 1/sqrt(d_k), PE x 1 (token/PE ratio 1.41)
  pe_down    no scale, the PE times d^-0.5 = 1/8 (E1's winner: 0.038 nats on seeds 0-4)
  inv_dk     the paper with 1/d_k (E6: 0.029-0.051 nats better at d_k 8-64)
  pe_x2      the paper with the PE doubled, ratio 0.71 (E2: 0.045 nats worse)
65 runs (three edges extended by one step), about 35 minutes of both cores on the 2-core machine.
  python scripts/sweep.py --sweep=configs/sweeps/m5_fine_grid.py --workdir=docs/sweeps/m5_fine_grid
"""

from transformer.research.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(
      name="m5_fine_grid",
      question="Test NLL of pe_down, 1/d_k and a doubled PE against the paper, each at its own "
               "best rate on a sqrt(2) grid, reported on five seeds that chose nothing.",
      base="configs/lm_tiny.py",
      axes=({"model.embed_scale": ["sqrt_d", "none", "sqrt_d", "sqrt_d"],
             "model.posemb_scale": [1.0, 0.125, 1.0, 2.0],
             "model.attention_scale": ["inv_sqrt_dk", "inv_sqrt_dk", "inv_dk", "inv_sqrt_dk"]},),
      arm_names=("paper", "pe_down", "inv_dk", "pe_x2"),
      seeds=(0, 1, 2),
      confirm_seeds=(6, 7, 8, 9, 10),
      fresh_report=True,
      fixed={"test_fraction": 0.02, "split_seed": 0},
      tune={"learning_rate": [7.07e-3, 1e-2, 1.41e-2]},
      extend_edges=1,
      metrics=("eval/loss", "test/loss"),
      curves=("eval/loss",),
  )
