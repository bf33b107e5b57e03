"""Model kinds: an experiment's model_type names what its batches hold and the class that
builds it. A third kind, defined in this file alone, goes through training, checkpoints,
restoring and decoding with no edit to the package."""

import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer import model_kinds, models
from transformer.errors import ConfigError
from transformer.inference import decoding, loading
from transformer.token_ids import EOS_ID, PAD_ID
from transformer.data import pipeline
from transformer.training import loop, sharding, steps, writers


class PrefixLM(models.DecoderOnly):
  """A decoder-only model that reads its source as a prefix: inputs ++ targets through one
  causal stack, scored on the targets. Decoding continues the source as a prompt, through
  the decoder-only model's cache (it runs `DecoderOnly.__call__` by name)."""

  batch_keys: ClassVar[tuple[str, ...]] = ("inputs", "targets")

  def __call__(self, inputs: jax.Array, targets: jax.Array, *, deterministic: bool = True,
               return_hidden: bool = False) -> jax.Array:
    joined = jnp.concatenate([inputs, targets], axis=1)
    out = models.DecoderOnly.__call__(self, joined, deterministic=deterministic,
                                      return_hidden=return_hidden)
    return out[:, inputs.shape[1]:]

  def logits(self, params: Any, batch: Any, *, deterministic: bool = True, rng=None,
             **kwargs: Any) -> Any:
    rngs = None if rng is None else {"dropout": rng}
    return self.apply({"params": params}, batch["inputs"], batch["targets"],
                      deterministic=deterministic, rngs=rngs, **kwargs)

  def stack_inputs(self, batch: Any) -> dict[str, tuple[jax.Array, jax.Array]]:
    joined = jnp.concatenate([batch["inputs"], batch["targets"]], axis=1)
    return {"decoder": (models.shift_right(joined), joined != PAD_ID)}


def test_the_built_in_kinds_and_their_mistakes():
  assert model_kinds.get("lm").batch_keys == ("targets",)
  assert model_kinds.get("seq2seq").model is models.Transformer
  assert model_kinds.get("seq2seq").reads_inputs and not model_kinds.get("lm").reads_inputs
  with pytest.raises(ConfigError, match=r"model_type='gpt' is not one of \[.*'lm'.*'seq2seq'"):
    model_kinds.get("gpt")
  with pytest.raises(ConfigError, match="batches hold 'targets'"):
    model_kinds.register("odd", ("inputs",), PrefixLM)
  with pytest.raises(ConfigError, match="Model kind 'lm' holds"):
    model_kinds.register("lm", ("inputs", "targets"), PrefixLM)


def test_a_third_kind_trains_checkpoints_restores_and_decodes(tiny_config, tmp_path,
                                                            monkeypatch):
  monkeypatch.setattr(model_kinds, "_KINDS", dict(model_kinds._KINDS))  # this test's alone
  model_kinds.register("prefix_lm", PrefixLM.batch_keys, PrefixLM)
  tiny_config.model_type = "prefix_lm"
  tiny_config.model.num_encoder_layers = 0
  tiny_config.model.max_len = 2 * tiny_config.max_len  # the source and target in one row
  tiny_config.diagnostics_every_steps = 5  # the scale diagnostics ask the model too
  workdir = str(tmp_path / "w")
  final = loop.train_and_evaluate(tiny_config, workdir)
  assert final["step"] == 10 and math.isfinite(final["eval"]["loss"])
  losses = [r["loss"] for r in writers.read_metrics(workdir, "train")]
  assert losses[-1] < losses[0]
  assert any("decoder/layer_0/self_attention/head_0/entropy" in r
             for r in writers.read_metrics(workdir, "diagnostics"))

  loaded = loading.load(workdir)
  assert isinstance(loaded.model, PrefixLM) and loaded.step == 10 and loaded.reads_source
  # The restored params score the eval split as the run did at its end.
  mesh = sharding.make_mesh()
  eval_step = steps.build_steps(loaded.experiment, loaded.model, mesh).eval
  batches = pipeline.get_datasets(loaded.experiment, workdir=workdir).eval_batches()
  again = steps.evaluate(eval_step, jax.device_put(loaded.params, sharding.replicated(mesh)),
                         batches, mesh)
  assert again["loss"] == pytest.approx(final["eval"]["loss"], rel=1e-5)

  source = np.asarray([[3, 4, 5, 6, EOS_ID]], np.int32)
  tokens, _ = decoding.decode(loaded.model, loaded.params, source,
                              decoding.DecodeConfig(method="greedy", extra_len=3))
  assert tokens.shape[0] == 1 and int(tokens[0, 0]) != PAD_ID
  # Through the cache, the first token is the full forward pass's argmax after the source.
  full = loaded.model.apply({"params": loaded.params}, jnp.asarray(source),
                            jnp.asarray([[EOS_ID]], jnp.int32))
  assert int(tokens[0, 0]) == int(jnp.argmax(full[0, 0, 1:])) + 1  # PAD never chosen
