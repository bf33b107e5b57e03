"""The training loop in-process: damaged checkpoints, non-finite losses, a
full disk, bugs that keep their traceback, and the mistakes a user can make."""

import errno
import io
import json
import logging
import os
import re
import shutil
import textwrap
import traceback

import jax
import numpy as np
import pytest

import script_starter
from conftest import REPO, read_only, script_env, tiny_experiment
from transformer import checkpoint, model_summary, models, storage
from transformer.data import corpus_files
from transformer.errors import InferenceError, NonFiniteLossError, TrainingError, UserError
from transformer.trained import evaluate
from transformer.training import experiment, loop, run, steps, workdir_checks, writers


# The device count matters to the mesh tests below (the 8 forced devices, or a mesh of their
# own); every other test trains on one device, where the loop's logic is the same and a tiny
# step runs and compiles faster (this file: 128 s -> 98 s on 2 cores).
ONE_DEVICE = jax.devices()[:1]


def _train(config, workdir, devices=ONE_DEVICE):
  """loop.train_and_evaluate of `config` (an ml_collections experiment) on `devices`."""
  return loop.train_and_evaluate(experiment.parse(config), str(workdir), devices=devices)


def _losses(workdir):
  return [r["loss"] for r in writers.read_metrics(str(workdir), "train")]


def test_damaged_newest_checkpoint_is_skipped(tiny_config, tmp_path, caplog, monkeypatch):
  workdir = tmp_path / "w"
  _train(tiny_config, str(workdir))  # checkpoints at 5 and 10
  damaged = workdir / "checkpoints" / "10"
  for f in (damaged / "state").rglob("*"):
    if f.is_file() and f.stat().st_size > 1000:
      f.write_bytes(b"garbage" * 10)
  tiny_config.num_train_steps = 12
  paused_at = []

  class Bar(loop.tqdm):  # the progress bar's clock
    def unpause(self):
      paused_at.append(self.n)
      super().unpause()

  monkeypatch.setattr(loop, "tqdm", Bar)
  with caplog.at_level(logging.WARNING):
    final = _train(tiny_config, str(workdir))
  assert final.step == 12
  # The rate and ETA count from after the resumed run's first (compiling) step, restarted once.
  assert paused_at == [5]
  assert any(str(damaged) in r.getMessage() for r in caplog.records)
  steps = [r["step"] for r in writers.read_metrics(str(workdir), "train")]
  assert steps == list(range(1, 13))  # resumed from 5: steps 6..12 re-run, logged once


def test_a_crash_in_the_last_evaluation_resumes_at_the_end_and_repeats_only_it(
    tiny_config, tmp_path, monkeypatch):
  """The last step's checkpoint is saved before its evaluation: a crash inside it loses no
  training, and the restart (nothing left to train) runs the evaluation once more."""
  tiny_config.num_train_steps = 5  # one checkpoint and one evaluation, both at step 5
  workdir = tmp_path / "w"
  split_metrics = steps.split_metrics

  def crash(*args, **kwargs):
    writers.MetricWriter(str(workdir), resume_step=5).write(5, "eval", {"loss": -1.0})  # half done
    raise RuntimeError("killed while evaluating")

  monkeypatch.setattr(steps, "split_metrics", crash)
  with pytest.raises(RuntimeError, match="killed while evaluating"):
    _train(tiny_config, str(workdir))
  assert checkpoint.Checkpointer(str(workdir)).all_steps() == [5]
  monkeypatch.setattr(steps, "split_metrics", split_metrics)
  final = _train(tiny_config, str(workdir))
  assert final.step == 5 and final.eval["loss"] > 0
  train = writers.read_metrics(str(workdir), "train")
  assert [r["step"] for r in train] == [1, 2, 3, 4, 5]  # not trained again
  assert final.train["loss"] == pytest.approx(train[-1]["loss"])
  assert [r["loss"] for r in writers.read_metrics(str(workdir), "eval")] == \
      [pytest.approx(final.eval["loss"])]  # the half-done record replaced, not kept


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tiny_config, tmp_path):
  tiny_config.learning_rate = 1e30
  tiny_config.checkpoint_every_steps = 1
  workdir = tmp_path / "w"
  with pytest.raises(NonFiniteLossError, match=r"^Non-finite (loss at|parameter norm after) "
                     r"step (\d+)") as err:
    _train(tiny_config, str(workdir))
  first = int(re.search(r"checkpoints from step (\d+) on were set aside", str(err.value))[1])
  kept = checkpoint.Checkpointer(str(workdir)).all_steps()
  # Checkpoints of params that produced the non-finite loss are set aside (or, where the
  # param norm said so first, never saved), the rest kept.
  assert all(s < first for s in kept)
  assert all(int(p.name.split(".")[0]) >= first
             for p in (workdir / "checkpoints").glob("*.nonfinite"))
  if kept:
    assert f"resumes from step {max(kept)}" in str(err.value)


