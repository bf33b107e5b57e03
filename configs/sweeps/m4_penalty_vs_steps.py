"""M4: does the penalty of dropping sqrt(d) vanish with training?

E4 trained 3000 steps at the rates chosen for 400 and found the no-scale penalty shrink from
0.199 to 0.053 nats. Here the paper and no scale are trained 400, 1200 and 3000 steps (0.82,
2.46 and 6.14 M tokens: 0.4, 1.2 and 2.9 epochs of the 2.11 M train tokens), each at its own
best rate for that length, and the penalty is read against tokens seen with a line in
log(steps) fitted per seed and the length where it would reach zero (an extrapolation; the
report's `trend` section). The 400-step runs repeat M1's paper and no_scale points without
QK-norm (the same config, split and seeds), so this sweep holds all three lengths itself.

Rates 5e-3, 1e-2, 2e-2 (one step further at an edge); seeds 0-1 choose, seeds 3-5 report
(fresh_report); one data split for every seed (split_seed=0). Cut for time: two choosing seeds,
not three (as in M2 and M3), which brings the sweep to 54 runs, about 105 minutes of both cores
on the 2-core machine.
  python scripts/sweep.py --sweep=configs/sweeps/m4_penalty_vs_steps.py \
      --workdir=docs/sweeps/m4_penalty_vs_steps
"""

from transformer.research.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(
      name="m4_penalty_vs_steps",
      question="Test NLL of the paper and no scale at 400, 1200 and 3000 steps, each at its own "
               "best learning rate for that length, and the penalty against the length.",
      base="configs/lm_tiny.py",
      axes=({"num_train_steps": [400, 1200, 3000]}, {"model.embed_scale": ["sqrt_d", "none"]}),
      arm_names=("paper@400", "no_scale@400", "paper@1200", "no_scale@1200", "paper@3000",
                 "no_scale@3000"),
      contrast="model.embed_scale",  # no scale against the paper, at each length
      trend="num_train_steps",  # ... and that penalty against the length
      seeds=(0, 1),
      confirm_seeds=(3, 4, 5),
      fresh_report=True,
      fixed={"test_fraction": 0.02, "split_seed": 0, "eval_every_steps": 300,
             "diagnostics_every_steps": 300, "checkpoint_every_steps": 600},
      tune={"learning_rate": [5e-3, 1e-2, 2e-2]},
      extend_edges=1,
      metrics=("eval/loss", "test/loss", "final/decoder/embed/ratio"),
      curves=("eval/loss", "diagnostics/decoder/embed/ratio"),
  )
