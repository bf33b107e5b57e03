"""Running sweeps: resume after interruption, diverging points, length losses, point locks."""

import json
import math
import os
import subprocess
import sys
import threading
import time

import jax
import pytest

from test_grid import REPO, TINY, tiny_sweep
from transformer import storage
from transformer.errors import ConfigError, TrainingError
from transformer.research import sweeps
from transformer.training import loop


@pytest.fixture(autouse=True)
def one_device(monkeypatch):
  """Points train on one device here: what the runner does with a point does not depend on
  the device count (test_campaign.py runs its points on the 8 forced devices), and a tiny
  step runs and compiles faster on one."""
  train = loop.train_and_evaluate
  monkeypatch.setattr(loop, "train_and_evaluate", lambda exp, workdir: train(
      exp, workdir, devices=jax.devices()[:1]))


def test_interrupted_sweep_resumes_and_aggregates_from_results(gcs):
  """A sweep stopped after its first point reruns only the rest; the tables rebuild alike.
  Its workdir is in a bucket (the emulator): points, locks, results and plots go there."""
  sweep = tiny_sweep()
  workdir = f"gs://{gcs}/sweep"
  first, second = sweeps.expand(sweep)
  assert sweeps.run_sweep(sweep, workdir, only=[first.name]) == [first]  # "interrupted" here
  result_file = storage.as_path(storage.join(sweeps.point_dir(workdir, first), sweeps.RESULT_FILE))
  stored = result_file.read_text()
  lines = sweeps.launch_lines(sweep, "S.py", workdir)
  assert len(lines) == 2 and second.name in lines[0] and "--aggregate_only" in lines[1]

  assert sweeps.run_sweep(sweep, workdir) == [second]
  assert sweeps.run_sweep(sweep, workdir) == []
  assert result_file.read_text() == stored and json.loads(stored)["status"] == "ok"

  sweeps.aggregate(sweep, workdir, command="CMD")
  table = storage.as_path(storage.join(workdir, "results.md")).read_text()
  # The paper's scale gives an input-embedding / PE ratio of sqrt(2) at init; none gives
  # sqrt(2/d) (d = 32).
  ratio = {r["group"]: r["metrics"]["init/decoder/embed/ratio"]
           for r in sweeps.load_results(workdir)}
  assert ratio["embed_scale=sqrt_d"] == pytest.approx(math.sqrt(2), rel=0.1)
  assert ratio["embed_scale=none"] == pytest.approx(math.sqrt(2 / 32), rel=0.1)
  for name in ("results.md", "results.csv"):
    storage.as_path(storage.join(workdir, name)).unlink()
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "scripts", "sweep.py"), "--sweep=SWEEP",
       f"--workdir={workdir}", "--aggregate_only"], capture_output=True, text=True, cwd=REPO)
  assert proc.returncode != 0 and "error: Sweep file SWEEP does not exist" in proc.stderr
  sweeps.aggregate(sweep, workdir, command="CMD")
  assert storage.as_path(storage.join(workdir, "results.md")).read_text() == table
  for plot in ("eval_nll.png", "diagnostics_decoder_embed_ratio.png"):
    assert len(storage.as_path(storage.join(workdir, "plots", plot)).read_bytes()) > 1000


def test_a_diverging_point_is_recorded_and_length_losses_are_measured(tmp_path):
  """A run that diverged is recorded so; one whose loss sat flat (a rate of 1e-12 here) was
  recorded 'ok' and now fails by the default failure rule, as no rule of the sweep's says."""
  sweep = tiny_sweep(axes=({"learning_rate": [2e-3, 1e38, 1e-12], "warmup_steps": [200, 200, 1],
                            "num_train_steps": [4, 4, 104], "eval_every_steps": [4, 4, 104],
                            "checkpoint_every_steps": [4, 4, 104],
                            "diagnostics_every_steps": [2, 2, 0]},),
                     length_factors=(1, 2),
                     fixed={**TINY, "model_type": "lm", "model.num_encoder_layers": 0,
                            "max_len": 34, "model.max_len": 68},
                     metrics=("eval/nll", "length_1x/loss", "length_2x/loss"))
  sweeps.run_sweep(sweep, str(tmp_path))
  by_lr = {r["overrides"]["learning_rate"]: r for r in sweeps.load_results(str(tmp_path))}
  assert by_lr[1e38]["status"] == "diverged" and "Non-finite" in by_lr[1e38]["message"]
  flat = by_lr[1e-12]
  assert flat["status"] == "failed" and flat["failure"].startswith("stalled: train loss ")
  assert flat["failure"].endswith(" at step 2")  # its first train record after warmup
  sweeps.aggregate(sweep, str(tmp_path))
  table = (tmp_path / "results.md").read_text()
  assert "The failure rule, fixed before the runs: a run failed if" in table
  assert f"- {flat['name']}: stalled: train loss " in table  # the failed runs, listed
  ok = by_lr[2e-3]
  assert ok["status"] == "ok"
  # Synthetic rows are shorter than max_len: longer rows only add padding, same tokens.
  assert ok["metrics"]["length_2x/loss"] == pytest.approx(ok["metrics"]["length_1x/loss"], rel=1e-4)
  # The loss is the training objective (label smoothing included) everywhere.
  assert ok["metrics"]["length_1x/loss"] == pytest.approx(ok["metrics"]["eval/loss"], rel=1e-4)


