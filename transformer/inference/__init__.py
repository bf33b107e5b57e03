"""Inference: decoding over the KV cache, BLEU of decoded splits, a workdir's lines in and out.

  decoding.py    greedy, sampling and beam search, one jitted while_loop (DecodeConfig)
  bleu.py        BLEU (sacrebleu) and exact match of a decoded split
  lines.py       lines of text in, lines of text out (scripts/decode.py; a checkpoint is
                 read by transformer.trained.loading)
"""
