"""Scale diagnostics: what the paper's scale factors do to the activations.

`scale_diagnostics(model, params, batch)` runs the model once (deterministic) with
mutable=['intermediates'], collects what the modules sow (the input embedding terms, q and k
and the mask of every attention, the residual stream after every block) and reduces them to
scalars in one jitted function: cheap enough to run inside training every N steps.
`update_diagnostics(old_params, new_params, grads)` gives gradient norms and relative updates
per parameter group. Both return flat dicts {name: float32 scalar}, ready for
`MetricWriter.write(step, 'diagnostics', ...)`.

Names (stack = 'encoder' | 'decoder', kind = 'self_attention' | 'cross_attention'):
  {stack}/embed/token_rms, posemb_rms, ratio      RMS of s*E[tok], of the PE term, their ratio
  {stack}/embed/bucket_{b}/...                    the same by frequency-rank quartile (0 = frequent)
  {stack}/layer_{i}/residual_rms                  RMS of the block output
  {stack}/layer_{i}/{kind}/head_{h}/{stat}        stat: raw_* (q.k) and logit_* (after scale
                                                  and soft cap) mean, var, absmax, var_within
                                                  (per query over its keys), qk_var_over_dk
                                                  (_within), qk_alignment (within-row
                                                  Var(q.k) over its random-direction value),
                                                  entropy, entropy_uniform (the masked
                                                  uniform reference), entropy_deficit
  output/log_z, output/max_logit                  mean over valid positions
All statistics are over valid positions only (token id not PAD_ID; attention: mask True).
`parse_name` splits a name into its parts.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterable, Mapping, NamedTuple, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer.attention import attention_logits
from transformer.config import ModelConfig
from transformer.models import apply_model
from transformer.token_ids import PAD_ID

Batch = Mapping[str, jax.Array]
NUM_BUCKETS = 4  # token-frequency buckets: quartiles of the frequency rank


def _masked_mean(x: jax.Array, weight: jax.Array, axes) -> jax.Array:
  """sum(x * w) / sum(w) over `axes`; NaN when nothing is valid."""
  w = weight.astype(jnp.float32)
  return jnp.sum(x * w, axis=axes) / jnp.sum(w, axis=axes)


def _rms(x: jax.Array, valid: jax.Array) -> jax.Array:
  """RMS of x float[B, L, d] over valid bool[B, L] positions and d: a scalar."""
  x = x.astype(jnp.float32)
  return jnp.sqrt(_masked_mean(jnp.mean(x * x, axis=-1), valid, (0, 1)))


def frequency_buckets(token_frequency: jax.Array, num_buckets: int = NUM_BUCKETS) -> jax.Array:
  """int[V] bucket of each token id: its frequency rank's quantile (0 = the most frequent).

  Quantiles are taken over the tokens seen so far (count > 0), so that early in training, when
  few ids have been seen, every bucket still holds tokens; unseen ids go to the last bucket.
  """
  freq = jnp.asarray(token_frequency, jnp.float32)
  rank = jnp.argsort(jnp.argsort(-freq))  # 0 = most frequent
  seen = jnp.maximum(jnp.sum(freq > 0), 1)
  return jnp.minimum((rank * num_buckets) // seen, num_buckets - 1)


def _scaled(raw: jax.Array, scale: jax.Array, softcap: Optional[float]) -> jax.Array:
  """The model's logits from raw q.k float[B, H, Lq, Lk]: per-head scale float[H], soft cap."""
  logits = raw * scale[None, :, None, None]
  return logits if softcap is None else softcap * jnp.tanh(logits / softcap)


def attention_weights(query: jax.Array, key: jax.Array, scale: jax.Array,
                      mask: Optional[jax.Array] = None,
                      softcap: Optional[float] = None) -> jax.Array:
  """The softmax weights float32[B, H, Lq, Lk] of sown q, k float[B, L, H, D], scale float[H]
  and mask bool[B, 1|H, Lq, Lk]; a row with no visible key is all 0."""
  logits = _scaled(attention_logits(query, key, scale=1.0), scale, softcap)
  valid = jnp.ones(logits.shape, bool) if mask is None else jnp.broadcast_to(mask, logits.shape)
  weights = jax.nn.softmax(jnp.where(valid, logits, -jnp.inf), axis=-1)
  return jnp.where(valid, weights, 0.0)


