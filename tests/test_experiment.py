"""Experiment configs: every ModelConfig field overridable, recipes resolved, the configs load."""

import json
import math
import subprocess
import sys

import jax
import pytest

from conftest import REPO
from transformer.errors import ConfigError
from transformer.training import experiment, run
from transformer.training.optimizer_settings import paper_peak_learning_rate


def test_every_model_field_has_an_override_slot():
  import dataclasses
  from transformer.config import ModelConfig
  model = experiment.model_fields()
  assert set(model) == {"recipe"} | {f.name for f in dataclasses.fields(ModelConfig)}


def test_overrides_and_scales_parse():
  config = experiment.base_config()
  config.model.recipe = "flax_wmt"
  config.model.embed_scale = "2.5"  # as --config.model.embed_scale=2.5 gives it
  config.model.attention_scale = "inv_dk"
  config.model.d_model = 64
  config.model.num_heads = 4
  cfg = experiment.model_config(config, vocab_size=100)
  assert cfg.embed_scale == 2.5 and cfg.attention_scale == "inv_dk"
  assert cfg.embed_init_std == 1.0 and cfg.logits_scale == "inv_sqrt_d"  # from the recipe
  assert cfg.vocab_size == 100 and cfg.max_len == config.max_len  # from the data


def test_an_experiment_is_one_frozen_checked_value():
  """parse checks a config once and freezes it with its typed ModelConfig; a run made from the
  Experiment checks nothing again; the data's vocabulary is held against the planned one."""
  config = experiment.base_config()
  config.model.embed_scale = "2.5"
  exp = experiment.parse(config)
  assert exp.model.embed_scale == 2.5 and exp.model.vocab_size == 35  # 32 symbols + 3 ids
  assert exp.vocab_from == "the synthetic 'reverse' task" and experiment.parse(exp) is exp
  with pytest.raises(Exception, match="frozen|immutable|cannot"):
    exp.config.seed = 3
  with pytest.raises(Exception, match="frozen|cannot assign"):
    exp.model = None
  experiment.check_data_vocab(exp, exp.model.vocab_size)
  with pytest.raises(experiment.TrainingError, match="The data gave a vocabulary of 7 where "
                     "the synthetic 'reverse' task gives 35"):
    experiment.check_data_vocab(exp, 7)
  config.model.vocab_size = 500  # explicit: room to spare is allowed, too little is not
  exp = experiment.parse(config)
  experiment.check_data_vocab(exp, 400)
  with pytest.raises(ConfigError, match="model.vocab_size=500 is smaller than the dataset's "
                     r"vocabulary \(600\)"):
    experiment.check_data_vocab(exp, 600)
  with config.unlocked():
    config.extra = [{"a": 1}]  # FrozenConfigDict holds no dict inside a list
  with pytest.raises(ConfigError, match="^The experiment config cannot be frozen .*sub-config"):
    experiment.parse(config)


def test_bad_values():
  config = experiment.base_config()
  config.model_type = "bert"
  with pytest.raises(ValueError, match="model_type"):
    experiment.parse(config)
  config = experiment.base_config()
  config.model.vocab_size = 5
  with pytest.raises(ValueError, match="smaller than the dataset"):
    experiment.model_config(config, 10)
  with pytest.raises(FileNotFoundError, match="does not exist"):
    experiment.load_config("configs/nope.py")


@pytest.mark.parametrize("name", ["default", "base", "big", "lm", "lm.py:paper"])
def test_configs_build_their_models(name):
  config = experiment.load_config(str(REPO / "configs" / (name if ".py" in name else f"{name}.py")))
  cfg = experiment.model_config(config, vocab_size=35)
  model = run.build_model(config.model_type, cfg)
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0),
                          *([jax.ShapeDtypeStruct((1, 8), "int32")] * len(model.batch_keys)))
  assert shapes["params"]
  if name in ("base", "big"):
    d = cfg.d_model
    assert (config.adam_b1, config.adam_b2, config.adam_eps) == (0.9, 0.98, 1e-9)
    assert config.warmup_steps == 4000 and config.label_smoothing == 0.1
    assert config.learning_rate == pytest.approx(paper_peak_learning_rate(d, 4000))
    assert math.isclose(config.learning_rate, d ** -0.5 * 4000 ** -0.5)
  if name == "base":
    assert (cfg.d_model, cfg.num_heads, cfg.d_ff, cfg.num_encoder_layers, cfg.dropout_rate) == (
        512, 8, 2048, 6, 0.1)
  if name == "big":
    assert (cfg.d_model, cfg.num_heads, cfg.d_ff, cfg.dropout_rate) == (1024, 16, 4096, 0.3)


