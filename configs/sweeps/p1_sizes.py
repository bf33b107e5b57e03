"""P1 at two smaller widths, in P1's own setup and at its depth: the paper and no scale at
d_model 128 and 256, each with 6 layers, on P1's corpus, split, tokenizer, rows, tokens a step,
steps, warmup and bf16 (configs/sweeps/p1_paper_size.py's `setup`; d_k 64 and d_ff 4 d_model at
every size), each arm at its own best learning rate. With P1's d_model 512, 6 layers, how no
scale's cost moves with width is read within one setting and one depth: against M9 (d_model
256, 4 layers) and M4 (d_model 64, 2 layers), P1 changes the corpus, the vocabulary, the rows,
the tokens a step, the precision, the warmup and the depth, so those comparisons cross settings.

One depth for every size, 6 layers (P1's `DEPTH`): the paper's, and that of P1's 8 finished
points (d_model 512 x 6), which a change of P1's depth would have thrown away. So the three
sizes differ in the width alone, with the heads (d_k held at 64) and d_ff (4 d_model) that
follow it. (Declared first at 128 x 2 and 256 x 4 layers, depth moving with width; changed to 6
layers before any point of this file ran.)

Declared 2026-11-28 with P1's redesign, before any point ran. Rates: E5's width rule (the
optimum halves with each doubling of d_model) centres a sqrt(2) grid of three at 5e-3 for
d_model 128 and 2.5e-3 for 256; an edge extends until the best rate is interior, at most three
steps a side. Seeds 0-1 choose, seeds 3-5 report (fresh_report); P1's failure rule, and P1's
intention-to-treat figure as the headline (a failed reporting run counted at its recorded test
NLL, or at ln 16384 without a finite one) beside the figure over the runs that did not fail.
Predeclared reading: no scale minus the paper at each size, paired by seed (Holm over the
two: `holm_family`); across sizes, with P1's d_model 512 (configs/contrasts.py once the
reporting seeds are in): the difference of two sizes' costs, paired by seed (one seed is one
split and data order; the initial draws differ across sizes) and by Welch's unpaired interval.
No point of these smaller models has run, so the dry run's times are P1's 512 x 6 pace, an
upper bound ('at most').
  python scripts/sweep.py --sweep=configs/sweeps/p1_sizes.py --workdir=docs/sweeps/p1_sizes \
      --dry_run --pace_from=docs/sweeps/p1_paper_size --lease_seconds=480
  python scripts/sweep.py --sweep=configs/sweeps/p1_sizes.py --workdir=docs/sweeps/p1_sizes \
      --compilation_cache=/tmp/jax_cache --time_budget=480
"""

import os

from transformer.research.sweeps import Sweep
from transformer.training.experiment import load_module

P1 = load_module(os.path.join(os.path.dirname(os.path.abspath(__file__)), "p1_paper_size.py"))
WIDTHS = (128, 256)  # each with P1.DEPTH layers


def get_sweep() -> Sweep:
  return Sweep(
      name="p1_sizes",
      question=f"Test NLL of the paper and no scale at d_model 128 and 256, each with "
               f"{P1.DEPTH} layers, in P1's setup (corpus, tokenizer, rows, steps, bf16), each "
               "at its own best learning rate.",
      base="configs/lm_tiny.py",
      axes=({"model.d_model": list(WIDTHS), "model.num_heads": [d // 64 for d in WIDTHS],
             "model.d_ff": [4 * d for d in WIDTHS]},
            {"model.embed_scale": ["sqrt_d", "none"]}),
      arm_names=tuple(f"{arm}@{d}" for d in WIDTHS for arm in ("paper", "no_scale")),
      contrast="model.embed_scale",
      holm_family=tuple((f"no_scale@{d}", f"paper@{d}") for d in WIDTHS),
      seeds=(0, 1),
      confirm_seeds=(3, 4, 5),
      fresh_report=True,
      fixed=P1.setup(512, P1.DEPTH),  # the width's fields are the axes'
      tune={"learning_rate": P1.rates(P1.CENTRE)},
      arm_values={f"{arm}@{d}": P1.rates(P1.CENTRE * 512 / d)
                  for d in WIDTHS for arm in ("paper", "no_scale")},
      extend_edges=3,
      failure=P1.FAILURE,
      itt_missing=P1.ITT_MISSING,
      metrics=P1.METRICS,
      curves=("eval/loss",),
  )
