"""P1: the headline answers at the paper's width and depth, for one GPU. The paper, no scale,
pe_down and embed_lr_fixed (no scale, the tied embedding at a fixed rate) as decoder-only
language models of the base model's blocks (d_model 512, 6 layers, 8 heads of d_k 64, d_ff
2048, post-LN, tied embeddings, sinusoids; about 27M parameters with the 16k vocabulary), each
at its own best learning rate. configs/sweeps/p1_sizes.py runs the paper and no scale at
d_model 128 and 256 in this same setup (`setup`) and at the same depth, so that how no
scale's cost moves with width is read within one setting.

One depth, 6 layers (`DEPTH`), at every size: the paper's depth, and the depth of the 8 points
that finished here (d_model 512 x 6, docs/sweeps/p1_paper_size/points), which keeps them. So
P1-sizes changes the width alone (with it the heads, d_k held at 64, and d_ff, 4 d_model).

The corpus: the English text of six Debian 12 documentation packages (15.7M words, 118 MB;
transformer/data/package_texts.py names them and their licences), made once by
  mkdir -p /tmp/debs && (cd /tmp/debs && apt-get download dict-gcide dict-wn linux-doc-6.1 \
      python3.11-doc perl-doc git-doc)
  python scripts/make_corpus.py --corpus=debian_docs --debs=/tmp/debs \
      --out=data/debian_docs_en.txt.xz
(23.8 MiB; its manifest, with the sha256, is docs/sweeps/p1_paper_size/corpus.json). One split
for every seed (split_seed 0): 0.5% of the paragraphs validate, 1% are the test set. The
16k-piece SentencePiece model is trained once on the train split and committed beside the
results (docs/sweeps/p1_paper_size/tokenizer.model), so a GPU host never trains it.

Steps: 64 rows of 256 tokens a step (16,384 tokens, the paper's batch is 25k a side), 2500 steps
(41.0M tokens: 0.93 epochs of the train split's 44.0M tokens, `Datasets.count_train_tokens`,
which scripts/analyze.py reports), the rsqrt schedule with 200 warmup steps, bfloat16 compute
on float32 parameters.

Arms (declared 2026-11-28, before any point of pe_down or embed_lr_fixed ran):
  paper           sqrt(d_model) on the token embedding, then the sinusoids (the paper)
  no_scale        no scale: the token N(0, 1/d) beside sinusoids of RMS 0.71
  pe_down         no scale, the sinusoids divided by sqrt(512): by the page's LayerNorm
                  identity the paper's input divided by sqrt(d), so post-LN it differs from the
                  paper only in the first attention's temperature; it tests whether the sqrt(d)
                  scale causes the layer-0 attention entropy collapse of the paper's failed run
  embed_lr_fixed  no scale, the tied token embedding trained at a fixed peak rate of 1e-2
                  (`embed_learning_rate`, E5's best rate at d_model 64, another setup) while
                  the blocks search theirs on the grid below; tied, the readout takes that rate
                  too
embed_lr_fixed was declared as `mup` and renamed before any of its points ran: it is not muP
(muP initialises the input embedding at O(1), not N(0, 1/d), and under Adam trains the readout
at a rate falling as 1/width, not at a width-constant one; 1e-2 was chosen in another setup),
and M6's `mup` recipe is a different model. Arm names are display names; a point's name comes
from its overrides, so no name of a point changes.
ratio_matched (M9's arm: no scale, the sinusoids scaled to d_model 64's token/PE ratio at init)
is not run. Its removal was decided on 2026-11-28 after the 8 points above had been seen (they
were committed with it), so it is not part of a declaration made before any point ran. The
reason given then, that M9 answered its question at d_model 256, does not hold: M9's answer is
not settled (the matched ratio buys back 0.086 [0.015, 0.157] nats of no scale's 0.639, not
kept by Holm in M9's family; docs/findings.md, M9). It stays out because GPU time is scarce:
its 6 choosing and 3 reporting points would take about 12 minutes, two leases, and W1
(configs/sweeps/w1_d64.py) reads the token/PE balance at every width on the CPU.
Rates: E5 found the optimum halve with each doubling of d_model (1e-2 at 64, 5e-3 at 128), which
puts it at 1.25e-3 here; a sqrt(2) grid of three around it; an edge extends one sqrt(2) step at a
time until the best rate is interior, at most three times a side. Seeds 0-1 choose on validation,
seeds 3-5 report on test (fresh_report); test rows stored.

Failure (`FAILURE`), fixed before any run it newly judges: besides a non-finite loss, a run
whose last train
loss is not 5% below its train loss at step 500 (stalled), or whose final diagnostics show a
layer with a gradient norm under 1e-3 of the largest layer's (a dead layer), failed. A failed
run is never chosen, is left out of the figure over the runs that did not fail, and is counted
per arm and rate; a failed reporting seed is listed as failed (no replacement seed) and counted
in the intention-to-treat figure. The rule was set after one choosing run had failed this way
(the paper at 1.7678e-3, seed 1, an attention entropy collapse recorded 'ok') and before any
run it would newly judge. Plainly:
- its thresholds (5% below step 500's loss, 1e-3 of the largest layer's gradient norm) were set
  with that failed run in view;
- a late collapse, one that sets in after the loss has fallen 5% below its step-500 value, is
  caught only if a layer dies (or the loss turns non-finite): the stall test cannot see it;
- it does not change the paper's choice: without it the paper's mean validation loss at
  1.7678e-3 is 4.49 (2.432 and 6.543), which loses to 1.25e-3's 2.478 anyway.

Reported figures: the intention-to-treat (ITT) figure is the headline. Every reporting run at
an arm's chosen rate counts in it, a failed one at its recorded test NLL where that is finite,
else at ITT_MISSING = ln 16384 = 9.704 nats, the NLL of the uniform model over the 16k
vocabulary (`itt_missing`). Beside it the report gives the figure over the runs that did not
fail. Both are given for each arm and for every paired difference; failures are counted per
arm and rate (the grid table's 'failed' column) and per arm at its chosen rate.

Predeclared reading (its Holm family fixed in `HOLM_FAMILY` with this redesign, before any point
after the 8 ran): no scale minus the paper and embed_lr_fixed minus the paper on test NLL (ITT,
the figure without failures beside it), paired by seed, Holm over these two. Exploratory, in no
family and uncorrected ('exploratory' in the report's Holm column): pe_down minus the paper,
likely within 0.04 nats (-0.038 at d_model 64 in E1, -0.015 [-0.041, +0.011] at 256 in M9),
which 3 reporting seeds cannot settle; pe_down minus no scale and embed_lr_fixed minus no scale
(`pairs`). (The text before this redesign said "Holm over the three" while the report put all
five comparisons in one family.) The size trend of no scale's cost from P1 and P1-sizes
(configs/contrasts.py once their reporting seeds are in: no scale minus the paper at 512 minus
the same at 256, and at 256 minus at 128; paired by seed and, across sizes, Welch's unpaired
interval); failures per arm and rate; the collapse diagnostics (max attention entropy deficit
and |logit| per layer).

Run order (`first_arms`): the paper's and no scale's points first, the headline contrast: the
paper's 3 reporting seeds at its chosen 1.25e-3 (its choice is complete), no scale's 4
remaining choosing points, then its 3 reporting seeds as soon as its own choice is complete;
then pe_down's and embed_lr_fixed's choosing points, then their reporting seeds. The dry run
lists that order and, with --lease_seconds, how many calls of --time_budget=480 (the usable
seconds of one 15-minute lease) the points need: at the finished points' pace, 81 s a point,
one such call runs 5 points, so the headline's 10 points take 2 leases (no scale's best
staying interior: each edge step adds 2 points) and the whole sweep 6 (28 points, before any
edge).

On one H200 the benchmark's step is 9.8 ms, but the points trained at 33-44 steps a second
with the grain pipeline of then, 73-124 s a point in the lease of 2026-11-28
(docs/gpu-runs/2026-11-28-h200); the dry run prints each point's time at the finished points'
own pace:
  python scripts/sweep.py --sweep=configs/sweeps/p1_paper_size.py \
      --workdir=docs/sweeps/p1_paper_size \
      --dry_run --pace_from=docs/sweeps/p1_paper_size --lease_seconds=480
  python scripts/sweep.py --sweep=configs/sweeps/p1_paper_size.py \
      --workdir=docs/sweeps/p1_paper_size \
      --compilation_cache=/tmp/jax_cache --time_budget=480
docs/research_tools.md says how to run it on a GPU host or a TPU VM.
"""

