"""The Nsight Systems side of ``streamtrace analyze``: an export read into the store
(``read_export``) and what ``summary.json`` says of it per rank (``rank_facts``,
``export_facts``)."""
from __future__ import annotations

import os

from ..events.nsys import NsysIngest, ingest_nsys
from ..trace.discover import load_rank_map
from ..trace.nsys import unowned_warning
from ..trace.nsys.counts import export_rows


def read_export(path, store, file_rank, opt, progress=None) -> NsysIngest:
    """Read the export ``path`` into ``store``; processes ranked by order start at ``file_rank``;
    ``opt.rank_map`` (a ``--rank-map`` file) may name ranks by pid (``"<pid> <rank>"`` lines or
    ``"<file>:<pid>"`` keys).  ``progress(bytes)``, the file's progress bar (in bytes, as for a
    Kineto trace), is called per batch with the file's size times the share of its activity rows
    read (``export_rows``: an export is read table by table, in
    no byte order).  Rows are read in each table's rowid order, not sorted by start (the analysis
    groups them by key and sorts each CPU track by time itself); ``opt.gpu_only``: the CPU tables
    are not read."""
    rmap = load_rank_map(opt.rank_map) if opt.rank_map else None
    rows = rows_as_bytes(path, progress) if progress is not None else None
    return ingest_nsys(path, store, rmap, file_rank, rows, ordered=False, gpu_only=opt.gpu_only)


def rows_as_bytes(path, progress):
    """``progress(bytes)`` as a ``progress(rows read)`` callback over the export at ``path``."""
    size, total = os.path.getsize(path), max(1, export_rows(path))

    def report(done):
        progress(min(size, size * done // total))
    return report


def warnings_of(ing: NsysIngest) -> list[str]:
    """The export's warnings, the rows left out included."""
    ex = ing.export
    out = list(ex.warnings) + list(ex.notices)
    if ing.unusable:
        out.append(f"{ex.path}: {ing.unusable:,} row(s) without a usable start/end (negative, or no end: cut at the "
                   f"capture's edge) left out")
    if ing.foreign:
        out.append(f"{ex.path}: {ing.foreign:,} CPU row(s) of processes without GPU work left out")
    if ing.unowned:
        out.append(unowned_warning(ex.path, ing.unowned))
    return out


def rank_facts(ing: NsysIngest, rank: int, devices) -> dict:
    """``trace_metadata`` of one rank (the keys ``streamtrace.trace.metadata.trace_facts`` gives a
    Kineto trace): ``base_time_ns`` = the session's ``utcEpochNs`` (an export's times count from
    it, as a Kineto trace's from ``baseTimeNanoseconds``), the first device's GPU name."""
    ex = ing.export
    name = next((ex.gpus[d] for d in sorted(devices) if d in ex.gpus), "")
    return {"base_time_ns": ex.session_start_ns, "merged": False, "device_name": name, "pg_entries": [],
            "world_size": None}


def export_facts(ing: NsysIngest, rank: int) -> dict:
    """``summary.json``'s ``"nsys"`` entry of one rank: the export's schema and product version, the
    rank's processes (pid, host, where the rank came from) and where collective bytes come from
    (or why they are unknown)."""
    ex = ing.export
    return {"schema_version": ex.version, "product_version": ex.product, "session_start_utc_ns": ex.session_start_ns,
            "processes": [{"pid": p.pid, "host": p.host, "rank_source": p.rank_source}
                          for p in ex.processes if p.rank == rank],
            "collective_bytes": ex.collective_bytes}
