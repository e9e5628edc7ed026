"""Which rank files of a run folder belong to the job: the epilogue's answer to a stale file from
an earlier run, a file copied in, or an elastic restart at another size (issue 33).

The job's world size is the topology's when one is given, else the one most rank files state
(``distributedInfo.world_size``); a file that states another world size is not the job's.  A
file that states none is kept (its rank, from its name, may still be wrong: analyze and
aggregate say so).  The files' heads only (the keys before
``traceEvents``, ``TraceFile``): nothing is read again."""
from __future__ import annotations

from collections import Counter

from ..trace.metadata import base_time_ns, read_trailer

SAME_JOB_NS = 86_400 * 10**9
"""Rank traces of one job start within this of each other (``baseTimeNanoseconds``, ns: a day);
``aggregate`` refuses folders whose traces started further apart."""


def stated_world(head: dict) -> int | None:
    """The ``distributedInfo.world_size`` a trace's head states (a positive int), else None."""
    di = head.get("distributedInfo") if isinstance(head, dict) else None
    w = di.get("world_size") if isinstance(di, dict) else None
    return w if isinstance(w, int) and not isinstance(w, bool) and w > 0 else None


def job_world(files, topology_world: int | None = None) -> tuple[int | None, str]:
    """``(world size, where it comes from)`` of the job the rank files ``files`` (TraceFile) form:
    ``topology_world`` (the topology file's) when given, else the world size most files state
    (a tie: the larger world), else ``(None, "")`` when no file states one."""
    if topology_world:
        return int(topology_world), "the topology file"
    counts = Counter(w for f in files if (w := stated_world(f.head)) is not None)
    if not counts:
        return None, ""
    world, n = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
    return world, f"{n} of {sum(counts.values())} rank files"


def base_times(files) -> dict:
    """path -> ``baseTimeNanoseconds`` (int ns) of the rank files ``files`` (TraceFile) whose head,
    or (plain files) last 64 KB, give it; gzipped files whose head lacks it are left out (their
    whole file would have to be read)."""
    out = {}
    for f in files:
        v = base_time_ns(f.head) if "baseTimeNanoseconds" in f.head else base_time_ns(read_trailer(f.path) or {})
        if v is not None:
            out[f.path] = v
    return out


def stated_groups(head: dict) -> dict:
    """``{pg_name: (pg_desc, ranks tuple)}`` of the process groups a trace's head lists
    (``distributedInfo.pg_config``); {} when it lists none."""
    di = head.get("distributedInfo") if isinstance(head, dict) else None
    cfg = di.get("pg_config") if isinstance(di, dict) else None
    out = {}
    for g in cfg if isinstance(cfg, list) else ():
        if isinstance(g, dict) and "pg_name" in g and isinstance(g.get("ranks"), list):
            out[str(g["pg_name"])] = (str(g.get("pg_desc")), tuple(g["ranks"]))
    return out


def same_groups(f, others) -> bool:
    """True when the rank file ``f`` lists process groups and every one of them that another file of
    ``others`` lists too is the same there (description and ranks), at least one being shared: the
    groups of one job (each rank lists only those it belongs to)."""
    mine = stated_groups(f.head)
    if not mine:
        return False
    shared = 0
    for o in others:
        theirs = stated_groups(o.head)
        for name, g in mine.items():
            if name in theirs:
                if theirs[name] != g:
                    return False
                shared += 1
    return shared > 0


def started_apart(files, base_times: dict, clocks_apart: list | None = None) -> list:
    """``[(file, reason)]`` for the files of ``files`` whose start (``base_times[path]``, int ns
    ``baseTimeNanoseconds``; files without one are kept) lies more than half of
    ``SAME_JOB_NS`` from the median start of the files: the files kept then all start within
    ``SAME_JOB_NS``, as ``aggregate`` asks of one job.  With ``clocks_apart`` (a list), a file
    that started apart but gives a rank (of its iteration) no file that started with the others gives,
    and lists the same process groups as those (``same_groups``; the caller has checked its world
    size), is the job's, on a host whose clock is off (issue 49): it is kept and appended there as
    ``(file, note)`` instead.  (One that repeats a rank is a stale copy: another job's.)"""
    known = sorted(base_times[f.path] for f in files if base_times.get(f.path) is not None)
    if not known:
        return []
    median = known[len(known) // 2]
    near = [f for f in files if base_times.get(f.path) is None or abs(base_times[f.path] - median) <= SAME_JOB_NS // 2]
    given = {(f.iteration, f.rank) for f in near}
    out = []
    for f in files:
        t = base_times.get(f.path)
        if t is not None and abs(t - median) > SAME_JOB_NS // 2:
            days = f"{abs(t - median) / 86_400e9:,.1f} days"
            if clocks_apart is not None and (f.iteration, f.rank) not in given and same_groups(f, near):
                clocks_apart.append((f, f"its clock is {days} off the job's other rank files' (baseTimeNanoseconds), "
                                        f"but it states the job's world size and process groups: kept as this job's "
                                        f"rank; its times are aligned to the others' by the collectives "
                                        f"(--clock-sync collectives)"))
                continue
            out.append((f, f"another job's rank file? it started {days} apart from "
                           f"the job's other rank files (baseTimeNanoseconds); skipped"))
    return out


def split_job(files, topology_world: int | None = None, base_times: dict | None = None,
              clocks_apart: list | None = None) -> tuple[list, list]:
    """``(the job's files, [(file, reason)])``: the files of ``files`` (TraceFile, any number of
    iterations) that do not belong to the job ``job_world`` finds, each with a one-line
    reason ("... world size 16, the job's is 8 (from 7 of 8 rank files) ...").  Files without a
    stated world size are kept.  With ``base_times`` (path -> ``baseTimeNanoseconds``), the files
    kept must also have started together (``started_apart``), or, with ``clocks_apart``, list the
    same process groups (kept, and told there)."""
    world, source = job_world(files, topology_world)
    keep, skipped = [], []
    for f in files:
        w = stated_world(f.head)
        if world is not None and w is not None and w != world:
            skipped.append((f, f"another job's rank file? world size {w}, the job's is {world} (from {source}); "
                               f"skipped"))
        else:
            keep.append(f)
    apart = started_apart(keep, base_times or {}, clocks_apart)
    odd = {id(f) for f, _ in apart}
    return [f for f in keep if id(f) not in odd], skipped + apart