import math

from transformer.research.sweeps import UNSET, FailureRule, Sweep

D_MODEL = 512
DEPTH = 6  # the paper's, and the 8 finished points': every P1 size's
CENTRE = 1.25e-3  # E5's width rule carried to d_model 512
EMBED_RATE_FIXED = 1e-2  # d_model 64's best rate (E5): embed_lr_fixed's embedding rate
VOCAB = 16384
ITT_MISSING = math.log(VOCAB)  # a run without a finite test NLL: the uniform model's, 9.704
CORPUS = "data/debian_docs_en.txt.xz"
WORKDIR = "docs/sweeps/p1_paper_size"
# As declared (the warmup and non-finite-layer judgments added to FailureRule later are off).
FAILURE = FailureRule(stall_step=500, min_fall=0.05, dead_ratio=1e-3, judge_warmup=False,
                      judge_nonfinite_layers=False)
# The test-NLL Holm family: each arm minus the paper, pe_down's left out (exploratory).
HOLM_FAMILY = (("no_scale", "paper"), ("embed_lr_fixed", "paper"))
METRICS = ("eval/loss", "test/loss", "final/decoder/embed/ratio",
           "max:final/decoder/layer_0/self_attention/head_*/logit_absmax",
           "max:final/decoder/layer_*/self_attention/head_*/entropy_deficit")