def test_a_point_diverging_before_its_first_metrics_line_is_recorded_and_the_sweep_goes_on(
    tmp_path):
  """No metrics.jsonl yet (no diagnostics, the first log step after the divergence): the
  point's series are empty, not a FileNotFoundError that aborted the sweep."""
  sweep = tiny_sweep(axes=({"learning_rate": [1e38, 2e-3]},),
                     fixed={**TINY, "diagnostics_every_steps": 0, "log_every_steps": 4},
                     metrics=("eval/nll",), curves=("eval/nll",))
  sweeps.run_sweep(sweep, str(tmp_path))
  by_lr = {r["overrides"]["learning_rate"]: r for r in sweeps.load_results(str(tmp_path))}
  assert by_lr[1e38]["status"] == "diverged" and "Non-finite" in by_lr[1e38]["message"]
  assert by_lr[2e-3]["status"] == "ok"


def test_a_point_locked_by_a_live_process_is_skipped(tmp_path):
  sweep = tiny_sweep()
  point = sweeps.expand(sweep)[0]
  lock = sweeps.claim(str(tmp_path), point)
  assert lock is not None and lock.is_locked
  assert sweeps.claim(str(tmp_path), point) is None  # held by a live process (this one)
  # Named with `only`, a held point is skipped at once (the whole grid would wait for it).
  assert sweeps.run_sweep(sweep, str(tmp_path), only=[point.name]) == []
  lock.release()  # as the OS does when the holding process dies
  again = sweeps.claim(str(tmp_path), point)
  assert again is not None
  again.release()
  # A process that took the lock and died without releasing it leaves it free.
  path = os.path.join(sweeps.point_dir(str(tmp_path), point), sweeps.LOCK_FILE)
  subprocess.run([sys.executable, "-c", "import filelock, os; "
                  f"filelock.FileLock({path!r}).acquire(); os._exit(9)"], check=False)
  taken = sweeps.claim(str(tmp_path), point)
  assert taken is not None
  taken.release()


def test_only_a_non_finite_loss_is_recorded_as_diverged(tmp_path, monkeypatch):
  def full_disk(config, workdir):
    raise TrainingError("No space left on the disk of W; free space and rerun.")

  monkeypatch.setattr(loop, "train_and_evaluate", full_disk)
  point = sweeps.expand(tiny_sweep())[0]
  with pytest.raises(TrainingError, match="No space left"):  # the sweep stops: not a finding
    sweeps.run_point(tiny_sweep(), str(tmp_path), point)
  assert not sweeps.is_finished(str(tmp_path), point)



def test_a_point_stopped_by_a_signal_is_not_recorded_and_the_sweep_stops(tmp_path, monkeypatch):
  """SIGTERM mid-point: the loop saves and returns early; the point must stay unfinished (it
  resumes from its checkpoint) and the sweep must not go on to the next point."""
  calls = []

  def stopped(config, workdir):
    calls.append(workdir)
    open(os.path.join(workdir, "metrics.jsonl"), "w").close()
    return loop.Summary(step=150, stopped_by="SIGTERM")

  monkeypatch.setattr(loop, "train_and_evaluate", stopped)
  sweep = tiny_sweep()
  assert sweeps.run_sweep(sweep, str(tmp_path)) == []
  assert len(calls) == 1
  assert not any(sweeps.is_finished(str(tmp_path), p) for p in sweeps.expand(sweep))