def attention_stats(query: jax.Array, key: jax.Array, scale: jax.Array,
                    mask: Optional[jax.Array] = None,
                    softcap: Optional[float] = None) -> dict[str, jax.Array]:
  """Per-head logit statistics: q, k float[B, L, H, D], scale float[H], mask bool[B, 1|H, Lq, Lk].

  Returns {stat: float[H]}, every statistic over the (query, key) pairs the mask lets through:
    raw_mean, raw_var, raw_absmax      of q.k, pooled over every visible pair
    logit_mean, logit_var, logit_absmax  the same of scale * q.k (soft-capped when the model caps)
    qk_var_over_dk                     raw_var / d_k
    raw_var_within, logit_var_within   the variance across one query's visible keys, averaged
                                       over queries with at least two: what the softmax sees
                                       (the pooled variance adds differences between rows,
                                       which the softmax ignores)
    qk_var_over_dk_within              raw_var_within / d_k
    qk_alignment                       per query, raw_var_within / (|q|^2 mean|k|^2 / d_k), the
                                       mean over its visible keys; averaged over queries with at
                                       least two. 1 when the keys point in random directions
                                       relative to q (what the d_k argument assumes); above 1
                                       when they spread along q: growth of Var(q.k) that is
                                       alignment, not norm
    entropy                            softmax entropy in nats, averaged over queries with a
                                       visible key
    entropy_uniform                    the same average of log(number of visible keys): the
                                       entropy of uniform attention under this very mask
                                       (causal and per-segment masks make it vary by query)
    entropy_deficit                    entropy_uniform - entropy (0 = uniform attention)
  """
  raw = attention_logits(query, key, scale=1.0)  # float32[B, H, Lq, Lk]
  logits = _scaled(raw, scale, softcap)
  valid = jnp.ones(raw.shape, bool) if mask is None else jnp.broadcast_to(mask, raw.shape)
  visible = jnp.sum(valid, axis=-1)  # int[B, H, Lq]
  out, row_vars = {}, {}
  for name, x in (("raw", raw), ("logit", logits)):
    spread, row_vars[name] = _spread(x, valid, visible)
    out.update({f"{name}_{stat}": value for stat, value in spread.items()})
  d_k = query.shape[-1]
  out["qk_var_over_dk"] = out["raw_var"] / d_k
  out["qk_alignment"] = _alignment(query, key, valid, visible, row_vars["raw"])
  out["qk_var_over_dk_within"] = out["raw_var_within"] / d_k
  out.update(_entropies(logits, valid, visible))
  return out


def _spread(x: jax.Array, valid: jax.Array, visible: jax.Array
            ) -> tuple[dict[str, jax.Array], jax.Array]:
  """({mean, var, absmax, var_within}: float[H], row variances float[B, H, Lq]) of x[B, H, Lq, Lk].

  mean, var and absmax pool every visible pair; var_within averages the variance across one
  query's visible keys over the queries with at least two.
  """
  axes = (0, 2, 3)
  mean = _masked_mean(x, valid, axes)
  row_mean = _masked_mean(x, valid, -1)[..., None]  # NaN for a row with no visible key
  row_var = (jnp.sum(jnp.where(valid, jnp.square(x - row_mean), 0.0), axis=-1)
             / jnp.maximum(visible, 1))  # [B, H, Lq]
  return {"mean": mean,
          "var": _masked_mean(jnp.square(x - mean[None, :, None, None]), valid, axes),
          "absmax": jnp.max(jnp.where(valid, jnp.abs(x), 0.0), axis=axes),
          "var_within": _masked_mean(jnp.where(visible >= 2, row_var, 0.0), visible >= 2,
                                     (0, 2))}, row_var


def _alignment(query: jax.Array, key: jax.Array, valid: jax.Array, visible: jax.Array,
               raw_row_var: jax.Array) -> jax.Array:
  """float[H]: each row's q.k variance against what random key directions would give."""
  d_k = query.shape[-1]
  q_sq = jnp.sum(jnp.square(query.astype(jnp.float32)), -1).transpose(0, 2, 1)  # [B, H, Lq]
  k_sq = jnp.sum(jnp.square(key.astype(jnp.float32)), -1).transpose(0, 2, 1)  # [B, H, Lk]
  k_sq_visible = _masked_mean(k_sq[:, :, None, :], valid, -1)  # [B, H, Lq]
  isotropic = q_sq * k_sq_visible / d_k
  two = (visible >= 2) & (isotropic > 0)
  ratio = raw_row_var / jnp.where(two, isotropic, 1.0)
  return _masked_mean(jnp.where(two, ratio, 0.0), two, (0, 2))


