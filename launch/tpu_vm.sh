#!/usr/bin/env bash
# Train on a Cloud TPU VM or a multi-host TPU slice: create it, put this repository on every
# worker, install, run scripts/train.py on all workers at once, delete it.
#
#   TPU_NAME=my-tpu ZONE=europe-west4-b ACCELERATOR_TYPE=v5litepod-16 bash launch/tpu_vm.sh create
#   TPU_NAME=my-tpu bash launch/tpu_vm.sh setup
#   TPU_NAME=my-tpu WORKDIR=gs://my-bucket/runs/base bash launch/tpu_vm.sh train [--config.FIELD=VALUE ...]
#   TPU_NAME=my-tpu bash launch/tpu_vm.sh delete
#   DRY_RUN=1 WORKERS=2 TPU_NAME=my-tpu WORKDIR=gs://b/r bash launch/tpu_vm.sh train   # print only
#
# On a slice every worker runs the same command; train.py, given no --coordinator_address,
# calls jax.distributed.initialize() with no arguments, which on Cloud TPU finds the other
# workers by itself. Every worker writes checkpoints and reads the workdir, so on a slice of
# more than one host the workdir must be shared: use a GCS bucket (gs://...) in the TPU's
# region that the TPU VM's service account can write.
#
# `--worker=all` makes gcloud ssh into every worker; load your key into an agent first:
#   ssh-add ~/.ssh/google_compute_engine
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bash launch/tpu_vm.sh {create|setup|train|stop|delete} [--config.FIELD=VALUE ...]

  create   gcloud compute tpus tpu-vm create TPU_NAME (ACCELERATOR_TYPE, RUNTIME_VERSION)
  setup    copy this checkout (or git clone REPO_URL) to every worker; check its Python (>= 3.11;
           an older one gets a Python 3.11 from uv in REMOTE_DIR/.venv) and pip install -e '.[train,tpu]'
  train    run scripts/train.py on every worker at once; extra arguments go to train.py
  stop     stop a DETACH=1 training run on every worker
  delete   gcloud compute tpus tpu-vm delete TPU_NAME

Environment:
  TPU_NAME          (required) name of the TPU VM / slice
  ZONE              zone                              (default: europe-west4-b)
  PROJECT           project                           (default: gcloud's core/project)
  ACCELERATOR_TYPE  e.g. v4-32, v5litepod-16, v5p-32, v6e-16 (default: v5litepod-16)
  RUNTIME_VERSION   TPU software version  (default: from ACCELERATOR_TYPE: v6e -> v2-alpha-tpuv6e,
                    v5p -> v2-alpha-tpuv5, v5litepod/v5e -> v2-alpha-tpuv5-lite, else tpu-ubuntu2204-base)
  SPOT              1 = create a Spot TPU             (default: 0)
  REPO_URL          git URL to clone on the workers instead of copying this checkout (default: copy)
  REPO_REF          branch or tag of REPO_URL         (default: the remote's default branch)
  REMOTE_DIR        checkout directory on the workers, relative to home (default: transformer)
  JAX_SPEC          extra pip requirement installed with '.[train,tpu]', e.g. jax[tpu]==0.10.2 (default: none)
  PYTHON            interpreter on the workers, Python >= 3.11 (default: python3)
  CONFIG            experiment config                 (default: configs/default.py)
  WORKDIR           (required for train) run directory; gs://BUCKET/PATH on a multi-host slice
  DETACH            1 = train under nohup, log to ~/train.log on each worker, return at once (default: 0)
  DRY_RUN           1 = run nothing: print each gcloud command, then the command every worker would run
  WORKERS           workers of the slice, for DRY_RUN's listing (default: 1)
EOF
}

die() { echo "tpu_vm.sh: $*" >&2; exit 2; }

[ $# -ge 1 ] || { usage >&2; exit 2; }
command_name="$1"
shift
case "$command_name" in
  -h|--help|help) usage; exit 0 ;;
  create|setup|train|stop|delete) ;;
  *) usage >&2; die "unknown command '$command_name'" ;;
esac

