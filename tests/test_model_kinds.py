"""Model kinds: an experiment's model_type names what its batches hold and the class that
builds it. A third kind, defined in this file alone (a prefix LM), trains on packed rows,
counts its source in its FLOPs, checkpoints, restores and decodes exactly what training
scored, with no edit to the package: it answers `models.ModelKind` itself."""

import math
from typing import Any, ClassVar, Mapping, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer import checkpoint, model_kinds, model_summary, models
from transformer.config import ModelConfig
from transformer.errors import ConfigError
from transformer.inference import decoding
from transformer.token_ids import EOS_ID, PAD_ID
from transformer.trained import evaluate, loading
from transformer.training import experiment, heldout, loop, steps, writers
from transformer.inference.decode_config import DecodeConfig

KIND = f"{__name__}:PrefixLM"  # the model_type that names the class below


def _join(batch: Mapping[str, jax.Array]) -> tuple[jax.Array, ...]:
  """Each (source, target) pair of a batch as one sequence, source tokens then target tokens,
  positions counting on from the source: (tokens, segmentation, position) int[B, Ls + Lt] and
  the index int[B, Lt] of each target token in it. Packed rows (several pairs a row, matched
  by segment id) are joined pair by pair; padding goes to the end."""
  inputs, targets = batch["inputs"], batch["targets"]
  B, Ls = inputs.shape
  Lt = targets.shape[1]
  in_seg = batch.get("inputs_segmentation", (inputs != PAD_ID).astype(jnp.int32))
  tg_seg = batch.get("targets_segmentation", (targets != PAD_ID).astype(jnp.int32))
  in_pos = batch.get("inputs_position", jnp.broadcast_to(jnp.arange(Ls), (B, Ls)))
  tg_pos = batch.get("targets_position", jnp.broadcast_to(jnp.arange(Lt), (B, Lt)))

  def count(seg, of, compare):  # [B, N]: tokens of `seg` whose segment compares to `of`'s
    return jnp.sum(compare(seg[:, None, :], of[:, :, None]) & (seg[:, None, :] > 0), -1)

  src_index = count(in_seg, in_seg, jnp.less) + count(tg_seg, in_seg, jnp.less) + in_pos
  source_len = count(in_seg, tg_seg, jnp.equal)  # of each target token's pair
  tgt_index = count(in_seg, tg_seg, jnp.less_equal) + count(tg_seg, tg_seg, jnp.less) + tg_pos
  L, rows = Ls + Lt, jnp.arange(B)[:, None]
  drop = lambda index, seg: jnp.where(seg > 0, index, L)  # noqa: E731  (padding: dropped)

  def scatter(src_values, tgt_values):
    out = jnp.zeros((B, L), jnp.int32)
    out = out.at[rows, drop(src_index, in_seg)].set(src_values, mode="drop")
    return out.at[rows, drop(tgt_index, tg_seg)].set(tgt_values, mode="drop")

  return (scatter(inputs, targets), scatter(in_seg, tg_seg),
          scatter(in_pos, source_len + tg_pos), jnp.minimum(tgt_index, L - 1))


