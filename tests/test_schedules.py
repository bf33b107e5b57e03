"""Learning-rate schedules: the paper's rsqrt exactly, and the shapes of the others."""

import numpy as np
import pytest

from transformer.training import schedules


def test_rsqrt_is_the_papers_formula():
  d_model, warmup = 512, 4000
  peak = schedules.paper_peak_learning_rate(d_model, warmup)
  np.testing.assert_allclose(peak, 6.9877e-4, rtol=1e-4)
  sched = schedules.make_schedule("rsqrt", learning_rate=peak, warmup_steps=warmup,
                                  total_steps=100_000)
  steps = np.array([0, 1, 10, 999, 3998, 3999, 4000, 4001, 10_000, 50_000, 99_999])
  paper_step = steps + 1.0  # the paper counts from 1
  paper = d_model**-0.5 * np.minimum(paper_step**-0.5, paper_step * warmup**-1.5)
  np.testing.assert_allclose([float(sched(s)) for s in steps], paper, rtol=1e-5)
  # Peak at paper step == warmup, i.e. optax step warmup - 1.
  values = np.asarray(sched(np.arange(8000)))
  assert int(np.argmax(values)) == warmup - 1
  np.testing.assert_allclose(values.max(), peak, rtol=1e-6)


def _values(name, warmup=10, total=50, lr=2.0):
  sched = schedules.make_schedule(name, learning_rate=lr, warmup_steps=warmup, total_steps=total)
  return np.asarray(sched(np.arange(total + 5)))


@pytest.mark.parametrize("name", ["cosine", "constant", "linear"])
def test_warmup_shapes(name):
  v = _values(name)
  np.testing.assert_allclose(v[:10], 2.0 * np.arange(1, 11) / 10, rtol=1e-6)  # linear ramp
  assert v[0] > 0  # the first update is not wasted
  if name == "constant":
    np.testing.assert_allclose(v[9:], 2.0, rtol=1e-6)
  else:
    assert np.all(np.diff(v[9:50]) < 0)  # strictly decaying after the peak
    assert v[49] > 0  # every one of the 50 updates gets a nonzero rate
    # Past the last update: 0 up to optax's float32 interpolation (~1e-7 of the peak).
    np.testing.assert_allclose(v[50:], 0.0, atol=1e-6)


def test_cosine_midpoint_and_linear_midpoint():
  # Peak at s = 10, zero at s = 51: the midpoint s = 30.5 is between steps 29 and 30.
  cos, lin = _values("cosine"), _values("linear")
  np.testing.assert_allclose((cos[29] + cos[30]) / 2, 1.0, atol=5e-3)
  np.testing.assert_allclose((lin[29] + lin[30]) / 2, 1.0, rtol=1e-6)


def test_no_warmup():
  v = _values("cosine", warmup=0)
  np.testing.assert_allclose(v[0], 2.0, rtol=1e-6)


def test_bad_arguments():
  with pytest.raises(ValueError, match="rsqrt, cosine, constant, linear"):
    schedules.make_schedule("step", learning_rate=1.0, warmup_steps=1, total_steps=2)
  with pytest.raises(ValueError, match="warmup_steps"):
    schedules.make_schedule("cosine", learning_rate=1.0, warmup_steps=-1, total_steps=2)
  with pytest.raises(ValueError, match="warmup_steps"):
    schedules.make_schedule("rsqrt", learning_rate=1.0, warmup_steps=0, total_steps=2)
  with pytest.raises(ValueError, match="total_steps"):
    schedules.make_schedule("linear", learning_rate=1.0, warmup_steps=10, total_steps=5)
