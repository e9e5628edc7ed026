"""``streamtrace.open``: a job's rank traces analysed and aggregated for a notebook by the epilogue's
stages (``streamtrace.epilogue``), into a cache folder where unchanged stages are reused."""
from __future__ import annotations

import os
from pathlib import Path

from ..runtime.errors import StreamtraceError
from ..runtime.files import atomic_output, clean_stale, write_json
from ..runtime.stagelog import StageLog
from .options import EpilogueOptions, with_options, worker_count
from .pipeline import read_state
from .stages import StageRun, aggregate_stage, analyze_stage
from .discovery import find_iterations, find_topology


def open_job(traces, cache=None, **options):
    """Analyse and aggregate the rank traces ``traces`` for a notebook (``streamtrace.open``), reusing
    what is unchanged, and return the job's tables.

    Each iteration is analysed into ``cache/iteration_<N>/analysis`` and all of them aggregated into
    ``cache/aggregate``, by the epilogue's stages (``streamtrace.epilogue.run``): a stage whose inputs (path, size,
    mtime of every trace and the topology) and options are those of its last successful run is
    reused, not run again; its state is kept in ``cache/open.json``.

    Parameters
    ----------
    traces : str, Path or list of them
        Trace files, folders (searched recursively) and glob patterns, as ``streamtrace.analyze``
        takes them; merged traces, earlier outputs and another job's files are skipped (as the
        epilogue's discovery does: each logged, and the last named in the aggregate's ``warnings``).
    cache : str or Path, optional
        The cache folder.  Default: ``.streamtrace-cache`` in the folder given (or, for files and
        globs, the folder holding them all), where ``analyze`` and ``epilogue`` do not look for traces.
    **options
        Fields of ``EpilogueOptions`` (``jobs``, ``chunked``, ``topology``, ``torchtitan_config``,
        ``progress`` (default False here: failures only), ``isolate`` (default False here), ...).

    Returns
    -------
    streamtrace.aggregate.folder.Aggregate
        ``streamtrace.load(cache/"aggregate")``: the aggregate's tables; ``.summary`` its
        ``aggregate.json``.

    Raises
    ------
    StreamtraceError
        When no trace matches ``traces`` or no rank trace could be analysed (the first failure's
        message); a rank that fails while others succeed is logged on stderr and left out.
    UsageError
        For options that cannot work together; ``TypeError`` for a name that is no option.
    """
    from ..aggregate.folder import Aggregate
    from ..trace.discover import expand_inputs
    opt = with_options(EpilogueOptions(progress=False, isolate=False), **options)
    opt.check()
    inputs = [traces] if isinstance(traces, (str, os.PathLike)) else list(traces)
    first = Path(inputs[0]) if inputs else None
    base = first if first is not None and first.is_dir() else \
        Path(os.path.commonpath([str(Path(p).resolve().parent) for p in expand_inputs(inputs)]))
    out = Path(cache) if cache is not None else base / ".streamtrace-cache"
    log = StageLog(progress=opt.progress, verbose=opt.verbose, name="open")
    out.mkdir(parents=True, exist_ok=True)
    clean_stale(out)
    state_path = out / "open.json"
    topo = opt.topology or find_topology(base)
    skipped: list = []
    found = find_iterations(inputs, log, out, topo, skipped)
    ctx = StageRun(opt, worker_count(opt), topo, out, read_state(state_path), log,
                   {"iterations": [], "ranks": 0, "stages": {}, "skipped": skipped})
    groups = {it: [tf.path for tf in files] for it, files in found.items()}
    analysed = [a for it in sorted(groups, key=lambda k: (k is None, k or 0))
                if (a := analyze_stage(ctx, it, groups[it]))]
    agg = aggregate_stage(ctx, analysed)[0] if analysed else None
    with atomic_output(state_path, compress=False) as f:
        write_json(f, {"summary": ctx.summary, "state": ctx.state}, str)
    if agg is None:
        why = log.failures[0]["error"] if log.failures else "no rank traces found"
        raise StreamtraceError(f"{', '.join(map(str, inputs))}: nothing to open ({why})")
    return Aggregate(agg)
