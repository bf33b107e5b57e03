"""Experiment 6: output logits. log Z (the log-partition of the softmax) and the max logit,
tied embeddings with and without the 1/sqrt(d) logit scale, untied, each with and without
z-loss 1e-4 (PaLM; Wortsman et al. 2023).
  python scripts/sweep.py --sweep=configs/sweeps/output_logits.py \
      --workdir=/tmp/sweeps/output_logits
"""

from transformer.research.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(
      name="output_logits",
      question="log Z and the max output logit at init and after training, and eval NLL, for "
               "tied logits h.E^T, tied h.E^T / sqrt(d), and an untied projection, with and "
               "without z-loss.",
      base="configs/lm_tiny.py",
      axes=({"model.logits_via_embedding": [True, True, False],
             "model.logits_scale": ["none", "inv_sqrt_d", "none"]},
            {"z_loss": [0.0, 1e-4]}),
      metrics=("init/output/log_z", "final/output/log_z", "init/output/max_logit",
               "final/output/max_logit", "eval/nll"),
      curves=("diagnostics/output/log_z", "diagnostics/output/max_logit", "eval/nll"),
  )
