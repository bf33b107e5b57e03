"""Two uint32 checksums per array leaf, recorded with each checkpoint and verified on restore.

The installed orbax (0.12) does not verify array data itself: a byte flipped inside an
array's data file reads back without an error, so the checkpoint records its own checksums.
They are order-independent integer sums, so a sharded device array and its host copy give the
same value whatever the device count: [sum(w), sum(w * (i + 1))] mod 2^32 over the leaf's raw
32-bit words w at flat index i. One jitted computation makes them for device and host leaves.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, Iterable, Mapping, Optional

from etils import epath
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

log = logging.getLogger(__name__)

CHECKSUMS_KEY = "checksums"  # in each step's orbax custom_metadata
# Beside them: the sha256 of the step's config item and of each process's data-iterator file
# (the JSON values they hold, key order aside), so that no file of a step goes unchecked.
CONFIG_KEY, DATA_KEY = "config_sha256", "data_sha256"
STEP_KEY = "step"  # the step it was saved as: a folder copied or renamed to another is damaged
_UINT = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}


def path_str(path: Iterable[Any]) -> str:
  """'params/dense/kernel' for a TrainState keypath and for its orbax dict form alike."""
  parts = []
  for k in path:
    for attr in ("key", "name", "idx"):  # DictKey/FlattenedIndexKey, GetAttrKey, SequenceKey
      if hasattr(k, attr):
        parts.append(str(getattr(k, attr)))
        break
    else:
      parts.append(str(k))
  return "/".join(parts)


def _leaf_checksum(x: jax.Array) -> Optional[jax.Array]:
  """uint32[2] of the leaf; None for a dtype without 8-, 16- or 32-bit words (left unverified)."""
  if x.dtype == jnp.bool_:
    w = x.astype(jnp.uint32)
  elif x.dtype.itemsize in _UINT:
    w = jax.lax.bitcast_convert_type(x, _UINT[x.dtype.itemsize]).astype(jnp.uint32)
  else:
    return None
  # The flat index from iotas, not a reshape, so a sharded leaf is never relaid out.
  idx = jnp.zeros(x.shape, jnp.uint32)
  stride = 1
  for axis in reversed(range(x.ndim)):
    idx = idx + jax.lax.broadcasted_iota(jnp.uint32, x.shape, axis) * jnp.uint32(stride % 2**32)
    stride *= x.shape[axis]
  return jnp.stack([jnp.sum(w, dtype=jnp.uint32), jnp.sum(w * (idx + 1), dtype=jnp.uint32)])


_checksums_jit = jax.jit(lambda leaves: [_leaf_checksum(x) for x in leaves])


def checksums(tree: Any) -> dict[str, list[int]]:
  """{'params/dense/kernel': [s1, s2], ...} for every array leaf (device or host numpy)."""
  groups: dict[Any, list[tuple[Any, jax.Array]]] = {}
  for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
    if not isinstance(x, jax.Array):
      x = np.asarray(x)
      if x.dtype.itemsize > 4:  # jax would narrow it to 32 bits: not the saved words
        continue
      x = jnp.asarray(x)
    # One jitted call per device set (a committed single-device step and mesh-sharded params
    # cannot share one computation); then one small host sync.
    groups.setdefault(frozenset(x.sharding.device_set), []).append((p, x))
  out = {}
  for group in groups.values():
    sums = jax.device_get(_checksums_jit([x for _, x in group]))
    out.update({path_str(p): [int(v) for v in s] for (p, _), s in zip(group, sums)
                if s is not None})
  return out


def verify(got: Mapping[str, list[int]], want: Optional[Mapping[str, Any]], where: str) -> None:
  """Raises ValueError on any leaf whose checksum differs from the one saved with it."""
  if not want:
    log.info("Checkpoint %s has no checksums (written by another tool?): not verified.", where)
    return
  common = [k for k in got if k in want]
  if got and not common:
    log.warning("Checkpoint %s: no leaf names match its checksum record; not verified.", where)
  bad = [k for k in common if list(want[k]) != list(got[k])]
  if bad:
    raise ValueError(f"checksum mismatch in {bad[:5]}{' ...' if len(bad) > 5 else ''}: "
                     "the array data is damaged")


def json_digest(value: Any) -> str:
  """sha256 of a JSON value, its keys sorted: what a step records of its config and of each
  iterator state, and checks when it reads them back."""
  return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def saved_metadata(step_dir: epath.Path) -> dict[str, Any]:
  """The custom metadata this package recorded with a step (checksums and file digests).

  A step this package wrote always holds a config item and its metadata; where the metadata
  is gone or unreadable (`_CHECKPOINT_METADATA` deleted or cut short) its arrays and files
  cannot be verified, so the step is damaged (ValueError). A step of another tool (no config
  item) has none to check: {}."""
  try:
    custom = ocp.metadata.get_step_metadata(step_dir).custom_metadata or {}
  except Exception:  # noqa: BLE001  (no readable metadata)
    custom = {}
  if not custom.get(CHECKSUMS_KEY) and (step_dir / "config").exists():
    raise ValueError("its metadata (_CHECKPOINT_METADATA) is missing or unreadable, so its "
                     "checksums cannot be verified")
  return custom


def verify_step(custom: Mapping[str, Any], step: int) -> None:
  """Raises ValueError where the step folder's name is not the step it was saved as."""
  saved = custom.get(STEP_KEY)
  if saved is not None and int(saved) != int(step):
    raise ValueError(f"it was saved as step {saved}, not {step}: the folder was copied or "
                     "renamed")


def verify_json(value: Any, custom: Mapping[str, Any], key: str, what: str,
                name: Optional[str] = None) -> None:
  """Raises ValueError where `value` (a config, an iterator state) is not the one the step
  recorded under custom[key] (or custom[key][name]); steps that predate the record pass."""
  want = custom.get(key)
  if isinstance(want, Mapping):
    want = want.get(name)
  if want is not None and json_digest(value) != want:
    raise ValueError(f"its {what} is not the one it was saved with (sha256 differs): the file "
                     "was edited or damaged")