def _entropies(logits: jax.Array, valid: jax.Array, visible: jax.Array) -> dict[str, jax.Array]:
  """{entropy, entropy_uniform, entropy_deficit}: float[H], over queries with a visible key."""
  log_p = jax.nn.log_softmax(jnp.where(valid, logits, -jnp.inf), axis=-1)
  p_log_p = jnp.where(valid, jnp.exp(log_p) * log_p, 0.0)
  entropy = -jnp.sum(p_log_p, axis=-1)  # [B, H, Lq]
  has_key = visible >= 1
  out = {"entropy": _masked_mean(entropy, has_key, (0, 2)),
         "entropy_uniform": _masked_mean(jnp.log(jnp.maximum(visible, 1).astype(jnp.float32)),
                                         has_key, (0, 2))}
  out["entropy_deficit"] = out["entropy_uniform"] - out["entropy"]
  return out


def _layers(tree: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any], bool]]:
  """(index, block intermediates, stacked) of a BlockStack's intermediates, in layer order.

  Handles the Python loop ('layer_i', with remat 'layer_i/block') and nn.scan ('layers/block',
  every leaf stacked along a leading layer axis).
  """
  if "layers" in tree:
    return [(-1, tree["layers"]["block"], True)]
  found = []
  for name, sub in tree.items():
    if name.startswith("layer_"):
      found.append((int(name[len("layer_"):]), sub.get("block", sub), False))
  return sorted(found, key=lambda t: t[0])


def _stack_diagnostics(stack: str, tree: Mapping[str, Any], tokens: jax.Array, valid: jax.Array,
                       buckets: Optional[jax.Array],
                       config: ModelConfig) -> dict[str, jax.Array]:
  """The embedding, residual and attention statistics of one encoder or decoder stack."""
  out = {}
  emb = tree["input_embedding"]
  token = emb["token"][0]
  out[f"{stack}/embed/token_rms"] = _rms(token, valid)
  if "position" in emb:
    position = emb["position"][0]
    out[f"{stack}/embed/posemb_rms"] = _rms(position, valid)
    out[f"{stack}/embed/ratio"] = out[f"{stack}/embed/token_rms"] / out[f"{stack}/embed/posemb_rms"]
  if buckets is not None:
    token_bucket = jnp.take(buckets, tokens, mode="clip")
    for b in range(NUM_BUCKETS):
      in_bucket = valid & (token_bucket == b)
      out[f"{stack}/embed/bucket_{b}/token_rms"] = _rms(token, in_bucket)
      if "position" in emb:
        out[f"{stack}/embed/bucket_{b}/posemb_rms"] = _rms(position, in_bucket)
        out[f"{stack}/embed/bucket_{b}/ratio"] = (out[f"{stack}/embed/bucket_{b}/token_rms"]
                                                  / out[f"{stack}/embed/bucket_{b}/posemb_rms"])
  for i, h in _residuals(tree["blocks"]):
    out[f"{stack}/layer_{i}/residual_rms"] = _rms(h, valid)
  for i, kind, q, k, s, m in _attentions(tree["blocks"]):
    for stat, per_head in attention_stats(q, k, s, m, config.softcap_at(i)).items():
      for h in range(per_head.shape[0]):
        out[f"{stack}/layer_{i}/{kind}/head_{h}/{stat}"] = per_head[h]
  return out


def _unstacked(blocks: Mapping[str, Any]):
  """(layer index, block intermediates) per layer, a scanned stack split into its layers."""
  for index, block, stacked in _layers(blocks):
    if not stacked:
      yield index, block
      continue
    for i in range(block["output"][0].shape[0]):
      yield i, jax.tree_util.tree_map(lambda x, i=i: x[i], block)


def _residuals(blocks: Mapping[str, Any]):
  """(layer, block output float[B, L, d]) per layer."""
  for i, block in _unstacked(blocks):
    yield i, block["output"][0]


def _attentions(blocks: Mapping[str, Any]):
  """(layer, kind, q, k, scale, mask or None) of every attention of a stack, in layer order."""
  for i, block in _unstacked(blocks):
    for kind in ("self_attention", "cross_attention"):
      if kind in block:
        a = block[kind]
        yield (i, kind, a["q"][0], a["k"][0], a["scale"][0],
               a["mask"][0] if "mask" in a else None)


