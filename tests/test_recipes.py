"""Each recipe builds both models and carries the facts of its implementation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer import recipes
from transformer.config import ModelConfig
from transformer.embeddings import embed_init_std_value, embed_scale_value, logits_scale_value
from transformer.attention import attention_scale_value
from transformer.models import DecoderOnly, Transformer

D = 64
# (embed multiplier, embed init std, tied logits, logits multiplier, posemb, layout, attention
# scale) at d_model = 64 and d_k = 16, written from the implementations' documented behaviour.
FACTS = {
    "vaswani2017": (8.0, 1 / 8, True, 1.0, "sinusoidal", "interleaved", 1 / 4),
    "tensor2tensor": (8.0, 1 / 8, True, 1.0, "sinusoidal", "concat", 1 / 4),
    "fairseq": (8.0, 1 / 8, False, 1.0, "sinusoidal", "concat", 1 / 4),
    "flax_wmt": (1.0, 1.0, True, 1 / 8, "sinusoidal", "concat", 1 / 4),
    "t5": (1.0, 1.0, True, 1 / 8, "none", None, 1.0),
    "gemma": (8.0, 0.01, True, 1.0, "rope", None, 1 / 4),
    "nanogpt": (1.0, 0.02, True, 1.0, "learned", None, 1 / 4),
    "mup": (1.0, 1.0, False, 1 / 64, "sinusoidal", None, 1 / 16),
}


def test_every_recipe_has_facts():
  assert sorted(FACTS) == sorted(recipes.RECIPES)


def test_unknown_recipe():
  with pytest.raises(ValueError, match="known recipes"):
    ModelConfig.from_recipe("bert")


@pytest.mark.parametrize("name", sorted(FACTS))
def test_recipe(name):
  cfg = ModelConfig.from_recipe(name, vocab_size=300, d_model=D, num_heads=4, d_ff=128,
                                num_encoder_layers=1, num_decoder_layers=1, max_len=16,
                                dropout_rate=0.0)
  scale, std, tied, logits_scale, posemb, layout, attn_scale = FACTS[name]
  assert embed_scale_value(cfg) == pytest.approx(scale)
  assert embed_init_std_value(cfg) == pytest.approx(std)
  assert cfg.logits_via_embedding == tied
  assert logits_scale_value(cfg) == pytest.approx(logits_scale)
  assert cfg.posemb == posemb
  if layout:
    assert cfg.sinusoid_layout == layout
  assert attention_scale_value(cfg) == pytest.approx(attn_scale)

  inputs = jnp.asarray(np.random.default_rng(0).integers(3, 300, (2, 6)), jnp.int32)
  targets = jnp.asarray(np.random.default_rng(1).integers(3, 300, (2, 5)), jnp.int32)
  for model, args in ((Transformer(cfg), (inputs, targets)), (DecoderOnly(cfg), (targets,))):
    variables = jax.jit(model.init)(jax.random.PRNGKey(0), *args)
    logits = jax.jit(model.apply)(variables, *args)
    assert logits.shape == (2, 5, 300) and np.all(np.isfinite(logits))
    params = variables["params"]
    table = np.asarray((params.get("embedding") or params["source_embedding"])["embedding"])
    assert table.std() == pytest.approx(std, rel=0.05)  # the init the recipe promises
    untied = [k for k in jax.tree_util.tree_leaves(variables["params"]) if k.shape == (D, 300)]
    assert len(untied) == (0 if tied else 1)
