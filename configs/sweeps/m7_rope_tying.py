"""M7: the decisive control for the balance account. RoPE (rotates queries and keys, adds
nothing to the token) x {post-LN, pre-LN} x {tied, untied output projection} x {no scale,
sqrt(d) on an N(0, 1/d) token embedding}.

If sqrt(d) acts through the token/PE balance, its effect should vanish wherever nothing is
added to the token: the post-LN no-scale penalty without an added PE should be near zero. If
M3's pre-LN gain from sqrt(d) with RoPE vanishes once the output projection is untied, it was
an effect of the gradient sqrt(d) sends into the shared matrix, not of the token's share of
the residual stream.

Each arm at its own best learning rate: post-LN arms search 5e-3, 1e-2, 2e-2 (M1's post-LN
optimum was 1e-2), pre-LN arms 1e-2, 2e-2, 4e-2 (M3's RoPE optimum was 2e-2), one step further
at an edge. Seeds 0 and 1 choose the rate; seeds 3-5 are run at the chosen rate only and are
the only seeds the reported test NLL and the paired differences use (fresh_report). One data
split for every seed (split_seed=0).
Cuts (budget): two choosing seeds, not three; extend_edges=1.
  python scripts/sweep.py --sweep=configs/sweeps/m7_rope_tying.py \
      --workdir=docs/sweeps/m7_rope_tying
"""

from transformer.research.sweeps import Sweep

NORMS = ("post", "pre")
TYING = (("tied", True), ("untied", False))
POST_RATES = [5e-3, 1e-2, 2e-2]
PRE_RATES = [1e-2, 2e-2, 4e-2]


def _arm(norm: str, tying: str, scaled: bool) -> str:
  return f"{norm}/{tying}" + ("+sqrt_d" if scaled else "")


ARM_NAMES = tuple(_arm(n, t, s) for n in NORMS for t, _ in TYING for s in (False, True))


def get_sweep() -> Sweep:
  return Sweep(
      name="m7_rope_tying",
      question="Test NLL of RoPE models (nothing added to the token), post-LN and pre-LN, tied "
               "and untied, each without and with sqrt(d) on the token, at its own best "
               "learning rate: does sqrt(d) matter where there is no balance to set?",
      base="configs/lm_tiny.py",
      axes=({"model.norm_position": list(NORMS)},
            {"model.logits_via_embedding": [tied for _, tied in TYING]},
            {"model.embed_scale": ["none", "sqrt_d"]}),
      arm_names=ARM_NAMES,
      contrast="model.embed_scale",  # sqrt(d) against no scale, in each of the four cells
      # Untied against tied, each scale and norm: what tying itself does.
      pairs=tuple((_arm(n, "untied", s), _arm(n, "tied", s))
                  for n in NORMS for s in (False, True)),
      seeds=(0, 1),
      confirm_seeds=(3, 4, 5),
      fresh_report=True,
      fixed={"test_fraction": 0.02, "split_seed": 0, "model.posemb": "rope",
             "model.embed_init_std": "inv_sqrt_d"},
      tune={"learning_rate": PRE_RATES},
      arm_values={name: (POST_RATES if name.startswith("post") else PRE_RATES)
                  for name in ARM_NAMES},
      extend_edges=1,
      metrics=("eval/loss", "test/loss",
               "mean:init/decoder/layer_0/self_attention/head_*/logit_var_within",
               "mean:final/decoder/layer_0/self_attention/head_*/logit_var_within",
               "max:final/decoder/layer_0/self_attention/head_*/logit_absmax",
               "spikes/loss", "spikes/grad_norm"),
      curves=("eval/loss", "mean:diagnostics/decoder/layer_0/self_attention/head_*/"
              "logit_var_within"),
  )