[ -n "${TPU_NAME:-}" ] || { usage >&2; die "TPU_NAME is not set"; }
ZONE="${ZONE:-europe-west4-b}"
PROJECT="${PROJECT:-}"
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v5litepod-16}"
SPOT="${SPOT:-0}"
REPO_URL="${REPO_URL:-}"
REPO_REF="${REPO_REF:-}"
REMOTE_DIR="${REMOTE_DIR:-transformer}"
JAX_SPEC="${JAX_SPEC:-}"
PYTHON="${PYTHON:-python3}"
MIN_PYTHON=3.11  # setup.py's python_requires (tests/test_launch.py)
MIN_PYTHON_TUPLE="${MIN_PYTHON/./, }"
CONFIG="${CONFIG:-configs/default.py}"
WORKDIR="${WORKDIR:-}"
DETACH="${DETACH:-0}"
GCLOUD="${GCLOUD:-gcloud}"
DRY_RUN="${DRY_RUN:-0}"
WORKERS="${WORKERS:-1}"
# A switch is 0 or 1: DRY_RUN=yes must not run the real gcloud.
for switch in SPOT DETACH DRY_RUN; do
  case "${!switch}" in 0|1) ;; *) die "$switch=${!switch} must be 0 or 1" ;; esac
done
case "$WORKERS" in
  ''|0|*[!0-9]*) die "WORKERS=$WORKERS must be a positive integer (the slice's workers)" ;;
esac
if [ -z "${RUNTIME_VERSION:-}" ]; then
  case "$ACCELERATOR_TYPE" in
    v6e-*) RUNTIME_VERSION=v2-alpha-tpuv6e ;;
    v5p-*) RUNTIME_VERSION=v2-alpha-tpuv5 ;;
    v5litepod-*|v5e-*) RUNTIME_VERSION=v2-alpha-tpuv5-lite ;;
    *) RUNTIME_VERSION=tpu-ubuntu2204-base ;;
  esac
fi

location=(--zone="$ZONE")
if [ -n "$PROJECT" ]; then location+=(--project="$PROJECT"); fi

# Quote words for the workers' bash.
quote() {
  local quoted
  quoted="$(printf '%q ' "$@")"
  printf '%s' "${quoted% }"
}

