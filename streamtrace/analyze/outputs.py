"""The analysis folder (``streamtrace analyze -o DIR``) as a kind of output folder
(``OutputKind``): ``summary.json``, ``kernels/`` and ``ops/``, and where
written ``cpu_collectives/`` (a CPU-only rank's gloo collectives), ``op_perf/`` and ``kernel_perf/``
(``analyze --op-perf``), ``cuda_sync/`` (newer Kineto's GPU sync events: ``streamtrace.analyze.cuda_sync``)."""
from __future__ import annotations

import json
from collections.abc import Sequence

from ..events.load import Outputs, read_dataset, register
from ..runtime.errors import DataError
from ..trace.merged_groups import GroupTable

# The analysis folder's datasets (one Parquet file per iteration and rank), by name: every module that
# writes or reads one names it by these constants.
KERNELS = "kernels"
OPS = "ops"
CPU_COLLECTIVES = "cpu_collectives"
OP_PERF = "op_perf"
KERNEL_PERF = "kernel_perf"
CUDA_SYNC = "cuda_sync"
#: the analysis folder's datasets, in the order ``tables()`` lists them
TABLES = (KERNELS, OPS, CPU_COLLECTIVES, OP_PERF, KERNEL_PERF, CUDA_SYNC)
#: a rank's key in ``summary.json`` listing the step patterns analyze marked its steps by (list of str;
#: written only when they are not the Kineto default ``^ProfilerStep#(\\d+)$``: absent means that)
STEP_PATTERNS_KEY = "step_patterns"
#: ``summary.json``'s table of the job's process groups (the distinct ``pg_config`` entries of every rank's
#: ``distributedInfo``, first seen first); a rank's ``trace_metadata`` lists its own by index under
#: ``PG_GROUPS_KEY`` (``share_process_groups``, ``rank_trace_metadata``)
PG_ENTRIES_KEY = "pg_entries"
PG_GROUPS_KEY = "pg_groups"


def share_process_groups(ranks: list) -> list:
    """Move each rank's process groups (``trace_metadata["pg_entries"]``: its ``pg_config`` entries,
    each with the group's member list, so O(world size) a rank) to one table for the job, in place:
    returns the distinct entries, first seen first; each rank's ``trace_metadata`` keeps their
    indices under ``PG_GROUPS_KEY``.  A group's members are written once, not once per member: at
    4,096 synthetic ranks ``summary.json`` was 241 MB (59 KB a rank, 19 KB at 1,024: quadratic).
    A rank's entries may be given as their JSON text (bytes: how analyze's workers hand them back).
    ``ProcessGroups`` does it as the ranks come back."""
    groups = ProcessGroups()
    for i, r in enumerate(ranks):
        groups.add(r, i)
    return groups.entries()