class PrefixLM(nn.Module):
  """A decoder-only model that reads its source as a prefix: each pair joined into one
  sequence (`_join`) through one causal stack, the package's `DecoderOnly` inside, scored on
  the targets. Decoding continues the source as a prompt, at the positions training used."""

  config: ModelConfig
  batch_keys: ClassVar[tuple[str, ...]] = ("inputs", "targets")

  def setup(self):
    self.lm = models.DecoderOnly(self.config)

  def __call__(self, inputs: jax.Array, targets: jax.Array, *, deterministic: bool = True,
               return_hidden: bool = False, **packed: jax.Array) -> jax.Array:
    tokens, segmentation, position, index = _join({"inputs": inputs, "targets": targets,
                                                   **packed})
    out = self.lm(tokens, segmentation=segmentation, position=position,
                  deterministic=deterministic, return_hidden=return_hidden)
    return jnp.take_along_axis(out, index[:, :, None], axis=1)

  def joined(self, tokens: jax.Array, *, decode: bool = False) -> jax.Array:
    return self.lm(tokens, decode=decode)

  def project(self, hidden: jax.Array) -> jax.Array:
    return self.lm.project(hidden)

  # ---- models.ModelKind ----
  def logits(self, params: Any, batch: Mapping[str, jax.Array], *, deterministic: bool = True,
             rng: Optional[jax.Array] = None, **kwargs: Any) -> Any:
    packed = {k: v for k, v in batch.items() if k.endswith(("_segmentation", "_position"))}
    return self.apply({"params": params}, batch["inputs"], batch["targets"],
                      deterministic=deterministic, rngs=None if rng is None else {"dropout": rng},
                      **packed, **kwargs)

  def stack_inputs(self, batch: Mapping[str, jax.Array]) -> dict[str, tuple[jax.Array, jax.Array]]:
    tokens, segmentation, _, _ = _join(batch)
    return {"decoder": (models.shift_right(tokens, segmentation), tokens != PAD_ID)}

  def stacks(self, intermediates: Any, batch: Mapping[str, jax.Array]) -> dict[str, models.Stack]:
    return models.read_stacks(intermediates["lm"], self.stack_inputs(batch))

  def parameter_groups(self, tree: Any) -> dict[str, list[jax.Array]]:
    return models.parameter_groups(tree["lm"])

  def forward_flops(self, shapes: Mapping[str, Any]) -> float:
    (batch, source_len), target_len = shapes["inputs"], shapes["targets"][1]
    return batch * model_summary.forward_flops(self.config, 0, source_len + target_len,
                                               with_encoder=False)

  def decoding_source(self, batch: Mapping[str, jax.Array]) -> jax.Array:
    return batch["inputs"]

  def input_len(self, train_len: int) -> int:
    return min(train_len, self.input_limit)

  @property
  def input_limit(self) -> int:
    return self.config.max_len - 1

  def input_eos(self, prompt_eos: bool) -> bool:
    return True  # sources end in EOS, as in training

  def decoding_lengths(self, inputs: jax.Array, extra_len: int):
    if inputs.shape[1] >= self.config.max_len:
      raise ConfigError(f"Sources of {inputs.shape[1]} tokens leave no room in max_len="
                        f"{self.config.max_len}.")
    num_steps = min(inputs.shape[1] + extra_len, self.config.max_len)
    count = models.num_tokens(inputs)
    return num_steps, num_steps - count, count + extra_len

  def start_decoding(self, params: Any, inputs: jax.Array, copies: int, num_steps: int):
    models.check_cache_length(self.config, num_steps)
    zeros = jnp.zeros((inputs.shape[0] * copies, num_steps), jnp.int32)
    _, variables = self.apply({"params": params}, zeros, decode=True, mutable=["cache"],
                              method=PrefixLM.joined)
    return {"cache": variables["cache"]}, inputs, models.num_tokens(inputs)

  def decode_step(self, params: Any, state: Any, token: jax.Array):
    logits, mutated = self.apply({"params": params, "cache": state["cache"]}, token[:, None],
                                 decode=True, mutable=["cache"], method=PrefixLM.joined)
    return logits[:, 0], {"cache": mutated["cache"]}

  def prefix_logits(self, params: Any, state: Any, tokens: jax.Array) -> jax.Array:
    return self.apply({"params": params}, tokens, method=PrefixLM.joined)


class Incomplete(nn.Module):
  """A flax module that holds rows but answers none of the other questions."""
  config: ModelConfig
  batch_keys: ClassVar[tuple[str, ...]] = ("targets",)


def test_a_class_that_does_not_answer_the_interface_is_one_line_when_it_is_named(tiny_config):
  tiny_config.model_type = f"{__name__}:Incomplete"
  with pytest.raises(ConfigError, match=r"Incomplete' lacks decode_step, decoding_lengths, .* of "
                     r"transformer.models.ModelKind"):
    experiment.parse(tiny_config)


def _small(max_len: int = 24) -> tuple[PrefixLM, Any]:
  config = ModelConfig(vocab_size=20, d_model=32, num_heads=2, d_ff=64, num_encoder_layers=0,
                       num_decoder_layers=2, max_len=max_len, dropout_rate=0.0)
  model = PrefixLM(config)
  rows = {"inputs": jnp.ones((1, 4), jnp.int32), "targets": jnp.ones((1, 4), jnp.int32)}
  return model, models.init_params(model, jax.random.PRNGKey(0), rows)


def test_the_built_in_kinds_and_their_mistakes():
  assert model_kinds.get("lm").batch_keys == ("targets",)
  assert models.model_class("seq2seq") is models.Transformer
  assert model_kinds.get(KIND).batch_keys == ("inputs", "targets")
  assert models.model_class(KIND) is PrefixLM
  for name, match in (("gpt", r"model_type='gpt' is not one of \['lm', 'seq2seq'\] or a model "
                               r"class 'package.module:ClassName'"),
                      ("no_such_module:X", "module 'no_such_module' cannot be imported"),
                      (f"{__name__}:Nothing", f"{__name__} has no class 'Nothing'"),
                      (f"{__name__}:ConfigError", "batch_keys hold 'targets'")):
    with pytest.raises(ConfigError, match=match):
      model_kinds.get(name)