def _sweep_file(path, **fields):
  """A sweep file of tiny_sweep(**fields) (its values written as Python literals)."""
  sweep = tiny_sweep(**fields)
  path.write_text(
      "from transformer.research.sweeps import Sweep\n"
      "def get_sweep():\n"
      f"  return Sweep(name={sweep.name!r}, question='q?', base={sweep.base!r},\n"
      f"               axes={sweep.axes!r}, seeds={sweep.seeds!r}, fixed={sweep.fixed!r})\n")
  return str(path)


def test_a_sweep_stopped_before_any_point_finished_says_so_and_ends_cleanly(tmp_path,
                                                                           monkeypatch):
  """SIGTERM during the first point: the stop is clean, so the command ends with one line that
  says how to go on, not with 'No finished points' and exit 1."""
  monkeypatch.setattr(loop, "train_and_evaluate",
                      lambda config, workdir: loop.Summary(step=2, stopped_by="SIGTERM"))
  text = sweeps.run_command(_sweep_file(tmp_path / "s.py"), str(tmp_path / "w"))
  assert text == ("No point of sweep t has finished yet; rerun the same command to continue it "
                  "(a stopped point resumes from its checkpoint).")
  with pytest.raises(ValueError, match="No finished points"):  # asked to tabulate: nothing to
    sweeps.run_command(str(tmp_path / "s.py"), str(tmp_path / "w"), aggregate_only=True)


def test_a_workdir_that_is_a_file_is_one_line(tmp_path):
  """A NotADirectoryError traceback before."""
  (tmp_path / "w").write_text("a file\n")
  with pytest.raises(ConfigError, match=r"^--workdir=.*/w is a file, not a directory"):
    sweeps.run_command(_sweep_file(tmp_path / "s.py"), str(tmp_path / "w"))
  assert (tmp_path / "w").read_text() == "a file\n"


def test_a_fixed_value_of_the_wrong_type_is_one_line_before_any_point_dir(tmp_path):
  path = _sweep_file(tmp_path / "s.py", fixed={**TINY, "batch_size": "abc"})
  with pytest.raises(ValueError, match="The sweep sets batch_size='abc', which does not fit"):
    sweeps.run_command(path, str(tmp_path / "w"))
  assert not (tmp_path / "w").exists()


def _bowl(exp, workdir):
  """Training replaced by a loss bowl in log2(lr), best at 2e-3 (sqrt_d) or 4e-3 (none)."""
  config = exp.config
  best = 2e-3 if config.model.embed_scale == "sqrt_d" else 4e-3
  loss = 3.0 + 0.1 * math.log2(config.learning_rate / best) ** 2 + 0.01 * config.seed
  open(os.path.join(workdir, "metrics.jsonl"), "w").close()
  return loop.Summary(step=1, eval={"loss": loss}, test={"loss": loss + 0.05})


def test_a_tuned_sweep_runs_the_grid_then_extends_an_edge(tmp_path, monkeypatch):
  """The 'none' arm's best lies above the grid, so the runner adds 8e-3 (then stops: 4e-3
  stays best); the other arm is left alone."""
  from test_tuning import tuned_sweep

  monkeypatch.setattr(loop, "train_and_evaluate", _bowl)
  sweep = tuned_sweep(seeds=(0, 1))
  done = sweeps.run_sweep(sweep, str(tmp_path))
  names = [p.name for p in done]
  assert len(names) == 2 * 3 * 2 + 2 and len(set(names)) == len(names)
  assert names[-2:] == ["embed_scale=none,learning_rate=0.008,seed=0",
                        "embed_scale=none,learning_rate=0.008,seed=1"]
  assert sweeps.run_sweep(sweep, str(tmp_path)) == []  # nothing left: the search is complete
  bests = sweeps.best_per_arm(sweep, sweeps.load_results(str(tmp_path)))
  assert [(b.best, b.on_edge, b.complete) for b in bests] == [(2e-3, False, True),
                                                              (4e-3, False, True)]
  assert bests[1].report[0] == pytest.approx(3.055)


