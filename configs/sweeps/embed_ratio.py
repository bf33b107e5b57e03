"""Experiment 1: the norm ratio ||s E[tok]|| / ||PE[pos]|| at init and through training.

Questions 1 and 4 of docs/findings.md: what sqrt(d_model) does to the balance of token and position
signal, and what scaling after the positional encoding is added would do instead. The ratio is
logged every 50 steps, overall and by token-frequency quartile (bucket_0 = most frequent).
The first layer's q.k statistics show what the embedding scale does to the attention after
the 1/sqrt(d_k) (question 3).
  python scripts/sweep.py --sweep=configs/sweeps/embed_ratio.py --workdir=/tmp/sweeps/embed_ratio
"""

from transformer.research.sweeps import Sweep

EMBED = "decoder/embed"
LAYER0 = "decoder/layer_0/self_attention/head_*"  # the first attention, averaged over heads


def get_sweep() -> Sweep:
  return Sweep(
      name="embed_ratio",
      question="RMS(s*E[tok]) / RMS(PE) at init and after training: s = sqrt(d) on the token "
               "embedding (the paper), no scale, or sqrt(d) on the sum E + PE (scale after PE).",
      base="configs/lm_tiny.py",
      axes=({"model.embed_scale": ["sqrt_d", "none", "sqrt_d"],
             "model.embed_scale_target": ["token", "token", "sum"]},),
      metrics=(f"init/{EMBED}/ratio", f"final/{EMBED}/ratio", f"final/{EMBED}/bucket_0/ratio",
               f"final/{EMBED}/bucket_3/ratio", f"final/{EMBED}/token_rms",
               f"final/{EMBED}/posemb_rms", f"init/{LAYER0}/raw_var", f"init/{LAYER0}/logit_var",
               f"init/{LAYER0}/entropy", f"final/{LAYER0}/logit_var", "eval/nll"),
      curves=(f"diagnostics/{EMBED}/ratio", f"diagnostics/{EMBED}/bucket_0/ratio",
              f"diagnostics/{EMBED}/bucket_3/ratio", "eval/nll"),
  )
