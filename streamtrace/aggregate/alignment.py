"""The analysed job as a whole: the ``streamtrace analyze`` folders of all ranks (and iterations), each
rank's clock, and the time alignment shared by ``aggregate``, ``report`` and the charts.

A *part* is one rank of one iteration of one analysed folder
(``DIR/kernels/iteration=N/rank=R/part-*.parquet`` and ``DIR/ops/iteration=N/rank=R/part-*.parquet``,
``N`` = -1 for an unknown iteration; listed in ``DIR/summary.json``; see
``streamtrace.events.dataset.partition_path`` and ``Part.files``).  Kernel and op times in the Parquet files are the rank's
own trace clock (int64 ns).  Alignment maps them to one time axis:

* ``global``: one time base for all ranks, through each trace's ``baseTimeNanoseconds`` (read from
  the source trace's metadata), the same rule as ``streamtrace merge``:
  ``t = ts + (base(rank) - min over ranks of base)``; a merged trace already has one clock
  (shift 0).  Times are then counted from the earliest event of the ranks of the same analysed
  iteration folder (``origin``).
* ``individual``: each rank from its own start (its earliest kernel or CPU op is 0), as
  Megatron-TraceViz's "individual" alignment.

On top of either, per-rank clock offsets (``--clock-sync collectives``,
``streamtrace.aggregate.collectives.estimate_clock_offsets``) are subtracted: ``t - offset(rank)``.
"""
from __future__ import annotations

import itertools
import os
import pickle
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from ..runtime.errors import DataError, StreamtraceError
from ..analyze.outputs import KERNELS, OPS, Analysis, rank_trace_metadata, schema_of
from ..analyze.rank_entries import read_rank_entries
from ..events.dataset import column_min_max, columns_min_max, partition_files, read_partition
from ..runtime.parallel import run_tasks
from ..runtime.progress import progress_bar
from ..topology.members import SAME_JOB_NS as MEMBERS_SAME_JOB_NS
from ..topology.sources import from_pg_config, load_topology
from ..trace.metadata import MAX_RANK, clock_ns, trace_facts, world_size_of
from ..trace.reader import TraceReader
from .steps import StepNames, step_names, step_patterns_of

ALIGNMENTS = ("global", "individual")
#: folder names that say nothing about the job (skipped by ``Job.name``)
GENERIC_DIRS = {"tb", "tensorboard", "profile_traces", "profile_trace", "torch_profile", "torch_profiler", "traces",
                "trace", "profiler", "profiles", "profile", "logs", "log", "outputs", "output", "runs"}
_ITER_DIR = re.compile(r"iteration[_-]?\d+|iter[_-]?\d+|step[_-]?\d+")
#: traces of one job start within this many ns of each other (one day)
SAME_JOB_NS = MEMBERS_SAME_JOB_NS     # (one value for the epilogue's job finder and aggregate)
#: the iteration of a part whose trace path names none (analyze's ``iteration=-1`` partitions)
UNKNOWN_ITERATION = -1
# names as ``Job.read_kernels`` returns them: "iteration" is the part's (the trace file's) iteration, "step"
# the row's ProfilerStep number (see ``read_parquet_columns``)
KERNEL_COLUMNS = ("device", "stream", "ts_ns", "dur_ns", "end_ns", "name", "kind", "phase", "microbatch",
                  "iteration", "step", "collective", "msg_bytes", "group_size", "pg_name", "pg_ranks", "parallel_dim",
                  "correlation")


