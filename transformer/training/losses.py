"""The one token-level loss used by training, evaluation and analysis.

`cross_entropy` returns weighted SUMS (never means) so that data-parallel shards and
successive eval batches combine exactly by addition; `summarize` turns sums into the
logged means.
"""

import math
from typing import Any, Iterable, Mapping, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from transformer.errors import ConfigError
from transformer.token_ids import PAD_ID


class LossOutput(NamedTuple):
  """Weighted sums over positions (float32 scalars), plus the per-position log partition.

  loss_sum:    the training objective: smoothed cross-entropy + z-loss.
  nll_sum:     plain (unsmoothed) cross-entropy -log p(target), for perplexity.
  z_loss_sum:  the z-loss term actually added, z_loss * log(Z)^2 (0 when z_loss = 0).
  correct_sum: positions whose argmax equals the target.
  weight_sum:  the total weight (the token count with the default pad mask).
  log_z:       float32[B, L] log-sum-exp of the logits, unweighted; NOT a sum, so drop it
               before adding outputs together: `a._replace(log_z=None)`.
  """

  loss_sum: jax.Array
  nll_sum: jax.Array
  z_loss_sum: jax.Array
  correct_sum: jax.Array
  weight_sum: jax.Array
  log_z: jax.Array | None = None

  @classmethod
  def zeros(cls) -> "LossOutput":
    """Zero sums (log_z None): the start of a running total."""
    return cls(*([jnp.zeros((), jnp.float32)] * 5))

  @classmethod
  def total(cls, outputs: Iterable[Any], dtype: Optional[Any] = None) -> "LossOutput":
    """The field-wise sum of `outputs` (LossOutputs, or mappings that hold their fields),
    log_z dropped: how steps and batches combine. On the device as they are, or on the host
    at `dtype` (np.float64 for a long window); zeros when there are none."""
    rows = ([out[k] if isinstance(out, Mapping) else getattr(out, k) for k in _SUMS]
            for out in outputs)
    if dtype is not None:  # numpy's (pairwise) sum of each field
      columns = list(zip(*rows))
      return cls(*(np.sum(c, dtype=dtype) for c in columns)) if columns else cls.zeros()
    sums = None
    for values in rows:  # a running sum: the outputs need not all be held at once
      sums = values if sums is None else [a + b for a, b in zip(sums, values)]
    return cls.zeros() if sums is None else cls(*sums)


_SUMS = LossOutput._fields[:-1]  # every field but log_z


def _smoothed_entropy(vocab_size: int, label_smoothing: float) -> float:
  """Entropy of the smoothed target distribution (1 - eps on the target, eps/(V-1) elsewhere)."""
  confidence = 1.0 - label_smoothing
  low = label_smoothing / (vocab_size - 1)

  def xlogx(x: float) -> float:
    return x * math.log(x) if x > 0 else 0.0

  return -(xlogx(confidence) + (vocab_size - 1) * xlogx(low))


