"""Shared test set-up: 8 forced CPU host devices, so data-parallel code runs as on a pod slice.

XLA_FLAGS must be set before jax is first imported, which is why it is set here, at collection.
"""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pathlib  # noqa: E402

import jax  # noqa: E402  (after XLA_FLAGS)
import pytest  # noqa: E402


REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def devices():
  assert jax.device_count() == 8, "tests expect 8 forced CPU devices (see conftest.py)"
  return jax.devices()


def tiny_experiment(tfds_data_dir: str):
  """A seconds-long experiment: the default config, shrunk (d_model 32, one layer each side)."""
  from transformer.training.experiment import load_config, model_fields

  config = load_config(str(REPO / "configs" / "default.py"))
  config.model = model_fields("vaswani2017", d_model=32, num_heads=2, d_ff=64,
                              num_encoder_layers=1, num_decoder_layers=1, dropout_rate=0.1)
  config.synthetic.update(task="reverse", vocab_size=8, min_len=2, max_len=8, num_train=512,
                          num_eval=40)
  config.tfds_data_dir = tfds_data_dir
  config.max_len = 9
  config.batch_size = 16
  config.num_train_steps = 10
  config.warmup_steps = 5
  config.log_every_steps = 1
  config.eval_every_steps = 5
  config.checkpoint_every_steps = 5
  return config


@pytest.fixture(scope="session")
def tfds_dir(tmp_path_factory):
  """One TFDS data dir for the session, so each synthetic dataset is generated once."""
  return str(tmp_path_factory.mktemp("tfds"))


@pytest.fixture
def tiny_config(tfds_dir):
  return tiny_experiment(tfds_dir)
