"""Experiment 2: embedding scale x weight tying x d_model at learning rate 4e-3, 3 seeds.

(One learning rate keeps the whole set of sweeps near two hours on 2 CPU cores; the
learning-rate and optimizer dependence of the scale is the `conventions` sweep.)

Questions 1 and 2 and hypothesis (a) of docs/findings.md: is sqrt(d) needed, and is it needed
because of tied embeddings (init std d^-0.5 keeps tied logits small; sqrt(d) restores a unit
input)? The embedding init is the paper's N(0, 1/d) throughout.
  python scripts/sweep.py --sweep=configs/sweeps/embed_scale_grid.py \
      --workdir=/tmp/sweeps/embed_scale_grid
"""

from transformer.research.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(
      name="embed_scale_grid",
      question="Final eval NLL with and without the sqrt(d) embedding scale, tied or untied "
               "input/output embeddings, d_model 32/64/128, peak learning rate 4e-3.",
      base="configs/lm_tiny.py",
      axes=({"model.embed_scale": ["sqrt_d", "none"]},
            {"model.logits_via_embedding": [True, False]},
            {"model.d_model": [32, 64, 128], "model.d_ff": [128, 256, 512]},
            {"learning_rate": [4e-3]}),
      fixed={"diagnostics_every_steps": 100},
      metrics=("eval/nll", "final/decoder/embed/ratio", "final/output/log_z",
               "final/output/max_logit"),
      curves=("eval/nll",),
  )
