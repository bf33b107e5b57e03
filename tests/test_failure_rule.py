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
