"""What aggregate's parent keeps of each rank's result (``streamtrace.aggregate.run``'s per-rank task) as
it comes back, in any order, until the job's tables are written: the ranks' top kernels summed as
they come (``TopKernels``), the ranks' phase rows pickled (``Kept``).  At 4,096 synthetic ranks the
phase rows as dicts held ~52 MiB and every rank's top kernels ~28 MiB (``tracemalloc``, a rank's result
unpickled) while the ranks ran; kept this way (and the explaining tables written a row group at a time),
the parent's heap peak fell 218.3 -> 168.6 MiB (memray, ``--no-critical-path``)."""
from __future__ import annotations

import pickle

import numpy as np


class TopKernels:
    """The job's top kernels ``{name: [kind, count, total_ns]}`` summed over the ranks' (``add``, in any
    order of ranks), as summing them in part order gives them (``result``): each name in the place, and
    with the kind, of its first appearance in part order (the least part, then its place in that part's
    dict); counts and totals summed (int).  Holds one entry a distinct name, not every rank's dict."""

    def __init__(self):
        self._acc: dict = {}

    def add(self, part: int, top: dict):
        """Part ``part``'s top kernels ``{name: (kind, count, total_ns)}``."""
        for pos, (name, (kind, count, total)) in enumerate(top.items()):
            a = self._acc.get(name)
            if a is None:
                self._acc[name] = [kind, count, total, part, pos]
                continue
            a[1] += count
            a[2] += total
            if (part, pos) < (a[3], a[4]):
                a[0], a[3], a[4] = kind, part, pos

    def result(self) -> dict:
        """``{name: [kind, count, total_ns]}`` in the order of the names' first appearance."""
        return {n: a[:3] for n, a in sorted(self._acc.items(), key=lambda x: (x[1][3], x[1][4]))}


PHASE, TOP, PART = 0, 4, 9
"""The places in a rank's result of its phase rows, its top kernels and its part index."""


class Kept:
    """``run_tasks``' ``on_result`` for aggregate's ranks: each result with its top kernels taken into
    ``top`` (None in their place) and its phase rows pickled (``phase_rows`` reads them back)."""

    def __init__(self):
        self.top = TopKernels()

    def __call__(self, r: tuple) -> tuple:
        self.top.add(r[PART], r[TOP])
        return (pickle.dumps(r[PHASE], protocol=pickle.HIGHEST_PROTOCOL),) + r[1:TOP] + (None,) + r[TOP + 1:]


def phase_rows(kept) -> list:
    """A result's phase rows (list of dicts), pickled by ``Kept`` or as the task returned them."""
    return pickle.loads(kept) if isinstance(kept, bytes) else kept


class PhaseColumns:
    """The ranks' phase rows (``rank_phase``'s) held as columns, one list a column (``columns``: the names),
    not a dict a row: 163,840 rows at 16,384 synthetic ranks.  ``add`` takes a part's rows (dicts; a column a
    row lacks is None), in part order; ``windows`` collects, as they come, what ``pipeline_rows`` reads of
    them (``pipeline.phase_windows``).  ``set_coords`` and ``set_overlap`` then fill the topology's and the
    overlap's columns, and ``arrays`` gives the table's columns as ``run._columns(run._sorted(rows))`` gives
    them for the same rows as dicts."""

    def __init__(self, columns, windows=None):
        self.cols = {c: [] for c in columns}
        self.windows: dict = {}
        self._windows = windows
        self.n = 0

    def add(self, rows: list):
        """A part's rows."""
        for c, col in self.cols.items():
            col.extend(r.get(c) for r in rows)
        if self._windows is not None:
            self._windows(rows, self.windows)
        self.n += len(rows)

    def set_coords(self, coords: dict):
        """Each row's values of ``coords[rank]`` (``{rank: {column: value}}``) in place of its own, as
        ``row.update(coords.get(rank, {}))`` sets them."""
        for c in {k for v in coords.values() for k in v}:
            col = self.cols.setdefault(c, [None] * self.n)
            for i, rank in enumerate(self.cols["rank"]):
                got = coords.get(rank)
                if got is not None and c in got:
                    col[i] = got[c]

    def set_overlap(self, pct):
        """``overlap_pct`` = ``pct(overlap_ns, comm_ns)`` of each row."""
        self.cols["overlap_pct"] = [pct(o, c) for o, c in zip(self.cols["overlap_ns"], self.cols["comm_ns"])]

    def arrays(self, order, key) -> dict:
        """The columns ``order`` as arrays (``column_array``), the rows
        sorted by ``key(i)`` (stable); each column's list let go once made an array."""
        rows = sorted(range(self.n), key=key)
        out = {}
        for c in order:
            col = self.cols.pop(c, None)
            vals = [None] * len(rows) if col is None else [col[i] for i in rows]
            del col
            out[c] = column_array(vals)
        return out


def column_array(vals: list) -> np.ndarray:
    """A table column's values as an array: an object array where a value is None or a str (pyarrow makes
    it a nullable or a string column), else ``np.asarray``'s (int64, float64, bool)."""
    return np.asarray(vals, object) if any(v is None or isinstance(v, str) for v in vals) else np.asarray(vals)