def test_a_process_whose_remaining_points_are_held_elsewhere_waits_and_runs_what_they_open(
    tmp_path, monkeypatch):
  """The last point of the 'none' arm's grid is held by another process (a lock this test
  takes): the sweep's own process runs everything else, waits instead of ending, and once that
  point's result is in runs the edge it opens (8e-3), not the held point."""
  from test_tuning import tuned_sweep

  monkeypatch.setattr(loop, "train_and_evaluate", _bowl)
  monkeypatch.setattr(sweeps.runner, "BUSY_POLL_SECONDS", 0.01)
  sweep, workdir = tuned_sweep(seeds=(0, 1)), str(tmp_path)
  held = next(p for p in sweeps.expand(sweep)
              if p.name == "embed_scale=none,learning_rate=0.004,seed=1")
  lock = sweeps.claim(workdir, held)
  ran = []
  worker = threading.Thread(target=lambda: ran.extend(sweeps.run_sweep(sweep, workdir)))
  worker.start()
  others = [p for p in sweeps.expand(sweep) if p != held]
  for _ in range(2000):
    if all(sweeps.is_finished(workdir, p) for p in others):
      break
    time.sleep(0.01)
  time.sleep(0.1)
  assert worker.is_alive()  # waiting: without the held point's result nothing more is known
  sweeps.run_point(sweep, workdir, held)  # the other process finishes it ...
  lock.release()  # ... and lets go
  worker.join(timeout=60)
  assert not worker.is_alive()
  names = [p.name for p in ran]
  assert held.name not in names and len(names) == len(others) + 2
  assert names[-2:] == ["embed_scale=none,learning_rate=0.008,seed=0",
                        "embed_scale=none,learning_rate=0.008,seed=1"]


def test_seeds_given_on_the_command_line_are_checked_against_confirm_seeds(tmp_path):
  """--seeds=0,3 on a sweep confirming with seed 3 would name two points alike: one line."""
  path = tmp_path / "s.py"
  path.write_text(
      "from transformer.research.sweeps import Sweep\n"
      "def get_sweep():\n"
      "  return Sweep(name='t', question='q?', "
      f"base={os.path.join(REPO, 'configs/default.py')!r},\n"
      "               axes=({'model.embed_scale': ['sqrt_d', 'none']},), seeds=(0, 1, 2),\n"
      "               tune={'learning_rate': [1e-3, 2e-3]}, confirm_seeds=(3, 4))\n")
  with pytest.raises(ValueError, match="repeat seeds"):
    sweeps.run_command(str(path), str(tmp_path / "w"), seeds=["0", "3"], print_launch=True)
  lines = sweeps.run_command(str(path), str(tmp_path / "w"), seeds=["0", "1"],
                             print_launch=True).splitlines()
  assert len(lines) == 2 * 2 * 2 + 1  # arms x rates x seeds, then the aggregation command
  # Each command carries the seeds: without them, --point='...,seed=1' of a sweep run with
  # --seeds=0,1 would name the file's points, not these.
  assert all(" --seeds=0,1 " in line for line in lines), lines
  # Seeds that are not integers, repeat, or are negative: one line each (a ValueError and
  # silently repeated runs before).
  for bad, message in ((["a"], r"^--seeds=a must be integers, e.g. --seeds=0,1,2.$"),
                       (["0", "0"], r"^seeds=\[0, 0\] must be distinct integers >= 0"),
                       (["-1"], r"^seeds=\[-1\] must be distinct integers >= 0")):
    with pytest.raises(ConfigError, match=message):
      sweeps.run_command(str(path), str(tmp_path / "w"), seeds=bad, print_launch=True)


