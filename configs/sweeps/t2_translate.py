"""T2: do T1's answers hold at twice the width? The paper, no scale and convention (2) in
English-German translation at d_model 256 (4 heads of d_k 64, the paper's head size; d_ff
1024; 3 + 3 layers), otherwise T1's set-up (configs/sweeps/t1_translate.py: 400 steps, batch
64 x 64 tokens, the shared vocabulary tying both embeddings and the pre-softmax projection,
test NLL and sacreBLEU of beam search, beam 4) on the German message catalogs:
  python scripts/make_corpus.py --out=data/catalogs_en_de.tsv
  python scripts/sweep.py --sweep=configs/sweeps/t2_translate.py --workdir=docs/sweeps/t2_translate

Each arm is run at its T1 (d_model 128) best rate, 5e-3 for all three, and one neighbour,
half of it: in the language model the best rate fell as the width grew (E5). The cut to fit
the 2 cores (a run takes 20-33 minutes with two processes sharing them): the rates are
compared on seed 0 (the choice, on validation NLL), and seeds 1 and 2 are run at the chosen
rate only (confirm_seeds), so every reported figure and paired difference has 3 seeds. A
best rate on an end adds up to two rates beyond it (extend_edges=2), also on seed 0: the
paper's 5e-3 stalled at this width (validation NLL 6.2 after 400 steps, near the unigram
level, against 3.1 at 2.5e-3), so 1.25e-3 was searched below it, and 6.25e-4 when 1.25e-3
was best again (2.97). No scale went the same way (1.25e-3 best, 5.13); convention (2)
stalled at 5e-3 too and chose 2.5e-3 over 1.25e-3. Results: docs/sweeps/t2_translate and
docs/findings.md ("T2").
"""

import os

from transformer.research.sweeps import Sweep
from transformer.training.experiment import load_module

# T1's encoder and decoder first-attention statistics, the same keys at this width.
T1 = load_module(os.path.join(os.path.dirname(__file__), "t1_translate.py"))

ARMS = {
    "model.embed_init_std": ["inv_sqrt_d", "inv_sqrt_d", 1.0],
    "model.embed_scale": ["sqrt_d", "none", "none"],
    "model.logits_scale": ["none", "none", "inv_sqrt_d"],
}


def get_sweep() -> Sweep:
  return Sweep(
      name="t2_translate",
      question="Test NLL and BLEU of English-German translation at d_model 256 (3 + 3 layers) "
               "with the paper's sqrt(d) token scale, no scale and convention (2), each at the "
               "better of its d_model-128 best rate and half of it.",
      base="configs/translate_tiny.py",
      axes=(ARMS,),
      arm_names=("paper", "no_scale", "conv2"),
      fixed={"model.d_model": 256, "model.d_ff": 1024, "model.num_encoder_layers": 3,
             "model.num_decoder_layers": 3, "num_train_steps": 400, "bleu_every_steps": 400,
             "eval_every_steps": 200, "diagnostics_every_steps": 200,
             "checkpoint_every_steps": 200},
      # T1's best rate, 5e-3 for all three (docs/sweeps/t1_translate/results.md), and half.
      tune={"learning_rate": [2.5e-3, 5e-3]},
      extend_edges=2,
      seeds=(0,),
      confirm_seeds=(1, 2),
      select="eval/nll",
      report="test/nll",
      also_report=("test/bleu",),
      metrics=("eval/nll", "test/nll", "decode/bleu", "test/bleu",
               "init/encoder/embed/ratio", "final/encoder/embed/ratio",
               "init/decoder/embed/ratio", "final/decoder/embed/ratio") + T1.FIRST_ATTENTION,
      curves=("eval/loss", "diagnostics/encoder/embed/ratio"),
  )
