"""Experiment 3 (and 7): the two conventions that are the same network at init, under three
optimizers. (1) E ~ N(0, 1/d), input sqrt(d) E, logits h.E^T (the paper); (2) E ~ N(0, 1),
input E, logits h.E^T / sqrt(d) (Flax WMT, T5). Do the loss curves coincide? The relative
update ||dE|| / ||E|| of the embedding is logged every 50 steps (experiment 7).
  python scripts/sweep.py --sweep=configs/sweeps/conventions.py --workdir=/tmp/sweeps/conventions
"""

from transformer.research.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(
      name="conventions",
      question="Eval NLL and the embedding's relative update size of conventions (1) "
               "sqrt(d)-scaled N(0, 1/d) embeddings and (2) N(0, 1) embeddings with logits "
               "/ sqrt(d), under Adam, Adafactor and SGD with momentum.",
      base="configs/lm_tiny.py",
      axes=({"model.embed_scale": ["sqrt_d", "none"],
             "model.embed_init_std": ["inv_sqrt_d", 1.0],
             "model.logits_scale": ["none", "inv_sqrt_d"]},
            {"optimizer": ["adam", "adafactor", "sgd"],
             "learning_rate": [2e-3, 1e-2, 0.1]}),
      metrics=("init/output/log_z", "eval/nll", "final/update_ratio/embedding",
               "final/decoder/embed/ratio", "final/output/max_logit"),
      curves=("eval/nll", "train/loss", "diagnostics/update_ratio/embedding"),
  )