@dataclass
class Part:
    """One rank of one analysed folder.  ``iteration``: the folder's iteration (from the trace path,
    may be None); ``base_time_ns``: the source trace's ``baseTimeNanoseconds`` (None when unknown);
    ``merged``: the source is a merged multi-rank trace (its times already share one clock);
    ``start_ns``: the earliest kernel / CPU op start in the rank's own clock; ``pg_entries``: the
    process groups the rank's trace lists (``distributedInfo.pg_config``), emptied once the job's
    topology is known; ``step_patterns``: the patterns analyze found its steps by (``summary.json``,
    None: the Kineto default), ``steps`` compiled."""
    index: int
    dir: Path
    rank: int
    iteration: int | None
    source: str
    base_time_ns: int | None = None
    merged: bool = False
    start_ns: int = 0
    end_ns: int = 0
    device_name: str = ""
    pg_entries: list = field(default_factory=list)
    world_size: int | None = None
    shift_ns: int = 0            # added to the rank's own times by the alignment (before the clock offset)
    clock_offset_ns: int = 0     # estimated clock offset, subtracted after the alignment
    step_patterns: list | None = None
    step_numbers: tuple = ()     # the steps analyze found (summary.json's ranks[].iterations keys)
    _files: dict = field(default_factory=dict, repr=False, compare=False)    # dataset -> files, listed once

    @property
    def steps(self) -> StepNames:
        """The part's step names (``streamtrace.aggregate.steps.step_names`` of ``step_patterns``)."""
        return step_names(self.step_patterns)

    def files(self, dataset) -> list[Path]:
        """The rank's ``dataset`` ("kernels" or "ops") files in row order: ``part-0.parquet``, or
        several after ``analyze --jobs N`` of one big trace.  Listed once per part (the folder
        was listed a dozen times per rank in an aggregate)."""
        got = self._files.get(dataset)
        if got is None:                   # (held as str: a Path is ~400 bytes, in every process a part is sent to)
            got = self._files[dataset] = tuple(map(str, partition_files(self.dir, dataset, self.rank, self.iteration)))
        return [Path(f) for f in got]

    def read(self, dataset, columns):
        """The rank's ``dataset`` rows (all part files, in order) as a pyarrow Table; None when
        there are none.  Its files checked against the schema analyze writes (``schema_of``): a
        ``DataError`` naming the one with a column of another type or a row of unsound times."""
        files = self.files(dataset)
        return read_partition(files, columns, schema_of(dataset)) if files else None

    def align(self, t):
        """Rank-local int64 ns -> aligned int64 ns (``t + shift_ns - clock_offset_ns``)."""
        return np.asarray(t, np.int64) + np.int64(self.shift_ns - self.clock_offset_ns)


@dataclass
class JobParts:
    """What work done away from the ``Job`` needs of it: its selected ``steps`` (None: all) and its
    ``parts`` (``Part``, aligned; empty for a rank's re-reduction, which is given its part): aggregate's
    job level in its own process (``streamtrace.runtime.fork.Standby``), the what-if's re-reduced
    ranks.  Small to send."""
    steps: set | None = None
    parts: list = field(default_factory=list)

    @staticmethod
    def iteration_of(part) -> int:
        """The part's iteration (``Job.iteration_of``)."""
        return Job.iteration_of(part)


def _event_counts(r: dict) -> tuple:
    """(GPU events, CPU events) of one rank of ``summary.json`` (0 when not recorded)."""
    def count(section, key):
        v = r.get(section)
        v = v.get(key) if isinstance(v, dict) else 0
        return v if type(v) is int else 0
    return count("links", "gpu_events"), count("call_tree", "cpu_events")


def _read_source_meta(source: str, rank: int) -> dict:
    """``trace_facts`` of one source trace, read again (a full
    metadata scan: the base time stands after ``traceEvents``), for folders analysed before
    ``summary.json`` kept them.  Empty dict when the file is gone or unreadable."""
    if not source or not os.path.isfile(source):
        return {}
    try:
        meta = TraceReader(source, salvage=True).read_metadata()
    except StreamtraceError:
        return {}
    return trace_facts(meta, rank)


