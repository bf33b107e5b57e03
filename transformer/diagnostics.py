"""Scale diagnostics: what the paper's scale factors do to the activations.

`scale_diagnostics(model, params, batch)` runs the model once (deterministic) with
mutable=['intermediates'], collects what the modules sow (the input embedding terms, q and k
and the mask of every attention, the residual stream after every block) and reduces them to
scalars in one jitted function: cheap enough to run inside training every N steps.
`update_diagnostics(model, old_params, new_params, grads)` gives gradient norms and relative updates
per parameter group. Both return flat dicts {name: float32 scalar}, ready for
`MetricWriter.write(step, 'diagnostics', ...)`.

Names (stack and kind as the model names them, `models.ModelKind.stacks`: a Transformer's
'encoder' | 'decoder', a block's 'self_attention' | 'cross_attention'):
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

from transformer import model_kinds
from transformer.attention import attention_logits
from transformer.config import ModelConfig
from transformer.models import Stack
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


def _stack_diagnostics(name: str, stack: Stack, buckets: Optional[jax.Array],
                       config: ModelConfig) -> dict[str, jax.Array]:
  """The embedding, residual and attention statistics of one stack the model recorded."""
  out, valid = {}, stack.valid
  terms = {"token_rms": stack.token, "posemb_rms": stack.position}
  groups = [("embed", valid)]
  if buckets is not None:
    token_bucket = jnp.take(buckets, stack.tokens, mode="clip")
    groups += [(f"embed/bucket_{b}", valid & (token_bucket == b)) for b in range(NUM_BUCKETS)]
  for group, where in groups:
    for stat, term in terms.items():
      if term is not None:
        out[f"{name}/{group}/{stat}"] = _rms(term, where)
    if stack.position is not None:
      out[f"{name}/{group}/ratio"] = out[f"{name}/{group}/token_rms"] / \
          out[f"{name}/{group}/posemb_rms"]
  for layer in stack.layers:
    out[f"{name}/layer_{layer.index}/residual_rms"] = _rms(layer.output, valid)
  for layer in stack.layers:
    for kind, a in layer.attentions.items():
      for stat, per_head in attention_stats(a.q, a.k, a.scale, a.mask,
                                            config.softcap_at(layer.index)).items():
        for h in range(per_head.shape[0]):
          out[f"{name}/layer_{layer.index}/{kind}/head_{h}/{stat}"] = per_head[h]
  return out


def _recorded(model: nn.Module, params: Any, batch: Batch) -> tuple[jax.Array, dict[str, Stack]]:
  """(logits, {stack: what it recorded}) of one deterministic forward pass."""
  logits, state = model.logits(params, batch, mutable=["intermediates"])
  return logits, model.stacks(state["intermediates"], batch)


@functools.partial(jax.jit, static_argnums=0)
def attention_maps(model: nn.Module, params: Any, batch: Batch) -> dict[str, jax.Array]:
  """{'{stack}/layer_{i}/{kind}': float32[B, H, Lq, Lk]} softmax weights of every attention of
  the model on `batch` (deterministic), in the model's stack order; for looking at, not for
  training."""
  out = {}
  for name, stack in _recorded(model, params, batch)[1].items():
    for layer in stack.layers:
      for kind, a in layer.attentions.items():
        out[f"{name}/layer_{layer.index}/{kind}"] = attention_weights(
            a.q, a.k, a.scale, a.mask, model.config.softcap_at(layer.index))
  return out


@functools.partial(jax.jit, static_argnums=0)
def scale_diagnostics(model: nn.Module, params: Any, batch: Batch,
                      token_frequency: Optional[jax.Array] = None) -> dict[str, jax.Array]:
  """Scale statistics of one batch: {name: float32 scalar} (names in the module docstring).

  model: any model kind (`models.ModelKind`); params its params; batch the training batch
  dict (int[B, L] arrays); token_frequency: optional float[V] counts, for the per-bucket
  embedding ratios. Deterministic (no dropout); jitted, model static.
  """
  logits, stacks = _recorded(model, params, batch)
  target_valid = batch["targets"] != PAD_ID
  buckets = None if token_frequency is None else frequency_buckets(token_frequency)
  out = {}
  for name, stack in stacks.items():
    out.update(_stack_diagnostics(name, stack, buckets, model.config))
  log_z = jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1)  # float32[B, L]
  out["output/log_z"] = _masked_mean(log_z, target_valid, (0, 1))
  max_logit = jnp.max(logits.astype(jnp.float32), axis=-1)
  out["output/max_logit"] = _masked_mean(max_logit, target_valid, (0, 1))
  return out


def _group_norms(model: nn.Module, tree: Any) -> dict[str, jax.Array]:
  """Squared L2 norm of each of the model's parameter groups (`parameter_groups`)."""
  return {group: sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves)
          for group, leaves in model.parameter_groups(tree).items()}


@functools.partial(jax.jit, static_argnums=0)
def update_diagnostics(model: nn.Module, old_params: Any, new_params: Any,
                       grads: Any) -> dict[str, jax.Array]:
  """{'grad_norm/GROUP': ||g||, 'update_ratio/GROUP': ||W_new - W_old|| / ||W_old||} per
  parameter group of the model (`models.parameter_groups`: each embedding matrix,
  '{stack}/layer_i', '{stack}/input_embedding', '{stack}/final_norm', 'output')."""
  grad_sq = _group_norms(model, grads)
  delta = jax.tree_util.tree_map(lambda a, b: b.astype(jnp.float32) - a.astype(jnp.float32),
                                 old_params, new_params)
  delta_sq, old_sq = _group_norms(model, delta), _group_norms(model, old_params)
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
  updates = jax.device_get(dict(update_diagnostics(model, old_params, new_params, grads)))
  values.update({k: float(v) for k, v in updates.items()})  # one device-to-host transfer
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


class TokenCounts:
  """Token counts of the training batches seen so far (host side), for the frequency buckets."""

  def __init__(self, vocab_size: int):
    self.counts = np.zeros((vocab_size,), np.float64)

  def add(self, batch: Mapping[str, Any]) -> None:
    """Counts the non-pad ids of batch['inputs'] and batch['targets'] (int[B, L] host arrays)."""
    for key in model_kinds.ROWS:
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
    r"(?P<stack>[a-z]\w*)/(?:embed/(?:bucket_(?P<bucket>\d+)/)?(?P<embed>\w+)"
    r"|layer_(?P<layer>\d+)/(?:(?P<attention>\w+)/head_(?P<head>\d+)/"
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
