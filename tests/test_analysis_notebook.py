"""docs/analysis.ipynb: executed headless (nbclient) as a user runs it, every cell without error
and every figure drawn: its install cell does nothing where the package is installed, its
training cell trains the main job's model, shortened, into a temporary workdir; the committed
copy holds the outputs of the run its header names."""

import json

import nbclient
import nbformat
import pytest

from conftest import MAIN_JOB_GROUP, REPO

NOTEBOOK = REPO / "docs" / "analysis.ipynb"
FIGURES = 6  # ratio by frequency, ratio over training, attention maps, entropy, Var(q.k), log Z
INSTALL, RUN = 1, 2  # the cells that install the package and name (or train) the run


def _images(nb) -> int:
  return sum("image/png" in out.get("data", {}) for cell in nb.cells if cell.cell_type == "code"
             for out in cell.get("outputs", []))


def _text(cell) -> str:
  return "".join(o.get("text", "") for o in cell.outputs)


@pytest.mark.slow
@pytest.mark.after_main_job
@pytest.mark.xdist_group(MAIN_JOB_GROUP)
def test_the_notebook_runs_top_to_bottom_training_its_own_run(tfds_dir, tmp_path, monkeypatch):
  monkeypatch.delenv("ANALYSIS_WORKDIR", raising=False)  # the kernel inherits the environment
  monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the training cell's mkdtemp makes the run
  monkeypatch.setenv("TFDS_DATA_DIR", tfds_dir)  # the session's datasets, not ~/tensorflow_datasets
  # One device (enough) at XLA's default level: the training cell's 200 steps are bound by
  # running, not compiling.
  monkeypatch.setenv("XLA_FLAGS", "")
  nb = nbformat.read(NOTEBOOK, as_version=4)
  for cell in nb.cells:  # run what is committed, not its saved outputs
    if cell.cell_type == "code":
      cell.outputs = []
  nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                          resources={"metadata": {"path": str(REPO / "docs")}}).execute()
  errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs
            if o.get("output_type") == "error"]
  assert not errors
  assert _text(nb.cells[INSTALL]) == ""  # installed here: nothing to do, nothing fetched
  run = _text(nb.cells[RUN])
  assert "trained to step 200." in run and f"run: {tmp_path}/transformer-analysis-" in run
  assert _images(nb) == FIGURES


def test_the_committed_copy_holds_the_outputs_of_the_run_it_names():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  assert _images(nb) == FIGURES
  assert "run: /tmp/transformer-default" in _text(nb.cells[RUN])
  header = nb.cells[0].source
  assert "--workdir=/tmp/transformer-default" in header and "jupyter execute" in header
  assert all(cell.get("execution_count") for cell in nb.cells if cell.cell_type == "code")
  json.dumps(nb)  # valid JSON throughout


def test_the_notebook_reads_the_checkpoints_record_and_installs_only_where_needed():
  """The experiment comes from the record stored with the checkpoint (as
  transformer/trained/loading.py reads it), never config.json; the install cell asks first."""
  nb = nbformat.read(NOTEBOOK, as_version=4)
  code = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")
  assert "read_config" not in code and "config.json\")" not in code
  assert 'loaded.record["experiment"]' in code
  install = nb.cells[INSTALL].source
  assert install.index('extras.missing("train", "analysis")') < install.index("pip")