def _part_info(dir_, rank, iteration, source, facts=None):
    kf = partition_files(dir_, KERNELS, rank, iteration)
    of = partition_files(dir_, OPS, rank, iteration)
    ks, os_ = schema_of(KERNELS), schema_of(OPS)                            # (each footer read once, its
    kmm = [columns_min_max(f, ("ts_ns", "end_ns"), ks) for f in kf]        # columns' types checked)
    starts = [x for x in [m["ts_ns"][0] for m in kmm] + [column_min_max(f, "ts_ns", os_)[0] for f in of]
              if x is not None]
    ends = [x for x in [m["end_ns"][1] for m in kmm] if x is not None]
    info = dict(facts) if isinstance(facts, dict) else _read_source_meta(source, rank)
    if isinstance(facts, dict):                    # (summary.json's: a damaged or foreign one's numbers checked)
        info["world_size"] = world_size_of(info.get("world_size"))
        info["base_time_ns"] = clock_ns(info.get("base_time_ns"))
    info["start_ns"] = min(starts) if starts else 0
    info["end_ns"] = max(ends) if ends else info["start_ns"]
    return info


def _check_rank_entry(folder, i: int, r) -> None:
    """Raise ``DataError`` naming ``folder``'s ``summary.json`` when its ``i``-th rank entry ``r`` is not an
    object with a rank from 0 to ``MAX_RANK`` (the later stages size arrays by rank: 10^30 made a traceback,
    10^9 gigabytes)."""
    rank = r.get("rank") if isinstance(r, dict) else None
    if type(rank) is not int or not 0 <= rank <= MAX_RANK:
        raise DataError(Path(folder) / Analysis.marker, f"ranks[{i}]: not a rank entry with a rank from 0 to "
                                                        f"{MAX_RANK:,} ({str(rank if isinstance(r, dict) else r)[:40]})")


def _rank_entries(folder, warnings: list) -> list:
    """What ``Job`` keeps of each rank entry of analysed folder ``folder``'s ``summary.json``:
    ``(rank, iteration, source, step patterns, step numbers, event counts, trace metadata)``, checked
    (``Analysis.check``'s checks, ``_check_rank_entry``, ``step_patterns_of``); appends to ``warnings`` when
    analyze could not read some files.  The entries are read one at a time (``read_rank_entries``: the
    whole document parsed was ~300 MB of objects at 16,384 synthetic ranks, an 89 MB file), and the tuples
    are a copy (a pickle round trip), not pieces of the parsed entries: the pieces held would keep the
    parse's memory pages in use after it is let go (4,096 synthetic ranks: the process 41 MB larger)."""
    d = Path(folder)
    meta: dict = {}
    out, tms = [], []
    entries = read_rank_entries(d, meta)
    first = next(entries, None)                      # (summary.json's own errors first, as read whole)
    if any((d / KERNELS).glob("rank=*")):
        raise StreamtraceError(f"{d}: analysed by an older streamtrace (kernels/rank=R/ without "
                               f"iteration=N/); run streamtrace analyze on it again")
    for i, r in enumerate(itertools.chain([first] if first is not None else [], entries)):
        _check_rank_entry(d, i, r)
        out.append((r["rank"], r.get("iteration"), str(r.get("source", "")), step_patterns_of(d, r),
                    tuple(sorted(map(str, r.get("iterations") or {}))), _event_counts(r)))
        tms.append(r.get("trace_metadata"))
    failed = meta.get("failed")
    if isinstance(failed, list) and failed:
        first = failed[0].get("source") if isinstance(failed[0], dict) else None
        warnings.append(f"{d}: analyze could not read {len(failed)} file(s) ({Analysis.marker} \"failed\""
                        f"{f', e.g. {first}' if first else ''}); their ranks are missing")
    out = [x + (rank_trace_metadata(meta, {"trace_metadata": tm}),) for x, tm in zip(out, tms)]
    return pickle.loads(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))


