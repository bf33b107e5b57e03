"""W1: why no scale's cost grows with size. A width series at fixed depth in M9's setup (its
corpus, tokenizer, 32 rows of 64 tokens, 1200 steps, split, float32, 4 layers), d_model 64, 128
and 256 with d_k 64 (heads = d_model / 64) and d_ff 4 d_model, so that only the width moves; at
every width M9's arms, each at its own best learning rate:
  paper          sqrt(d) on the token (token/PE ratio at init sqrt(2) = 1.41 at every width)
  no_scale       nothing on the token (ratio sqrt(2/d): 0.177, 0.125, 0.088)
  ratio_matched  no scale, the sinusoids times sqrt(64/d): the ratio d_model 64's no scale has,
                 0.177, at every width (at d_model 64 it is no scale itself, not run twice)
  pe_down        no scale, the sinusoids times d^-1/2: the paper's ratio, sqrt(2), the paper's
                 input divided by sqrt(d)
The d_model 256 row is M9 (docs/sweeps/m9_width_256): its resolved configs are this file's at
256 (tests/test_w1.py checks it), so its 40 points are not run again. The new rows are this
file (d_model 64, docs/sweeps/w1_d64) and w1_d128.py (docs/sweeps/w1_d128), which takes its
`width_sweep` from here. (This declaration was committed as w1_width_fixed_depth.py before the
first point ran, and moved here unchanged but for this sentence and get_sweep.)

Declared before the first point ran:
- Rates: a sqrt(2) grid of three centred by E5's width rule (the optimum halves with each
  doubling: 1e-2 at d_model 64, 5e-3 at 128; M9's 2.5e-3 at 256), one grid for every arm; an
  edge extends until the best rate is interior (at most three steps a side). Seeds 0-1 choose
  on validation, seeds 3-5 run at the chosen rate only and are the only seeds reported
  (fresh_report), on one test split for every seed (split_seed 0).
- Failure: the default FailureRule() (a non-finite loss; a last train loss not 5% below the one
  at the first record after warmup, 100 or more steps before; a layer whose final gradient norm
  is below 1e-3 of the largest's), fixed here and read again with the results; failures are
  counted per arm and rate in each width's table. A failed reporting seed is counted in the
  intention-to-treat figure (its recorded test NLL) beside the figure without it; one with no
  finite test NLL counts at ln 2000 = 7.60 nats, the uniform model's (the runner's default for
  an NLL, said here after 14 points had run, none of them failed).
- Reading 1, the growth: no scale minus the paper at each width (paired by seed within a
  width: one seed is one split, data order and dropout stream), and the change of that cost
  from one width to the next (Welch's unpaired interval across widths: the initial draws
  differ). Widths change together with the head count (d_k is held at 64) and the parameter
  count; nothing else moves.
- Reading 2, the balance: the cost against the paper of each no-scale arm (no_scale,
  ratio_matched, pe_down) against its token/PE ratio at init, one curve per width. If the
  curves lie on one another (at ratio 0.177: d_model 64's no scale, 128's and 256's
  ratio_matched within their intervals of each other), the token/position balance explains the
  growth with width; if the wider models pay more at the same ratio, something else grows with
  width, and the page says so. pe_down against the paper at each width reads what dividing the
  whole input by sqrt(d) costs once the balance is the paper's.
- Not covered: 1200 steps (1.2 epochs), one corpus, decoder-only, post-LN, sinusoids, widths
  up to 256, one depth.

Budget: 27 points at d_model 64 (3 arms) and 36 at 128 (4 arms), before any edge extension;
--dry_run prints each with its expected time here. M9's points took a median of 1,655 s each
on this machine's 2 cores with two sweep processes side by side.
  python scripts/sweep.py --sweep=configs/sweeps/w1_d64.py --workdir=docs/sweeps/w1_d64 --dry_run
  python scripts/sweep.py --sweep=configs/sweeps/w1_d64.py --workdir=docs/sweeps/w1_d64
  python scripts/sweep.py --sweep=configs/sweeps/w1_d128.py --workdir=docs/sweeps/w1_d128
"""

import math

from transformer.research.sweeps import Sweep, headline_arms
from transformer.training.failure_rule import FailureRule

SMALL_D_MODEL = 64  # ratio_matched holds no scale's token/PE ratio at this width
HEAD_DIM = 64
RATE_AT_64 = 1e-2  # E5's optimum at d_model 64; it halves with each doubling of the width
LAYER0 = "mean:{}/decoder/layer_0/self_attention/head_*/logit_var_within"
WIDTHS = (64, 128, 256)
# The default FailureRule() as it was when W1 was declared: the warmup and non-finite-layer
# judgments added to the default after W1's first points ran are off.
DECLARED_RULE = FailureRule(judge_warmup=False, judge_nonfinite_layers=False)
SWEEP_OF_WIDTH = {64: "w1_d64", 128: "w1_d128", 256: "m9_width_256"}


def centre(d_model: int) -> float:
  return RATE_AT_64 * SMALL_D_MODEL / d_model


def width_sweep(d_model: int, name: str) -> Sweep:
  """W1's sweep at one width (M9's at 256)."""
  rate = centre(d_model)
  return Sweep(
      name=name,
      question=f"Test NLL of M9's arms at d_model {d_model} with 4 layers (d_k 64, d_ff "
               f"{4 * d_model}), 1200 steps (1.2 epochs), each at its own best learning rate.",
      base="configs/lm_tiny.py",
      **headline_arms(d_model, SMALL_D_MODEL),
      seeds=(0, 1),
      confirm_seeds=(3, 4, 5),
      fresh_report=True,
      fixed={"test_fraction": 0.02, "split_seed": 0, "model.d_model": d_model,
             "model.num_heads": d_model // HEAD_DIM, "model.d_ff": 4 * d_model,
             "model.num_decoder_layers": 4, "num_train_steps": 1200, "eval_every_steps": 300,
             "diagnostics_every_steps": 150, "checkpoint_every_steps": 300},
      tune={"learning_rate": [round(rate / math.sqrt(2), 7), rate,
                              round(rate * math.sqrt(2), 7)]},
      extend_edges=3,
      failure=DECLARED_RULE,
      at_steps=(150,),
      metrics=("eval/loss", "test/loss", "init/decoder/embed/ratio",
               "final/decoder/embed/ratio", LAYER0.format("init"), LAYER0.format("step_150"),
               LAYER0.format("final"),
               "max:final/decoder/layer_0/self_attention/head_*/logit_absmax"),
      curves=("eval/loss",),
  )


def get_sweep() -> Sweep:
  return width_sweep(64, "w1_d64")
