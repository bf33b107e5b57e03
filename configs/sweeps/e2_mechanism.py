"""E2: the mechanism behind Question 1. Is sqrt(d) needed because of the small N(0, 1/d)
initialisation, because of tied input/output embeddings, or because of the balance against
the added sinusoids? Embedding init std {d^-0.5 (the paper), 0.02 (GPT-2), 1 (Flax/T5)} x
embedding scale {none, sqrt(d)} x tied / untied output projection (the tied d^-0.5 pair is
E1's paper and no_scale arms, not rerun), each arm at its own best learning rate (a coarser
grid than E1's, around its optima; extended past an edge), 3 seeds.
The posemb_scale side of the balance is configs/sweeps/e2_posemb_scale.py.
  python scripts/sweep.py --sweep=configs/sweeps/e2_mechanism.py --workdir=docs/sweeps/e2_mechanism
"""

from transformer.research.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(
      name="e2_mechanism",
      question="Test NLL of embedding init std x sqrt(d) scale x tying, each arm at its own "
               "best learning rate.",
      base="configs/lm_tiny.py",
      # init x tying, less the paper's tied d^-0.5 init: those two arms are E1's paper and
      # no_scale arms, the same configs on the same data and seeds (results identical).
      axes=({"model.embed_init_std": [0.02, 0.02, 1.0, 1.0, "inv_sqrt_d"],
             "model.logits_via_embedding": [True, False, True, False, False]},
            {"model.embed_scale": ["sqrt_d", "none"]}),
      fixed={"test_fraction": 0.02},
      tune={"learning_rate": [5e-3, 1e-2, 2e-2]},
      confirm_seeds=(3, 4),  # 5 seeds at each chosen rate, where differences are read
      extend_edges=2,
      contrast="model.embed_scale",  # no scale against sqrt(d), at each init and tying
      metrics=("eval/loss", "test/loss", "init/decoder/embed/ratio", "final/decoder/embed/ratio",
               "final/output/log_z"),
      curves=("eval/loss",),
  )