def logit_statistics(logits: jax.Array,
                     targets: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(log Z, the target's logit, the sum of the logits), each float32[B, L], of logits
  float[B, L, V] in any dtype: every loss term is a function of these three.

  Computed in float32 from the logits as they are. Logits in a lower precision (a bfloat16
  step) take `lean_logit_statistics`'s gradient, which keeps no float32 [B, L, V] copy;
  float32 logits take autodiff's, as they always have.
  """
  if logits.dtype == jnp.float32:
    return _statistics(logits, targets)
  return lean_logit_statistics(logits, targets)


def _statistics(logits, targets):
  x = logits.astype(jnp.float32)
  # Gathered before the cast: a gather of the float32 copy made XLA:TPU write that copy.
  target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
  return jax.nn.logsumexp(x, axis=-1), target_logit.astype(jnp.float32), jnp.sum(x, axis=-1)


@jax.custom_vjp
def lean_logit_statistics(logits: jax.Array,
                          targets: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`logit_statistics` with its own gradient: the backward pass keeps the logits in their
  dtype and log Z [B, L] and recomputes softmax from them, where autodiff would keep a
  float32 [B, L, V] copy (twice the bytes of bfloat16 logits, written and read back)."""
  return _statistics(logits, targets)


def _logit_statistics_fwd(logits, targets):
  stats = _statistics(logits, targets)
  return stats, (logits, targets, stats[0])


def _logit_statistics_bwd(residuals, cotangents):
  logits, targets, log_z = residuals
  g_log_z, g_target, g_sum = (g[..., None] for g in cotangents)
  # d log Z / d logit_v = softmax_v; d target logit = one-hot; d sum = 1.
  softmax = jnp.exp(logits.astype(jnp.float32) - log_z[..., None])
  is_target = jnp.arange(logits.shape[-1]) == targets[..., None]
  grad = g_log_z * softmax + jnp.where(is_target, g_target, 0.0) + g_sum
  return grad.astype(logits.dtype), None


lean_logit_statistics.defvjp(_logit_statistics_fwd, _logit_statistics_bwd)


def _check_arguments(logits: jax.Array, targets: jax.Array, label_smoothing: float,
                     z_loss: float) -> None:
  """cross_entropy's shapes and settings, each refused with a one-line error."""
  if logits.ndim != targets.ndim + 1 or logits.shape[:-1] != targets.shape:
    raise ValueError(
        f"cross_entropy needs logits [B, L, V] and targets [B, L], got {logits.shape} and "
        f"{targets.shape}.")
  if label_smoothing > 0.0 and logits.shape[-1] < 2:
    raise ConfigError("label_smoothing needs a vocabulary of at least 2 tokens.")


def _smoothed_nll(nll: jax.Array, sum_logits: jax.Array, log_z: jax.Array, vocab_size: int,
                  label_smoothing: float) -> jax.Array:
  """KL(q || p) per position, float[B, L]: the label-smoothed loss less its constant H(q)."""
  if label_smoothing == 0.0:
    return nll
  confidence = 1.0 - label_smoothing
  low = label_smoothing / (vocab_size - 1)
  sum_log_p = sum_logits - vocab_size * log_z  # sum_v log p_v, [B, L]
  # -sum_v q_v log p_v = confidence * nll - low * (sum_v log p_v - log p_target).
  smoothed = confidence * nll - low * (sum_log_p + nll)
  return smoothed - _smoothed_entropy(vocab_size, label_smoothing)


def cross_entropy(
    logits: jax.Array,
    targets: jax.Array,
    weights: jax.Array | None = None,
    *,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
) -> LossOutput:
  """Weighted token cross-entropy with optional label smoothing and z-loss, in float32.

  Args:
    logits: float[B, L, V], any float dtype (bfloat16 in a bfloat16 step); read in float32
      (`logit_statistics`), never copied to float32 as a whole.
    targets: int[B, L] token ids.
    weights: float[B, L], or None for `targets != PAD_ID` (padding contributes nothing).
      Given weights are used as they are (not combined with the pad mask).
    label_smoothing: eps in [0, 1), a Python float. The target distribution q puts 1 - eps
      on the target and eps / (V - 1) on every other token (the paper / tensor2tensor).
      The constant entropy H(q) is subtracted, as in the Flax WMT example, so the smoothed
      loss is KL(q || p): 0 for the model that predicts q exactly, and >= 0 otherwise.
      (A model more confident than q is therefore penalised.)
    z_loss: coefficient c >= 0 of the auxiliary c * log(Z)^2 per position, which keeps the
      softmax normaliser near 1 (PaLM; Wortsman et al. 2023 use c = 1e-4).

  Returns:
    LossOutput of float32 sums over all positions (see its docstring).
  """
  _check_arguments(logits, targets, label_smoothing, z_loss)
  if weights is None:
    weights = (targets != PAD_ID).astype(jnp.float32)
  else:
    weights = weights.astype(jnp.float32)

  # log p_v = logits_v - log_z; the target term and the sum over v come from the logits
  # directly, so no [B, L, V] one-hot or log-softmax array is built.
  log_z, target_logit, sum_logits = logit_statistics(logits, targets)
  nll = log_z - target_logit  # [B, L]
  smoothed = _smoothed_nll(nll, sum_logits, log_z, logits.shape[-1], label_smoothing)
  z_term = z_loss * jnp.square(log_z)
  # Accuracy from the same logits, in their own dtype (no float32 copy).
  correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
  return LossOutput(
      loss_sum=jnp.sum(weights * (smoothed + z_term)),
      nll_sum=jnp.sum(weights * nll),
      z_loss_sum=jnp.sum(weights * z_term),
      correct_sum=jnp.sum(weights * correct),
      weight_sum=jnp.sum(weights),
      log_z=log_z,
  )


def summarize(out: LossOutput) -> dict[str, jax.Array]:
  """Means per unit weight: loss, nll, perplexity = exp(nll), accuracy, z_loss, weight_sum.

  With weight_sum == 0 the means are 0 (perplexity 1) rather than NaN.
  """
  # Divide by 1 when nothing was weighted: every sum is then 0 too.
  denom = jnp.where(out.weight_sum > 0, out.weight_sum, 1.0)
  nll = out.nll_sum / denom
  return {
      "loss": out.loss_sum / denom,
      "nll": nll,
      "perplexity": jnp.exp(nll),
      "accuracy": out.correct_sum / denom,
      "z_loss": out.z_loss_sum / denom,
      "weight_sum": out.weight_sum,
  }