@pytest.mark.parametrize("field, value, message", [
    ("log_every_steps", 0, "log_every_steps=0 must be an integer >= 1."),
    ("eval_every_steps", 0, "eval_every_steps=0 must be an integer >= 1."),
    ("grad_accum_steps", 0, "grad_accum_steps=0 must be an integer >= 1"),
    ("learning_rate", -1.0, "learning_rate must be a finite number > 0, got -1.0."),
    ("tokenizer.train_examples", 0, "tokenizer.train_examples=0 must be an integer >= 1."),
    ("bleu_every_steps", -5, "bleu_every_steps=-5 must be an integer >= 0 (0 = off)."),
    ("model.embed_scale", "bogus", "ModelConfig.embed_scale='bogus' is not one of"),
    ("model.max_len", 8, "Rows of max_len=17 tokens exceed the model's position table "
                         "(model.max_len=8)"),
    ("profile_steps", "10", "profile_steps='10' must be 'START,COUNT'"),
    ("profile_steps", "a,b", "profile_steps='a,b' must be 'START,COUNT'"),
    ("profile_steps", "5,0", "profile_steps='5,0' must be 'START,COUNT'"),
    ("test_fraction", 1.0, "test_fraction=1.0 must be in [0, 1)"),
    ("diagnostics_batches", 0, "diagnostics_batches=0 must be an integer >= 1."),
    ("fsdp", 0, "fsdp=0 must be -1 (every device) or an integer >= 1"),
    ("model.dtype", "float16", "model.dtype='float16' needs loss scaling"),
    ("seed", -1, "seed=-1 must be an integer in [0, 2**32)"),  # not grain's traceback
    ("split_seed", -1, "split_seed=-1 must be None (the run's seed) or an integer"),
    ("model.vocab_size", 1, "model.vocab_size=1 leaves no room for tokens beside the 3 "
                            "reserved ids"),
    ("keep_checkpoints", 0, "keep_checkpoints=0 would keep no usable checkpoint; pass an "
                            "integer >= 1 (the newest N are kept), or None to keep every one."),
])
def test_validate_finds_each_mistake_before_anything_runs(field, value, message):
  config = experiment.load_config(str(REPO / "configs" / "default.py"))
  node, _, name = field.rpartition(".")
  (config[node] if node else config)[name] = value
  with pytest.raises(ConfigError) as e:
    experiment.validate(config)
  assert message in str(e.value)


@pytest.mark.parametrize("name", ["default", "base", "big", "lm", "lm.py:paper", "lm_tiny",
                                  "translate"])
def test_every_shipped_config_validates(name):
  experiment.validate(experiment.load_config(
      str(REPO / "configs" / (name if ".py" in name else f"{name}.py"))))


def test_lm_defaults_are_the_findings_and_the_paper_is_one_flag_away():
  from absl import flags
  from ml_collections import config_flags
  from transformer.config import ModelConfig
  fv = flags.FlagValues()
  holder = config_flags.DEFINE_config_file("config", None, "", flag_values=fv)
  fv(["train.py", f"--config={REPO / 'configs' / 'lm.py'}:paper"])  # as scripts/train.py parses it
  paper, findings = holder.value, experiment.load_config(str(REPO / "configs" / "lm.py"))
  assert paper.to_dict() == experiment.load_config(str(REPO / "configs" / "lm.py:paper")).to_dict()
  paper_model = experiment.model_config(paper, vocab_size=8000)
  sizes = dict(vocab_size=8000, max_len=128, d_model=128, num_heads=4, d_ff=512,
               num_encoder_layers=0, num_decoder_layers=4, dropout_rate=0.1)
  assert paper_model == ModelConfig.from_recipe("vaswani2017", **sizes)  # the recipe untouched
  assert (paper.schedule, paper.learning_rate) == ("rsqrt", paper_peak_learning_rate(128, 200))
  # The findings' recipe changes exactly the knobs the experiments measured (and the schedule).
  model = experiment.model_config(findings, vocab_size=8000)
  changed = {k for k in paper_model.__dataclass_fields__
             if getattr(model, k) != getattr(paper_model, k)}
  assert changed == {"norm_position", "logits_via_embedding", "attention_scale"}
  assert (model.norm_position, model.logits_via_embedding, model.attention_scale,
          model.embed_scale, model.embed_init_std) == (
      "pre", False, "inv_dk", "sqrt_d", "inv_sqrt_d")
  paper_fields, findings_fields = paper.to_dict(), findings.to_dict()
  assert ({k for k in findings_fields if findings_fields[k] != paper_fields[k]}
          == {"model", "schedule", "learning_rate"})
  with pytest.raises(ConfigError, match="configs/lm.py:bogus is not a recipe"):
    experiment.load_config(str(REPO / "configs" / "lm.py:bogus"))


