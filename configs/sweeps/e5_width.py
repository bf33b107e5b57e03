"""E5: does the no-scale penalty depend on width? The paper's sqrt(d) token scale against no
scale at d_model 64, 128 and 256 (4 heads, d_ff = 4 d_model, 2 layers, 400 steps), each arm
at its own best learning rate (chosen on validation, reported on test), 3 seeds. Without the
scale the token's share of the input falls like d^-0.5 against the fixed-size sinusoids, so a
penalty that grows with width would support the imbalance account of Question 1.
  python scripts/sweep.py --config=configs/sweeps/e5_width.py --workdir=docs/sweeps/e5_width
"""

from transformer.research.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(
      name="e5_width",
      question="Test NLL with and without the sqrt(d) token scale at d_model 64, 128, 256, "
               "each at its own best learning rate.",
      base="configs/lm_tiny.py",
      axes=({"model.d_model": [64, 128, 256], "model.d_ff": [256, 512, 1024]},
            {"model.embed_scale": ["sqrt_d", "none"]}),
      fixed={"test_fraction": 0.02},
      tune={"learning_rate": [2.5e-3, 5e-3, 1e-2, 2e-2]},
      confirm_seeds=(3, 4),  # 5 seeds at each chosen rate, where differences are read
      contrast="model.embed_scale",  # no scale against the paper at each width
      metrics=("eval/loss", "test/loss", "final/decoder/embed/ratio"),
      curves=("eval/loss",),
  )