def test_a_translation_point_records_test_bleu_and_encoder_diagnostics(tmp_path):
  """configs/translate_tiny.py shrunk, on a TSV written here: the point's result holds the
  validation and test BLEU with sacrebleu's signature, and the encoder's input and first
  self-attention diagnostics beside the decoder's (what the translation sweep reports)."""
  words = ["red", "blue", "green", "cat", "dog", "house", "tree", "car", "book", "door"]
  german = ["rot", "blau", "grün", "Katze", "Hund", "Haus", "Baum", "Auto", "Buch", "Tür"]
  lines = [f"{words[i % 10]} {words[(i // 10) % 10]} {i}\t{german[i % 10]} "
           f"{german[(i // 10) % 10]} {i}" for i in range(100)]
  tsv = tmp_path / "pairs.tsv"
  tsv.write_text("\n".join(lines) + "\n")
  sweep = sweeps.Sweep(
      name="t", question="q?", base=os.path.join(REPO, "configs/translate_tiny.py"),
      axes=({"model.embed_scale": ["sqrt_d"]},), seeds=(0,),
      fixed={"data_files": str(tsv), "tfds_data_dir": str(tmp_path / "tfds"),
             "tokenizer.kind": "bytes", "model.d_model": 32, "model.d_ff": 64,
             "model.num_encoder_layers": 1, "model.num_decoder_layers": 1, "batch_size": 8,
             "max_len": 32, "num_train_steps": 2, "log_every_steps": 1, "eval_every_steps": 2,
             "bleu_every_steps": 2, "diagnostics_every_steps": 1,
             "checkpoint_every_steps": 2, "async_checkpoints": False,
             "eval_fraction": 0.1, "test_fraction": 0.1}, at_steps=(1,))
  [point] = sweeps.expand(sweep)
  result = sweeps.run_point(sweep, str(tmp_path / "w"), point)
  metrics = result["metrics"]
  _check_test_rows(result, examples=10)
  assert metrics["step_1/decoder/embed/ratio"] != metrics["init/decoder/embed/ratio"]
  assert result["status"] == "ok" and result["bleu_signature"].startswith("nrefs:1|")
  assert 0 <= metrics["decode/bleu"] <= 100 and 0 <= metrics["test/bleu"] <= 100
  assert metrics["test/num_examples"] == 10  # 10% of 100 pairs, decoded once each
  for stack in ("encoder", "decoder"):
    assert metrics[f"init/{stack}/embed/ratio"] > 0
    for stat in ("logit_var_within", "entropy_deficit", "entropy_uniform"):
      value = sweeps.metric_value(
          metrics, f"mean:final/{stack}/layer_0/self_attention/head_*/{stat}")
      assert math.isfinite(value), (stack, stat)


def _check_test_rows(result, examples):
  """One [NLL sum, tokens] per test example, in order; their sums give the run's test NLL."""
  rows = result["test_rows"]
  assert len(rows) == examples and all(tokens > 0 for _, tokens in rows)
  assert len({n for n, _ in rows}) > 1  # each row its own sums, not a batch's
  nll = sum(n for n, _ in rows) / sum(t for _, t in rows)
  assert nll == pytest.approx(result["metrics"]["test/nll"], rel=1e-5)
  assert sum(t for _, t in rows) == result["metrics"]["test/weight_sum"]


def test_a_language_model_point_stores_each_test_examples_nll(tmp_path):
  """A packed LM on a text file written here: the test split is scored one example a row,
  each example's sums stored (what the report's test-set error reads)."""
  text = tmp_path / "t.txt"
  text.write_text("\n\n".join(f"line {i} of some text, {'ab' * (i % 7)}." for i in range(200)))
  sweep = tiny_sweep(
      base=os.path.join(REPO, "configs/lm_tiny.py"), axes=({"model.embed_scale": ["none"]},),
      fixed={"data_files": str(text), "tfds_data_dir": str(tmp_path / "tfds"),
             "tokenizer.kind": "bytes", "model.d_model": 32, "model.d_ff": 64,
             "model.num_decoder_layers": 1, "batch_size": 8, "max_len": 32,
             "num_train_steps": 2, "log_every_steps": 1, "eval_every_steps": 2,
             "diagnostics_every_steps": 1, "checkpoint_every_steps": 2,
             "async_checkpoints": False, "eval_fraction": 0.1, "test_fraction": 0.1},
      metrics=("test/nll",), curves=("eval/loss",))
  [point] = sweeps.expand(sweep)
  result = sweeps.run_point(sweep, str(tmp_path / "w"), point)
  # 10% of 200 paragraphs, each scored whole from its start (none is longer than a row).
  _check_test_rows(result, examples=20)


def _fake_training(calls):
  """train_and_evaluate without training: records the config it was given."""
  def train(exp, workdir):
    config = exp.config
    calls.append(config)
    open(os.path.join(workdir, "metrics.jsonl"), "w").close()
    return loop.Summary(step=config.num_train_steps, eval={"loss": 1.0 + len(calls)})
  return train