class ProcessGroups:
    """``share_process_groups`` one rank at a time, in any order (``add``; ``on_result`` for
    ``run_tasks``: each task's ranks as they come back), then ``entries`` once all are in: the table and
    indices ``share_process_groups`` gives for the ranks in the order of their ``key``, without every
    rank's entries held until the last rank is done (their JSON text: ~25 KB a rank, 100 MB at 4,096
    synthetic ranks, O(world size^2) in all).  An entry's place is the least (rank's key, position in
    its list) it was seen at, and the copy written is the one seen there (equal entries may list their
    keys in another order); the ranks' indices are renumbered by ``entries``.  ``key(rank entry)``:
    the ranks' sort order (comparable, distinct per rank), for ``on_result``."""

    def __init__(self, key=None, keep: bool = True):
        self.key = key
        self._table = GroupTable()     # (by text only: each rank's entries are parsed anew)
        self._first: list = []         # by table index: the least (rank's key, position) it was seen at
        self._given: list = []         # the ranks' trace_metadata given indices (``keep``)
        self._keep = keep

    def add(self, rank_entry: dict, key) -> None:
        """Take ``rank_entry``'s process groups out of its ``trace_metadata`` (as ``share_process_groups``),
        the rank's place in the order being ``key``."""
        tm = rank_entry.get("trace_metadata")
        if not isinstance(tm, dict) or PG_ENTRIES_KEY not in tm:
            return
        entries = tm.pop(PG_ENTRIES_KEY) or []
        ids = []
        for pos, e in enumerate(json.loads(entries) if isinstance(entries, (bytes, str)) else entries):
            i = self._table.index(e)
            if i is None:
                continue
            if i == len(self._first):
                self._first.append((key, pos))
            elif (key, pos) < self._first[i]:           # (equal entries may differ in their keys' order:
                self._first[i] = (key, pos)               # the table writes the copy seen first in the
                self._table.entries[i] = e                # ranks' order, as a plain reading would)
            ids.append(i)
        tm[PG_GROUPS_KEY] = ids
        if self._keep:
            self._given.append(tm)

    def on_result(self, ranks: list) -> list:
        """``add`` each of one task's rank entries (``key`` of each); returns them."""
        for r in ranks:
            self.add(r, self.key(r))
        return ranks

    def entries(self) -> list:
        """The distinct entries, first seen first in the ranks' order; each rank's indices renumbered
        to them (call once, after the last ``add``; made with ``keep=False``, the ranks' entries were not
        kept: ``renumber`` each as it is read back)."""
        order = sorted(range(len(self._first)), key=self._first.__getitem__)
        self._new = [0] * len(order)
        for n, i in enumerate(order):
            self._new[i] = n
        for tm in self._given:
            self.renumber(tm)
        self._given = []
        return [self._table.entries[i] for i in order]

    def renumber(self, tm: dict) -> None:
        """A rank's ``trace_metadata`` given indices by ``add``, renumbered in place to the table
        ``entries`` returned (after ``entries``)."""
        if isinstance(tm, dict) and PG_GROUPS_KEY in tm:
            tm[PG_GROUPS_KEY] = [self._new[i] for i in tm[PG_GROUPS_KEY]]


def rank_trace_metadata(summary: dict, rank_entry: dict):
    """A rank's ``trace_metadata`` (``streamtrace.trace.metadata.trace_facts``) from ``summary.json``
    (``summary``) and its entry in ``ranks``, with ``pg_entries`` its process groups taken from the
    job's table (``share_process_groups``; an older summary lists them per rank: returned as it is);
    an index outside the table is left out.  None when the summary has none for the rank."""
    tm = rank_entry.get("trace_metadata") if isinstance(rank_entry, dict) else None
    if not isinstance(tm, dict) or PG_GROUPS_KEY not in tm:
        return tm
    table = summary.get(PG_ENTRIES_KEY) if isinstance(summary.get(PG_ENTRIES_KEY), list) else []
    ids = tm[PG_GROUPS_KEY] if isinstance(tm[PG_GROUPS_KEY], list) else []
    out = {k: v for k, v in tm.items() if k != PG_GROUPS_KEY}
    out[PG_ENTRIES_KEY] = [table[i] for i in ids if type(i) is int and 0 <= i < len(table)]
    return out


def schema_of(dataset: str):
    """The pyarrow schema of the dataset named ``dataset``, as analyze writes it: ``KERNELS`` and ``OPS``
    (``streamtrace.events.dataset.schemas``), ``CUDA_SYNC`` and ``CPU_COLLECTIVES`` (their modules'
    ``SCHEMA``); None for the others (their files say theirs).  The readers of an analysis folder check
    its files against it (``streamtrace.events.dataset.read_partition``)."""
    if dataset == CUDA_SYNC:
        from .cuda_sync import SCHEMA
        return SCHEMA
    if dataset == CPU_COLLECTIVES:
        from .cpu_collectives import SCHEMA
        return SCHEMA
    from ..events.dataset import schemas
    return dict(zip((KERNELS, OPS), schemas())).get(dataset)


NOT_A_SUMMARY = 'not an analysis summary (expected an object with a "ranks" list)'


