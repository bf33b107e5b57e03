"""SIGTERM, SIGINT and SIGHUP set a flag the loop reads between steps; a second Ctrl-C stops at
once."""

import os
import signal
import time

import pytest

from transformer.training import stop_signals


def _deliver(sig):
  os.kill(os.getpid(), sig)
  time.sleep(0.05)  # Python runs the handler between bytecodes, soon after delivery


@pytest.mark.parametrize("first", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_sets_the_flag_and_the_old_handlers_come_back(first):
  """SIGHUP (an ssh drop) ended a run with exit 129 and no checkpoint; now it saves like
  SIGTERM."""
  if first == signal.SIGHUP and signal.getsignal(first) is signal.SIG_IGN:
    pytest.skip("SIGHUP is ignored here (nohup): a run keeps it ignored")
  before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
  with stop_signals.StopSignals() as signals:
    assert signals.stopped_by is None
    _deliver(first)
    assert signals.stopped_by == first.name
    _deliver(signal.SIGTERM)  # a later signal does not rename the first
    assert signals.stopped_by == first.name
  assert {s: signal.getsignal(s) for s in before} == before


def test_a_second_ctrl_c_interrupts_at_once():
  with stop_signals.StopSignals() as signals:
    _deliver(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
      _deliver(signal.SIGINT)
  assert signals.stopped_by == "SIGINT"


def test_one_process_decides_alone():
  assert stop_signals.any_process(True) and not stop_signals.any_process(False)
  with stop_signals.StopSignals() as signals:
    assert not signals.should_stop(0)
    _deliver(signal.SIGTERM)
    assert signals.should_stop(1) and signals.stopped_by == "SIGTERM"
