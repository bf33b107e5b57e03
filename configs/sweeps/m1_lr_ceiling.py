"""M1: is the scale's effect a learning-rate ceiling set by the first attention's logits?

Each E1 arm with and without QK-norm (a LayerNorm on every head's queries and keys before the
1/sqrt(d_k) or 1/d_k, so the logits' size no longer follows the input's). If QK-norm removes
the arms' differences, the scale acts through the growth of the first attention's logits;
if the differences stay, it acts through what the input holds (the token/PE balance).

Arms (axis 1, zipped), each without and with QK-norm (axis 2):
  paper      N(0, 1/d), sqrt(d) on the token, 1/sqrt(d_k)
  no_scale   N(0, 1/d), no scale
  pe_down    N(0, 1/d), no scale, the PE times d^-0.5 = 1/8 (the paper's balance, 8x smaller input)
  inv_dk     the paper with 1/d_k (E6's better exponent)
  scale_sum  sqrt(d) on token + PE (no_scale's balance, 8x larger input)
The learning rate is searched on a factor-2 grid from 5e-3 to 8e-2 (Wortsman et al. 2023's
learning-rate sensitivity reads the whole curve), one step further where an arm's best is on
an edge (extend_edges=1, a cut: E1 allowed 3). Seeds 0-2 choose each arm's rate (validation
loss) and give the sensitivity curves; seeds 3-5 are run at the chosen rate only and are the
only seeds the reported test NLL and the paired differences use (fresh_report). One data split
for every seed (split_seed=0): the seed changes the initial draws, dropout and data order only.
Both layers' within-row logit variance and largest |logit| are stored through training. The
learning-rate sensitivity (tuning.sensitivity) reads seeds 0-2 over the 5e-3 to 8e-2 grid.
Cuts (budget): 3 choosing seeds, not more; the arms run in the order above, so a partial run
holds whole arms.
  python scripts/sweep.py --sweep=configs/sweeps/m1_lr_ceiling.py \
      --workdir=docs/sweeps/m1_lr_ceiling
"""

from transformer.research.sweeps import Sweep

ARMS = {
    "model.embed_scale": ["sqrt_d", "none", "none", "sqrt_d", "sqrt_d"],
    "model.embed_scale_target": ["token", "token", "token", "token", "sum"],
    "model.posemb_scale": [1.0, 1.0, 0.125, 1.0, 1.0],
    "model.attention_scale": ["inv_sqrt_dk", "inv_sqrt_dk", "inv_sqrt_dk", "inv_dk",
                              "inv_sqrt_dk"],
}
QK_NORM = {"model.qk_norm": ["none", "layernorm"]}
NAMES = ("paper", "no_scale", "pe_down", "inv_dk", "scale_sum")
ATTENTION = "diagnostics/decoder/layer_{}/self_attention/head_*/"


def get_sweep() -> Sweep:
  return Sweep(
      name="m1_lr_ceiling",
      question="Learning-rate sensitivity and test NLL of E1's arms with and without QK-norm: "
               "does normalising queries and keys remove the differences the embedding scale "
               "makes?",
      base="configs/lm_tiny.py",
      axes=(ARMS, QK_NORM),
      arm_names=tuple(f"{n}{s}" for n in NAMES for s in ("", "+qk")),
      contrast="model.qk_norm",  # each arm with QK-norm against itself without
      # Against the paper, and the sum against no scale: the same balance, 8x the input's size.
      pairs=tuple((f"{n}{s}", f"paper{s}") for s in ("", "+qk") for n in NAMES[1:])
      + tuple((f"scale_sum{s}", f"no_scale{s}") for s in ("", "+qk")),
      seeds=(0, 1, 2),
      confirm_seeds=(3, 4, 5),
      fresh_report=True,
      fixed={"test_fraction": 0.02, "split_seed": 0},
      tune={"learning_rate": [5e-3, 1e-2, 2e-2, 4e-2, 8e-2]},
      extend_edges=1,
      select="eval/loss",
      report="test/loss",
      metrics=("eval/loss", "test/loss",
               "mean:init/decoder/layer_0/self_attention/head_*/logit_var_within",
               "mean:final/decoder/layer_0/self_attention/head_*/logit_var_within",
               "mean:final/decoder/layer_1/self_attention/head_*/logit_var_within",
               "max:final/decoder/layer_0/self_attention/head_*/logit_absmax",
               "max:final/decoder/layer_1/self_attention/head_*/logit_absmax",
               "mean:final/decoder/layer_0/self_attention/head_*/entropy_deficit"),
      # Through training, each layer: the heads' mean within-row logit variance, the largest
      # |logit|.
      curves=("eval/loss",) + tuple(f"{reduce}:{ATTENTION.format(layer)}{name}"
                                    for reduce, name in (("mean", "logit_var_within"),
                                                         ("max", "logit_absmax"))
                                    for layer in (0, 1)),
      # ln 2000: the loss of a uniform guess over the 2000-piece vocabulary, about the loss at init.
      sensitivity_cap=7.6,
  )