def check_rank_entry(path, i: int, r, seen: dict) -> None:
    """Raise ``DataError`` naming ``path`` (a ``summary.json``) when its ``i``-th rank entry ``r`` is not
    ``{"rank": int >= 0, "iteration": int or null, "source": str}`` or names a (rank, iteration) an earlier
    entry did (``seen``: ``{(rank, iteration): index}`` of the entries before, updated)."""
    ok = isinstance(r, dict) and type(r.get("rank")) is int and r["rank"] >= 0 \
        and (r.get("iteration") is None or type(r["iteration"]) is int) and isinstance(r.get("source", ""), str)
    if not ok:
        raise DataError(path, f'ranks[{i}] is not {{"rank": int >= 0, "iteration": int or null, "source": str}}')
    j = seen.setdefault((r["rank"], r.get("iteration")), i)
    if j != i:
        it = f" of iteration {r['iteration']}" if r.get("iteration") is not None else ""
        raise DataError(path, f"ranks[{i}]: rank {r['rank']}{it} is listed twice (ranks[{j}] too): damaged, "
                              f"or edited; analyse the traces again")


@register
class Analysis(Outputs):
    """``streamtrace analyze -o DIR``: ``kernels`` and ``ops`` (with ``iteration``, ``rank`` int64
    columns, rows in analyze's order), and ``cpu_collectives``, ``op_perf``, ``kernel_perf``,
    ``cuda_sync`` where written; ``summary`` is ``summary.json``."""
    kind, marker, precedence = "analysis", "summary.json", 3
    missing = "{path}: not an analysed folder (no {marker}; run streamtrace analyze first)"

    @property
    def summary(self) -> dict:
        """``summary.json`` as a dict; as ``analyze`` returns it, its ``ranks`` (a ``RankEntries``, read from the
        file as asked for) are read into a list the first time ``summary`` is asked for, not before: the
        mapping's ``result["ranks"]`` gives them as that ``RankEntries``, without a list of every rank."""
        ranks = self._summary.get("ranks")
        if isinstance(ranks, Sequence) and not isinstance(ranks, (list, tuple, str)):
            self._summary["ranks"] = list(ranks)
        return self._summary

    @summary.setter
    def summary(self, value: dict):
        self._summary = value

    def _fields(self) -> dict:
        return self._summary              # (``ranks`` as given: the mapping's ``result["ranks"]`` reads no list)

    @classmethod
    def owns(cls, name) -> bool:
        """The top-level entries of an analysis folder (old spill folders included)."""
        return name in (cls.marker, *TABLES) or name.startswith(".streamtrace-")

    def check(self):
        """``summary.json`` (``read``): an object whose ``"ranks"`` is a list of objects with an int
        ``"rank"`` >= 0, an int or null ``"iteration"`` and a string ``"source"``, no two of one rank and
        iteration (analyze refuses two inputs of one rank: ``RankConflictError``; they would share one
        partition); else a ``DataError`` naming it."""
        sp, summ = self.path / self.marker, self.summary
        if not isinstance(summ, dict) or not isinstance(summ.get("ranks"), list):
            raise DataError(sp, NOT_A_SUMMARY)
        seen: dict = {}
        for i, r in enumerate(summ["ranks"]):
            check_rank_entry(sp, i, r, seen)

    @staticmethod
    def step_patterns(rank_entry) -> list | None:
        """The step patterns one ``ranks[*]`` entry of ``summary.json`` records (``STEP_PATTERNS_KEY``,
        a list of str); None when it records none or not a non-empty list of str (the Kineto default)."""
        v = rank_entry.get(STEP_PATTERNS_KEY) if isinstance(rank_entry, dict) else None
        return list(v) if isinstance(v, list) and v and all(isinstance(x, str) for x in v) else None

    def tables(self):
        return [n for n in TABLES if (self.path / n).is_dir()]

    def _read(self, name):
        return read_dataset(self.path, name, schema=schema_of(name))
