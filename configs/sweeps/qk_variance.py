"""Experiment 4: Var(q.k) and max |logit| per layer and head against d_k, at init and after
training. The slope of log Var(q.k) against log d_k is 1 when q and k have iid components
(the paper's argument for 1/sqrt(d_k)) and 2 when q and k are correlated (muP's for 1/d_k).
d_model 64 and 4 heads throughout; head_dim sets d_k.
  python scripts/sweep.py --sweep=configs/sweeps/qk_variance.py --workdir=/tmp/sweeps/qk_variance
"""

from transformer.research.sweeps import Sweep

HEADS = "decoder/layer_*/self_attention/head_*"


def get_sweep() -> Sweep:
  return Sweep(
      name="qk_variance",
      question="Var(q.k) (before the 1/sqrt(d_k) scale), Var(q.k)/d_k, max |logit| and "
               "attention entropy, averaged over layers and heads, at init and after "
               "training, for d_k = 8, 16, 32, 64.",
      base="configs/lm_tiny.py",
      axes=({"model.head_dim": [8, 16, 32, 64]},),
      metrics=(f"init/{HEADS}/raw_var", f"final/{HEADS}/raw_var", f"init/{HEADS}/qk_var_over_dk",
               f"final/{HEADS}/qk_var_over_dk", f"max:final/{HEADS}/logit_absmax",
               f"final/{HEADS}/entropy", "eval/nll"),
      curves=("diagnostics/decoder/layer_0/self_attention/head_0/qk_var_over_dk",
              "diagnostics/decoder/layer_1/self_attention/head_0/logit_var", "eval/nll"),
      fits=({"x": "model.head_dim", "y": f"init/{HEADS}/raw_var"},
            {"x": "model.head_dim", "y": f"final/{HEADS}/raw_var"}),
  )
