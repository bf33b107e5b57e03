"""Positional encodings: the paper's formula, both layouts, the rotation property, learned, RoPE."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer import positional
from transformer.config import ModelConfig
from transformer.errors import ConfigError


def test_interleaved_table_equals_the_paper_formula_elementwise():
  length, d = 50, 16
  table = positional.sinusoidal_table(length, d)
  assert table.shape == (length, d) and table.dtype == np.float32
  for pos in range(length):
    for i in range(d // 2):
      angle = pos / 10000 ** (2 * i / d)
      assert table[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-6)
      assert table[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-6)


def test_concat_layout_is_the_same_columns_moved():
  inter = positional.sinusoidal_table(64, 32, "interleaved")
  concat = positional.sinusoidal_table(64, 32, "concat")
  np.testing.assert_array_equal(concat[:, :16], inter[:, 0::2])
  np.testing.assert_array_equal(concat[:, 16:], inter[:, 1::2])


@pytest.mark.parametrize("d", [2, 8, 64, 512])
def test_values_bounded_and_rms_is_inv_sqrt2(d):
  table = positional.sinusoidal_table(200, d)
  assert np.abs(table).max() <= 1.0
  # sin^2 + cos^2 = 1 for every pair of columns, so the mean square is exactly 1/2.
  assert np.sqrt(np.mean(table.astype(np.float64) ** 2)) == pytest.approx(1 / math.sqrt(2), 1e-6)


@pytest.mark.parametrize("k", [1, 7, 40])
def test_shift_by_k_is_a_fixed_rotation_per_frequency(k):
  length, d = 120, 16
  table = positional.sinusoidal_table(length + k, d).astype(np.float64)
  inv_freq = 10000.0 ** (-np.arange(0, d, 2) / d)
  rotation = np.zeros((d, d))
  for i, w in enumerate(inv_freq):  # [sin(a+b), cos(a+b)] = R(b) [sin a, cos a]
    b = k * w
    rotation[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[math.cos(b), math.sin(b)],
                                                  [-math.sin(b), math.cos(b)]]
  np.testing.assert_allclose(table[:length] @ rotation.T, table[k:k + length], atol=1e-5)


def test_bad_table_arguments():
  with pytest.raises(ValueError, match="even"):
    positional.sinusoidal_table(4, 7)
  with pytest.raises(ValueError, match="layout"):
    positional.sinusoidal_table(4, 8, "blocked")


def _posemb(cfg, positions):
  module = positional.PositionEmbedding(cfg)
  variables = module.init(jax.random.PRNGKey(0), positions)
  return module.apply(variables, positions), variables


def test_sinusoidal_module_gathers_explicit_positions_and_scales():
  cfg = ModelConfig(d_model=16, num_heads=2, max_len=32, posemb_scale=0.5,
                    sinusoid_layout="concat")
  positions = jnp.array([[0, 1, 2, 0, 1, 0]])  # a packed row restarts at 0
  pe, variables = _posemb(cfg, positions)
  assert not variables  # a constant, not a parameter
  table = positional.sinusoidal_table(32, 16, "concat")
  np.testing.assert_allclose(pe[0], 0.5 * table[[0, 1, 2, 0, 1, 0]], atol=1e-7)


def test_learned_posemb_is_a_parameter():
  cfg = ModelConfig(d_model=16, num_heads=2, max_len=32, posemb="learned",
                    learned_posemb_init_std=0.02)
  pe, variables = _posemb(cfg, jnp.arange(5)[None])
  table = variables["params"]["pos_embedding"]
  assert table.shape == (32, 16)
  assert abs(float(jnp.std(table)) - 0.02) < 0.005
  np.testing.assert_allclose(pe[0], table[:5], atol=1e-7)


@pytest.mark.parametrize("posemb", ["sinusoidal", "learned"])
def test_rows_longer_than_the_table_are_an_error_not_its_last_row_repeated(posemb):
  cfg = ModelConfig(d_model=16, num_heads=2, max_len=8, posemb=posemb)
  _posemb(cfg, jnp.arange(8)[None])  # as long as the table: fine
  with pytest.raises(ConfigError, match="Rows of 9 positions exceed the position table of "
                     "max_len=8"):
    _posemb(cfg, jnp.arange(9)[None])


@pytest.mark.parametrize("posemb", ["rope", "none"])
def test_non_additive_posembs_return_none(posemb):
  pe, _ = _posemb(ModelConfig(d_model=16, num_heads=2, posemb=posemb), jnp.arange(3)[None])
  assert pe is None


def test_rope_scores_depend_only_on_the_offset():
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(1, 1, 1, 16)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(1, 1, 1, 16)), jnp.float32)
  def score(pq, pk):
    rq = positional.apply_rope(q, jnp.array([[pq]]))
    rk = positional.apply_rope(k, jnp.array([[pk]]))
    return float(jnp.sum(rq * rk))
  assert score(5, 2) == pytest.approx(score(13, 10), abs=1e-4)
  assert score(0, 0) == pytest.approx(float(jnp.sum(q * k)), abs=1e-5)  # position 0: identity
  # A rotation keeps norms.
  rq = positional.apply_rope(q, jnp.array([[37]]))
  assert float(jnp.linalg.norm(rq)) == pytest.approx(float(jnp.linalg.norm(q)), rel=1e-5)
