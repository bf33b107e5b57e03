"""P1: the headline answers at the paper's width and depth, for one GPU. The paper, no scale,
pe_down and ratio_matched as decoder-only language models of the base model's blocks
(d_model 512, 6 layers, 8 heads of d_k 64, d_ff 2048, post-LN, tied embeddings, sinusoids;
about 27M parameters with the 16k vocabulary), each at its own best learning rate.

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
which scripts/analyze.py reports), the rsqrt
schedule with 200 warmup steps, bfloat16 compute on float32 parameters.

Arms: pe_down divides the sinusoids by sqrt(512) (no scale's input is then the paper's divided
by sqrt(d), as at every size of this project); ratio_matched scales them by sqrt(64/512), so
that the token/PE ratio at init is no scale's at d_model 64 (0.177, against 0.0625 here).
Rates: E5 found the optimum halve with each doubling of d_model (1e-2 at 64, 5e-3 at 128), which
puts it at 1.25e-3 here; a sqrt(2) grid of three around it, one step further at an edge. Seeds
0-1 choose on validation, seeds 3-5 report on test (fresh_report); test rows stored.
About 36 points. On one H200 the benchmark's step is 14.2 ms (35 s of steps a point; the dry
run measures it), but the loop ran at 33-42 ms a step, and the first point of a fresh host
took 221 s with 50 s of dataset preparation (docs/sweeps/p1_paper_size/gpu_2026-11-27_h200/):
  python scripts/sweep.py --config=configs/sweeps/p1_paper_size.py --workdir=docs/sweeps/p1_paper_size --dry_run
  python scripts/sweep.py --config=configs/sweeps/p1_paper_size.py --workdir=docs/sweeps/p1_paper_size \
      --compilation_cache=/tmp/jax_cache --time_budget=480
docs/research_tools.md says how to run it on a GPU host or a TPU VM.
"""

import math

from transformer.research.sweeps import Sweep, headline_arms

D_MODEL = 512
SMALL_D_MODEL = 64  # ratio_matched's token/PE ratio is no scale's at this width
CENTRE = 1.25e-3  # E5's width rule carried to d_model 512
CORPUS = "data/debian_docs_en.txt.xz"
WORKDIR = "docs/sweeps/p1_paper_size"


def get_sweep() -> Sweep:
  return Sweep(
      name="p1_paper_size",
      question="Test NLL of the paper, no scale, pe_down and ratio_matched at d_model 512 with "
               "6 layers, 2500 steps of 16k tokens (0.93 epochs), each at its own best "
               "learning rate.",
      base="configs/lm_tiny.py",
      **headline_arms(D_MODEL, SMALL_D_MODEL),
      seeds=(0, 1),
      confirm_seeds=(3, 4, 5),
      fresh_report=True,
      fixed={"data_files": CORPUS, "tokenizer.vocab_size": 16384,
             "tokenizer.path": f"{WORKDIR}/tokenizer.model",
             "eval_fraction": 0.005, "test_fraction": 0.01, "split_seed": 0,
             "model.d_model": D_MODEL, "model.num_heads": 8, "model.d_ff": 4 * D_MODEL,
             "model.num_decoder_layers": 6, "model.dtype": "bfloat16",
             "max_len": 256, "batch_size": 64, "num_train_steps": 2500, "warmup_steps": 200,
             "log_every_steps": 250, "eval_every_steps": 500, "diagnostics_every_steps": 500,
             "checkpoint_every_steps": 1250, "data_threads": 8, "data_prefetch": 8},
      tune={"learning_rate": [round(CENTRE / math.sqrt(2), 7), CENTRE,
                              round(CENTRE * math.sqrt(2), 7)]},
      extend_edges=1,
      metrics=("eval/loss", "test/loss", "final/decoder/embed/ratio",
               "max:final/decoder/layer_0/self_attention/head_*/logit_absmax"),
      curves=("eval/loss",),
  )