def test_packed_rows_give_each_pair_its_own_logits():
  """Two pairs packed in one row score as each pair alone: the joined sequence keeps each
  pair's tokens together, its positions, and attention within the pair."""
  model, params = _small()
  a_in, a_tg = jnp.asarray([[3, 4, 5, EOS_ID]]), jnp.asarray([[6, 7, EOS_ID]])
  b_in, b_tg = jnp.asarray([[8, 9, EOS_ID]]), jnp.asarray([[10, 11, 12, EOS_ID]])
  packed = {"inputs": jnp.asarray([[3, 4, 5, EOS_ID, 8, 9, EOS_ID, 0]]),
            "inputs_segmentation": jnp.asarray([[1, 1, 1, 1, 2, 2, 2, 0]]),
            "inputs_position": jnp.asarray([[0, 1, 2, 3, 0, 1, 2, 0]]),
            "targets": jnp.asarray([[6, 7, EOS_ID, 10, 11, 12, EOS_ID, 0]]),
            "targets_segmentation": jnp.asarray([[1, 1, 1, 2, 2, 2, 2, 0]]),
            "targets_position": jnp.asarray([[0, 1, 2, 0, 1, 2, 3, 0]])}
  tokens = _join(packed)[0]  # every real token has a place of its own: none overwritten
  assert int((tokens != PAD_ID).sum()) == int((packed["inputs"] != PAD_ID).sum() +
                                              (packed["targets"] != PAD_ID).sum())
  logits = model.logits(params, packed)
  alone = lambda i, t: model.logits(params, {"inputs": i, "targets": t})  # noqa: E731
  np.testing.assert_allclose(logits[:, :3], alone(a_in, a_tg), atol=1e-5)
  np.testing.assert_allclose(logits[:, 3:7], alone(b_in, b_tg), atol=1e-5)
  # Padding after the source (an unpacked row shorter than its width) changes nothing either.
  padded = jnp.pad(a_in, ((0, 0), (0, 3)))
  np.testing.assert_allclose(alone(padded, a_tg), alone(a_in, a_tg), atol=1e-5)


def test_its_flops_count_the_source_it_reads():
  model, _ = _small()
  one_sequence = model_summary.forward_flops(model.config, 0, 16 + 8, with_encoder=False)
  assert model.forward_flops({"inputs": (3, 16), "targets": (3, 8)}) == 3 * one_sequence


def test_decoding_scores_what_training_scored():
  """Through the cache, each output token's logits are the training forward pass's at that
  target position (the source padded, as batches pad it), and greedy decoding picks their
  argmax."""
  model, params = _small()
  source = jnp.asarray([[3, 4, 5, 6, EOS_ID, 0, 0, 0]], jnp.int32)  # padded to 8
  tokens, _ = decoding.decode(model, params, source,
                              DecodeConfig(method="greedy", extra_len=8, eos_id=-1))
  output = tokens[:, :8]
  trained = model.logits(params, {"inputs": source, "targets": output})
  state, _, _ = model.start_decoding(params, source, 1, 5 + 8)
  fed = jnp.concatenate([jnp.zeros((1, 1), jnp.int32), source[:, :5], output[:, :-1]], axis=1)
  stepped = []
  for t in range(fed.shape[1]):
    logits, state = model.decode_step(params, state, fed[:, t])
    stepped.append(logits)
  np.testing.assert_allclose(jnp.stack(stepped[5:], axis=1), trained, atol=1e-4)
  np.testing.assert_array_equal(jnp.argmax(trained[0, :, 1:], -1) + 1, output[0])


def test_a_third_kind_trains_on_packed_rows_checkpoints_restores_and_decodes(tiny_config,
                                                                           tmp_path):
  tiny_config.model_type = KIND
  tiny_config.model.num_encoder_layers = 0
  tiny_config.model.max_len = 2 * tiny_config.max_len  # the source and target in one row
  tiny_config.packing = "pack"
  tiny_config.diagnostics_every_steps = 5  # the scale diagnostics ask the model too
  workdir = str(tmp_path / "w")
  final = loop.train_and_evaluate(experiment.parse(tiny_config), workdir)
  assert final.step == 10 and math.isfinite(final.eval["loss"])
  losses = [r["loss"] for r in writers.read_metrics(workdir, "train")]
  assert losses[-1] < losses[0]
  diag = writers.read_metrics(workdir, "diagnostics")
  assert any("decoder/layer_0/self_attention/head_0/entropy" in r for r in diag)
  assert any("grad_norm/decoder/layer_0" in r for r in diag)

  loaded = loading.load(workdir)
  assert isinstance(loaded.model, PrefixLM) and loaded.step == 10
  # It trained on rows of several pairs, and the run's summary counts each row's source.
  train_batch = next(iter(evaluate.run_datasets(loaded).train_iter()))
  assert train_batch["targets_segmentation"].max() > 1
  length = tiny_config.max_len
  forward = model_summary.forward_flops(loaded.model_config, 0, 2 * length, with_encoder=False)
  summary = checkpoint.read_config(workdir)["summary"]["flops_per_token"]
  assert summary["forward"] == pytest.approx(forward / length)
  # The restored params score the eval split as the run did at its end.
  r = loaded.as_run()
  batches = evaluate.run_datasets(loaded).eval_batches()
  again = steps.split_metrics(r.steps.eval, r.state.params, batches, r.mesh)
  assert again["loss"] == pytest.approx(final.eval["loss"], rel=1e-5)
  # Its eval split decodes (the source as the prompt) into BLEU, as a seq2seq model's does.
  decoded = heldout.decode_eval_split(r.model, r.state.params, evaluate.run_datasets(loaded),
                                       r.mesh, DecodeConfig(method="greedy"))
  assert decoded is not None and len(decoded.hypotheses) > 0
