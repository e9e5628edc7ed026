#!/usr/bin/env bash
# Example Slurm epilogue (or the last line of an sbatch script): turn a finished job's
# profiler traces into merged Perfetto traces, Parquet, a report and charts.
#
#   Epilog=/path/to/streamtrace/tools/slurm_epilogue.sh        # slurm.conf (runs on each node as root), or
#   srun ...; bash /path/to/streamtrace/tools/slurm_epilogue.sh # at the end of your sbatch script
#
# It never fails the job: streamtrace epilogue exits 0 even when some traces are bad
# (they are listed in RUN_DIR/streamtrace/epilogue.json), and this script ignores errors.
# Set STREAMTRACE_RUN_DIR (or pass it as $1) to the run's output folder, e.g. Megatron's
# --tensorboard-dir.  Only one node runs it (SLURM_NODEID 0) and only when that folder exists.
set -u
RUN_DIR="${1:-${STREAMTRACE_RUN_DIR:-}}"
[ -n "$RUN_DIR" ] && [ -d "$RUN_DIR" ] || exit 0
[ "${SLURM_NODEID:-0}" = "0" ] || exit 0
# Bound time and memory so a huge run cannot hold the node: 2 h, half the node's RAM.
MEM_GB=$(awk '/MemTotal/ {printf "%d", $2 / 1024 / 1024 / 2}' /proc/meminfo)
JOBS="${STREAMTRACE_JOBS:-$(nproc)}"
LOG="$RUN_DIR/streamtrace-epilogue.log"
timeout 7200 streamtrace epilogue "$RUN_DIR" --jobs "$JOBS" --max-memory "${MEM_GB:-8}" >>"$LOG" 2>&1 || true
exit 0
