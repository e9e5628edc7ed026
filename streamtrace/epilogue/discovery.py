"""Finding the job in a run folder, before any work: the topology file, every iteration's rank
traces that belong to the job (never a merged trace, an earlier output or another job's file), and
the checks of the run and output folders (``check_paths``)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..report.outputs import EpilogueRun
from ..runtime.errors import OutputError, StreamtraceError, UnknownRankError
from ..runtime.files import check_output_folder

if TYPE_CHECKING:
    from . import EpilogueOptions


def find_topology(run_dir):
    """streamtrace's topology JSON, else the newest TraceViz ``unique_parallel_groups_*.txt``,
    else a ``parallel_topology.json``, searched in ``run_dir`` and one level below."""
    run_dir = Path(run_dir)
    for pattern in ("streamtrace_topology.json", "unique_parallel_groups_*.txt", "parallel_topology.json"):
        hits = sorted(run_dir.glob(pattern)) + sorted(run_dir.glob(f"*/{pattern}"))
        hits = [(t, h) for h in hits if ("streamtrace" not in h.parent.name or h.parent == run_dir)
                and (t := _mtime(h)) is not None]
        if hits:
            return str(max(hits)[1])
    return None


def _mtime(path):
    """``path``'s modification time, None when it cannot be read (a broken link, a symbolic-link loop)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def is_merged(head: dict) -> bool:
    """True for the top-level keys of a trace streamtrace merged (``streamtrace.kind`` "merged")."""
    st = head.get("streamtrace")
    return isinstance(st, dict) and st.get("kind") == "merged"


def find_iterations(run_dir, log, outdir=None, topology=None, odd_files=None):
    """``{iteration: [TraceFile]}`` for every readable rank trace under ``run_dir`` (a folder, or a
    list of files, folders and globs) that belongs
    to the job (``streamtrace.topology.members.split_job``: the world size of ``topology``, a
    topology file, else the one most files state); never a merged trace (streamtrace's own
    header), nor anything under ``outdir`` or a ``streamtrace`` folder (earlier outputs);
    unreadable files and folders, rank files without a ``traceEvents`` array and another job's
    files are logged as failures (the last also appended to ``odd_files`` as "path: reason")."""
    from ..trace.discover import expand_inputs, identify
    groups: dict = {}

    def skipped(path, msg):
        log.fail("discover", path, msg)
    try:
        paths = expand_inputs([run_dir] if isinstance(run_dir, (str, os.PathLike)) else run_dir, skipped)
    except Exception as e:   # noqa: BLE001
        log.fail("discover", run_dir, e)
        return groups
    skip = Path(os.path.realpath(outdir)) if outdir is not None else None
    for p in paths:
        try:        # one bad entry (a symbolic-link loop: ELOOP) is one failure (issue 49)
            if skip is not None and Path(os.path.realpath(p)).is_relative_to(skip):
                continue
            tf = identify(p, warn=skipped)
        except UnknownRankError as e:
            if not merged_file(p):
                log.fail("discover", p, e)
            continue
        except Exception as e:   # noqa: BLE001
            log.fail("discover", p, e)
            continue
        if tf is not None and not is_merged(tf.head):
            groups.setdefault(tf.iteration, []).append(tf)
    groups = the_job(groups, topology, log, odd_files)
    for it, files in groups.items():
        seen = {}
        keep = []
        for tf in sorted(files, key=lambda t: (t.rank, t.path)):
            if not tf.source.rank_per_file:      # an export's ranks are its processes': told when read
                keep.append(tf)
                continue
            if tf.rank in seen:
                log.fail("discover", tf.path, f"rank {tf.rank} already given by {seen[tf.rank]}; skipped")
                continue
            seen[tf.rank] = tf.path
            keep.append(tf)
        groups[it] = keep
    return groups


def the_job(groups, topology, log, skipped) -> dict:
    """``groups`` without the files of another job (``split_job``),
    each logged as a failure of discovery and appended to ``skipped``."""
    from ..topology.members import base_times, split_job
    from ..topology.sources import load_topology
    world = None
    if topology:
        try:
            world = load_topology(topology).world_size or None
        except Exception:   # noqa: BLE001 - analyze reports the topology file's problem
            world = None
    files = [tf for files in groups.values() for tf in files]
    apart: list = []
    keep, odd = split_job(files, world, base_times(files), apart)
    for tf, why in apart:             # the job's rank on a host whose clock is off (issue 49)
        log.note(f"{tf.path}: {why}")
    for tf, why in odd:
        log.fail("discover", tf.path, why)
        if skipped is not None:
            skipped.append(f"{tf.path}: {why}")
    kept = {id(tf) for tf in keep}
    return {it: k for it, files in groups.items() if (k := [tf for tf in files if id(tf) in kept])}


def merged_file(path) -> bool:
    from ..trace.reader import TraceReader
    try:
        return is_merged(TraceReader(path, salvage=True).read_metadata())
    except Exception:   # noqa: BLE001 - unreadable: not a merged trace of ours
        return False


def outdir_of(run_dir, opt: EpilogueOptions) -> Path:
    """The epilogue's output folder: ``opt.outdir``, else ``RUN_DIR/streamtrace``."""
    return Path(opt.outdir) if opt.outdir else Path(run_dir) / "streamtrace"


def check_paths(run_dir, opt: EpilogueOptions) -> None:
    """Before any work: ``run_dir`` is a readable folder, and the output folder
    (``outdir_of``) holds nothing but an earlier epilogue's outputs of the same run folder
    (its ``epilogue.json``, ``iteration_*/``, ``aggregate/``, report and charts), does not hold
    ``run_dir``, and is not the current folder.  Raises ``StreamtraceError`` (the run
    folder) or ``OutputError`` (the output folder), one line naming the path."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise StreamtraceError(f"{run_dir}: no such run folder")
    if not run_dir.is_dir():
        raise StreamtraceError(f"{run_dir}: not a folder; give the training run's output folder")
    if not os.access(run_dir, os.R_OK | os.X_OK):
        raise StreamtraceError(f"{run_dir}: cannot read the run folder (permission denied)")
    out = outdir_of(run_dir, opt)
    prev = earlier_run(out)
    if prev.get("run_dir") and Path(prev["run_dir"]).resolve() != run_dir.resolve():
        raise OutputError(out, f"holds the epilogue outputs of another run folder ({prev['run_dir']}), which this "
                               f"run would replace; give another folder")
    report_md = Path(prev["report"]).name if prev.get("report") else None

    def owned(name):             # the epilogue's entries; of Markdown files, only its earlier report
        return EpilogueRun.owns(name) and (not name.endswith(".md") or name == report_md)
    check_output_folder(out, owned, inputs=[run_dir])


def earlier_run(out: Path) -> dict:
    """The ``summary`` of the ``epilogue.json`` in ``out`` ({} when none or unreadable)."""
    try:
        s = json.loads((out / EpilogueRun.marker).read_text()).get("summary")
    except (OSError, ValueError, AttributeError):
        return {}
    return s if isinstance(s, dict) else {}