def rates(centre: float) -> list[float]:
  """A sqrt(2) grid of three around `centre`."""
  return [round(centre / math.sqrt(2), 7), centre, round(centre * math.sqrt(2), 7)]


def setup(d_model: int, layers: int) -> dict:
  """The fields every P1 point shares, at a size: corpus, split, tokenizer, rows, tokens a step,
  steps, warmup, bf16; d_k 64 (d_model / 64 heads) and d_ff 4 d_model at every size."""
  return {"data_files": CORPUS, "tokenizer.vocab_size": VOCAB,
          "tokenizer.path": f"{WORKDIR}/tokenizer.model",
          "eval_fraction": 0.005, "test_fraction": 0.01, "split_seed": 0,
          "model.d_model": d_model, "model.num_heads": d_model // 64, "model.d_ff": 4 * d_model,
          "model.num_decoder_layers": layers, "model.dtype": "bfloat16",
          "max_len": 256, "batch_size": 64, "num_train_steps": 2500, "warmup_steps": 200,
          "log_every_steps": 250, "eval_every_steps": 500, "diagnostics_every_steps": 500,
          "checkpoint_every_steps": 1250, "data_threads": 8, "data_prefetch": 8}


def get_sweep() -> Sweep:
  return Sweep(
      name="p1_paper_size",
      question="Test NLL of the paper, no scale, pe_down and embed_lr_fixed (no scale, the tied "
               "embedding at a fixed rate of 1e-2) at d_model 512 with 6 layers, 2500 steps of "
               "16k tokens (0.93 epochs), each at its own best learning rate.",
      base="configs/lm_tiny.py",
      axes=({"model.embed_scale": ["sqrt_d", "none", "none", "none"],
             "model.posemb_scale": [1.0, 1.0, 1.0 / math.sqrt(D_MODEL), 1.0],
             "embed_learning_rate": [UNSET, UNSET, UNSET, EMBED_RATE_FIXED]},),
      arm_names=("paper", "no_scale", "pe_down", "embed_lr_fixed"),
      pairs=(("pe_down", "no_scale"), ("embed_lr_fixed", "no_scale")),
      holm_family=HOLM_FAMILY,
      first_arms=("paper", "no_scale"),
      seeds=(0, 1),
      confirm_seeds=(3, 4, 5),
      fresh_report=True,
      fixed=setup(D_MODEL, DEPTH),
      tune={"learning_rate": rates(CENTRE)},
      extend_edges=3,
      failure=FAILURE,
      itt_missing=ITT_MISSING,
      metrics=METRICS,
      curves=("eval/loss",),
  )
