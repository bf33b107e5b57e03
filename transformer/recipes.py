"""Named conventions of other implementations, as ModelConfig overrides.

Each recipe sets only what that implementation sets differently from, or must pin against,
the paper's defaults; sizes stay the caller's. Facts and sources: shared RESEARCH notes,
summarised in the comment on each line.
"""

from typing import Any

from transformer.errors import ConfigError

RECIPES: dict[str, dict[str, Any]] = {
    # Vaswani et al. 2017, "Attention Is All You Need".
    "vaswani2017": dict(
        embed_scale="sqrt_d",  # Sec. 3.4: "we multiply those weights by sqrt(d_model)"
        embed_scale_target="token",  # Sec. 3.4-3.5: scaled embedding, then PE added
        embed_init_std="inv_sqrt_d",  # t2t reference code: N(0, d^-0.5)
        share_embeddings=True,  # Sec. 3.4: one matrix for both embedding layers
        logits_via_embedding=True,  # Sec. 3.4: ... and the pre-softmax linear transformation
        logits_scale="none",
        posemb="sinusoidal",  # Sec. 3.5: PE(pos, 2i) = sin, PE(pos, 2i+1) = cos
        sinusoid_layout="interleaved",
        attention_scale="inv_sqrt_dk",  # Sec. 3.2.1, Eq. 1
        norm_position="post",  # Sec. 3.1: LayerNorm(x + Sublayer(x))
        activation="relu",  # Sec. 3.3, Eq. 2
    ),
    # tensor2tensor transformer_base (the paper's code).
    "tensor2tensor": dict(
        embed_scale="sqrt_d",  # multiply_embedding_mode='sqrt_depth' (default)
        embed_init_std="inv_sqrt_d",  # random_normal_initializer(0, hidden_size**-0.5)
        share_embeddings=True,
        logits_via_embedding=True,  # shared_embedding_and_softmax_weights, logits h.E^T unscaled
        logits_scale="none",
        posemb="sinusoidal",
        sinusoid_layout="concat",  # get_timing_signal_1d concatenates sin | cos halves
        attention_scale="inv_sqrt_dk",  # q *= depth_per_head**-0.5
        norm_position="post",  # transformer_base v1; later t2t defaults moved to pre-LN
    ),
    # fairseq transformer_wmt_en_de.
    "fairseq": dict(
        embed_scale="sqrt_d",  # embed_scale = sqrt(embed_dim) unless --no-scale-embedding
        embed_init_std="inv_sqrt_d",  # nn.init.normal_(weight, 0, embed_dim**-0.5), pad row 0
        share_embeddings=False,  # --share-all-embeddings is off by default
        logits_via_embedding=False,  # --share-decoder-input-output-embed is off by default
        posemb="sinusoidal",
        sinusoid_layout="concat",  # SinusoidalPositionalEmbedding: sin half | cos half
        attention_scale="inv_sqrt_dk",  # self.scaling = head_dim**-0.5
        norm_position="post",  # --encoder-normalize-before off by default
        norm_epsilon=1e-5,  # torch LayerNorm default
    ),
    # Flax examples/wmt.
    "flax_wmt": dict(
        embed_scale="none",  # no sqrt(d) multiplier on the input embedding
        embed_init_std=1.0,  # nn.initializers.normal(stddev=1.0)
        share_embeddings=True,  # share_embeddings=True
        logits_via_embedding=True,  # logits_via_embedding=True
        logits_scale="inv_sqrt_d",  # logits = embed.attend(y) / sqrt(y.shape[-1])
        posemb="sinusoidal",
        sinusoid_layout="concat",  # sinusoidal_init: sin half | cos half
        attention_scale="inv_sqrt_dk",  # nn.dot_product_attention: 1/sqrt(depth)
        norm_position="pre",  # LayerNorm before attention and MLP
    ),
    # T5 v1.0 (mesh_tensorflow / flaxformer).
    "t5": dict(
        embed_scale="none",  # no embedding multiplier
        embed_init_std=1.0,  # embedding initializer stddev 1.0
        share_embeddings=True,
        logits_via_embedding=True,  # T5.1.0 tied (T5.1.1 unties)
        logits_scale="inv_sqrt_d",  # tied logits rescaled by d_model**-0.5
        # T5 uses a relative position bias, not an absolute encoding (not built here)
        posemb="none",
        attention_scale="none",  # no run-time scale; d_head**-0.5 is folded into the query init
        norm_position="pre",
        norm="rmsnorm",  # T5LayerNorm: scale only, no mean subtraction
        use_bias=False,  # no biases anywhere
    ),
    # Gemma (google-deepmind/gemma, v1).
    "gemma": dict(
        embed_scale="sqrt_d",  # x *= sqrt(embed_dim)
        embed_init_std=0.01,  # embedder init normal(0.01)
        share_embeddings=True,
        logits_via_embedding=True,  # embedder.decode: x @ E^T, no rescale
        logits_scale="none",
        posemb="rope",  # rotary position embeddings
        attention_scale="inv_sqrt_dk",  # query_pre_attn_scalar = head_dim**-0.5
        norm_position="pre",
        norm="rmsnorm",
        activation="geglu",  # gated GELU feed-forward
        use_bias=False,
    ),
    # nanoGPT / GPT-2.
    "nanogpt": dict(
        embed_scale="none",  # wte(idx) + wpe(pos), no multiplier
        embed_init_std=0.02,  # normal(0, 0.02)
        share_embeddings=True,
        logits_via_embedding=True,  # lm_head.weight = wte.weight
        logits_scale="none",
        posemb="learned",  # wpe, normal(0, 0.02)
        learned_posemb_init_std=0.02,
        attention_scale="inv_sqrt_dk",  # 1/sqrt(head_dim)
        norm_position="pre",
        activation="gelu",
        norm_epsilon=1e-5,
    ),
    # muP (Tensor Programs V, Yang et al. 2022), its model side. Its Adam rule for the hidden
    # weight matrices (updates times base_width / width) is the optimizer's hidden_lr_scale.
    "mup": dict(
        embed_scale="none",  # input weights O(1), no width multiplier
        embed_init_std=1.0,  # N(0, 1) input embedding
        logits_via_embedding=False,  # an untied readout
        logits_scale="inv_d",  # readout multiplier 1/width
        attention_scale="inv_dk",  # 1/d_head attention instead of 1/sqrt(d_head)
        norm_position="pre",
    ),
}


def get(name: str) -> dict[str, Any]:
  """The overrides of recipe `name`; raises ValueError listing the known recipes."""
  if name not in RECIPES:
    raise ConfigError(f"Unknown recipe {name!r}; known recipes are {sorted(RECIPES)}.")
  return dict(RECIPES[name])
