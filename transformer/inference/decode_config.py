"""How to decode (`DecodeConfig`): a plain frozen dataclass that imports no jax, so that the
scripts' command lines build and check it before jax starts (transformer.cli)."""

from __future__ import annotations

import dataclasses

from transformer.errors import ConfigError
from transformer.token_ids import EOS_ID

METHODS = ("greedy", "sample", "beam")
# Beam search holds a KV cache per beam of every row: memory grows linearly with the beam, and
# translation quality stops improving long before this (BLEU peaks at beams of 4 to 10).
MAX_BEAM_SIZE = 64


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
  """How to decode; hashable, so each distinct config compiles once.

  method: 'greedy', 'sample' or 'beam'. beam_size, alpha: beam search (GNMT length penalty).
  temperature, top_k (0 = off), top_p (1.0 = off): sampling. extra_len: the output may hold
  input length + extra_len tokens. eos_id: the id that ends a row (-1: never stop, for
  benchmarks).
  """
  method: str = "beam"
  beam_size: int = 4
  alpha: float = 0.6
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  extra_len: int = 50
  eos_id: int = EOS_ID

  def __post_init__(self):
    if self.method not in METHODS:
      raise ConfigError(f"Decoding method {self.method!r} is unknown; use one of "
                       f"{', '.join(METHODS)}.")
    for name, ok, rule in (("beam_size", 1 <= self.beam_size <= MAX_BEAM_SIZE,
                            f"in [1, {MAX_BEAM_SIZE}] (each beam holds its own KV cache; "
                            "BLEU peaks at beams of 4 to 10)"),
                           ("alpha", self.alpha >= 0.0, ">= 0"),
                           ("temperature", self.temperature > 0.0, "> 0 (greedy: method='greedy')"),
                           ("top_k", self.top_k >= 0, ">= 0 (0 = off)"),
                           ("top_p", 0.0 < self.top_p <= 1.0, "in (0, 1] (1 = off)"),
                           ("extra_len", self.extra_len >= 0, ">= 0")):
      if not ok:
        raise ConfigError(f"Decoding {name}={getattr(self, name)!r} must be {rule}.")