def _strict_json(text):
  """json.loads that refuses NaN and Infinity, which Python's json writes and no JSON
  reader takes."""
  def refuse(constant):
    raise ValueError(f"{constant} is not JSON")
  return json.loads(text, parse_constant=refuse)


def test_a_run_that_diverges_at_its_last_update_fails_and_keeps_no_bad_checkpoint(tiny_config,
                                                                                   tmp_path):
  """Round 7, item 2: at a rate of 1e38 the last update made the params non-finite (no train
  loss measures them); the run exited 0, no FAILED, its eval loss and param norm null and its
  checkpoint of those params the newest, for evaluate and a resume to take."""
  tiny_config.update(learning_rate=1e38, num_train_steps=1, checkpoint_every_steps=1,
                     eval_every_steps=1)
  workdir = tmp_path / "w"
  with pytest.raises(NonFiniteLossError, match=r"^Non-finite parameter norm after step 1 "
                     r"\(inf: the update diverged\); training stopped, checkpoints from step 1 "
                     r"on were set aside as <step>.nonfinite and no checkpoint is left;"):
    _train(tiny_config, str(workdir))
  assert checkpoint.finished_steps(checkpoint.checkpoint_dir(str(workdir))) == []


def test_a_non_finite_held_out_loss_fails_the_run_and_sets_its_checkpoint_aside(
    tiny_config, tmp_path, monkeypatch):
  """A held-out loss that is not finite (params finite, logits not) ends the run as
  diverged, its checkpoint (saved, asynchronously, just before) set aside."""
  split_metrics = steps.split_metrics
  monkeypatch.setattr(steps, "split_metrics",
                      lambda *a, **k: {**split_metrics(*a, **k), "loss": float("nan")})
  tiny_config.num_train_steps = 5
  workdir = tmp_path / "w"
  with pytest.raises(NonFiniteLossError, match=r"^Non-finite held-out loss at step 5 \(the "
                     r"eval split's: nan\); training stopped, checkpoints from step 5 on were "
                     r"set aside as <step>.nonfinite and no checkpoint is left;"):
    _train(tiny_config, str(workdir))
  assert checkpoint.finished_steps(checkpoint.checkpoint_dir(str(workdir))) == []
  assert (workdir / "checkpoints" / "5.nonfinite").is_dir()


def test_evaluate_writes_a_non_finite_figure_as_null_never_nan(five_steps, tmp_path,
                                                               monkeypatch):
  """results.json held NaN literals (not JSON) for a checkpoint whose eval loss was NaN."""
  workdir = tmp_path / "w"
  shutil.copytree(five_steps, workdir)
  split_metrics = steps.split_metrics
  monkeypatch.setattr(steps, "split_metrics",
                      lambda *a, **k: {**split_metrics(*a, **k), "loss": float("nan")})
  results = evaluate.evaluate_workdir(str(workdir), decode=False)
  assert results["loss"] is None
  assert _strict_json(open(results["results_file"]).read())["loss"] is None


def _fsdp_config(tfds_dir):
  """tiny_experiment, 5 steps with params and optimizer state split over the 8 devices."""
  config = tiny_experiment(tfds_dir)
  # The key bias has an exactly-zero true gradient, which Adam turns into +-lr noise.
  config.model.use_bias = False
  config.log_every_steps = config.eval_every_steps = 10
  config.num_train_steps, config.fsdp = 5, 8
  return config


@pytest.fixture(scope="module")
def fsdp_run(tfds_dir, tmp_path_factory):
  """_fsdp_config trained on the 8 devices, saved at step 5: the two tests below read it (one
  xdist group, so one worker trains it once)."""
  workdir = tmp_path_factory.mktemp("fsdp_run")
  _train(_fsdp_config(tfds_dir), str(workdir), devices=jax.devices())
  return workdir