class Job:
    """Every part of the analysed folders, the topology and the time alignment.

    ``parts``: list of ``Part``; ``topology``: ``Topology``
    (given, or from the traces' ``pg_config``, or None); ``alignment``: ``"global"`` or
    ``"individual"``; ``warnings``: list of str.

    **Iteration and step.**  A part's ``iteration`` is its trace file's (``iteration_4/`` or
    ``_iter_4`` in the path, as analyze's ``iteration=4`` partition; -1 unknown); a kernel's
    ``step`` is the ``N`` of the ``ProfilerStep#N`` around its launch (-1 none).  With the Megatron
    patch ``iteration_4/`` holds ``ProfilerStep#3``: iteration 4, step 3.  ``iterations`` selects
    parts by their iteration, ``steps`` rows by their step."""

    def __init__(self, dirs, alignment="global", topology=None, iterations=None, jobs=0, steps=None, force=False,
                 progress=None, clock_sync=None):
        if alignment not in ALIGNMENTS:
            raise StreamtraceError(f"bad --time-alignment {alignment!r}: use global or individual")
        self.alignment = alignment
        self.clock_sync = clock_sync          # "collectives": offsets will be estimated (no advice to)
        self.iterations = set(int(i) for i in iterations) if iterations else None
        self.steps = set(int(i) for i in steps) if steps else None
        self.warnings: list = []
        self.clocks_apart_days = None         # one job whose hosts' clocks are this many days apart (issue 49)
        self.parts: list = []
        self.dirs = [Path(d) for d in dirs]
        if not self.dirs:
            raise StreamtraceError("give at least one analysed folder (the -o of streamtrace analyze)")
        counts, facts = [], {}
        shared: dict = {}             # equal step numbers and device names one object: pickled once (~180 bytes a part)
        for d in self.dirs:
            for rank, iteration, source, patterns, numbers, count, meta in _rank_entries(d, self.warnings):
                self.parts.append(Part(len(self.parts), d, rank, iteration, source, step_patterns=patterns,
                                       step_numbers=shared.setdefault(numbers, numbers)))
                counts.append(count)
                facts[(str(d), rank, iteration)] = meta
        if not self.parts:
            raise StreamtraceError(f"{', '.join(map(str, dirs))}: no ranks in {Analysis.marker}")
        self._missing_partitions(counts)
        if self.iterations is not None:
            have = sorted({p.iteration for p in self.parts if p.iteration is not None})
            keep = [p for p in self.parts if p.iteration in self.iterations]
            self.parts = [replace(p, index=i) for i, p in enumerate(keep)]
            if not self.parts:
                raise StreamtraceError(f"no analysed rank has iteration(s) {_list(self.iterations)}: the folders hold "
                                       f"iteration(s) {_list(have) or 'unknown (no iteration in the trace paths)'} "
                                       f"(--steps selects by ProfilerStep number)")
        tasks = [(p.dir, p.rank, p.iteration, p.source, facts.get((str(p.dir), p.rank, p.iteration)))
                 for p in self.parts]
        rereads = sum(1 for t in tasks if not isinstance(t[-1], dict))    # else only Parquet footers: no workers
        with progress_bar(len(self.parts), "read traces' metadata", "rank", progress) as bar:
            infos = run_tasks(_part_info, tasks, max(1, min(jobs or os.cpu_count() or 1, rereads)),
                              on_done=bar.update)
        for p, info in zip(self.parts, infos):
            for k, v in info.items():
                setattr(p, k, shared.setdefault(v, v) if k == "device_name" and isinstance(v, str) else v)
        problem = self.different_jobs()
        if problem and not force:
            raise StreamtraceError(f"{_list(map(str, self.dirs))}: these look like different jobs ({problem}); "
                                   f"aggregate one job at a time, or give --force")
        if problem:
            self.warnings.append(f"aggregated although these look like different jobs ({problem})")
        if callable(topology):        # a topology of the world size (a TorchTitan config's mesh)
            topology = topology(max([p.world_size or 0 for p in self.parts] + [p.rank + 1 for p in self.parts]))
        self.topology = topology if topology is not None else self._topology_from_traces()
        for p in self.parts:          # each rank's copy of its groups (~5 KB a rank at 1,024 ranks): no longer needed
            p.pg_entries = []
        self._align()

    def name(self) -> str:
        """The job's name: the folder that holds its traces (the common folder of the parts' sources,
        above ``iteration_N/`` and generic names such as ``tb``, ``profile_traces``,
        ``torch_profile``); else the first analysed folder's name."""
        parents = [Path(p.source).resolve().parent for p in self.parts if p.source]
        if parents:
            d = Path(os.path.commonpath([str(x) for x in parents]))
            while d.name and (_ITER_DIR.fullmatch(d.name) or d.name.lower() in GENERIC_DIRS):
                d = d.parent
            if d.name:
                return d.name
        return self.dirs[0].resolve().name

    def different_jobs(self) -> str | None:
        """Why the parts cannot be one job, or None: different world sizes in ``distributedInfo``,
        one rank of one iteration in two folders, or trace start times (``baseTimeNanoseconds``)
        more than ``SAME_JOB_NS`` apart."""
        worlds: dict = {}
        for p in self.parts:
            if p.world_size:
                worlds.setdefault(p.world_size, {}).setdefault(str(p.dir), set()).add(p.rank)
        if len(worlds) > 1:     # which folders and ranks state which world size (issue 33)
            return "world size " + " vs ".join(
                f"{w} ({'; '.join(f'{_ranks(r)} in {d}' for d, r in sorted(by_dir.items()))})"
                for w, by_dir in sorted(worlds.items()))
        seen: dict = {}
        for p in self.parts:
            key = (p.rank, p.iteration)
            if key in seen and seen[key] != p.dir:
                it = f" of iteration {p.iteration}" if p.iteration is not None else ""
                return f"rank {p.rank}{it} is in both {seen[key]} and {p.dir}"
            seen[key] = p.dir
        bases = [(p.base_time_ns, p.dir) for p in self.parts if p.base_time_ns and not p.merged]
        if bases and max(bases)[0] - min(bases)[0] > SAME_JOB_NS:
            days = (max(bases)[0] - min(bases)[0]) / 86_400e9
            if self._one_job():
                self.clocks_apart_days = days
                return None
            return f"traces started {days:,.1f} days apart ({min(bases)[1]}, {max(bases)[1]})"
        return None

    def _one_job(self) -> bool:
        """Whether parts whose traces started days apart are one job all the same (issue 49): one
        stated world size (checked before), process groups that agree wherever two ranks list the same
        group (``pg_config``: name, description, ranks), and the same steps in each iteration: hosts
        whose clocks differ, which the clock offsets (``--clock-sync collectives``) are for."""
        groups: dict = {}
        for p in self.parts:
            for g in p.pg_entries:
                if isinstance(g, dict) and "pg_name" in g:
                    key = (str(g.get("pg_desc")), tuple(g.get("ranks") or ()))
                    if groups.setdefault(str(g["pg_name"]), key) != key:
                        return False
        steps: dict = {}
        for p in self.parts:
            if steps.setdefault(p.iteration, p.step_numbers) != p.step_numbers:
                return False
        return bool(groups) and all(p.step_numbers for p in self.parts)

    def _missing_partitions(self, counts):
        """A warning per analysed folder and table whose partitions are missing for ranks that
        ``summary.json`` says had events (``counts``: (GPU events, CPU events) per part)."""
        for d in self.dirs:
            for dataset, k in ((KERNELS, 0), (OPS, 1)):
                gone = [p for p, c in zip(self.parts, counts) if p.dir == d and c[k] and not p.files(dataset)]
                if gone:
                    where = ", ".join(f"iteration={-1 if p.iteration is None else p.iteration}/rank={p.rank}"
                                      for p in gone)
                    self.warnings.append(f"{d / dataset}: summary.json lists events of ranks whose partitions are "
                                         f"missing ({where}); their {dataset} rows are left out")

    def _topology_from_traces(self):
        entries = [e for p in self.parts for e in p.pg_entries]
        world = max([p.world_size or 0 for p in self.parts] + [p.rank + 1 for p in self.parts])
        if entries:
            try:
                return from_pg_config(entries, world, source="distributedInfo.pg_config")
            except StreamtraceError as e:
                self.warnings.append(str(e))
        for d in self.dirs:   # a topology file beside the traces (e.g. the generator's or the Megatron patch's)
            for p in [Path(x.source).parent for x in self.parts[:1]] + [d]:
                for c in [p, p.parent]:
                    hits = sorted(c.glob("unique_parallel_groups_*.txt")) + \
                        [c / n for n in ("streamtrace_topology.json", "parallel_topology.json") if (c / n).is_file()]
                    if hits:
                        return load_topology(hits[0])
        why = "its pg_config names no parallel dimension" if entries else "no pg_config in the traces"
        self.warnings.append(f"no topology ({why} and no topology file): give --topology; "
                             "pipeline and replica views are skipped")
        return None

    def _align(self):
        if self.alignment == "global":
            known = [p.base_time_ns for p in self.parts if p.base_time_ns is not None and not p.merged]
            if len(known) < len([p for p in self.parts if not p.merged]):
                self.warnings.append("some traces have no baseTimeNanoseconds (or are no longer at their path): "
                                     "their ranks keep their own clock" + (
                                         "; their offsets are estimated from the collectives"
                                         if self.clock_sync == "collectives" else
                                         "; consider --clock-sync collectives"))
            lo = min(known) if known else 0
            for p in self.parts:
                p.shift_ns = 0 if p.merged or p.base_time_ns is None else p.base_time_ns - lo
            groups: dict = {}
            for p in self.parts:
                groups.setdefault((p.dir, p.iteration), []).append(p)
            for ps in groups.values():
                origin = min(p.start_ns + p.shift_ns for p in ps)
                for p in ps:
                    p.shift_ns -= origin
        else:
            for p in self.parts:
                p.shift_ns = -p.start_ns

    def file_peer(self, part) -> int | None:
        """The one rank a point-to-point kernel of ``part`` that names neither its communicator nor its
        peer can have been with: the other rank of ``part``'s trace file, when that file holds exactly
        the two ranks the job has of the part's iteration and no trace states a larger world (the two
        processes of one Nsight Systems export made without NCCL's payloads, or a merged two-rank
        trace); None otherwise."""
        if not hasattr(self, "_file_peers"):
            by: dict = {}
            for p in self.parts:
                by.setdefault(p.iteration, []).append(p)
            self._file_peers = {}
            for ps in by.values():
                ranks = {p.rank for p in ps}
                if len(ranks) == 2 and len({p.source for p in ps}) == 1 and ps[0].source and \
                        all(p.world_size in (None, 2) for p in ps):
                    for p in ps:
                        self._file_peers[p.index] = next(r for r in ranks if r != p.rank)
        return self._file_peers.get(part.index)

    def set_clock_offsets(self, offsets: dict):
        """Subtract ``offsets[part index]`` (int ns) from every aligned time of that part."""
        for p in self.parts:
            p.clock_offset_ns = int(offsets.get(p.index, 0))

    def keep_rows(self, step):
        """Boolean mask of the rows to keep under ``steps`` (all when none were given): the row's
        ProfilerStep number (``step``, int64 array) is one of them."""
        step = np.asarray(step)
        if self.steps is None:
            return np.ones(len(step), bool)
        return np.isin(step, list(self.steps))

    @staticmethod
    def iteration_of(part) -> int:
        """The part's iteration (its trace file's), ``UNKNOWN_ITERATION`` when unknown."""
        return UNKNOWN_ITERATION if part.iteration is None else int(part.iteration)

    def read_kernels(self, part, columns=KERNEL_COLUMNS, kind=None) -> dict:
        """The part's kernel columns as numpy arrays (strings as object arrays), filtered by
        ``steps`` and optionally by ``kind`` ("compute"/"communication"/"memory"), sorted by
        start.  ``iteration`` is the part's (``iteration_of``), ``step`` the file's ``step``
        column; ``ts_ns``/``end_ns`` stay rank-local."""
        return read_parquet_columns(part.files(KERNELS), columns, self, part, kind)

    def meta(self) -> dict:
        """JSON-able description of the parts and the alignment."""
        return {"alignment": self.alignment,
                "parts": [{"index": p.index, "dir": str(p.dir), "rank": p.rank, "iteration": p.iteration,
                           "source": p.source, "base_time_ns": p.base_time_ns, "merged": p.merged,
                           "start_ns": p.start_ns, "shift_ns": p.shift_ns, "clock_offset_ns": p.clock_offset_ns,
                           "device_name": p.device_name} for p in self.parts],
                "warnings": self.warnings}


