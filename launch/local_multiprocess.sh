#!/usr/bin/env bash
# Run scripts/train.py as a multi-host job on this one machine: N CPU processes, each with
# D forced host devices, joined by jax.distributed through a coordinator on 127.0.0.1.
# The processes see N*D global devices, exactly as N hosts of a pod slice would.
#
#   bash launch/local_multiprocess.sh [-n N] [-d D] -- --config=configs/default.py \
#       --workdir=/tmp/w [--config.FIELD=VALUE ...]
#
# Everything after `--` goes to every process unchanged; the script appends
# --coordinator_address=127.0.0.1:PORT --num_processes=N --process_id=I.
# Process I logs to WORKDIR/logs/process_I.log; process 0 is also shown on the terminal.
# When one process fails, the others are stopped and the script exits with that status.
#
# Environment (all optional):
#   PYTHON        interpreter                       (default: python3)
#   TRAIN_SCRIPT  the entry point                   (default: <repo>/scripts/train.py)
#   PORT          coordinator port                  (default: a free port)
#   LOG_DIR       where process_I.log go            (default: WORKDIR/logs)
#   KILL_GRACE    seconds between SIGTERM and SIGKILL when stopping the others (default: 10)
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bash launch/local_multiprocess.sh [-n N] [-d D] -- --config=configs/default.py --workdir=DIR [--config.FIELD=VALUE ...]

  -n N   number of processes (default 2)
  -d D   forced CPU devices per process (default 2)
  -h     show this help

Arguments after `--` are passed to every process of scripts/train.py; the script adds
--coordinator_address, --num_processes and --process_id. Logs: DIR/logs/process_I.log.
Environment: PYTHON, TRAIN_SCRIPT, PORT, LOG_DIR, KILL_GRACE (see the script's header).
EOF
}

die() { echo "local_multiprocess.sh: $*" >&2; exit 2; }

num_processes=2
devices_per_process=2
while [ $# -gt 0 ]; do
  case "$1" in
    -n) [ $# -ge 2 ] || die "-n needs a value"; num_processes="$2"; shift 2 ;;
    -n*) num_processes="${1#-n}"; shift ;;
    -d) [ $# -ge 2 ] || die "-d needs a value"; devices_per_process="$2"; shift 2 ;;
    -d*) devices_per_process="${1#-d}"; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) break ;;  # the first argument that is not an option of this script starts train.py's
  esac
done
case "$num_processes" in ''|*[!0-9]*) die "-n must be a positive integer, got '$num_processes'" ;; esac
case "$devices_per_process" in ''|*[!0-9]*) die "-d must be a positive integer, got '$devices_per_process'" ;; esac
[ "$num_processes" -ge 1 ] || die "-n must be at least 1"
[ "$devices_per_process" -ge 1 ] || die "-d must be at least 1"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
TRAIN_SCRIPT="${TRAIN_SCRIPT:-$repo_root/scripts/train.py}"
KILL_GRACE="${KILL_GRACE:-10}"
command -v "$PYTHON" >/dev/null 2>&1 || die "PYTHON=$PYTHON is not an executable; set PYTHON to your interpreter"
[ -f "$TRAIN_SCRIPT" ] || die "TRAIN_SCRIPT=$TRAIN_SCRIPT does not exist; run from a checkout or set TRAIN_SCRIPT"

# The workdir (for the logs) is whatever --workdir train.py is given.
workdir=""
prev=""
for arg in "$@"; do
  case "$arg" in
    --workdir=*) workdir="${arg#--workdir=}" ;;
    *) if [ "$prev" = "--workdir" ]; then workdir="$arg"; fi ;;
  esac
  prev="$arg"
done
if [ -z "${LOG_DIR:-}" ]; then
  [ -n "$workdir" ] || { usage >&2; die "no --workdir=DIR among the arguments after '--' (or set LOG_DIR)"; }
  case "$workdir" in
    *://*) die "--workdir=$workdir is not a local path; set LOG_DIR to a local directory for the logs" ;;
  esac
  LOG_DIR="$workdir/logs"
fi
mkdir -p "$LOG_DIR"

if [ -z "${PORT:-}" ]; then
  PORT="$("$PYTHON" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')"
fi
coordinator="127.0.0.1:$PORT"

# Each process gets its own device count; drop any count inherited from the caller's XLA_FLAGS.
xla_flags=""
for flag in ${XLA_FLAGS:-}; do
  case "$flag" in
    --xla_force_host_platform_device_count=*) ;;
    *) xla_flags="$xla_flags $flag" ;;
  esac
done
xla_flags="${xla_flags# } --xla_force_host_platform_device_count=$devices_per_process"
xla_flags="${xla_flags# }"