@functools.partial(jax.jit, static_argnums=0)
def attention_maps(model: nn.Module, params: Any, batch: Batch) -> dict[str, jax.Array]:
  """{'{stack}/layer_{i}/{kind}': float32[B, H, Lq, Lk]} softmax weights of every attention of
  the model on `batch` (deterministic), encoder first; for looking at, not for training."""
  _, state = apply_model(model, params, batch, mutable=["intermediates"])
  out = {}
  for stack in ("encoder", "decoder"):
    if stack in state["intermediates"]:
      for i, kind, q, k, s, m in _attentions(state["intermediates"][stack]["blocks"]):
        out[f"{stack}/layer_{i}/{kind}"] = attention_weights(q, k, s, m,
                                                             model.config.softcap_at(i))
  return out


@functools.partial(jax.jit, static_argnums=0)
def scale_diagnostics(model: nn.Module, params: Any, batch: Batch,
                      token_frequency: Optional[jax.Array] = None) -> dict[str, jax.Array]:
  """Scale statistics of one batch: {name: float32 scalar} (names in the module docstring).

  model: a `Transformer` or `DecoderOnly`; params its params; batch the training batch dict
  (int[B, L] arrays); token_frequency: optional float[V] counts, for the per-bucket embedding
  ratios. Deterministic (no dropout); jitted, model static.
  """
  cfg = model.config
  logits, state = apply_model(model, params, batch, mutable=["intermediates"])
  inter = state["intermediates"]
  target_valid = batch["targets"] != PAD_ID
  buckets = None if token_frequency is None else frequency_buckets(token_frequency)
  out = {}
  for stack, (tokens, valid) in model.stack_inputs(batch).items():
    out.update(_stack_diagnostics(stack, inter[stack], tokens, valid, buckets, cfg))
  log_z = jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1)  # float32[B, L]
  out["output/log_z"] = _masked_mean(log_z, target_valid, (0, 1))
  max_logit = jnp.max(logits.astype(jnp.float32), axis=-1)
  out["output/max_logit"] = _masked_mean(max_logit, target_valid, (0, 1))
  return out


def _group_norms(tree: Any) -> dict[str, jax.Array]:
  """Squared L2 norms per parameter group: embedding(s), each block of each stack, output, rest.

  A scanned stack ('layers', leaves [num_layers, ...]) is split into its layers.
  """
  sums: dict[str, jax.Array] = {}

  def add(name, value):
    sums[name] = sums.get(name, 0.0) + value

  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    keys = [getattr(p, "key", str(p)) for p in path]
    sq = jnp.square(leaf.astype(jnp.float32))
    if keys[0].endswith("embedding"):  # 'embedding', 'source_embedding', 'target_embedding'
      add(keys[0], jnp.sum(sq))
    elif keys[0] == "output_logits":
      add("output", jnp.sum(sq))
    elif len(keys) > 2 and keys[1] == "blocks" and keys[2] == "layers":
      per_layer = jnp.sum(sq.reshape(sq.shape[0], -1), axis=1)
      for i in range(per_layer.shape[0]):
        add(f"{keys[0]}/layer_{i}", per_layer[i])
    elif len(keys) > 2 and keys[1] == "blocks":
      add(f"{keys[0]}/{keys[2]}", jnp.sum(sq))
    else:  # input_embedding (learned PE, embed_norm), final_norm
      add(f"{keys[0]}/{keys[1]}" if len(keys) > 1 else keys[0], jnp.sum(sq))
  return sums


@jax.jit
def update_diagnostics(old_params: Any, new_params: Any, grads: Any) -> dict[str, jax.Array]:
  """{'grad_norm/GROUP': ||g||, 'update_ratio/GROUP': ||W_new - W_old|| / ||W_old||} per group.

  Groups: each embedding matrix, '{encoder|decoder}/layer_i', '{stack}/input_embedding',
  '{stack}/final_norm', 'output' (an untied projection).
  """
  grad_sq = _group_norms(grads)
  delta = jax.tree_util.tree_map(lambda a, b: b.astype(jnp.float32) - a.astype(jnp.float32),
                                 old_params, new_params)
  delta_sq, old_sq = _group_norms(delta), _group_norms(old_params)
  out = {f"grad_norm/{g}": jnp.sqrt(v) for g, v in grad_sq.items()}
  out.update({f"update_ratio/{g}": jnp.sqrt(delta_sq[g] / old_sq[g]) for g in delta_sq})
  return out


