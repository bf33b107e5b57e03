"""Experiment 2: embedding scale x weight tying x d_model x learning rate, 3 seeds.

Questions 1 and 2 and hypothesis (a) of RESEARCH.md: is sqrt(d) needed, and is it needed
because of tied embeddings (init std d^-0.5 keeps tied logits small; sqrt(d) restores a unit
input)? The embedding init is the paper's N(0, 1/d) throughout.
  python scripts/sweep.py --config=configs/sweeps/embed_scale_grid.py --workdir=/tmp/sweeps/embed_scale_grid
"""

from transformer.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(
      name="embed_scale_grid",
      question="Final eval NLL with and without the sqrt(d) embedding scale, tied or untied "
               "input/output embeddings, d_model 32/64/128, two peak learning rates.",
      base="configs/lm_tiny.py",
      axes=({"model.embed_scale": ["sqrt_d", "none"]},
            {"model.logits_via_embedding": [True, False]},
            {"model.d_model": [32, 64, 128], "model.d_ff": [128, 256, 512]},
            {"learning_rate": [1e-3, 4e-3]}),
      fixed={"diagnostics_every_steps": 100},
      metrics=("eval/nll", "final/decoder/embed/ratio", "final/output/log_z",
               "final/output/max_logit"),
      curves=("eval/nll",),
  )
