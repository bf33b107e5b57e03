"""T1: the scale questions in the paper's own setting, English-German translation scored by
BLEU. The encoder-decoder of configs/translate_tiny.py (d_model 128, 4 heads, 2 + 2 layers, one
shared vocabulary tying the source and target embeddings and the pre-softmax projection),
400 steps (about 2.7 epochs of ~150 packed steps; a step takes ~1.4 s with two processes on
the 2 cores, so a point is ~10-12 minutes and 600 steps would not fit the budget) on the
German message catalogs installed on the machine:
  python scripts/make_corpus.py --out=data/catalogs_en_de.tsv

Arms (as E1 of the language model, configs/sweeps/e1_tuned.py):
  paper      N(0, 1/d), sqrt(d) on the token, logits h.E^T, PE as is
  no_scale   N(0, 1/d), no scale
  scale_sum  N(0, 1/d), sqrt(d) on token + PE (the sum)
  conv2      N(0, 1), no scale, logits h.E^T / sqrt(d) (Flax WMT, T5)
  pe_down    N(0, 1/d), no scale, PE times d^-0.5 (the paper's token/PE balance reached by
             shrinking the PE)
Each at its own best learning rate (factor-2 grid, extended past an edge), chosen on
validation NLL, reported on the test split (test NLL and sacreBLEU of beam search, beam 4);
3 seeds, paired differences with 95% intervals. pe_down alone is a control run at the paper
arm's chosen rate (5e-3 in results.md), not searched: the budget of the 2 cores went to the
four arms' searches first. Diagnostics: the token/PE ratio and the first
self-attention's within-row logit variance and entropy deficit, for the encoder (source,
bidirectional) and the decoder (target, causal) separately.
  python scripts/sweep.py --sweep=configs/sweeps/t1_translate.py --workdir=docs/sweeps/t1_translate
"""

from transformer.research.sweeps import Sweep

ARMS = {
    "model.embed_init_std": ["inv_sqrt_d", "inv_sqrt_d", "inv_sqrt_d", 1.0, "inv_sqrt_d"],
    "model.embed_scale": ["sqrt_d", "none", "sqrt_d", "none", "none"],
    "model.embed_scale_target": ["token", "token", "sum", "token", "token"],
    "model.logits_scale": ["none", "none", "none", "inv_sqrt_d", "none"],
    "model.posemb_scale": [1.0, 1.0, 1.0, 1.0, 128 ** -0.5],
}
FIRST_ATTENTION = tuple(
    f"mean:{when}/{stack}/layer_0/self_attention/head_*/{stat}"
    for stack in ("encoder", "decoder")
    for when, stat in (("init", "logit_var_within"), ("final", "logit_var_within"),
                       ("init", "entropy_deficit"), ("final", "entropy_deficit"),
                       ("final", "entropy_uniform")))


def get_sweep() -> Sweep:
  return Sweep(
      name="t1_translate",
      question="Test NLL and BLEU of English-German translation (d_model 128, 2 + 2 layers) with "
               "the paper's sqrt(d) token scale, no scale, the scale on the sum, convention (2) "
               "and a PE scaled down instead, each at its own best learning rate.",
      base="configs/translate_tiny.py",
      axes=(ARMS,),
      arm_names=("paper", "no_scale", "scale_sum", "conv2", "pe_down"),
      # paper, no_scale, scale_sum, pe_down: E1's 2 x 2 of balance x input size, both stacks.
      pairs=(("no_scale", "pe_down"), ("scale_sum", "no_scale")),
      fixed={"num_train_steps": 400, "bleu_every_steps": 400, "eval_every_steps": 200,
             "diagnostics_every_steps": 200, "checkpoint_every_steps": 200},
      tune={"learning_rate": [2.5e-3, 5e-3, 1e-2]},
      arm_values={"pe_down": [5e-3]},  # the paper arm's best rate
      extend_edges=2,
      # NLL, not the training loss: with label smoothing 0.1 `loss` is the smoothed objective.
      select="eval/nll",
      report="test/nll",
      also_report=("test/bleu",),
      metrics=("eval/nll", "test/nll", "decode/bleu", "test/bleu",
               "init/encoder/embed/ratio", "final/encoder/embed/ratio",
               "init/decoder/embed/ratio", "final/decoder/embed/ratio") + FIRST_ATTENTION,
      curves=("eval/loss", "diagnostics/encoder/embed/ratio"),  # the smoothed objective
  )