def training_diagnostics(model: nn.Module, old_params: Any, new_params: Any, grads: Any,
                         heldout: Sequence[Batch],
                         token_frequency: Optional[Any] = None) -> dict[str, float]:
  """What training logs every `diagnostics_every_steps`: `heldout_scale_diagnostics` of
  new_params on the fixed `heldout` batches and `update_diagnostics` of the update
  old_params -> new_params made with `grads` (the training side computes them:
  `training.steps.Steps.grads`), as host floats."""
  values = heldout_scale_diagnostics(model, new_params, heldout, token_frequency)
  values.update(to_floats(update_diagnostics(old_params, new_params, grads)))
  return values


def heldout_scale_diagnostics(model: nn.Module, params: Any, batches: Iterable[Batch],
                              token_frequency: Optional[Any] = None) -> dict[str, float]:
  """`scale_diagnostics` averaged over `batches` (a fixed set of held-out batches, so that the
  figures of different steps and runs describe the same text): {name: float}."""
  results = [jax.device_get(scale_diagnostics(model, params, batch, token_frequency))
             for batch in batches]
  if not results:
    raise ValueError("heldout_scale_diagnostics needs at least one batch.")
  return mean_over_batches(results)


def to_floats(values: Mapping[str, jax.Array]) -> dict[str, float]:
  """{name: float} of a diagnostics dict (one device-to-host transfer)."""
  return {k: float(v) for k, v in jax.device_get(dict(values)).items()}


class TokenCounts:
  """Token counts of the training batches seen so far (host side), for the frequency buckets."""

  def __init__(self, vocab_size: int):
    self.counts = np.zeros((vocab_size,), np.float64)

  def add(self, batch: Mapping[str, Any]) -> None:
    """Counts the non-pad ids of batch['inputs'] and batch['targets'] (int[B, L] host arrays)."""
    for key in ("inputs", "targets"):
      if key in batch:
        ids = np.asarray(batch[key]).ravel()
        ids = ids[(ids != PAD_ID) & (ids >= 0) & (ids < self.counts.shape[0])]
        self.counts += np.bincount(ids, minlength=self.counts.shape[0])

  def frequency(self) -> np.ndarray:
    """float32[V] counts so far."""
    return self.counts.astype(np.float32)


def mean_over_batches(results: list[Mapping[str, Any]]) -> dict[str, float]:
  """The NaN-ignoring mean of each statistic over several batches' results."""
  keys = results[0].keys()
  stacked = {k: np.asarray([float(r[k]) for r in results]) for k in keys}
  with np.errstate(all="ignore"):
    return {k: float(np.nanmean(v)) if np.any(np.isfinite(v)) else float("nan")
            for k, v in stacked.items()}


class DiagnosticName(NamedTuple):
  """The parts of a diagnostic's name; None where the name has no such part."""
  group: str  # 'embed', 'residual', 'attention', 'output', 'grad_norm' or 'update_ratio'
  stat: str  # 'ratio', 'residual_rms', 'entropy', 'log_z', or a parameter group's name
  stack: Optional[str] = None  # 'encoder' or 'decoder'
  layer: Optional[int] = None
  attention: Optional[str] = None  # 'self_attention' or 'cross_attention'
  head: Optional[int] = None
  bucket: Optional[int] = None  # token-frequency bucket of an embed statistic


_STACK_NAME = re.compile(
    r"(?P<stack>encoder|decoder)/(?:embed/(?:bucket_(?P<bucket>\d+)/)?(?P<embed>\w+)"
    r"|layer_(?P<layer>\d+)/(?:(?P<attention>self_attention|cross_attention)/head_(?P<head>\d+)/"
    r"(?P<attn_stat>\w+)|(?P<layer_stat>residual_rms)))")


def parse_name(name: str) -> DiagnosticName:
  """'decoder/layer_1/self_attention/head_2/entropy' -> DiagnosticName('attention', 'entropy',
  'decoder', 1, 'self_attention', 2); raises ValueError for a name this module does not make."""
  group, _, rest = name.partition("/")
  if group in ("output", "grad_norm", "update_ratio") and rest:
    return DiagnosticName(group, rest)
  m = _STACK_NAME.fullmatch(name)
  if m is None:
    raise ValueError(f"{name!r} is not a diagnostics name (see transformer.diagnostics).")
  as_int = lambda k: None if m[k] is None else int(m[k])  # noqa: E731
  if m["embed"]:
    return DiagnosticName("embed", m["embed"], m["stack"], bucket=as_int("bucket"))
  if m["attention"]:
    return DiagnosticName("attention", m["attn_stat"], m["stack"], as_int("layer"),
                          m["attention"], as_int("head"))
  return DiagnosticName("residual", m["layer_stat"], m["stack"], as_int("layer"))
