"""M8: a dose-response for the early-logit reading. The paper's arm with its first layer's
attention logits soft-capped (cap * tanh(logits / cap), on layer 0 alone; the second layer
untouched) at caps 16, 8 and 4, beside the uncapped paper, pe_down (no token scale,
sinusoids x 1/8) and 1/d_k (attention scale 1/d_k in place of 1/sqrt(d_k)).

In M1 the paper arm's layer-0 logits grow early at its chosen rate (within-row variance from
~1.5 at init to 6-32 by step 150; absmax ~30 at the end), while pe_down's and 1/d_k's stay
below ~2 (absmax 4-8), and both beat the paper. If that growth is what costs the paper, capping
layer 0 alone should close the gap as the cap tightens (a cap of 4 confines the paper's logits
to the range pe_down's and 1/d_k's own logits keep), and across runs test NLL should follow the
early growth. If the gaps stay, the early logits are a symptom, not the cause.

Each arm at its own best learning rate (5e-3, 1e-2, 2e-2; one step further at an edge),
chosen on validation by seeds 0-1; seeds 3-5 run at the chosen rate only and are the only
seeds reported (fresh_report); one data split for every seed (split_seed=0). Each run stores
its test examples' NLL (the intervals' test-set term) and its layer-0 logit variance at step
150 (the correlation with test NLL).
  python scripts/sweep.py --sweep=configs/sweeps/m8_first_layer_cap.py \
      --workdir=docs/sweeps/m8_first_layer_cap
"""

from transformer.research.sweeps import Sweep

CAPS = (16.0, 8.0, 4.0)
ARM_NAMES = ("paper",) + tuple(f"paper+cap{c:g}" for c in CAPS) + ("pe_down", "inv_dk")
LAYER0 = "mean:{}/decoder/layer_0/self_attention/head_*/logit_var_within"
EARLY_STEP = 150


def get_sweep() -> Sweep:
  return Sweep(
      name="m8_first_layer_cap",
      question="Test NLL of the paper with its first layer's attention logits soft-capped "
               "(16, 8, 4), against the uncapped paper, pe_down and 1/d_k, each at its own best "
               "learning rate: does capping the early first-layer logit growth close the gaps?",
      base="configs/lm_tiny.py",
      axes=({"model.embed_scale": ["sqrt_d"] * 4 + ["none", "sqrt_d"],
             "model.posemb_scale": [1.0] * 4 + [0.125, 1.0],
             "model.attention_scale": ["inv_sqrt_dk"] * 5 + ["inv_dk"],
             "model.attn_logit_softcap": [None, *CAPS, None, None],
             "model.attn_logit_softcap_layers": [None, 1, 1, 1, None, None]},),
      arm_names=ARM_NAMES,
      # Is what pe_down and 1/d_k gain over the paper left once the paper is capped?
      pairs=tuple((ref, capped) for ref in ("pe_down", "inv_dk")
                  for capped in ARM_NAMES[1:1 + len(CAPS)]),
      seeds=(0, 1),
      confirm_seeds=(3, 4, 5),
      fresh_report=True,
      fixed={"test_fraction": 0.02, "split_seed": 0},
      tune={"learning_rate": [5e-3, 1e-2, 2e-2]},
      extend_edges=1,
      at_steps=(EARLY_STEP,),
      metrics=("eval/loss", "test/loss", LAYER0.format("init"),
               LAYER0.format(f"step_{EARLY_STEP}"), LAYER0.format("final"),
               "max:final/decoder/layer_0/self_attention/head_*/logit_absmax",
               "mean:final/decoder/layer_0/self_attention/head_*/entropy_deficit"),
      correlations=({"x": LAYER0.format(f"step_{EARLY_STEP}"), "y": "test/loss"},),
      curves=("eval/loss", LAYER0.format("diagnostics")),
  )