def test_a_mistake_in_the_model_ends_the_run_before_the_workdir_is_written(tmp_path):
  from transformer.training import loop
  config = experiment.load_config(str(REPO / "configs" / "lm.py"))
  config.update(dataset="text_files", data_files=str(REPO / "README.md"))
  config.model.embed_scale = "bogus"
  with pytest.raises(ConfigError, match="embed_scale='bogus'"):
    loop.train_and_evaluate(experiment.parse(config), str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()  # no tokenizer trained and saved there first


def test_a_config_is_read_and_checked_without_jax():
  """Loading a config file and validating it (and train.py's flags, --helpfull) import no jax,
  flax, optax or grain: every mistake a config alone shows is said before jax starts."""
  heavy = ("jax", "flax", "optax", "grain", "orbax")
  check = ("import sys; from transformer.training import experiment; "
           "experiment.parse(experiment.load_config('configs/default.py')); "
           f"print([m for m in {heavy!r} if m in sys.modules])")
  out = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
  assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
  helped = subprocess.run([sys.executable, "-X", "importtime", "scripts/train.py", "--helpfull"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
  imported = {line.split("|")[-1].strip().split(".")[0] for line in helped.stderr.splitlines()
              if line.startswith("import time:")}
  assert "--config" in helped.stdout and "absl" in imported, helped.stderr[-2000:]
  assert not imported & set(heavy), sorted(imported & set(heavy))


# Runs scripts/train.py as the command line does, counting the builds of the experiment's
# ModelConfig and recording the files whose code reads `embed_scale` from a ModelConfig.
_TRACE = r"""
import json, os, runpy, sys
from transformer import config as config_module
from transformer.training import experiment
out, argv = sys.argv[1], sys.argv[2:]
built, reads = [], []
plain_read, plain_build = config_module.ModelConfig.__getattribute__, experiment.model_config

def read(self, name):
  if name == "embed_scale":
    reads.append(os.path.relpath(sys._getframe(1).f_code.co_filename))
  return plain_read(self, name)

def build(*args, **kwargs):
  built.append(1)
  return plain_build(*args, **kwargs)

config_module.ModelConfig.__getattribute__ = read
experiment.model_config = build
sys.argv = ["scripts/train.py", *argv]
try:
  runpy.run_path("scripts/train.py", run_name="__main__")
finally:
  with open(out, "w") as f:
    json.dump({"built": len(built), "reads": reads}, f)
"""


def test_a_scale_knob_is_parsed_once_and_read_only_where_it_is_checked_and_acts(tfds_dir,
                                                                               tmp_path):
  """`--config.model.embed_scale=2.5` through scripts/train.py: the experiment's ModelConfig is
  built once (experiment.parse: the text parsed there), and in the whole run only config.py
  (its check) and embeddings.py (where it acts) read the knob, in that order; the number the
  forward pass uses is made in embeddings.py, which calls nothing of config.py for it.
  (The order of reads alone held before too; the one build and the last check did not.)"""
  import inspect

  from transformer import attention, embeddings
  from transformer import config as config_module

  small = {"model.d_model": 32, "model.num_heads": 2, "model.d_ff": 64,
           "model.num_encoder_layers": 1, "model.num_decoder_layers": 1,
           "synthetic.vocab_size": 8, "synthetic.max_len": 8, "synthetic.num_train": 512,
           "synthetic.num_eval": 40, "max_len": 9, "batch_size": 16, "num_train_steps": 2,
           "eval_every_steps": 2, "checkpoint_every_steps": 2, "tfds_data_dir": tfds_dir,
           "model.embed_scale": 2.5}
  trace = tmp_path / "trace.json"
  done = subprocess.run(
      [sys.executable, "-c", _TRACE, str(trace), "--config=configs/default.py",
       f"--workdir={tmp_path / 'w'}", *(f"--config.{k}={v}" for k, v in small.items())],
      cwd=REPO, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  got = json.loads(trace.read_text())
  assert got["built"] == 1
  files = [f for f in got["reads"] if f.startswith(("transformer/", "scripts/"))]
  order = [f for i, f in enumerate(files) if i == 0 or f != files[i - 1]]
  assert order == ["transformer/config.py", "transformer/embeddings.py"], got["reads"]
  record = json.loads((tmp_path / "w" / "config.json").read_text())
  assert record["model"]["embed_scale"] == 2.5
  # Everything config.py defines (functions, classes, tables such as MODES) and the module.
  defined = {id(v) for k, v in vars(config_module).items() if not k.startswith("__")
             and not inspect.ismodule(v)
             and getattr(v, "__module__", "transformer.config") == "transformer.config"}
  defined.add(id(config_module))
  for value in (embeddings.embed_scale_value, embeddings._width_scale,
                attention.attention_scale_value):
    from_config = [n for n in value.__code__.co_names if id(value.__globals__.get(n)) in defined]
    assert not from_config, (value.__name__, from_config)
