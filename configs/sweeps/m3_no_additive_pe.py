"""M3: does sqrt(d) act through the token/PE balance or through the size of the residual
stream? Pre-LN models (where Takase et al. 2023, "Spike No More", locate the embedding's scale
in the residual stream) with an added sinusoid, with RoPE (rotates queries and keys, adds
nothing to the input) and with no position encoding at all (a causal model can still infer
order), each without and with sqrt(d) on an N(0, 1/d) token embedding. If sqrt(d) still
matters where nothing is added to the token, the balance account is not the whole story.

Each arm at its own best learning rate, searched on 1e-2, 2e-2, 4e-2 (E3's pre-LN optimum at
this init was 2e-2), one step further at an edge. Seeds 0 and 1 choose the rate; seeds 3-5 are
run at the chosen rate only and are the only seeds the reported test NLL and the paired
differences use (fresh_report). One data split for every seed (split_seed=0).
Cuts (budget): two choosing seeds, not three; extend_edges=1.
  python scripts/sweep.py --sweep=configs/sweeps/m3_no_additive_pe.py \
      --workdir=docs/sweeps/m3_no_additive_pe
"""

from transformer.research.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(
      name="m3_no_additive_pe",
      question="Test NLL of pre-LN models with a sinusoid added, RoPE or no position encoding, "
               "each with and without sqrt(d) on the token, at its own best learning rate.",
      base="configs/lm_tiny.py",
      axes=({"model.posemb": ["sinusoidal", "rope", "none"]},
            {"model.embed_scale": ["none", "sqrt_d"]}),
      arm_names=("sinusoid", "sinusoid+sqrt_d", "rope", "rope+sqrt_d", "none", "none+sqrt_d"),
      contrast="model.embed_scale",  # sqrt(d) against no scale, for each position encoding
      seeds=(0, 1),
      confirm_seeds=(3, 4, 5),
      fresh_report=True,
      fixed={"test_fraction": 0.02, "split_seed": 0, "model.norm_position": "pre",
             "model.embed_init_std": "inv_sqrt_d"},
      tune={"learning_rate": [1e-2, 2e-2, 4e-2]},
      extend_edges=1,
      metrics=("eval/loss", "test/loss", "final/decoder/embed/ratio",
               "mean:init/decoder/layer_0/self_attention/head_*/logit_var_within",
               "mean:final/decoder/layer_0/self_attention/head_*/logit_var_within",
               "spikes/loss", "spikes/grad_norm"),
      curves=("eval/loss",),
  )
