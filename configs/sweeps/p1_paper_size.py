"""P1: the headline answers at the paper's width and depth, for one GPU. The paper, no scale,
pe_down and muP's learning-rate rule as decoder-only language models of the base model's
blocks (d_model 512, 6 layers, 8 heads of d_k 64, d_ff 2048, post-LN, tied embeddings,
sinusoids; about 27M parameters with the 16k vocabulary), each at its own best learning rate.
configs/sweeps/p1_sizes.py runs the paper and no scale at d_model 128 and 256 in this same
setup (`setup`), so that how no scale's cost moves with size is read within one setting.

The corpus: the English text of six Debian 12 documentation packages (15.7M words, 118 MB;
transformer/data/package_texts.py names them and their licences), made once by
  mkdir -p /tmp/debs && (cd /tmp/debs && apt-get download dict-gcide dict-wn linux-doc-6.1 \
      python3.11-doc perl-doc git-doc)
  python scripts/make_corpus.py --corpus=debian_docs --debs=/tmp/debs --out=data/debian_docs_en.txt.xz
(23.8 MiB; its manifest, with the sha256, is docs/sweeps/p1_paper_size/corpus.json). One split
for every seed (split_seed 0): 0.5% of the paragraphs validate, 1% are the test set. The
16k-piece SentencePiece model is trained once on the train split and committed beside the
results (docs/sweeps/p1_paper_size/tokenizer.model), so a GPU host never trains it.

Steps: 64 rows of 256 tokens a step (16,384 tokens, the paper's batch is 25k a side), 2500 steps
(41.0M tokens: 0.93 epochs of the train split's 44.0M tokens, `Datasets.count_train_tokens`,
which scripts/analyze.py reports), the rsqrt schedule with 200 warmup steps, bfloat16 compute
on float32 parameters.

Arms (declared 2026-11-28, before any point of pe_down or mup ran):
  paper     sqrt(d_model) on the token embedding, then the sinusoids (the paper)
  no_scale  no scale: the token N(0, 1/d) beside sinusoids of RMS 0.71
  pe_down   no scale, the sinusoids divided by sqrt(512): by the page's LayerNorm identity the
            paper's input divided by sqrt(d), so post-LN it differs from the paper only in the
            first attention's temperature; it tests whether the sqrt(d) scale causes the
            layer-0 attention entropy collapse of the paper's failed run
  mup       no scale, the token embedding trained at a rate that does not fall with width
            (muP's Adam rule for the input layer, Yang et al. 2022): `embed_learning_rate`
            1e-2, d_model 64's best rate (E5), while the blocks search theirs on the grid
            below; the embedding is tied, so the readout takes that rate too
ratio_matched (M9's arm) is not run at this size: M9 answered its question at d_model 256.
Rates: E5 found the optimum halve with each doubling of d_model (1e-2 at 64, 5e-3 at 128), which
puts it at 1.25e-3 here; a sqrt(2) grid of three around it; an edge extends one sqrt(2) step at a
time until the best rate is interior, at most three times a side. Seeds 0-1 choose on validation,
seeds 3-5 report on test (fresh_report); test rows stored.

Failure, fixed before the runs (`FAILURE`): besides a non-finite loss, a run whose last train
loss is not 5% below its train loss at step 500 (stalled), or whose final diagnostics show a
layer with a gradient norm under 1e-3 of the largest layer's (a dead layer), failed. A failed
run is never chosen, left out of every mean, and counted per arm and rate; a failed reporting
seed is listed as failed and its arm is reported over the others (no replacement seed). The
rule was set after one choosing run had failed this way (the paper at 1.7678e-3, seed 1, an
attention entropy collapse recorded 'ok') and before any run it would newly judge.

Predeclared reading: each arm minus the paper on test NLL, paired by seed, Holm over the three;
the size trend of no scale's cost from P1 and P1-sizes (configs/contrasts.py once their
reporting seeds are in: no scale minus the paper at 512 minus the same at 256, and at 256
minus at 128; paired by seed and, across sizes, Welch's unpaired interval); failures per arm
and rate; the collapse diagnostics (max attention entropy deficit and |logit| per layer).

On one H200 the benchmark's step is 9.8 ms, but the points trained at 33-44 steps a second
with the grain pipeline of then, 73-124 s a point in the lease of 2026-11-28
(docs/gpu-runs/2026-11-28-h200); the dry run prints each point's time at the finished points'
own pace:
  python scripts/sweep.py --config=configs/sweeps/p1_paper_size.py --workdir=docs/sweeps/p1_paper_size --dry_run --pace_from=docs/sweeps/p1_paper_size
  python scripts/sweep.py --config=configs/sweeps/p1_paper_size.py --workdir=docs/sweeps/p1_paper_size \
      --compilation_cache=/tmp/jax_cache --time_budget=480
docs/research_tools.md says how to run it on a GPU host or a TPU VM.
"""

import math

from transformer.research.sweeps import UNSET, FailureRule, Sweep

D_MODEL = 512
CENTRE = 1.25e-3  # E5's width rule carried to d_model 512
MUP_EMBED_RATE = 1e-2  # d_model 64's best rate (E5): the embedding's rate at every width
CORPUS = "data/debian_docs_en.txt.xz"
WORKDIR = "docs/sweeps/p1_paper_size"
FAILURE = FailureRule(stall_step=500, min_fall=0.05, dead_ratio=1e-3)
METRICS = ("eval/loss", "test/loss", "final/decoder/embed/ratio",
           "max:final/decoder/layer_0/self_attention/head_*/logit_absmax",
           "max:final/decoder/layer_*/self_attention/head_*/entropy_deficit")


def rates(centre: float) -> list[float]:
  """A sqrt(2) grid of three around `centre`."""
  return [round(centre / math.sqrt(2), 7), centre, round(centre * math.sqrt(2), 7)]


def setup(d_model: int, layers: int) -> dict:
  """The fields every P1 point shares, at a size: corpus, split, tokenizer, rows, tokens a step,
  steps, warmup, bf16; d_k 64 (d_model / 64 heads) and d_ff 4 d_model at every size."""
  return {"data_files": CORPUS, "tokenizer.vocab_size": 16384,
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
      question="Test NLL of the paper, no scale, pe_down and muP's embedding-rate rule at "
               "d_model 512 with 6 layers, 2500 steps of 16k tokens (0.93 epochs), each at its "
               "own best learning rate.",
      base="configs/lm_tiny.py",
      axes=({"model.embed_scale": ["sqrt_d", "none", "none", "none"],
             "model.posemb_scale": [1.0, 1.0, 1.0 / math.sqrt(D_MODEL), 1.0],
             "embed_learning_rate": [UNSET, UNSET, UNSET, MUP_EMBED_RATE]},),
      arm_names=("paper", "no_scale", "pe_down", "mup"),
      pairs=(("pe_down", "no_scale"), ("mup", "no_scale")),
      seeds=(0, 1),
      confirm_seeds=(3, 4, 5),
      fresh_report=True,
      fixed=setup(D_MODEL, 6),
      tune={"learning_rate": rates(CENTRE)},
      extend_edges=3,
      failure=FAILURE,
      metrics=METRICS,
      curves=("eval/loss",),
  )
