"""``streamtrace epilogue RUN_DIR``: everything after a training job, in one call that
never takes the job down.

Finds every iteration folder and the topology under ``RUN_DIR`` (any layout
``streamtrace.trace.discover`` knows; never a merged trace or anything in the output folder),
then into ``RUN_DIR/streamtrace/`` (or ``EpilogueOptions.outdir``, e.g. for a read-only run folder):

* ``iteration_<N>/analysis/``: ``streamtrace.analyze.analyze`` (``--chunked`` by default;
  Parquet in ``kernels/iteration=<N>/rank=<R>/`` and ``ops/iteration=<N>/rank=<R>/``);
* ``iteration_<N>/merged_gpu.json.gz`` (GPU processes only, so Perfetto's UI can load it) or
  ``merged.json.gz`` with ``gpu_only=False``: ``streamtrace.merge.merge_files``;
* ``aggregate/``: ``streamtrace.aggregate.run.aggregate`` over all iterations; its critical path
  then marked in each merged trace (``streamtrace.aggregate.critical_marks``);
* ``<run name>.md`` + ``report.json`` and ``charts/``: ``streamtrace.report.write_report``;
* ``epilogue.json``: what ran, what was reused, what failed (and why).

Made for the end of a job or a Slurm epilogue: ``run`` never raises (each
failure is logged with the file it concerns and the rest carries on), it is
idempotent (a stage whose inputs and options have not changed since its last
successful run is reused), ``jobs`` and ``max_memory_gb`` cap parallelism.

Discovery and each stage run in a child process of their own (``call_in_child``): the
epilogue's own process holds only the log, the list of files (~20 MB at 1,024 ranks) and, from
the first stage that runs, numba's set-up, pyarrow and the stages' modules, which every stage's
process inherits instead of loading them again (``stages.share_imports``); the report, which loads
no kernel, runs in a process forked before numba was set up (``StageRun.report_process``).  A stage
never starts on top of another's memory and the system gets every stage's memory back.
"""
from .discovery import check_paths, find_iterations, find_topology, outdir_of
from .options import RENAMED, WORKER_GB, EpilogueOptions, with_options, worker_count
from .pipeline import read_state, run
from ..report.outputs import EpilogueRun

__all__ = ["run", "EpilogueOptions", "EpilogueRun", "with_options", "worker_count", "read_state", "check_paths",
           "find_iterations", "find_topology", "outdir_of", "RENAMED", "WORKER_GB"]