def read_parquet_columns(path, columns, job=None, part=None, kind=None) -> dict:
    """Columns of one rank's kernels file (``path``, or a list of its part files) as numpy
    arrays, rows filtered (see ``Job.read_kernels``).  ``"iteration"`` is the part's
    iteration (the file has no ``iteration`` column: that name is the dataset's partition key;
    ``UNKNOWN_ITERATION`` without a part), ``"step"`` the file's ``step`` column
    (``ProfilerStep#N``, -1 none)."""
    files = [Path(p) for p in (path if isinstance(path, (list, tuple)) else [path]) if Path(p).is_file()]
    fcols = _file_columns(columns, kind)
    return kernel_columns(read_partition(files, fcols, schema_of(KERNELS)), columns, job, part, kind)


def _file_columns(columns, kind) -> list:
    """The kernels file's columns ``kernel_columns`` reads for ``columns`` (``iteration`` is the part's)."""
    cols = dict.fromkeys(list(columns) + ["ts_ns", "step"] + (["kind"] if kind else []))
    return [c for c in cols if c != "iteration"]


def kernel_columns(t, columns, job=None, part=None, kind=None) -> dict:
    """``read_parquet_columns`` of a kernels table already read (``t``: pyarrow, with ``columns``,
    ``ts_ns``, ``step`` and, with ``kind``, ``kind``; other columns are left out)."""
    fcols = _file_columns(columns, kind)
    if kind is not None:
        t = t.filter(pc.equal(t["kind"], kind))
    out = {c: column_numpy(t[c]) for c in fcols}
    if job is not None:
        keep = job.keep_rows(out["step"])
        out = {c: v[keep] for c, v in out.items()}
    if "iteration" in columns:
        out["iteration"] = np.full(len(out["ts_ns"]), Job.iteration_of(part) if part is not None
                                   else UNKNOWN_ITERATION, np.int64)
    o = np.argsort(out["ts_ns"], kind="stable")
    return {c: v[o] for c, v in out.items()}


