"""ModelConfig: every architectural knob of the Transformer, frozen and validated.

Each research knob (the scale factors of "Attention Is All You Need" and the choices other
implementations made instead) is one field here, read in exactly one place in the modules.
Defaults are the paper's base model (Vaswani et al. 2017, Table 3 "base", Section 3.4).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Union


from transformer import recipes
from transformer.errors import ConfigError

Scale = Union[str, float]

# Allowed string values of each mode field; the SCALE_FIELDS also take a positive number.
MODES: dict[str, tuple[str, ...]] = {
    "embed_scale": ("sqrt_d", "none"),
    "embed_scale_target": ("token", "sum"),
    "embed_init_std": ("inv_sqrt_d",),
    "logits_scale": ("none", "inv_sqrt_d", "inv_d"),
    "posemb": ("sinusoidal", "learned", "rope", "none"),
    "sinusoid_layout": ("interleaved", "concat"),
    "attention_scale": ("inv_sqrt_dk", "inv_dk", "none", "learned"),
    "qkv_init": ("xavier", "lecun"),
    "qk_norm": ("none", "layernorm", "rmsnorm", "l2"),
    "norm_position": ("post", "pre"),
    "norm": ("layernorm", "rmsnorm"),
    "activation": ("relu", "gelu", "silu", "geglu", "swiglu"),
    "dtype": ("float32", "bfloat16", "float16"),
    "param_dtype": ("float32", "bfloat16"),
    "remat": ("none", "full", "dots"),
    "attention_impl": ("auto", "einsum", "xla", "cudnn", "splash"),
}
SCALE_FIELDS = ("embed_scale", "embed_init_std", "logits_scale", "attention_scale")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Architecture of an encoder-decoder `Transformer` or a `DecoderOnly` language model."""

  # Sizes. `target_vocab_size=None` means one vocabulary shared by source and target.
  vocab_size: int = 32000
  target_vocab_size: Optional[int] = None
  d_model: int = 512
  num_heads: int = 8
  head_dim: Optional[int] = None  # None: d_model // num_heads (the paper's d_k = d_v)
  num_encoder_layers: int = 6
  num_decoder_layers: int = 6
  d_ff: int = 2048
  max_len: int = 256  # longest position a learned table or cache must hold

  # Embeddings (Section 3.4): x = embed_scale * E[token] + PE, E ~ N(0, embed_init_std^2).
  embed_scale: Scale = "sqrt_d"
  embed_scale_target: str = "token"
  embed_init_std: Scale = "inv_sqrt_d"
  embed_norm: bool = False  # a norm on the summed input embedding (fairseq/BART option)
  share_embeddings: bool = True  # encoder and decoder share one matrix
  logits_via_embedding: bool = True  # pre-softmax projection is E^T (Press & Wolf 2017)
  logits_scale: Scale = "none"

  # Positions (Section 3.5).
  posemb: str = "sinusoidal"
  sinusoid_layout: str = "interleaved"
  posemb_scale: float = 1.0
  max_timescale: float = 10000.0
  learned_posemb_init_std: float = 0.02

  # Attention (Section 3.2.1).
  attention_scale: Scale = "inv_sqrt_dk"
  # q/k/v projection init. 'xavier' (the Flax default the Transformer codebases use): the
  # variance 2 / (d_model + heads * d_k) depends on the attention width. 'lecun': N(0, 1/d_model),
  # unit-variance q and k components for unit-variance inputs, the premise of the paper's
  # Var(q.k) = d_k argument (footnote 4).
  qkv_init: str = "xavier"
  qk_norm: str = "none"
  attn_logit_softcap: Optional[float] = None
  # Cap only the first N blocks of each stack (None: every block): an intervention on the
  # early layers' logits alone (docs/findings.md, M8). Not with scan_layers (one block shape).
  attn_logit_softcap_layers: Optional[int] = None

  # Blocks.
  norm_position: str = "post"
  norm: str = "layernorm"
  norm_epsilon: float = 1e-6
  activation: str = "relu"
  use_bias: bool = True

  # Regularisation (Section 5.4): dropout on each sub-layer output and on the embedding sum.
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.0

  # Numerics and speed.
  dtype: str = "float32"  # compute dtype
  param_dtype: str = "float32"
  scan_layers: bool = False  # nn.scan over blocks: compile time independent of depth
  remat: str = "none"  # recompute activations in the backward pass: 'full' or 'dots'
  # The attention kernel: 'auto' = splash on TPU, cuDNN on GPU where JAX's lowering takes the
  # inputs (bf16/fp16, its head dims, even lengths), einsum elsewhere
  # (attention.resolve_implementation); or one of them by name.
  attention_impl: str = "auto"

  def __post_init__(self):
    self.validate()

  # ---- derived sizes ----
  @property
  def has_position_table(self) -> bool:
    """Whether positions come from a table of max_len rows (sinusoidal, learned): no row
    can be longer. RoPE and no encoding have no such limit."""
    return self.posemb in ("sinusoidal", "learned")

  @property
  def qk_dim(self) -> int:
    """d_k: the per-head query/key width."""
    return self.head_dim if self.head_dim is not None else self.d_model // self.num_heads

  def softcap_at(self, layer: int) -> Optional[float]:
    """The attention logit soft cap of block `layer` (0-based) of a stack."""
    capped = self.attn_logit_softcap_layers is None or layer < self.attn_logit_softcap_layers
    return self.attn_logit_softcap if capped else None

  def for_layer(self, layer: int) -> "ModelConfig":
    """The config block `layer` of a stack sees: the per-layer fields resolved."""
    if self.attn_logit_softcap_layers is None:
      return self
    return self.replace(attn_logit_softcap=self.softcap_at(layer), attn_logit_softcap_layers=None)

  @property
  def output_vocab_size(self) -> int:
    return self.target_vocab_size if self.target_vocab_size is not None else self.vocab_size

  @property
  def compute_dtype(self) -> Any:
    import jax.numpy as jnp  # here: the config itself is read and checked without jax
    return jnp.dtype(self.dtype)

  @property
  def storage_dtype(self) -> Any:
    """The dtype the params are stored in (`param_dtype`, as a jnp dtype)."""
    import jax.numpy as jnp
    return jnp.dtype(self.param_dtype)

  # ---- validation ----
  def validate(self) -> None:
    """Raises ConfigError naming the field and its allowed values for any bad combination."""
    self._validate_modes()
    self._validate_sizes()
    self._validate_combinations()

  def _validate_modes(self) -> None:
    for name, allowed in MODES.items():
      value = getattr(self, name)
      if name in SCALE_FIELDS and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or value <= 0:
          raise ConfigError(f"ModelConfig.{name}={value!r}: a numeric value must be a finite "
                            "number > 0.")
        continue
      if value not in allowed:
        extra = " or a positive float" if name in SCALE_FIELDS else ""
        raise ConfigError(f"ModelConfig.{name}={value!r} is not one of {list(allowed)}{extra}.")

  def _validate_sizes(self) -> None:
    positive = ("vocab_size", "d_model", "num_heads", "d_ff", "max_len")
    for name in positive:
      value = getattr(self, name)
      if not isinstance(value, int) or value <= 0:
        raise ConfigError(f"ModelConfig.{name}={value!r} must be a positive integer.")
    for name in ("num_encoder_layers", "num_decoder_layers"):
      value = getattr(self, name)
      if not isinstance(value, int) or value < 0:
        raise ConfigError(f"ModelConfig.{name}={value!r} must be a non-negative integer.")
    for name in ("target_vocab_size", "head_dim"):
      value = getattr(self, name)
      if value is not None and (not isinstance(value, int) or value <= 0):
        raise ConfigError(f"ModelConfig.{name}={value!r} must be None or a positive integer.")
    for name in ("dropout_rate", "attention_dropout_rate"):
      value = getattr(self, name)
      if not 0.0 <= value < 1.0:
        raise ConfigError(f"ModelConfig.{name}={value!r} must be in [0, 1).")
    for name in ("posemb_scale", "max_timescale", "norm_epsilon", "learned_posemb_init_std"):
      value = getattr(self, name)
      if not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"ModelConfig.{name}={value!r} must be a number > 0.")

  def _validate_combinations(self) -> None:
    if self.attn_logit_softcap is not None and not self.attn_logit_softcap > 0:
      raise ConfigError(
          f"ModelConfig.attn_logit_softcap={self.attn_logit_softcap!r} must be None or a "
          "number > 0.")
    if self.attn_logit_softcap_layers is not None:
      if self.attn_logit_softcap is None:
        raise ConfigError("ModelConfig.attn_logit_softcap_layers is set but attn_logit_softcap "
                          "is None: set the cap, or leave the layers unset.")
      if (not isinstance(self.attn_logit_softcap_layers, int)
          or self.attn_logit_softcap_layers <= 0):
        raise ConfigError(f"ModelConfig.attn_logit_softcap_layers="
                          f"{self.attn_logit_softcap_layers!r} must be None or a positive integer.")
      if self.scan_layers:
        raise ConfigError("ModelConfig.attn_logit_softcap_layers needs scan_layers=False: a "
                          "scanned stack runs one block for every layer.")
    if self.head_dim is None and self.d_model % self.num_heads:
      raise ConfigError(
          f"ModelConfig.d_model={self.d_model} is not divisible by num_heads={self.num_heads}; "
          "change one of them or set head_dim.")
    if self.posemb == "sinusoidal" and self.d_model % 2:
      raise ConfigError(
          f"ModelConfig.d_model={self.d_model} must be even with posemb='sinusoidal' "
          "(sin and cos fill pairs of columns).")
    if self.posemb == "rope" and self.qk_dim % 2:
      raise ConfigError(f"ModelConfig.head_dim={self.qk_dim} must be even with posemb='rope'.")
    if (self.share_embeddings and self.target_vocab_size is not None
        and self.target_vocab_size != self.vocab_size):
      raise ConfigError(
          "ModelConfig.share_embeddings=True needs one vocabulary, but "
          f"vocab_size={self.vocab_size} and target_vocab_size={self.target_vocab_size}; "
          "set share_embeddings=False or one size.")

  # ---- construction and serialisation ----
  @classmethod
  def from_recipe(cls, name: str, **overrides: Any) -> "ModelConfig":
    """The conventions of a named implementation (transformer.recipes), then `overrides`."""

    return cls(**{**recipes.get(name), **overrides})

  def replace(self, **overrides: Any) -> "ModelConfig":
    return dataclasses.replace(self, **overrides)

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, fields: dict[str, Any]) -> "ModelConfig":
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
      raise ConfigError(f"ModelConfig has no field(s) {unknown}; known fields are {sorted(known)}.")
    return cls(**fields)
