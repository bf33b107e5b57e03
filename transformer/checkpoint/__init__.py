"""Checkpoints: `Checkpointer` for training, `load_params` for analysis, `config.json` I/O.

  manager.py      Checkpointer (orbax CheckpointManager: state, data iterator, config)
  params.py       load_params: host numpy params + ModelConfig, any device count
  step_dirs.py    finished steps and the newest-readable-step rule every reader uses
  checksums.py    per-leaf checksums recorded with each step, verified on restore
  config_file.py  WORKDIR/config.json
"""

from transformer.checkpoint.config_file import (CONFIG_FILE, IDENTITY_KEY, read_config, to_json,
                                                write_config)
from transformer.checkpoint.manager import Checkpointer
from transformer.checkpoint.params import LoadedParams, load_params, stored_config
from transformer.checkpoint.step_dirs import (CHECKPOINT_DIR, IncompatibleCheckpointError,
                                              checkpoint_dir, finished_steps, newest_readable)

__all__ = ["CONFIG_FILE", "IDENTITY_KEY", "CHECKPOINT_DIR", "Checkpointer",
           "IncompatibleCheckpointError", "LoadedParams", "checkpoint_dir", "finished_steps",
           "load_params", "newest_readable", "read_config", "stored_config", "to_json",
           "write_config"]
