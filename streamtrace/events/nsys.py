"""An Nsight Systems SQLite export into an event store (``ingest_nsys``), the same rows and
keys as ``streamtrace.events.ingest.ingest`` gives a Kineto trace: GPU rows keyed
``("gpu", rank, device, stream)`` (a Kineto GPU event's pid is its device, its tid its stream),
CPU rows (CUDA runtime/driver calls, NVTX ranges) keyed ``("cpu", rank, pid, tid)``, names and
categories interned in one ``StringTable``, NCCL payloads as
collective-args rows.  Memory: one batch of rows at a time, plus the store."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..trace.nsys import KINDS, NsysExport
from .columns import StringTable
from .store import STORE_DTYPE

#: a process's correlation ids are offset by its place in its rank << this, when one rank holds
#: several processes (their ``correlationId`` sequences overlap)
CORR_SHIFT = 40


@dataclass
class NsysIngest:
    """What ``ingest_nsys`` read: the string table and collective-args rows the stored rows
    refer to, the export (processes, version, notices, warnings), the rows left out
    (``unusable``: no usable start/end; ``foreign``: CPU rows of processes without GPU work;
    ``unowned``: GPU rows without a usable process id, ``globalPid`` not an integer of 0 or more)."""
    table: StringTable
    comm_rows: list
    export: NsysExport
    unusable: int = 0
    foreign: int = 0
    unowned: int = 0
    ranks: dict = field(default_factory=dict)


def ingest_nsys(path, store, rank_map=None, base_rank=0, progress=None, ordered=True,
                gpu_only=False) -> NsysIngest:
    """Read the export at ``path`` into ``store`` (module docstring).  ``rank_map``:
    ``{"<pid>" | "<file>:<pid>": rank}``; ``base_rank``: the first rank of processes ranked by
    order; ``progress(rows read)``: called per batch; ``ordered=False``: each key's rows in the
    tables' rowid order, not in start order (no SQLite sort; what ``analyze`` reads:
    ``read_order``); ``gpu_only``: the CPU tables (runtime
    calls, NVTX ranges) are not read at all.  Raises
    ``TraceError`` for a file that is not a readable export."""
    ex = NsysExport(path, rank_map, base_rank)
    table = StringTable()
    cats = np.asarray([table.id(k) for k in KINDS], np.int32)
    procs = sorted(ex.processes, key=lambda p: (p.rank, p.host, p.pid))
    rank_of = {p.key: p.rank for p in procs}
    count: dict = {}
    shift = {}
    for p in procs:
        shift[p.key] = count.get(p.rank, 0) << CORR_SHIFT
        count[p.rank] = count.get(p.rank, 0) + 1
    default = None if ex.gpu_by_pid or not procs else procs[0].key   # GPU rows without a process
    names = _Names(ex, table)
    out = NsysIngest(table, ex.comm_rows, ex, ranks=count)
    done = 0
    for gpu in (True, False) if not gpu_only else (True,):
        for b in ex.gpu_batches(ordered) if gpu else ex.cpu_batches(ordered):
            proc = b["proc"] if default is None or not gpu else np.full(len(b), default, np.int64)
            keys = np.unique(proc)
            rank = np.full(len(b), -1, np.int64)
            corr_off = np.zeros(len(b), np.int64)
            for k in keys.tolist():
                sel = proc == k
                rank[sel] = rank_of.get(k, -1)
                corr_off[sel] = shift.get(k, 0)
            kept = rank >= 0
            if gpu:
                out.unowned += int(np.count_nonzero(~kept))
            else:
                out.foreign += int(np.count_nonzero(~kept))
            b, rank, corr_off = b[kept], rank[kept], corr_off[kept]
            rows = np.empty(len(b), STORE_DTYPE)
            rows["ts"], rows["dur"] = b["ts"], b["dur"]
            rows["cat"] = cats[b["kind"]]
            rows["name"] = names.map(b["name"])
            rows["correlation"] = np.where(b["correlation"] >= 0, b["correlation"] + corr_off, -1)
            rows["external_id"] = -1
            rows["stream"], rows["device"], rows["comm"] = b["stream"], b["device"], b["comm"]
            cols = (rank, b["device"], b["stream"]) if gpu else (rank, b["proc"] & 0xFFFFFF, b["tid"])
            for key, sel in key_groups(cols):
                store.add(("gpu" if gpu else "cpu", *key), rows[sel])
            done += len(b)
            if progress is not None:
                progress(done)
    store.flush()
    out.unusable = ex.unusable
    return out


def key_groups(cols):
    """``(key tuple, row indices)`` of each distinct tuple of the int64 key columns ``cols``, rows
    in their order: one stable sort (an export's CPU rows, in start order, alternate between
    threads, so runs of one key are short)."""
    n = len(cols[0])
    if not n:
        return []
    order = np.lexsort(cols[::-1])
    ks = [c[order] for c in cols]
    change = np.zeros(n, bool)
    change[0] = True
    for k in ks:
        change[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], n)
    firsts = [k[starts].tolist() for k in ks]
    return [(tuple(int(f[i]) for f in firsts), order[a:b]) for i, (a, b) in enumerate(zip(starts.tolist(),
                                                                                       ends.tolist()))]


class _Names:
    """Export name ids -> ids of the string table, resolved once per distinct id."""

    def __init__(self, ex, table):
        self.ex, self.table = ex, table
        self.ids = np.zeros(0, np.int64)      # sorted export ids seen
        self.to = np.zeros(0, np.int32)

    def map(self, ids):
        u = np.unique(ids)
        new = u[~np.isin(u, self.ids)]
        if len(new):
            texts = self.ex.names(new.tolist())
            add = np.asarray([self.table.id(texts[i]) for i in new.tolist()], np.int32)
            allk = np.concatenate([self.ids, new])
            allv = np.concatenate([self.to, add])
            o = np.argsort(allk, kind="stable")
            self.ids, self.to = allk[o], allv[o]
        return self.to[np.searchsorted(self.ids, ids)]
