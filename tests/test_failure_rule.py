"""The failure rule every finished run is judged by: stalled after warmup, or a dead layer."""

from transformer.training.failure_rule import FailureRule, layer_grad_norms


def test_the_default_rule_reads_the_first_train_record_after_warmup():
  rule = FailureRule()
  losses = {50: 6.0, 100: 5.6, 150: 5.5, 2000: 5.4}  # 3.6% below step 100's: stalled
  assert rule.judge(losses, {}, warmup_steps=100) == (
      "stalled: train loss 5.400 at step 2000 against 5.600 at step 100")
  assert rule.judge({**losses, 2000: 5.3}, {}, warmup_steps=100) is None  # 5.4% below
  assert rule.judge(losses, {}, warmup_steps=60) == (
      "stalled: train loss 5.400 at step 2000 against 5.600 at step 100")
  assert rule.judge(losses, {}, warmup_steps=3000) is None  # no record after warmup
  assert rule.judge({100: 5.6}, {}, warmup_steps=100) is None  # none after it
  assert FailureRule(stall_step=50).judge(losses, {}) is None  # 10% below step 50's


def test_a_dead_layer_is_read_off_the_last_diagnostics_record():
  record = {"grad_norm/decoder/layer_0": 2e-4, "grad_norm/decoder/layer_1": 0.5,
            "grad_norm/embed": 1e-9, "update_ratio/decoder/layer_0": 0.1}
  norms = layer_grad_norms(record)
  assert norms == {"decoder/layer_0": 2e-4, "decoder/layer_1": 0.5}  # layers only
  assert FailureRule().judge({}, norms) == (
      "dead layer: decoder/layer_0's final gradient norm 0.0002 against the largest layer's 0.5")
  assert FailureRule().judge({}, {**norms, "decoder/layer_0": 1e-3}) is None
  assert layer_grad_norms({"final/grad_norm/encoder/layer_2": 1.0}, prefix="final/") == {
      "encoder/layer_2": 1.0}


def test_a_loss_at_its_floor_when_warmup_ends_converged_and_is_not_stalled():
  """Round 7, item 5: 0.059 -> 0.058 after warmup was 'stalled', a healthy run failed."""
  losses = {1: 2.08, 50: 0.4, 100: 0.059, 2000: 0.058}
  assert FailureRule().judge(losses, {}, warmup_steps=100) is None
  assert FailureRule(stall_step=100).judge(losses, {}) is None
  # Fallen, but far from its floor (6.0 -> 5.6 in warmup): still stalled.
  assert FailureRule().judge({1: 6.0, 100: 5.6, 2000: 5.4}, {}, warmup_steps=100).startswith(
      "stalled:")


def test_a_loss_that_blew_up_in_warmup_and_did_not_come_back_failed():
  """A loss that rose 2.1 -> 50 in warmup, then fell 5% passed."""
  losses = {1: 2.1, 100: 50.0, 2000: 47.0}
  assert FailureRule().judge(losses, {}, warmup_steps=100) == (
      "blew up: train loss 47.000 at step 2000 against 2.100 at step 1, after 50.000 at "
      "step 100")
  assert FailureRule().judge({**losses, 2000: 1.5}, {}, warmup_steps=100) is None  # came back
  assert FailureRule().judge({1: 2.1, 100: 50.0, 150: 47.0}, {}, warmup_steps=100) is None


def test_a_non_finite_or_all_zero_layer_gradient_fails():
  """NaN, inf and an all-zero layer gradient norm were ignored; metrics.jsonl writes a
  non-finite one as null."""
  for bad in (float("nan"), float("inf")):
    assert FailureRule().judge({}, {"decoder/layer_0": 0.5, "decoder/layer_1": bad}) == (
        f"non-finite layer gradient: decoder/layer_1's final gradient norm {bad}")
  record = {"grad_norm/decoder/layer_0": 0.5, "grad_norm/decoder/layer_1": None}
  assert FailureRule().judge({}, layer_grad_norms(record)).startswith("non-finite layer")
  assert FailureRule().judge({}, {"decoder/layer_0": 0.0, "decoder/layer_1": 0.0}) == (
      "dead layer: every layer's final gradient norm is 0 (decoder/layer_0, decoder/layer_1)")
