"""A finished run's workdir, read offline: the loss, perplexity and token accuracy of its eval
split and the BLEU of its decoding (`evaluate_workdir`, scripts/evaluate.py), lines of a file
decoded (`decode_file`, scripts/decode.py) or scored against references (`score_file`).

Each takes the run's newest readable checkpoint (`loading.load`) and the same eval step and
decoding as training's held-out scores (`transformer.training.heldout`), so its eval loss is
the one training logged.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

import jax
import numpy as np

from transformer import storage
from transformer.data import pipeline, settings
from transformer.errors import InferenceError, UserError
from transformer.inference import bleu, lines
from transformer.inference.decode_config import DecodeConfig
from transformer.trained import loading
from transformer.training import experiment, steps, workdir_checks, writers
from transformer.training.heldout import decode_eval_split

EVAL_DIR = "eval"  # WORKDIR/eval/<step>/: results.json, hypotheses.txt, references.txt


def check_run_data(loaded: loading.Loaded, exp: Optional[experiment.Experiment] = None) -> None:
  """One line where a loaded run's data cannot be its own: its data files hold other text
  than it was trained on (its held-out split would be other text), or a data path is on
  gs:// without gcsfs. Before any work or any file is written."""
  experiment.check_paths_reachable((exp or loaded.experiment).config, prefix="the run's ")
  changed = workdir_checks.changed_data_files(loaded.identity, loaded.experiment.data,
                                              loaded.workdir)
  if changed:
    raise InferenceError(
        f"The data files of {loaded.workdir} hold other text than it was trained on "
        f"({', '.join(changed)}), so its held-out split would be other text; restore those "
        "files to read it.")


def run_datasets(loaded: loading.Loaded,
                 exp: Optional[experiment.Experiment] = None) -> pipeline.Datasets:
  """The datasets of a loaded run (`exp`: its recorded experiment, or one with eval-time
  changes such as the batch size, `experiment.changed`), after `check_run_data`. Every reader
  of a run's data (evaluate, analyze, the sweep runner) takes them here."""
  check_run_data(loaded, exp)
  try:
    return pipeline.get_datasets((exp or loaded.experiment).data, workdir=loaded.workdir)
  except UserError as e:
    raise InferenceError(
        f"The data of {loaded.workdir} cannot be read ({' '.join(str(e).split())}).") from None