def test_a_point_is_reused_only_while_the_sweep_file_gives_it_the_same_config(tmp_path,
                                                                            monkeypatch):
  """The fixed fields changed under the same point names: the old results were taken as
  finished, and a table mixed label smoothing 0.1 and 0.0."""
  calls = []
  monkeypatch.setattr(loop, "train_and_evaluate", _fake_training(calls))
  workdir = str(tmp_path / "w")
  sweeps.run_command(_sweep_file(tmp_path / "s.py"), workdir)
  assert len(calls) == 2
  changed = _sweep_file(tmp_path / "s.py", fixed={**TINY, "label_smoothing": 0.0,
                                                   "num_train_steps": 40})
  for aggregate_only in (False, True):
    with pytest.raises(ConfigError, match=r"^2 finished point\(s\) of sweep t in .* were run "
                       r"with another config than the sweep file gives them now: "
                       r"embed_scale=none,seed=0 \(label_smoothing 0.1 -> 0.0, "
                       r"num_train_steps 4 -> 40\); .*--rerun_changed"):
      sweeps.run_command(changed, workdir, aggregate_only=aggregate_only)
  assert len(calls) == 2
  sweeps.run_command(changed, workdir, rerun_changed=True)
  assert len(calls) == 4 and {c.label_smoothing for c in calls[2:]} == {0.0}
  assert sweeps.run_command(changed, workdir) and len(calls) == 4  # now the same: reused
  # Advice to the user (how to get missing data) changes nothing a point computes.
  advised = _sweep_file(tmp_path / "s.py", fixed={**TINY, "label_smoothing": 0.0,
                                                   "num_train_steps": 40, "data_help": "get it"})
  assert sweeps.run_command(advised, workdir) and len(calls) == 4  # nothing trained again


def test_the_report_lists_only_the_points_of_the_grid(tmp_path, monkeypatch):
  monkeypatch.setattr(loop, "train_and_evaluate", _fake_training([]))
  workdir = tmp_path / "w"
  sweeps.run_command(_sweep_file(tmp_path / "s.py"), str(workdir))
  stray = workdir / "points" / "embed_scale=sqrt_d_x,seed=0"  # a point the file no longer has
  stray.mkdir()
  result = json.loads((workdir / "points" / "embed_scale=none,seed=0" / "result.json").read_text())
  result.update(name=stray.name, group="embed_scale=sqrt_d_x")
  (stray / "result.json").write_text(json.dumps(result))
  text = sweeps.run_command(str(tmp_path / "s.py"), str(workdir), aggregate_only=True)
  assert "sqrt_d_x" not in text and "(2 of 2 points finished" in text


def test_points_whose_axes_change_the_tokenizer_get_their_own(tmp_path):
  """A vocabulary-size axis: both points read the sweep's one 400-piece tokenizer."""
  lm = {"dataset": "text_files", "data_files": "/d/*.txt", "model_type": "lm"}
  sweep = tiny_sweep(axes=({"tokenizer.vocab_size": [400, 600]},), fixed=lm)
  paths = {p.name: sweeps.tokenizer_path(sweep, "W", sweeps.point_config(sweep, p))
           for p in sweeps.expand(sweep)}
  assert len(set(paths.values())) == 2
  assert all(path.startswith("W/tokenizer-") for path in paths.values())
  same = tiny_sweep(axes=({"learning_rate": [1e-3, 2e-3]},), fixed=lm, seeds=(0, 1))
  assert {sweeps.tokenizer_path(same, "W", sweeps.point_config(same, p))
          for p in sweeps.expand(same)} == {"W/tokenizer.model"}  # one for the whole sweep


def test_every_printed_launch_line_runs_its_command_alone_whatever_the_values(tmp_path):
  """Round 6, item 5: an axis value `b'; touch X; echo '` printed by --print_launch ran
  `touch` when the line was piped to bash, and --config and --workdir were printed bare."""
  canary = tmp_path / "ran"
  hostile = f"b'; touch {canary}; echo '"
  sweep = tiny_sweep(axes=({"model.embed_scale": ["sqrt_d", hostile]},))
  config, workdir = f"c f;touch {canary}.py", f"w $(touch {canary}) `touch {canary}`"
  lines = sweeps.launch_lines(sweep, config, workdir)
  assert len(lines) == 3
  for line in lines:  # `python` stands in for the interpreter: it records what it was given
    got = subprocess.run(["bash", "-c", 'python() { printf "%s\\n" "$@"; }; ' + line],
                         capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    argv = got.splitlines()
    assert argv[:3] == ["scripts/sweep.py", f"--sweep={config}", f"--workdir={workdir}"]
    assert len(argv) == 4 and argv[3] in (
        "--aggregate_only", *(f"--point={p.name}" for p in sweeps.expand(sweep)))
  assert not canary.exists()
