"""M2: the token/PE balance at a fixed input size (E1's 2 x 2 made orthogonal).

E2's PE-scale sweep moved the balance by scaling the sinusoids, which also moved the input's
size and so the first attention's temperature. Here a LayerNorm on the summed input embedding
(embed_norm) gives every arm the same unit RMS at init, and the PE scale alone sets the ratio
RMS(token) / RMS(PE): 0.18 (PE x 8, no scale's balance), 0.71 (x 2), 1.41 (x 1, the paper's)
and 2.8 (x 0.5). Post-LN, the paper's N(0, 1/d) token times sqrt(d). If the loss still rises
as the ratio falls, the balance acts beyond the temperature.

Each arm at its own best learning rate, searched on 5e-3, 1e-2, 2e-2 (E1's and E2's optimum
was 1e-2), one step further at an edge. Seeds 0 and 1 choose the rate; seeds 3-5 are run at
the chosen rate only and are the only seeds the reported test NLL and the paired differences
use (fresh_report). One data split for every seed (split_seed=0).
Cuts (budget): two choosing seeds, not three; extend_edges=1.
  python scripts/sweep.py --sweep=configs/sweeps/m2_balance_fixed_size.py \
      --workdir=docs/sweeps/m2_balance_fixed_size
"""

from transformer.research.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(
      name="m2_balance_fixed_size",
      question="Test NLL at token/PE ratios 0.18, 0.71, 1.41 and 2.8 with the summed input "
               "normalised (one input size for every arm), each at its own best learning rate.",
      base="configs/lm_tiny.py",
      axes=({"model.posemb_scale": [8.0, 2.0, 1.0, 0.5]},),
      arm_names=("ratio_0.18", "ratio_0.71", "ratio_1.41", "ratio_2.8"),
      baseline="posemb_scale=1",  # the paper's balance
      seeds=(0, 1),
      confirm_seeds=(3, 4, 5),
      fresh_report=True,
      fixed={"test_fraction": 0.02, "split_seed": 0, "model.embed_norm": True},
      tune={"learning_rate": [5e-3, 1e-2, 2e-2]},
      extend_edges=1,
      metrics=("eval/loss", "test/loss", "init/decoder/embed/ratio", "final/decoder/embed/ratio",
               "mean:init/decoder/layer_0/self_attention/head_*/logit_var_within",
               "mean:final/decoder/layer_0/self_attention/head_*/logit_var_within",
               "mean:final/decoder/layer_0/self_attention/head_*/entropy_deficit"),
      curves=("eval/loss", "diagnostics/decoder/embed/ratio"),
  )