def evaluate_workdir(workdir: str, *, step: Optional[int] = None,
                     config: DecodeConfig = DecodeConfig(), batch_size: Optional[int] = None,
                     tfds_data_dir: Optional[str] = None, decode: bool = True) -> dict[str, Any]:
  """Loss, perplexity and token accuracy on the eval split; for a seq2seq model also BLEU and
  exact-sequence accuracy of `config`'s decoding. Writes WORKDIR/eval/<step>/results.json,
  and hypotheses.txt / references.txt / sources.txt (one example a line) that
  `sacrebleu references.txt -i hypotheses.txt` scores as `results['bleu']`. Without decoding
  (decode=False, or an LM), the BLEU an earlier call wrote for this step is kept."""
  storage.check_reachable(tfds_data_dir, "--tfds_data_dir")
  settings.check_tfds_data_dir(tfds_data_dir, "--tfds_data_dir")
  loaded = loading.load(workdir, step)
  check_run_data(loaded)  # before the results directory is made
  out_dir = storage.join(workdir, EVAL_DIR, str(loaded.step))
  # Before the evaluation, not after it: a read-only workdir is said at once.
  workdir_checks.check_writable(out_dir, "evaluation writes its results there: make the workdir "
                                "writable, or evaluate a writable copy of it",
                                what="The results directory")
  devices = jax.device_count()
  exp = experiment.changed(  # a batch that splits evenly over the devices
      loaded.experiment, tfds_data_dir=tfds_data_dir or loaded.data.tfds_data_dir,
      batch_size=-(-(batch_size or loaded.data.batch_size) // devices) * devices)
  datasets = run_datasets(loaded, exp)
  r = loaded.as_run(exp)
  results: dict[str, Any] = {"workdir": workdir, "step": loaded.step, "split": "eval"}
  results.update(steps.split_metrics(r.steps.eval, r.state.params, datasets.eval_batches(), r.mesh))
  decoded = decode_eval_split(r.model, r.state.params, datasets, r.mesh, config) if decode \
      else None
  if decoded is not None:
    results.update(decoded.metrics())
    results["bleu_signature"] = decoded.bleu.signature
    results["decode"] = dataclasses.asdict(config)
    for name, texts in (("hypotheses", decoded.hypotheses), ("references", decoded.references),
                        ("sources", decoded.sources)):
      lines.write_lines(storage.join(out_dir, f"{name}.txt"), texts)
  path = storage.join(out_dir, "results.json")
  if decoded is None and storage.as_path(path).exists():
    # This checkpoint's decoding, written earlier beside hypotheses.txt, is still its own:
    # keep it (and the files) rather than a results.json that no longer matches them.
    results = {**json.loads(storage.as_path(path).read_text()), **results}
  # JSON has no NaN: a non-finite figure (a checkpoint of a run that diverged) is null, in
  # the file and in what is returned (printed).
  results = writers.finite_json(results)
  storage.write_atomically(path, json.dumps(results, indent=2, sort_keys=True,
                                            allow_nan=False) + "\n")
  results["results_file"] = path
  return results


def decode_file(workdir: str, input_path: str = "-", output_path: str = "-", *,
                config: DecodeConfig = DecodeConfig(), step: Optional[int] = None,
                tokenizer: Optional[str] = None, batch_size: int = 64,
                max_len: Optional[int] = None, prompt_eos: Optional[bool] = None,
                seed: int = 0) -> dict[str, Any]:
  """Decodes each line of `input_path` with the workdir's checkpoint into `output_path`;
  returns what it did: {'workdir', 'step' (the checkpoint loaded), 'lines', 'output'}."""
  storage.check_all_reachable({"--input": input_path, "--output": output_path})
  lines.check_writable(output_path, {"--input": input_path})
  texts = lines.read_lines(input_path)
  loaded = loading.load(workdir, step, tokenizer)
  outputs = lines.decode_lines(loaded, texts, config, batch_size=batch_size, max_len=max_len,
                               prompt_eos=prompt_eos, seed=seed)
  lines.write_lines(output_path, outputs)
  return {"workdir": workdir, "step": loaded.step, "lines": len(texts), "output": output_path}


def score_file(workdir: str, input_path: str, reference_path: str,
               output_path: Optional[str] = None, *, config: DecodeConfig = DecodeConfig(),
               step: Optional[int] = None, batch_size: int = 64, seed: int = 0) -> dict[str, Any]:
  """Decodes each line of `input_path` (a named test set's sources) and scores the outputs
  against `reference_path` (one reference a line) with sacrebleu's corpus BLEU, the figure
  `sacrebleu REFERENCE -i HYPOTHESES` prints; writes the hypotheses to `output_path` if given.
  Returns {'workdir', 'step', 'num_examples', 'bleu', 'bleu_signature', 'exact_match', ...}."""
  storage.check_all_reachable({"--input": input_path, "--reference": reference_path,
                               "--output": output_path})
  if output_path is not None:
    lines.check_writable(output_path, {"--input": input_path, "--reference": reference_path})
  sources = lines.read_lines(input_path)
  references = lines.read_lines(reference_path, "--reference")
  if not sources:
    raise InferenceError(f"--input={input_path} holds no line: there is nothing to score; "
                         "pass a test set of at least one line.")
  if len(sources) != len(references):
    raise InferenceError(
        f"--input={input_path} has {len(sources)} lines but --reference={reference_path} has "
        f"{len(references)}; pass one reference line per input line.")
  loaded = loading.load(workdir, step)
  hypotheses = lines.decode_lines(loaded, sources, config, batch_size=batch_size, seed=seed)
  if output_path is not None:
    lines.write_lines(output_path, hypotheses)
  score = bleu.corpus_bleu(hypotheses, references)
  return {"workdir": workdir, "step": loaded.step, "input": input_path,
          "reference": reference_path, "hypotheses_file": output_path,
          "num_examples": len(sources), "bleu": score.score, "bleu_signature": score.signature,
          "exact_match": float(np.mean([h == r for h, r in zip(hypotheses, references)]))
          if sources else 0.0}
