"""The training loop's held-out scores: the loss of the eval split every eval_every_steps,
the test split's once at the end, and the BLEU of decoding them (`bleu_every_steps`), on the
mesh. `transformer.trained.evaluate` scores a finished run's checkpoint the same way, with
the same eval step, so its eval loss is the one training logged.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from transformer.data import pipeline
from transformer.inference import bleu
from transformer.inference.decode_config import DecodeConfig
from transformer.training import sharding, steps, writers
from transformer.training.experiment import Experiment

# The splits training's evaluations write; at a resumed step they are run again, so their
# records there are dropped first.
EVAL_SPLITS = ("eval", "test", "decode")


def evaluations_due(step: int, exp: Experiment, model: nn.Module,
                    params: Any, eval_step: Any, datasets: pipeline.Datasets,
                    mesh: jax.sharding.Mesh, writer: writers.MetricWriter,
                    on_nonfinite: Callable[[int, str, float], None] = lambda *_: None
                    ) -> dict[str, Any]:
  """Training's evaluations due at `step`: the eval split every eval_every_steps, the test
  split once at the end, BLEU every bleu_every_steps (and the test split's at the end); each
  written, and returned as {'eval', 'test', 'decode': metrics, 'bleu_signature'} (those made).
  A split whose loss is not finite calls `on_nonfinite(step, split, loss)` once it is written,
  before anything is decoded (the loop's raises)."""
  final: dict[str, Any] = {}
  loop, is_last = exp.loop, step == exp.optimization.num_train_steps
  for split, due, batches in (
      ("eval", step % loop.eval_every_steps == 0 or is_last, datasets.eval_batches),
      ("test", is_last and datasets.test_batches() is not None, datasets.test_batches)):
    if due:  # the test split is scored once, at the end
      final[split] = steps.split_metrics(eval_step, params, batches(), mesh)
      writer.write(step, split, final[split])
      logging.info("step %d %s %s", step, split, final[split])
      if not math.isfinite(final[split]["loss"]):
        on_nonfinite(step, split, final[split]["loss"])
  if loop.bleu_every_steps and (step % loop.bleu_every_steps == 0 or is_last):
    decoded = decode_eval_split(model, params, datasets, mesh)
    final["decode"] = decoded.metrics()
    examples = decoded.examples_markdown(loop.num_decode_examples)
    writer.write(step, "decode", final["decode"])
    writer.write_text(step, "decode/examples", examples)
    logging.info("step %d decode %s\n%s", step, final["decode"], examples)
    if is_last and "test" in final:  # the reported BLEU: the test split's, once
      decoded = decode_eval_split(model, params, datasets, mesh, split="test")
      final["test"].update(decoded.metrics())
      final["bleu_signature"] = decoded.bleu.signature
      writer.write(step, "test", decoded.metrics())
      logging.info("step %d test decode %s (%s)", step, decoded.metrics(),
                   final["bleu_signature"])
  return final


def decode_eval_split(model: nn.Module, params: Any, datasets: pipeline.Datasets,
                      mesh: jax.sharding.Mesh, config: DecodeConfig = DecodeConfig(), *,
                      split: str = "eval") -> Optional[bleu.DecodedSplit]:
  """`bleu.decode_split` over `datasets.eval_batches()` (split 'eval') or
  `datasets.test_batches()` (split 'test') on a mesh (any process count); None for a model
  whose rows hold nothing to decode from.

  Each process places its rows of each global batch; every process gets the whole batch's
  outputs back, so each computes the same corpus BLEU.
  """
  batches = {"eval": datasets.eval_batches, "test": datasets.test_batches}[split]()
  return bleu.decode_split(
      model, params, batches, datasets.decode_ids, config,
      place=lambda b: sharding.global_batch(b, mesh),
      fetch=lambda x: np.asarray(multihost_utils.process_allgather(x, tiled=True)))
