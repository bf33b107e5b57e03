"""ModelConfig validation: every bad field raises ValueError naming the field and what is
allowed."""

import pytest

from transformer import attention, embeddings
from transformer.config import MODES, ModelConfig


def test_defaults_are_the_paper_base_model():
  cfg = ModelConfig()
  assert (cfg.d_model, cfg.num_heads, cfg.d_ff, cfg.num_encoder_layers) == (512, 8, 2048, 6)
  assert cfg.qk_dim == 64 and cfg.dropout_rate == 0.1
  assert cfg.embed_scale == "sqrt_d" and cfg.attention_scale == "inv_sqrt_dk"


@pytest.mark.parametrize("overrides, words", [
    (dict(d_model=30, num_heads=4), ["d_model=30", "num_heads=4"]),
    (dict(vocab_size=100, target_vocab_size=120, share_embeddings=True),
     ["share_embeddings", "vocab_size=100", "target_vocab_size=120"]),
    (dict(embed_scale="sqrt"), ["embed_scale", "'sqrt_d'", "'none'"]),
    (dict(embed_scale_target="both"), ["embed_scale_target", "'token'", "'sum'"]),
    (dict(embed_init_std="xavier"), ["embed_init_std", "'inv_sqrt_d'"]),
    (dict(logits_scale="sqrt_d"), ["logits_scale", "'inv_sqrt_d'"]),
    (dict(posemb="alibi"), ["posemb", "'rope'"]),
    (dict(sinusoid_layout="blocked"), ["sinusoid_layout", "'interleaved'", "'concat'"]),
    (dict(attention_scale="inv_sqrt_d"), ["attention_scale", "'inv_sqrt_dk'", "'learned'"]),
    (dict(qk_norm="batchnorm"), ["qk_norm", "'l2'"]),
    (dict(norm_position="sandwich"), ["norm_position", "'post'", "'pre'"]),
    (dict(activation="tanh"), ["activation", "'relu'"]),
    (dict(dtype="float8"), ["dtype", "'bfloat16'"]),
    (dict(d_model=33, num_heads=3), ["d_model=33", "even"]),
    (dict(vocab_size=-5), ["vocab_size=-5", "positive"]),
    (dict(d_ff=0), ["d_ff=0", "positive"]),
    (dict(num_encoder_layers=-1), ["num_encoder_layers=-1"]),
    (dict(dropout_rate=-0.1), ["dropout_rate=-0.1", "[0, 1)"]),
    (dict(attention_dropout_rate=1.5), ["attention_dropout_rate=1.5"]),
    (dict(embed_scale=-2.0), ["embed_scale=-2.0", "> 0"]),
    (dict(attention_scale=0.0), ["attention_scale=0.0"]),
    (dict(posemb_scale=-1.0), ["posemb_scale=-1.0"]),
    (dict(attn_logit_softcap=-3.0), ["attn_logit_softcap=-3.0"]),
    (dict(head_dim=0), ["head_dim=0"]),
    (dict(attn_logit_softcap_layers=1),
     ["attn_logit_softcap_layers", "attn_logit_softcap is None"]),
    (dict(attn_logit_softcap=5.0, attn_logit_softcap_layers=0), ["attn_logit_softcap_layers=0"]),
    (dict(attn_logit_softcap=5.0, attn_logit_softcap_layers=1, scan_layers=True),
     ["attn_logit_softcap_layers", "scan_layers=False"]),
    (dict(posemb="rope", d_model=36, num_heads=4), ["head_dim=9", "rope"]),
])
def test_bad_config_raises_value_error_naming_the_field(overrides, words):
  with pytest.raises(ValueError) as err:
    ModelConfig(**overrides)
  message = str(err.value)
  for word in words:
    assert word in message, (word, message)


def test_good_variants_validate():
  ModelConfig(d_model=34, num_heads=2)  # even d with an odd head_dim is fine without rope
  ModelConfig(embed_scale=2.5, attention_scale=0.1, logits_scale=0.5, embed_init_std=1.0)
  ModelConfig(d_model=30, num_heads=4, head_dim=8)  # head_dim decouples d_model from heads
  ModelConfig(vocab_size=100, target_vocab_size=120, share_embeddings=False)


def test_config_is_frozen_and_round_trips():
  cfg = ModelConfig(d_model=64, num_heads=4)
  with pytest.raises(Exception):
    cfg.d_model = 128
  assert ModelConfig.from_dict(cfg.to_dict()) == cfg
  with pytest.raises(ValueError, match="no field"):
    ModelConfig.from_dict({**cfg.to_dict(), "dmodel": 3})


def test_softcap_per_layer():
  every = ModelConfig(attn_logit_softcap=5.0)
  assert [every.softcap_at(i) for i in range(3)] == [5.0, 5.0, 5.0]
  assert every.for_layer(2) is every
  first_two = every.replace(attn_logit_softcap_layers=2)
  assert [first_two.softcap_at(i) for i in range(3)] == [5.0, 5.0, None]
  assert first_two.for_layer(1).attn_logit_softcap == 5.0
  assert first_two.for_layer(2).attn_logit_softcap is None
  assert first_two.for_layer(2).attn_logit_softcap_layers is None
  assert ModelConfig().softcap_at(0) is None


def test_replace_validates():
  with pytest.raises(ValueError, match="num_heads"):
    ModelConfig(d_model=64, num_heads=4).replace(num_heads=5)


def test_every_scale_mode_has_its_value_where_it_acts():
  """Each scale field's modes (config.MODES) are turned into numbers by the module that uses
  them, for d_model = 64 and d_k = 16; a number is taken as it is."""
  cfg = ModelConfig(d_model=64, num_heads=4, num_encoder_layers=1, num_decoder_layers=1)
  value_of = {"embed_scale": embeddings.embed_scale_value,
              "embed_init_std": embeddings.embed_init_std_value,
              "logits_scale": embeddings.logits_scale_value,
              "attention_scale": attention.attention_scale_value}
  want = {"none": 1.0, "sqrt_d": 8.0, "inv_sqrt_d": 0.125, "inv_d": 1 / 64,
          "inv_sqrt_dk": 0.25, "inv_dk": 1 / 16, "learned": 0.25}  # learned starts at d_k^-0.5
  for field, value in value_of.items():
    for mode in MODES[field]:
      assert value(cfg.replace(**{field: mode})) == pytest.approx(want[mode]), (field, mode)
    assert value(cfg.replace(**{field: 0.3})) == 0.3
