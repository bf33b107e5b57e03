"""Experiment 5: attention scale variants at a high learning rate (1e-2, 5x lm_tiny's 2e-3,
where Wortsman et al. 2023 see attention-logit growth in small models).
1/sqrt(d_k) (the paper), 1/d_k (muP), none, QK-LayerNorm (with 1/sqrt(d_k)), a learned
per-head temperature, a soft cap of 5 on the logits. Attention entropy and max |logit| are
logged every 50 steps; collapse shows as entropy falling toward 0.
  python scripts/sweep.py --sweep=configs/sweeps/attention_scale.py \
      --workdir=/tmp/sweeps/attention_scale
"""

from transformer.research.sweeps import Sweep

HEADS = "decoder/layer_*/self_attention/head_*"


def get_sweep() -> Sweep:
  return Sweep(
      name="attention_scale",
      question="Eval NLL, logit variance and attention entropy (means over layers and heads) "
               "and the largest |logit| of six attention-scale variants at peak learning "
               "rate 1e-2.",
      base="configs/lm_tiny.py",
      axes=({"model.attention_scale": ["inv_sqrt_dk", "inv_dk", "none", "inv_sqrt_dk",
                                       "learned", "inv_sqrt_dk"],
             "model.qk_norm": ["none", "none", "none", "layernorm", "none", "none"],
             "model.attn_logit_softcap": [None, None, None, None, None, 5.0]},
            {"learning_rate": [1e-2]}),
      metrics=("eval/nll", f"init/{HEADS}/logit_var", f"final/{HEADS}/logit_var",
               f"max:final/{HEADS}/logit_absmax", f"final/{HEADS}/entropy",
               ),
      curves=("eval/nll", "diagnostics/decoder/layer_1/self_attention/head_0/entropy",
              "diagnostics/decoder/layer_1/self_attention/head_0/logit_absmax"),
  )
