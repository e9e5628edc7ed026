"""The matched collectives' members as the critical path's job graph meets them: read once from
``collectives_ranks.parquet``, held by part (``PartMembers``), so that a step's graph matches its
anchors to them a batch of parts at a time (``critical_path._build``) instead of coding every key of
the step at once (~2 M keys of three int64 and their sort at 4,096 synthetic ranks).
"""
from __future__ import annotations

import numpy as np

from ..events.dataset import read_arrow
from ..runtime.tuning import trim
from .alignment import dictionary_numpy
from .critical_graph import joined_ints, narrow, search
from .folder import COLLECTIVES_RANKS, columns, table_path

P2P = ("send", "recv", "sendrecv")
"""Point-to-point collectives (``collectives_ranks.parquet``'s ``collective``, lower case): a receive
posts early by design, so their waits are not a rank's lateness (``streamtrace.aggregate.critical_ranks``)."""


class PartMembers:
    """The members of complete matched instances (two or more ranks), ordered by part (the table's order
    kept within a part): ``part``, ``correlation``, ``stream`` and ``instance`` columns (int32 while
    every value fits, else int64: 16 bytes a member where an int64[n, 3] key and an int64 instance held
    32) and ``starts`` (int64[max part + 2]: part ``p``'s members are rows ``starts[p]:starts[p + 1]``)."""

    def __init__(self, part, correlation, stream, instance):
        o = np.argsort(np.asarray(part), kind="stable")
        self.part, self.correlation, self.stream, self.instance = (
            joined_ints(np.asarray(c)[o]) for c in (part, correlation, stream, instance))
        del o
        top = int(self.part[-1]) + 1 if len(self.part) else 0
        self.starts = search(self.part, np.arange(top + 1))     # (in ``part``'s type: no int64 copy of it)

    @classmethod
    def read(cls, outdir) -> "PartMembers":
        """The matched members of the aggregate folder ``outdir`` (none when it has no
        ``collectives_ranks.parquet``)."""
        p = table_path(outdir, COLLECTIVES_RANKS)
        if not p.is_file():
            return cls(*(np.zeros(0, np.int64) for _ in range(4)))
        names = columns(COLLECTIVES_RANKS, "instance", "part", "correlation", "stream")
        col = lambda c: read_arrow(p, [c])[c].to_numpy()  # noqa: E731  (a column at a time, narrowed as read:
        inst = col(names[0])                               # the four as int64 and their copies were 64 MB at
        keep = np.bincount(inst)[inst] >= 2 if len(inst) else np.zeros(0, bool)     # 4,096 synthetic ranks)
        inst = narrow(inst[keep])
        part, corr, stream = (narrow(col(c)[keep]) for c in names[1:])
        trim()                 # (the reads' Parquet pages and int64 columns, freed: ~17 MB of glibc's heap)
        return cls(part, corr, stream, inst)

    def __len__(self) -> int:
        return len(self.part)

    def release(self):
        """Let the members' columns go (none left: a graph that has matched its last batch of parts; 10 MB
        at 4,096 synthetic ranks, not held under its barriers' build)."""
        self.part, self.correlation, self.stream, self.instance = (np.zeros(0, np.int32) for _ in range(4))
        self.starts = np.zeros(1, np.int64)

    def of(self, first: int, last: int) -> tuple:
        """``(keys, instance)`` of parts ``first`` .. ``last`` (inclusive): keys as the three key columns
        (``critical_graph.matched_members``' members; views, not copies)."""
        top = len(self.starts) - 1                      # (parts past the last member's: no rows)
        rows = slice(int(self.starts[min(first, top)]), int(self.starts[min(last + 1, top)]))
        return (self.part[rows], self.correlation[rows], self.stream[rows]), self.instance[rows]


def p2p_instances(outdir) -> set:
    """The matched instances that are point-to-point transfers (``P2P``, any case).  The ``collective``
    column is tested once a distinct text (``alignment.dictionary_numpy``), not decoded a row: 4,096
    synthetic ranks' 655,360 members held a ~30 MB transient as one lowered Arrow string a row."""
    p = table_path(outdir, COLLECTIVES_RANKS)
    if not p.is_file():
        return set()
    t = read_arrow(p, columns(COLLECTIVES_RANKS, "instance", "collective"))
    values, idx = dictionary_numpy(t["collective"])
    p2p = np.asarray([v is not None and v.lower() in P2P for v in values.tolist()], bool)[idx]
    return set(np.unique(t["instance"].to_numpy()[p2p]).tolist())