def column_numpy(col):
    """A pyarrow column as numpy; a string column as an object array whose equal values are one
    Python str (through its dictionary): 8 bytes per row instead of a str object per row, which
    for a job's repeated kernel names, kinds and group names is most of the memory."""
    import pyarrow as pa
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        values, idx = dictionary_numpy(col)
        return values[idx] if len(idx) else np.zeros(0, object)
    return col.to_numpy(zero_copy_only=False)


def dictionary_numpy(col) -> tuple:
    """A pyarrow string column as ``(values, idx)``: its distinct values, then None, as an object
    array (one str each), and per row the index of its value (int, a null's the last: None), so that
    ``values[idx]`` is ``column_numpy(col)`` and a per-value flag costs one test per distinct value."""
    d = pc.dictionary_encode(col).combine_chunks()
    values = np.asarray(d.dictionary.to_pylist() + [None], object)
    idx = d.indices.fill_null(len(d.dictionary)) if d.indices.null_count else d.indices
    return values, idx.to_numpy(zero_copy_only=False)


def _ranks(ranks) -> str:
    """``rank 3`` / ``ranks 0-7, 12`` (runs of consecutive ranks as ranges)."""
    rs, runs = sorted(ranks), []
    for r in rs:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    text = ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)
    return f"rank {text}" if len(rs) == 1 else f"ranks {text}"


def _list(xs) -> str:
    return ", ".join(map(str, sorted(xs)))