pids=()
tail_pid=""

# Stop every process still running: SIGTERM, then SIGKILL after KILL_GRACE seconds.
stop_all() {
  local pid live waited=0
  for pid in ${pids[@]+"${pids[@]}"}; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  while :; do
    live=0
    for pid in ${pids[@]+"${pids[@]}"}; do
      if kill -0 "$pid" 2>/dev/null; then live=1; fi
    done
    if [ "$live" -eq 0 ]; then break; fi
    if [ "$waited" -ge $((KILL_GRACE * 5)) ]; then
      for pid in ${pids[@]+"${pids[@]}"}; do
        kill -KILL "$pid" 2>/dev/null || true
      done
      break
    fi
    sleep 0.2
    waited=$((waited + 1))
  done
  for pid in ${pids[@]+"${pids[@]}"}; do
    wait "$pid" 2>/dev/null || true
  done
}

stop_tail() {
  if [ -n "$tail_pid" ]; then
    kill "$tail_pid" 2>/dev/null || true
    wait "$tail_pid" 2>/dev/null || true
    tail_pid=""
  fi
}

on_signal() {
  echo "local_multiprocess.sh: interrupted, stopping all processes" >&2
  trap - INT TERM
  stop_all
  stop_tail
  exit "$1"
}
# A shell started with SIGINT ignored (a background job of a script: POSIX ignores SIGINT in
# asynchronous commands when job control is off, and the processes it starts inherit that)
# cannot trap it, so Ctrl-C cannot reach this job. Say so; SIGTERM still stops everything.
if [ "$(trap -p INT)" = "trap -- '' SIGINT" ]; then
  echo "local_multiprocess.sh: SIGINT is ignored in this shell (started in the background?)," \
    "so Ctrl-C will not stop the job; stop it with SIGTERM: kill $$" >&2
fi
trap 'on_signal 130' INT
trap 'on_signal 143' TERM
trap 'stop_all; stop_tail' EXIT

echo "local_multiprocess.sh: $num_processes processes x $devices_per_process CPU devices," \
  "coordinator $coordinator, logs in $LOG_DIR" >&2
for ((i = 0; i < num_processes; i++)); do
  log="$LOG_DIR/process_$i.log"
  : > "$log"
  XLA_FLAGS="$xla_flags" \
  JAX_PLATFORMS=cpu \
  JAX_CPU_COLLECTIVES_IMPLEMENTATION="${JAX_CPU_COLLECTIVES_IMPLEMENTATION:-gloo}" \
  PYTHONUNBUFFERED=1 \
  PYTHONPATH="$repo_root${PYTHONPATH:+:$PYTHONPATH}" \
    "$PYTHON" "$TRAIN_SCRIPT" "$@" \
      "--coordinator_address=$coordinator" \
      "--num_processes=$num_processes" \
      "--process_id=$i" \
      > "$log" 2>&1 < /dev/null &
  pids[i]=$!
done

# Mirror process 0's log on the terminal. GNU tail stops by itself once the process is gone.
if tail --version >/dev/null 2>&1; then
  tail -n +1 -f --pid="${pids[0]}" "$LOG_DIR/process_0.log" &
else
  tail -n +1 -f "$LOG_DIR/process_0.log" &
fi
tail_pid=$!

# Wait for all; on the first failure stop the rest and remember that status.
status=0
failed=""
remaining=$num_processes
while [ "$remaining" -gt 0 ]; do
  for ((i = 0; i < num_processes; i++)); do
    pid="${pids[i]:-}"
    if [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null; then continue; fi
    rc=0
    wait "$pid" || rc=$?
    unset "pids[i]"
    remaining=$((remaining - 1))
    if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
      status=$rc
      failed=$i
      echo "local_multiprocess.sh: process $i exited with status $rc (log: $LOG_DIR/process_$i.log);" \
        "stopping the others" >&2
      stop_all
      remaining=0
      break
    fi
  done
  if [ "$remaining" -gt 0 ]; then sleep 0.2; fi
done

# Let tail print the end of process 0's log, then stop it.
if [ -n "$tail_pid" ]; then
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    if ! kill -0 "$tail_pid" 2>/dev/null; then break; fi
    sleep 0.2
  done
  stop_tail
fi

if [ "$status" -ne 0 ]; then
  if [ "$failed" != "0" ]; then
    echo "---- last lines of $LOG_DIR/process_$failed.log ----" >&2
    tail -n 20 "$LOG_DIR/process_$failed.log" >&2 || true
  fi
  exit "$status"
fi
echo "local_multiprocess.sh: all $num_processes processes finished" >&2
