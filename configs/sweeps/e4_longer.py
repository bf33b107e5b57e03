"""E4: does the gap close with longer training? The paper, no scale and convention (2), each at
its best rate of E1 (docs/sweeps/e1_tuned: 1e-2, 1e-2 and 2e-2, chosen on validation over
factor-2 grids), trained 3000 steps instead of 400: 2.9 epochs of the 2.11 M train tokens
instead of 0.39. Does the test NLL gap close, and does the token/PE ratio of the no-scale arm
recover? 3 seeds; diagnostics every 250 steps.
  python scripts/sweep.py --sweep=configs/sweeps/e4_longer.py --workdir=docs/sweeps/e4_longer
"""

from transformer.research.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(
      name="e4_longer",
      question="Test NLL and token/PE ratio of the paper, no scale and convention (2) at their "
               "E1 rates over 3000 steps.",
      base="configs/lm_tiny.py",
      axes=({"model.embed_init_std": ["inv_sqrt_d", "inv_sqrt_d", 1.0],
             "model.embed_scale": ["sqrt_d", "none", "none"],
             "model.logits_scale": ["none", "none", "inv_sqrt_d"],
             "learning_rate": [1e-2, 1e-2, 2e-2]},),
      fixed={"test_fraction": 0.02, "num_train_steps": 3000, "eval_every_steps": 250,
             "diagnostics_every_steps": 250, "checkpoint_every_steps": 500},
      metrics=("eval/loss", "test/loss", "final/decoder/embed/ratio"),
      curves=("eval/loss", "diagnostics/decoder/embed/ratio"),
      arm_names=("paper", "no_scale", "conv2"),
      # Paired by seed against the paper, as E1 (same seeds: same data order and init draws).
      baseline="embed_init_std=inv_sqrt_d,embed_scale=sqrt_d,logits_scale=none,learning_rate=0.01",
  )