@pytest.mark.slow
@pytest.mark.xdist_group("fsdp_run")
def test_a_checkpoint_of_one_mesh_resumes_on_another_to_the_same_params(fsdp_run, tfds_dir,
                                                                        tmp_path):
  config = _fsdp_config(tfds_dir)
  config.num_train_steps, config.fsdp = 10, 1
  whole = tmp_path / "whole"
  _train(config, str(whole), devices=jax.devices())  # all-data, 10 steps
  split = tmp_path / "split"
  shutil.copytree(fsdp_run, split)  # FSDP, saved at step 5 ...
  assert _train(config, str(split), devices=jax.devices()).step == 10  # ... resumed all-data
  expected, got = (checkpoint.load_params(str(w))[0] for w in (whole, split))
  for a, b in zip(jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(got)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.xdist_group("fsdp_run")
def test_load_params_of_an_eight_device_run_in_a_one_device_process(fsdp_run, tfds_dir, tmp_path,
                                                                   devices):
  workdir = fsdp_run  # params and optimizer state saved split over the 8 devices
  tiny_config = _fsdp_config(tfds_dir)
  # The logits of the training process's own (sharded, restored) state ...
  from transformer.training import sharding, steps
  model_config = checkpoint.load_params(str(workdir))[1]
  model = run.build_model(tiny_config.model_type, model_config)
  tokens = np.arange(18, dtype=np.int32).reshape(2, 9) % 10 + 1
  batch = {"inputs": tokens, "targets": tokens[:, ::-1].copy()}
  mesh = sharding.make_mesh(devices)
  from transformer.training import optimizers
  tx = optimizers.make_optimizer(experiment.parse(tiny_config).optimization)
  abstract = jax.eval_shape(lambda: steps.init_state(model, tx, jax.random.PRNGKey(0), batch))
  abstract = jax.tree_util.tree_map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding.replicated(mesh)),
      abstract)
  state, _ = checkpoint.Checkpointer(str(workdir)).restore(abstract)
  expected = np.asarray(model.logits(state.params, batch))
  np.save(tmp_path / "batch.npy", np.stack([batch["inputs"], batch["targets"]]))
  # ... equal those of load_params in a process that has one device.
  script = textwrap.dedent(f"""
      import numpy as np
      import jax
      assert jax.device_count() == 1
      from transformer import checkpoint, model_summary
      from transformer.models import Transformer
      params, cfg = checkpoint.load_params({str(workdir)!r})
      inputs, targets = np.load({str(tmp_path / 'batch.npy')!r})
      logits = Transformer(cfg).logits(params, {{"inputs": inputs, "targets": targets}})
      np.save({str(tmp_path / 'logits.npy')!r}, np.asarray(logits))
  """)
  env = script_env()
  done = script_starter.run_code(script, env=env, cwd=REPO)
  assert done.returncode == 0, done.stderr[-3000:]
  np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), expected, rtol=1e-5, atol=1e-6)


def test_user_mistakes_raise_one_clear_sentence(tiny_config, tmp_path):
  tiny_config.batch_size = 12  # 8 devices
  with pytest.raises(ValueError, match="batch_size=12 is not divisible by the 8 devices"):
    _train(tiny_config, str(tmp_path / "a"), devices=jax.devices())
  tiny_config.batch_size = 16
  tiny_config.dataset = "wmt99"
  with pytest.raises(ValueError, match="Unknown dataset 'wmt99'"):
    _train(tiny_config, str(tmp_path / "b"))
  assert not (tmp_path / "b").exists()  # a first attempt that failed leaves no empty workdir
  tiny_config.dataset = "synthetic"
  afile = tmp_path / "afile"
  afile.write_text("x")
  with pytest.raises(TrainingError, match="is not writable"):
    _train(tiny_config, str(afile / "sub"))
  tiny_config.num_train_steps = 1
  _train(tiny_config, str(tmp_path / "c"))
  tiny_config.model.d_model = 48
  with pytest.raises(TrainingError,
                     match=r"different model .*d_model 32 -> 48.*allow_model_change"):
    _train(tiny_config, str(tmp_path / "c"))
  tiny_config.model.d_model = 32
  # The saved data position counts batches: another batch size would resume elsewhere.
  tiny_config.batch_size = 32
  with pytest.raises(TrainingError, match=r"another data stream \(batch_size 16 -> 32\)"):
    _train(tiny_config, str(tmp_path / "c"))
  # config.json deleted: the config stored with the checkpoint still says what the run was.
  os.remove(tmp_path / "c" / checkpoint.CONFIG_FILE)
  with pytest.raises(TrainingError, match=r"another data stream \(batch_size 16 -> 32\)"):
    _train(tiny_config, str(tmp_path / "c"))


def test_a_first_run_that_fails_once_its_data_is_read_leaves_no_workdir(tiny_config, tmp_path,
                                                                      monkeypatch):
  """Round 7, item 8: it left the tokenizer.json its data preparation wrote."""
  def refuse(exp, vocab_size):
    raise TrainingError("refused once the data was read")

  monkeypatch.setattr(experiment, "check_data_vocab", refuse)
  with pytest.raises(TrainingError, match="refused once the data was read"):
    _train(tiny_config, str(tmp_path / "w"))
  assert not (tmp_path / "w").exists()