# REMOTE_DIR as one word of the workers' bash, whatever it holds (spaces, ';'): relative to
# $HOME, which the worker's shell expands.
case "$REMOTE_DIR" in
  /*) remote_dir="$(quote "$REMOTE_DIR")" ;;
  '~') remote_dir="\$HOME" ;;
  '~/'*) remote_dir="\$HOME/$(quote "${REMOTE_DIR#'~/'}")" ;;
  *) remote_dir="\$HOME/$(quote "$REMOTE_DIR")" ;;
esac

# Run gcloud, or with DRY_RUN=1 print the command line instead.
run_gcloud() {
  if [ "$DRY_RUN" = 1 ]; then
    echo "$(quote "$GCLOUD" "$@")"
  else
    "$GCLOUD" "$@"
  fi
}

# Run a shell command on every worker of the slice at once (with DRY_RUN=1, also print what
# each worker runs: the same command on all).
on_all_workers() {
  run_gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${location[@]}" --worker=all --command="$1"
  if [ "$DRY_RUN" = 1 ]; then
    for ((worker = 0; worker < WORKERS; worker++)); do echo "worker $worker: $1"; done
  fi
}

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

case "$command_name" in
  create)
    extra=()
    if [ "$SPOT" = 1 ]; then extra+=(--spot); fi
    run_gcloud compute tpus tpu-vm create "$TPU_NAME" "${location[@]}" \
      --accelerator-type="$ACCELERATOR_TYPE" --version="$RUNTIME_VERSION" ${extra[@]+"${extra[@]}"}
    ;;

  setup)
    if [ -n "$REPO_URL" ]; then
      branch=()
      if [ -n "$REPO_REF" ]; then branch=(--branch "$REPO_REF"); fi
      fetch="if [ -d $remote_dir/.git ]; then git -C $remote_dir pull --ff-only; \
else git clone $(quote ${branch[@]+"${branch[@]}"} "$REPO_URL") $remote_dir; fi"
    else
      # The working tree as it is (tracked and untracked files, not the ignored ones).
      command -v git >/dev/null 2>&1 || die "git is needed to pack this checkout; or set REPO_URL"
      tarball="$(mktemp "${TMPDIR:-/tmp}/transformer-src.XXXXXX")"
      trap 'rm -f "$tarball"' EXIT
      (cd "$repo_root" && git ls-files -z --cached --others --exclude-standard \
        | while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done \
        | tar --null -T - -czf "$tarball")
      run_gcloud compute tpus tpu-vm scp "$tarball" "$TPU_NAME:transformer-src.tar.gz" \
        "${location[@]}" --worker=all
      fetch="mkdir -p $remote_dir && tar -xzf \$HOME/transformer-src.tar.gz -C $remote_dir \
&& rm \$HOME/transformer-src.tar.gz"
    fi
    # An older Python would make pip pick an older, untested stack. The TPU images of Ubuntu
    # 22.04 carry 3.10, so there a Python $MIN_PYTHON is installed with uv (a standalone build,
    # no sudo) into $REMOTE_DIR/.venv, which train then uses; if that fails, one line says so.
    py="$(quote "$PYTHON")"
    venv="$remote_dir/.venv"
    ensure_python="if $py -c 'import sys; sys.exit(sys.version_info < ($MIN_PYTHON_TUPLE))'; then PY=$py; \
else echo \"tpu_vm.sh: worker \$(hostname): \$($py -V 2>&1) is older than Python $MIN_PYTHON; installing \
Python $MIN_PYTHON with uv into $venv\" >&2; \
if $py -m pip install --user --quiet uv && $py -m uv venv --seed --python $MIN_PYTHON $venv; then PY=$venv/bin/python; \
else echo \"tpu_vm.sh: worker \$(hostname): \$($py -V 2>&1) is older than Python $MIN_PYTHON, which the \
package needs, and installing one with uv failed; install python$MIN_PYTHON there and set \
PYTHON=python$MIN_PYTHON, or create the TPU with a RUNTIME_VERSION whose Python is $MIN_PYTHON or newer\" >&2; \
exit 1; fi; fi"
    # One pip call, so the resolver picks a jax[tpu] within the package's bounds.
    on_all_workers "set -e; $ensure_python; $fetch; cd $remote_dir; \$PY -m pip install --upgrade pip; \
\$PY -m pip install -e $(quote ".[train,tpu]" ${JAX_SPEC:+"$JAX_SPEC"}) \
-f https://storage.googleapis.com/jax-releases/libtpu_releases.html; \
\$PY -c 'import jax; jax.distributed.initialize(); \
print(\"process\", jax.process_index(), \"of\", jax.process_count(), \"devices\", jax.device_count())'"
    ;;

  train)
    [ -n "$WORKDIR" ] || { usage >&2; die "WORKDIR is not set (for a multi-host slice: gs://BUCKET/PATH)"; }
    case "$WORKDIR" in
      gs://*) ;;
      *) echo "tpu_vm.sh: warning: WORKDIR=$WORKDIR is local to each worker; on a multi-host" \
           "slice use gs://BUCKET/PATH so all workers share it" >&2 ;;
    esac
    # setup's Python: its own $REMOTE_DIR/.venv where it had to install one, else $PYTHON.
    pick_python="PY=$(quote "$PYTHON"); if [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi"
    train="\$PY scripts/train.py $(quote --config="$CONFIG" --workdir="$WORKDIR" "$@")"
    if [ "$DETACH" = 1 ]; then
      on_all_workers "cd $remote_dir || exit 1; $pick_python; nohup $train > \$HOME/train.log 2>&1 < /dev/null & \
echo \$! > \$HOME/train.pid; echo \"worker \$(hostname): started pid \$(cat \$HOME/train.pid), log ~/train.log\""
    else
      on_all_workers "cd $remote_dir && $pick_python && $train"
    fi
    ;;

  stop)
    on_all_workers "if [ -f \$HOME/train.pid ]; then kill \$(cat \$HOME/train.pid) 2>/dev/null || true; \
rm -f \$HOME/train.pid; fi"
    ;;

  delete)
    run_gcloud compute tpus tpu-vm delete "$TPU_NAME" "${location[@]}" --quiet
    ;;
esac
