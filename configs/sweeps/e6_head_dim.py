"""E6: Question 5 redesigned. The 1/sqrt(d_k) argument assumes unit-variance, independent q and
k components, so Var(q.k) = d_k. Here d_k varies at a fixed d_model 64 with the attention
width fixed: 1, 2, 4, 8 heads of d_k 64, 32, 16, 8. Three settings at each:
  xavier, 1/sqrt(d_k)   the paper's scale with the Flax default initialiser (variance
                        2 / (d_model + heads * d_k): below the argument's premise)
  xavier, 1/d_k         muP's scale, so the two are compared across d_k, not at one value
  lecun,  1/sqrt(d_k)   the unit-variance LeCun initialiser (qkv_init='lecun'): the argument's
                        premise holds at init
(lecun with 1/d_k is cut to fit the budget: it crosses two effects the other arms separate.)
d_model varied at a fixed head count (4 heads, d_k 8, 16, 32) is E5's paper arms
(configs/sweeps/e5_width.py), whose results hold the same diagnostics. Measured: the
within-row Var(q.k)/d_k at init and after training, its log-log slope against d_k, and
qk_alignment (within-row Var(q.k) over what random key directions would give: 1 = no
alignment) of the first layer. Learning rate tuned per arm on one seed (chosen on validation;
cut from three seeds to fit the budget: near-ties between rates matter little to the
comparison), then 5 seeds at each chosen rate, reported on test.
  python scripts/sweep.py --sweep=configs/sweeps/e6_head_dim.py --workdir=docs/sweeps/e6_head_dim
"""

from transformer.research.sweeps import Sweep

# Within-row Var(q.k) of the first layer (raw: before any attention scale), heads averaged.
RAW_VAR = "mean:{}/decoder/layer_0/self_attention/head_*/raw_var_within"
ALIGNMENT = "mean:final/decoder/layer_0/self_attention/head_*/qk_alignment"


def get_sweep() -> Sweep:
  return Sweep(
      name="e6_head_dim",
      question="Var(q.k) and q-k alignment against d_k (heads varied at d_model 64), Xavier "
               "against unit-variance q/k/v init, 1/sqrt(d_k) against 1/d_k, each arm at its "
               "own best learning rate.",
      base="configs/lm_tiny.py",
      axes=({"model.num_heads": [1, 2, 4, 8], "model.head_dim": [64, 32, 16, 8]},
            {"model.qkv_init": ["xavier", "xavier", "lecun"],
             "model.attention_scale": ["inv_sqrt_dk", "inv_dk", "inv_sqrt_dk"]}),
      fixed={"test_fraction": 0.02},
      tune={"learning_rate": [5e-3, 1e-2, 2e-2]},
      seeds=(0,),  # the search: one seed per rate, to fit the budget
      confirm_seeds=(1, 2, 3, 4),  # 5 seeds at each chosen rate, where differences are read
      extend_edges=1,
      metrics=("eval/loss", "test/loss",
               "mean:init/decoder/layer_0/self_attention/head_*/qk_var_over_dk_within",
               "mean:final/decoder/layer_0/self_attention/head_*/qk_var_over_dk_within",
               "mean:init/decoder/layer_0/self_attention/head_*/qk_alignment",
               "mean:final/decoder/layer_0/self_attention/head_*/qk_alignment",
               # the logits the softmax saw (after the arm's scale), within rows
               "mean:final/decoder/layer_0/self_attention/head_*/logit_var_within",
               "mean:final/decoder/layer_0/self_attention/head_*/entropy_deficit"),
      curves=("eval/loss",),
      arm_names=tuple(f"dk{dk}_{name}" for dk in (64, 32, 16, 8)
                      for name in ("xavier_sqrt", "xavier_inv_dk", "lecun_sqrt")),
      # Each setting against (xavier, 1/sqrt(d_k)) at the same head count, paired by seed.
      contrast="model.qkv_init",
      # Slopes across d_k, each arm at its chosen rate: at init, after training, and the change
      # training made (the first version's single slope mixed the first with the last).
      fits=tuple({"x": "model.head_dim", "y": y} for y in (RAW_VAR.format("init"),
                                                            RAW_VAR.format("final"),
                                                            RAW_VAR.format("final") + " - "
                                                            + RAW_VAR.format("init"),
                                                            ALIGNMENT)),
  )