def test_an_error_inside_a_train_step_keeps_its_type_and_traceback(tiny_config, tmp_path,
                                                                   monkeypatch):
  build = steps.build_steps

  def failing_build(*args, **kwargs):
    def train(*a, **k):
      raise TypeError("a bug inside the train step")
    return build(*args, **kwargs)._replace(train=train)

  monkeypatch.setattr(steps, "build_steps", failing_build)
  with pytest.raises(TypeError, match="a bug inside the train step") as e:
    _train(tiny_config, str(tmp_path / "w"))
  assert any(entry.name == "train" for entry in e.traceback)  # raised where it happened


def test_a_full_disk_is_one_clear_sentence(tiny_config, tmp_path, monkeypatch):
  def no_space(self, step, *args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", f"checkpoints/{step}")

  monkeypatch.setattr(checkpoint.Checkpointer, "save", no_space)
  tiny_config.num_train_steps = 5
  with pytest.raises(TrainingError, match=r"^No space left on the disk of .*; free space "
                     "and rerun the same command"):
    _train(tiny_config, str(tmp_path / "w"))


def test_a_full_disk_under_the_data_names_that_disk_and_no_checkpoint(tiny_config, tmp_path,
                                                                      monkeypatch):
  """The TFDS directory's disk full while the data is prepared said "No space left on the disk
  of WORKDIR ... it resumes from the newest readable checkpoint": neither was true."""
  shard = tmp_path / "tfds" / "synthetic" / "1.0.0" / "synthetic-train.array_record-00000"

  def no_space(config, workdir):
    raise OSError(errno.ENOSPC, "No space left on device", str(shard))

  monkeypatch.setattr(loop, "_get_datasets", no_space)
  with pytest.raises(TrainingError) as e:
    _train(tiny_config, str(tmp_path / "w"))
  message = str(e.value)
  assert message.startswith(f"No space left on the disk of {shard} ([Errno 28] No space left ")
  assert message.endswith("); free space and rerun the same command: it starts from step 0, as "
                          "no checkpoint was saved.")


@pytest.fixture(scope="module")
def five_steps(tfds_dir, tmp_path_factory):
  """A finished 5-step run of the tiny experiment (checkpoint at 5); tests copy it."""
  config = tiny_experiment(tfds_dir)
  config.num_train_steps = 5
  workdir = tmp_path_factory.mktemp("five_steps") / "w"
  _train(config, str(workdir))
  return workdir


def test_the_summary_puts_the_held_out_figures_first_and_names_the_checkpoint():
  final = loop.Summary(step=2000, eval={"accuracy": 0.99951, "nll": 0.0123, "perplexity": 1.0124},
                       decode={"bleu": 99.9, "exact_match": 0.996, "num_examples": 1000.0},
                       train={"loss": 0.5})
  assert final.lines("/w") == [
      "Run /w: trained to step 2000.",
      "  held-out: token accuracy 99.95%, NLL 0.0123, perplexity 1.01",
      "  decoded held-out: BLEU 99.90, exact 99.60% of 1,000",
      "  checkpoint /w/checkpoints/2000; metrics /w/metrics.jsonl"]
  stopped = loop.Summary(step=7, stopped_by="SIGTERM").lines("/w")
  assert stopped[0] == "Run /w: stopped by SIGTERM at step 7."


def test_a_run_whose_loss_sat_flat_says_it_failed_where_it_ends(tiny_config, tmp_path):
  """A loss flat for the whole run (a rate of 1e-12 here) ended as 'trained to step N', like a
  good run; the default failure rule now says it stalled, in the summary and in `final`."""
  tiny_config.update(learning_rate=1e-12, diagnostics_every_steps=0, num_train_steps=105,
                     log_every_steps=50, eval_every_steps=105, checkpoint_every_steps=105)
  final = _train(tiny_config, str(tmp_path / "w"))
  # Its first train record after warmup (5 steps) is step 50's, 55 steps before its last: too
  # few to judge a stall by (100); trained on to step 155, it is judged.
  assert final.failure is None
  tiny_config.update(num_train_steps=155, eval_every_steps=155, checkpoint_every_steps=155)
  final = _train(tiny_config, str(tmp_path / "w"))
  assert re.fullmatch(r"stalled: train loss [\d.]+ at step 155 against [\d.]+ at step 50",
                      final.failure)
  lines = final.lines("/w")
  assert lines[:2] == ["Run /w: trained to step 155.",
                       f"  FAILED by the default failure rule: {final.failure} "
                       "(docs/training.md, 'A run that failed')."]


def test_a_run_that_ended_leaves_no_lock_file(five_steps):
  names = {p.name for p in five_steps.iterdir()}
  assert "checkpoints" in names and not {n for n in names if n.startswith("train.lock")}


@pytest.mark.parametrize("field, value, said", [
    ("synthetic.num_train", 600, "synthetic.num_train 512 -> 600"),
    ("seed", 7, "seed 0 -> 7")])
def test_a_resume_onto_other_data_is_refused_before_any_dataset_is_built(
    five_steps, tiny_config, tmp_path, field, value, said):
  """It said "Resumed from step 5" (a new seed, other synthetic fields); and a refusal came
  only after the new corpus had been prepared."""
  workdir = tmp_path / "w"
  shutil.copytree(five_steps, workdir)
  tiny_config.tfds_data_dir = str(tmp_path / "tfds")
  tiny_config.update_from_flattened_dict({field: value})
  with pytest.raises(TrainingError, match=rf"another data stream \({said}\)"):
    _train(tiny_config, str(workdir))
  assert not (tmp_path / "tfds").exists()


def test_a_resume_with_another_optimizer_names_it(five_steps, tiny_config, tmp_path):
  """An 800-character list of optimizer-state paths before, never naming the optimizer."""
  workdir = tmp_path / "w"
  shutil.copytree(five_steps, workdir)
  tiny_config.update(num_train_steps=10, optimizer="sgd")
  with pytest.raises(TrainingError, match=r"^Workdir .* was trained with optimizer='adam', "
                     r"whose state its checkpoints hold; this run asks for 'sgd': resume with "
                     r"--config.optimizer=adam, or use a new --workdir.$"):
    _train(tiny_config, str(workdir))


def test_a_model_change_a_resume_accepts_is_warned_and_in_the_checkpoints_record(
    five_steps, tiny_config, tmp_path, caplog):
  """Round 7, item 3: dropout 0.1 -> 0.3 under allow_model_change went on unwarned, and
  config.json then showed 0.3 for the whole run."""
  workdir = tmp_path / "w"
  shutil.copytree(five_steps, workdir)
  tiny_config.update(num_train_steps=6, allow_model_change=True)
  tiny_config.model.dropout_rate = 0.3
  with caplog.at_level(logging.WARNING):
    _train(tiny_config, str(workdir))
  assert "a different model (dropout_rate 0.1 -> 0.3; allow_model_change=True)" in caplog.text
  stored = checkpoint.load_params(str(workdir)).record  # the record of step 6
  assert stored[workdir_checks.CHANGED_ON_RESUME] == [
      {"step": 5, "changes": ["model.dropout_rate 0.1 -> 0.3"]}]


def test_a_rerun_with_fewer_steps_than_its_checkpoint_is_refused(five_steps, tiny_config,
                                                                 tmp_path):
  """Not a silent success that passes the 5-step run off as a 3-step one."""
  workdir = tmp_path / "w"
  shutil.copytree(five_steps, workdir)
  tiny_config.num_train_steps = 3
  with pytest.raises(TrainingError, match=r"holds a checkpoint at step 5, past "
                     r"num_train_steps=3; pass --config.num_train_steps=5 or more to continue"):
    _train(tiny_config, str(workdir))
  tiny_config.num_train_steps = 5  # the same command again: its evaluations, nothing trained
  assert _train(tiny_config, str(workdir)).step == 5


def test_each_train_record_says_the_steps_it_covers_across_checkpoints_and_a_stop(
    tiny_config, tmp_path, monkeypatch):
  """Log every 5 steps, checkpoint every 2: a checkpoint does not cut the window; a run
  stopped at step 6 and resumed covers steps 7-10 in its step-10 record (the unbroken run
  6-10) and says so, rather than passing steps 7-10 off as the window of 6-10."""
  from transformer.training import stop_signals
  tiny_config.update(num_train_steps=10, log_every_steps=5, checkpoint_every_steps=2,
                     eval_every_steps=10)
  unbroken, resumed = str(tmp_path / "unbroken"), str(tmp_path / "resumed")
  final = _train(tiny_config, unbroken)
  train = {r["step"]: r for r in writers.read_metrics(unbroken, "train")}
  assert (train[5]["first_step"], train[10]["first_step"]) == (1, 6)
  assert type(train[10]["first_step"]) is int and "first_step" not in final.train  # not a metric
  monkeypatch.setattr(stop_signals.StopSignals, "should_stop", lambda self, step: step == 6)
  assert _train(tiny_config, resumed).step == 6
  monkeypatch.undo()
  _train(tiny_config, resumed)
  again = {r["step"]: r for r in writers.read_metrics(resumed, "train")}
  assert again[5] == {**train[5], **{k: again[5][k] for k in writers.TIMING_FIELDS}}
  assert again[10]["first_step"] == 7 and again[10]["loss"] != train[10]["loss"]


def test_a_read_only_checkpoint_directory_is_refused_before_training(five_steps, tiny_config,
                                                                    tmp_path):
  """A resume into a read-only checkpoints/ trained to the next save, stalled 5 minutes in
  orbax and ended in 4 tracebacks: now one line before any step, naming the directory."""
  workdir = tmp_path / "w"
  shutil.copytree(five_steps, workdir)
  metrics = (workdir / writers.METRICS_FILE).read_text()
  tiny_config.num_train_steps = 10
  with read_only(workdir / checkpoint.CHECKPOINT_DIR):
    with pytest.raises(TrainingError, match=r"^The checkpoint directory .*/checkpoints is "
                       r"not writable \((Read-only file system|Permission denied)\); make it "
                       r"writable, or pass another --workdir.$"):
      _train(tiny_config, str(workdir))
  assert (workdir / writers.METRICS_FILE).read_text() == metrics  # no step trained


def test_a_full_disk_when_a_resume_rewrites_its_files_is_one_sentence(five_steps, tiny_config,
                                                                      tmp_path, monkeypatch):
  """The resume rewrites config.json and metrics.jsonl before training: on a full disk that
  is the same one sentence as during training, and no temporary file stays behind."""
  workdir = tmp_path / "w"
  shutil.copytree(five_steps, workdir)
  before = {name: (workdir / name).read_text() for name in (writers.METRICS_FILE,
                                                            checkpoint.CONFIG_FILE)}

  def full_disk(path, data):  # the temporary file is made, then the disk is full
    open(path, "w").close()
    raise OSError(errno.ENOSPC, "No space left on device")

  monkeypatch.setattr(storage, "_write", full_disk)
  tiny_config.num_train_steps = 10
  with pytest.raises(TrainingError, match=r"^No space left on the disk of .*; free space "
                     "and rerun the same command: it resumes from the newest readable "
                     r"checkpoint.$"):
    _train(tiny_config, str(workdir))
  assert {name: (workdir / name).read_text() for name in before} == before  # nothing lost
  assert not list(workdir.glob("*.tmp-*"))


@pytest.mark.parametrize("fields, message", [
    ({"batch_size": 12}, "batch_size=12 is not divisible by the 8 devices"),
    ({"grad_accum_steps": 3}, "must split into grad_accum_steps=3 micro-batches"),
    ({"bleu_every_steps": 10}, "bleu_every_steps=10 needs model_type='seq2seq'"),
    # Refused after the TFDS dataset was built (and, for seq2seq, the tokenizer trained and
    # left in the workdir) before.
    ({"tokenizer.vocab_size": 60}, r"tokenizer.vocab_size=60 is too small for SentencePiece"),
    ({"model_type": "seq2seq", "model.num_encoder_layers": 1},
     r"Dataset 'text_files' is a language-modelling corpus \(no inputs\), but "
     r"model_type='seq2seq' reads a source"),
    ({"model.attention_impl": "cudnn"}, "attention_impl='cudnn' needs NVIDIA GPUs, and JAX runs "
     "on cpu")])
def test_batch_and_metric_mistakes_end_before_any_data_and_leave_the_workdir_as_it_was(
    tiny_config, corpus, tmp_path, fields, message):
  """No tokenizer trained, no dataset prepared, nothing written, no lock left: the refusal
  comes before data preparation (a SentencePiece LM, whose preparation would train one)."""
  workdir = tmp_path / "w"
  workdir.mkdir()
  (workdir / "notes.txt").write_text("the user's own")
  config = _lm_on(corpus, tiny_config, tfds_data_dir=str(tmp_path / "tfds"))
  config.tokenizer.update(kind="sentencepiece", vocab_size=300)
  config.update_from_flattened_dict(fields)
  with pytest.raises(UserError, match=message):
    _train(config, str(workdir), devices=jax.devices())
  assert [p.name for p in workdir.iterdir()] == ["notes.txt"]
  assert not (tmp_path / "tfds").exists()


def test_a_second_run_on_a_workdir_in_use_is_refused(tiny_config, tmp_path):
  """Two runs on one workdir would interleave their metrics and checkpoints: the second one
  ends at once, naming the first, and writes nothing."""
  workdir = tmp_path / "w"
  workdir.mkdir()
  with workdir_checks.workdir_lock(str(workdir)):  # the first run, training
    with pytest.raises(TrainingError, match=rf"^Workdir {workdir} is in use by another "
                       rf"run \(process {os.getpid()} on "):
      _train(tiny_config, str(workdir))
  assert list(workdir.iterdir()) == []  # the first run's lock files, gone with its release


def _lm_on(corpus, tiny_config, **fields):
  """tiny_config as a byte-level language model on the corpus fixture's paragraphs."""
  config = tiny_config
  config.model_type = "lm"
  config.model.num_encoder_layers = 0
  config.update(dataset="text_files", data_files=str(corpus / "books" / "*.txt"),
                eval_fraction=0.1, max_len=32, packing="concat")
  config.update(fields)
  config.tokenizer.kind = "bytes"
  config.model.max_len = 32
  return config


def test_heldout_diagnostics_a_non_init_knob_keeps_the_init_and_test_is_scored_at_the_end(
    tiny_config, corpus, tmp_path):
  """attention_scale does not touch the initialisation: two runs that differ only in it start
  from the same params on the same held-out batches, so at step 0 every statistic before the
  first attention scale agrees exactly and layer 0's logit variance differs by exactly d_k.
  The test split is scored once, at the last step; profile_steps writes a trace."""
  init = {}
  for scale in ("none", "inv_sqrt_dk"):
    config = _lm_on(corpus, tiny_config, diagnostics_every_steps=2, diagnostics_batches=2,
                    test_fraction=0.1, num_train_steps=2, eval_every_steps=2,
                    checkpoint_every_steps=2)
    config.model.attention_scale = scale
    config.model.dropout_rate = 0.0
    config.profile_steps = "1,1" if scale == "none" else ""  # a trace of step 2
    final = _train(config, str(tmp_path / scale))
    traces = list((tmp_path / scale / loop.PROFILE_DIR).rglob("*.xplane.pb"))
    assert len(traces) == (1 if scale == "none" else 0) and all(t.stat().st_size for t in traces)
    records = writers.read_metrics(str(tmp_path / scale), "diagnostics")
    assert [r["step"] for r in records] == [0, 2]
    init[scale] = records[0]
    for r in writers.read_metrics(str(tmp_path / scale), "train"):  # one-step windows
      assert r["loss_step_max"] == pytest.approx(r["loss"], rel=1e-5)
      assert r["grad_norm_step_max"] == pytest.approx(r["grad_norm"], rel=1e-6)
    # Decoder-only: the parameter count of the summary is that of the restored params.
    saved = checkpoint.read_config(str(tmp_path / scale))["summary"]["params"]
    assert saved == model_summary.param_counts(
        models.parameter_groups(checkpoint.load_params(str(tmp_path / scale)).params))
    assert "encoder" not in saved and "output" not in saved  # tied
    test = writers.read_metrics(str(tmp_path / scale), "test")
    assert [r["step"] for r in test] == [2]
    assert test[0]["loss"] == pytest.approx(final.test["loss"])
    assert final.test["loss"] != pytest.approx(final.eval["loss"])  # another split
  none, paper = init["none"], init["inv_sqrt_dk"]
  d_k = 32 // 2
  for key in ("decoder/embed/ratio", "decoder/layer_0/self_attention/head_0/raw_var",
              "decoder/layer_0/self_attention/head_1/raw_var_within",
              "decoder/layer_0/self_attention/head_0/entropy_uniform"):
    assert none[key] == pytest.approx(paper[key], rel=1e-6), key
  for stat in ("logit_var", "logit_var_within"):
    key = f"decoder/layer_0/self_attention/head_0/{stat}"
    assert none[key] == pytest.approx(d_k * paper[key], rel=1e-5), key


def test_other_text_in_the_data_files_is_refused_on_resume_unless_allowed(tiny_config, corpus,
                                                                         tmp_path, caplog):
  """The saved data position of a run would index another corpus: the resume is refused,
  naming the file; a touch is no change; allow_data_change=True resumes the params on the data
  read from the start."""
  config = _lm_on(corpus, tiny_config, num_train_steps=2, eval_every_steps=2,
                  checkpoint_every_steps=2)
  workdir = str(tmp_path / "w")
  _train(config, workdir)
  book = corpus / "books" / "a.txt"
  os.utime(book, (1, 1))  # touched: the same text
  config.num_train_steps = 4
  with caplog.at_level(logging.INFO):
    assert _train(config, workdir).step == 4
  assert "Resumed from step 2" in caplog.text
  book.write_text("Other text altogether,\nfor another run.\n\n" * 30)
  config.num_train_steps = 6
  with pytest.raises(TrainingError, match=rf"another data stream \(data_files: {book} "
                     r"changed\); .*allow_data_change=True"):
    _train(config, workdir)
  with pytest.raises(InferenceError, match=rf"The data files of {workdir} hold other "
                     rf"text than it was trained on \(data_files: {book} changed\)"):
    evaluate.evaluate_workdir(workdir)  # its eval split held out of other text
  from transformer.research import analysis
  with pytest.raises(InferenceError, match=rf"The data files of {workdir} hold other "
                     rf"text than it was trained on \(data_files: {book} changed\)"):
    analysis.analyze(workdir, num_batches=1)  # its statistics: of that split too
  assert not any(os.path.exists(os.path.join(workdir, d)) for d in ("eval", "plots"))
  config.allow_data_change = True
  assert _train(config, workdir).step == 6
  identity = checkpoint.read_config(workdir)[checkpoint.IDENTITY_KEY]  # now the run's own
  assert identity["data_files"][str(book)] == corpus_files.content_fingerprint(str(book))


def test_log_lines_are_printed_above_the_progress_bar_not_on_its_row():
  from absl import flags
  from absl import logging as absl_logging
  from tqdm import tqdm
  handler = absl_logging.get_absl_handler().python_handler
  saved, out, parsed = handler.stream, io.StringIO(), flags.FLAGS.is_parsed()
  handler.setStream(out)
  flags.FLAGS.mark_as_parsed()  # as in a script: before it, absl writes to stderr directly
  try:
    bar = tqdm(total=3, file=out, desc="train", ascii=True)
    with loop._logs_above_the_bar():
      bar.update(1)
      handler.handle(logging.LogRecord("absl", logging.WARNING, __file__, 1, "a line of the log",
                                       None, None))  # what absl's handler gets in a script
      bar.update(1)
    bar.close()
  finally:
    handler.setStream(saved)
    if not parsed:
      flags.FLAGS.unparse_flags()
  text = out.getvalue()
  # The bar's row is cleared (a carriage return), the whole line is printed, the bar is drawn
  # again below it.
  assert re.search(r"\r *\rW\d{4} [^\r\n]*\] a line of the log\n\rtrain: ", text), repr(text)


def test_the_loop_fetches_from_the_device_only_at_logging_checkpoint_and_eval_steps(
    tiny_config, tmp_path, monkeypatch):
  """Inside a step's work (`_train_step`, `_log_and_save`) nothing is read from the device but
  by the window's summary and check (logging steps), the checkpoint's save and the
  evaluations: every read of an array's value and every block_until_ready is recorded where it
  is not allowed. (JAX's transfer guard does not act on a CPU; there every read of an array
  laid out over several devices, as the loop's are over the 8, goes through ArrayImpl._value:
  np.asarray, float, item, device_get.) So between logging steps the host never waits on the
  device. The train records also time the loop."""
  from jax._src import array as jax_array

  tiny_config.update(num_train_steps=12, log_every_steps=4, checkpoint_every_steps=6,
                     eval_every_steps=12, diagnostics_every_steps=0)
  state = {"depth": 0, "allowed": 0}
  reads, lifted = [], []
  value = jax_array.ArrayImpl._value

  def read(self):
    if state["depth"] and not state["allowed"]:
      reads.append("".join(traceback.format_stack(limit=6)))
    return value.fget(self)

  def wait(self, *args, **kwargs):
    if state["depth"] and not state["allowed"]:
      reads.append("".join(traceback.format_stack(limit=6)))
    return block(self, *args, **kwargs)

  block = jax_array.ArrayImpl.block_until_ready
  monkeypatch.setattr(jax_array.ArrayImpl, "_value", property(read))
  monkeypatch.setattr(jax_array.ArrayImpl, "block_until_ready", wait)

  def counted(fn, key):
    def call(*args, **kwargs):
      state[key] += 1
      if key == "allowed":
        lifted.append(fn.__name__)
      try:
        return fn(*args, **kwargs)
      finally:
        state[key] -= 1
    return call

  for owner, name in ((writers.MetricWindow, "summary"), (writers.MetricWindow, "check"),
                      (checkpoint.Checkpointer, "save"), (loop, "_heldout_scores")):
    monkeypatch.setattr(owner, name, counted(getattr(owner, name), "allowed"))
  for name in ("_train_step", "_log_and_save"):
    monkeypatch.setattr(loop, name, counted(getattr(loop, name), "depth"))
  state["depth"] = 1  # the recorder records a read where it is not allowed
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
  np.asarray(jax.device_put(np.ones(8), jax.sharding.NamedSharding(
      mesh, jax.sharding.PartitionSpec("data"))))
  assert len(reads) == 1
  state["depth"], reads[:] = 0, []
  _train(tiny_config, str(tmp_path / "w"))
  assert not reads, reads[0]
  assert lifted.count("summary") == 3 and lifted.count("save") == 2
  records = writers.read_metrics(str(tmp_path / "w"), "train")
  assert all(0 <= r["input_ms_per_step"] <= r["host_ms_per_step"] for r in records)
