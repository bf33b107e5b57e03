"""P1 at two smaller sizes, in P1's own setup: the paper and no scale at d_model 128 with 2
layers and at d_model 256 with 4 layers (M9's shape), on P1's corpus, split, tokenizer, rows,
tokens a step, steps, warmup and bf16 (configs/sweeps/p1_paper_size.py's `setup`; d_k 64 and
d_ff 4 d_model at every size), each arm at its own best learning rate. With P1's d_model 512,
6 layers, how no scale's cost moves with size is read within one setting: against M9 (d_model
256) and M4 (d_model 64), P1 changes the corpus, the vocabulary, the rows, the tokens a step,
the precision and the warmup, so those comparisons cross settings.

Declared 2026-11-28 with P1's redesign, before any point ran. Rates: E5's width rule (the
optimum halves with each doubling of d_model) centres a sqrt(2) grid of three at 5e-3 for
d_model 128 and 2.5e-3 for 256; an edge extends until the best rate is interior, at most three
steps a side. Seeds 0-1 choose, seeds 3-5 report (fresh_report); P1's failure rule.
Predeclared reading: no scale minus the paper at each size, paired by seed (Holm over the
two); across sizes, with P1's d_model 512 (configs/contrasts.py once the reporting seeds are
in): the difference of two sizes' costs, paired by seed (one seed is one split and data order;
the initial draws differ across sizes) and by Welch's unpaired interval.
  python scripts/sweep.py --config=configs/sweeps/p1_sizes.py --workdir=docs/sweeps/p1_sizes --dry_run --pace_from=docs/sweeps/p1_paper_size
  python scripts/sweep.py --config=configs/sweeps/p1_sizes.py --workdir=docs/sweeps/p1_sizes \
      --compilation_cache=/tmp/jax_cache --time_budget=480
"""

import os

from transformer.research.sweeps import Sweep
from transformer.training.experiment import load_module

P1 = load_module(os.path.join(os.path.dirname(os.path.abspath(__file__)), "p1_paper_size.py"))
SIZES = ((128, 2), (256, 4))  # (d_model, layers)


def get_sweep() -> Sweep:
  widths = [d for d, _ in SIZES]
  return Sweep(
      name="p1_sizes",
      question="Test NLL of the paper and no scale at d_model 128 (2 layers) and 256 (4 "
               "layers) in P1's setup (corpus, tokenizer, rows, steps, bf16), each at its own "
               "best learning rate.",
      base="configs/lm_tiny.py",
      axes=({"model.d_model": widths, "model.num_heads": [d // 64 for d in widths],
             "model.d_ff": [4 * d for d in widths],
             "model.num_decoder_layers": [n for _, n in SIZES]},
            {"model.embed_scale": ["sqrt_d", "none"]}),
      arm_names=tuple(f"{arm}@{d}" for d in widths for arm in ("paper", "no_scale")),
      contrast="model.embed_scale",
      seeds=(0, 1),
      confirm_seeds=(3, 4, 5),
      fresh_report=True,
      fixed=P1.setup(512, 6),  # the size's fields are the axes'
      tune={"learning_rate": P1.rates(P1.CENTRE)},
      arm_values={f"{arm}@{d}": P1.rates(P1.CENTRE * 512 / d)
                  for d in widths for arm in ("paper", "no_scale")},
      extend_edges=3,
      failure=P1.FAILURE,
      metrics=P1.METRICS,
      curves=("eval/loss",),
  )
