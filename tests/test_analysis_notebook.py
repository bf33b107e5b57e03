"""docs/analysis.ipynb: executed headless (nbclient) on a freshly trained tiny run, every cell
without error and every figure drawn; the committed copy holds the outputs of the run its first
cell names."""

import json

import nbclient
import nbformat
import pytest

from conftest import FAST_COMPILE, REPO
from transformer.training import experiment, loop

NOTEBOOK = REPO / "docs" / "analysis.ipynb"
FIGURES = 6  # ratio by frequency, ratio over training, attention maps, entropy, Var(q.k), log Z


def _images(nb) -> int:
  return sum("image/png" in out.get("data", {}) for cell in nb.cells if cell.cell_type == "code"
             for out in cell.get("outputs", []))


@pytest.mark.slow
def test_the_notebook_runs_top_to_bottom_on_a_tiny_run(tiny_config, tmp_path, monkeypatch):
  workdir = str(tmp_path / "run")
  tiny_config.diagnostics_every_steps = 2
  tiny_config.num_train_steps = 4
  loop.train_and_evaluate(experiment.parse(tiny_config), workdir)

  monkeypatch.setenv("ANALYSIS_WORKDIR", workdir)  # the kernel inherits the environment
  monkeypatch.setenv("XLA_FLAGS", FAST_COMPILE)  # one device (enough) and the fast compile
  nb = nbformat.read(NOTEBOOK, as_version=4)
  for cell in nb.cells:  # run what is committed, not its saved outputs
    if cell.cell_type == "code":
      cell.outputs = []
  nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                          resources={"metadata": {"path": str(tmp_path)}}).execute()
  assert _images(nb) == FIGURES
  first = "".join(o.get("text", "") for o in nb.cells[1].outputs)
  assert f"run: {workdir}" in first
  errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs
            if o.get("output_type") == "error"]
  assert not errors


def test_the_committed_copy_holds_the_outputs_of_the_run_it_names():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  assert _images(nb) == FIGURES
  first = "".join(o.get("text", "") for o in nb.cells[1].outputs)
  assert "run: /tmp/transformer-default" in first
  header = nb.cells[0].source
  assert "--workdir=/tmp/transformer-default" in header and "jupyter execute" in header
  assert all(cell.get("execution_count") for cell in nb.cells if cell.cell_type == "code")
  json.dumps(nb)  # valid JSON throughout
