"""``rank_phase``'s rows streamed through aggregate's parent: each part's phase rows (dicts, as
``rank_results.Kept.gathered`` reads them back) completed as they come (the topology's coordinates, the
derived columns), one chunk a (iteration, step, rank) of the part as lists of values, and spilled; the
pipeline's windows collected; then the table written in ``row_key`` order a group of chunks at a time
(``explain.write_streamed``, typed from the chunks' kinds), so that the parent never holds the table.

At 4,096 synthetic ranks (40,960 rows) the phase rows gathered as columns, sorted and written set
aggregate's parent's peak, the largest process of the command: 202.5 MB, 193.2-194.7 streamed (bench/RESULTS.md,
issue 48's sixty-second session).
"""
from __future__ import annotations

import functools
import pickle

import numpy as np

from ..events.dataset import write_table
from ..runtime import spillfile
from .explain import column_kinds, fold_kinds, joined_types, write_streamed
from .rank_results import RowRules, column_array


def row_key(iteration, step, rank, device, start_ns, phase) -> tuple:
    """The order of the per-rank tables' rows: iteration, step, rank, device, start (None first), phase."""
    return iteration, step, rank, device, start_ns if start_ns is not None else -1, phase


def phase_order(cols: dict) -> np.ndarray:
    """The rows of ``cols`` (``{column: values}``, lists or arrays as ``rank_results.column_array`` makes them:
    ``RowColumns.columns``') in ``row_key`` order (stable; a row without a phase: ""), int64 row indices:
    ``np.lexsort`` of the keys as numbers where iteration, step, rank and device are all ints (the phases coded
    in their sorted order, a start None as -1), else Python's sort of ``row_key`` tuples (40,960 of them were
    ~4 MB of aggregate's parent at its peak, 4,096 synthetic ranks; the keys as lists of Python ints, +5 MB
    over its level, where its typed columns are read as they are).  Raises TypeError where Python cannot
    compare two rows' keys (a device None beside an int)."""
    it, st, rank, dev, start, phase = (cols[c] for c in ("iteration", "step", "rank", "device", "start_ns", "phase"))
    phase = ["" if p is None else p for p in phase]
    keys = [_int_keys(x) for x in (it, st, rank, dev)]
    if all(k is not None for k in keys):
        code = {p: i for i, p in enumerate(sorted(set(phase)))}
        ph = np.fromiter((code[p] for p in phase), np.int64, len(phase))
        s = _int_keys(start)
        if s is None:
            s = np.fromiter((-1 if x is None else x for x in start), np.int64, len(start))
        return np.lexsort((ph, s, *keys[::-1]))
    return np.asarray(sorted(range(len(it)), key=lambda i: row_key(it[i], st[i], rank[i], dev[i], start[i], phase[i])),
                      np.int64)


def _int_keys(values) -> np.ndarray | None:
    """``values`` (a list, or an array: a signed integer one as it is, an object one's values) as int64 when
    they are all ints (not bool), else None."""
    if isinstance(values, np.ndarray):
        if values.dtype.kind == "i":
            return values.astype(np.int64, copy=False)
        if values.dtype != object:
            return None
    if not all(type(v) is int for v in values):
        return None
    return np.fromiter(values, np.int64, len(values))


KINDS_ROWS = 1_024
"""Rows of chunks whose kinds ``PhaseTable`` reads at once (``explain.column_kinds`` a chunk, ~10 rows a
part, was ~0.35 CPU-s of aggregate's parent at 1,024 synthetic ranks)."""


class PhaseTable:
    """The ``rank_phase`` table a part's rows at a time (``add``, in part order), written by ``write``.

    ``columns``: the table's columns; ``rules`` (``rank_results.RowRules``): how a row is completed (the
    topology's coordinates, the derived columns); ``windows``: what
    ``pipeline_rows`` reads of the rows (``windows(rows)``: ``pipeline.phase_windows``), collected into
    ``self.windows``, each key's an (n, 2) int64 array; ``spill``: a folder the chunks are appended to
    (``runtime.spillfile``; None: held).  Nothing but an index entry a chunk, the columns' kinds folded
    and the windows is held between ``add`` and ``write``."""

    def __init__(self, columns, rules: RowRules | None = None, windows=None, spill=None):
        self.columns = tuple(columns)
        self._rules = rules or RowRules()
        self._windows = windows
        self._spill = spill
        self.windows: dict = {}
        self._index: list = []          # ((iteration, step, rank), part, chunk or its record)
        self._kinds: dict = {}
        self._pending: list = []        # (chunks whose kinds are not folded yet)
        self.n = self._parts = self._pending_rows = 0

    def add(self, rows: list):
        """A part's rows (dicts; a column a row lacks is None), in part order."""
        if self._windows is not None:
            for key, w in self._windows(rows).items():
                w = np.asarray(w, np.int64).reshape(-1, 2)
                old = self.windows.get(key)
                self.windows[key] = w if old is None else np.concatenate([old, w])
        groups: dict = {}
        for r in rows:
            groups.setdefault((r.get("iteration"), r.get("step"), r.get("rank")), []).append(r)
        for key, group in groups.items():
            vals = self._values(group)
            self._pending.append(vals)
            self._pending_rows += len(group)
            rec = vals if self._spill is None else \
                spillfile.append(self._spill, pickle.dumps(vals, protocol=pickle.HIGHEST_PROTOCOL))
            self._index.append((key, self._parts, rec))      # (lists of Python objects: pickled ~7x faster
        self._parts += 1                                      # than their object arrays)
        self.n += len(rows)
        if self._pending_rows >= KINDS_ROWS:
            self._fold()

    def _fold(self):
        """The pending chunks' kinds folded, as one chunk's (``column_kinds`` of their rows joined)."""
        if self._pending:
            fold_kinds(self._kinds, column_kinds({c: column_array([x for v in self._pending for x in v[c]])
                                                  for c in self.columns}))
            self._pending.clear()
            self._pending_rows = 0

    def _values(self, rows: list) -> dict:
        """``rows`` completed (``RowRules.column``) as ``{column: list of values}``."""
        raw = functools.cache(lambda c: [r.get(c) for r in rows])     # (a column's own values read once)
        return {c: self._rules.column(c, raw) for c in self.columns}

    def _groups(self):
        """Each (iteration, step, rank)'s chunks joined, in ``row_key`` order (the groups in Python's
        order of their keys, a group's rows in Python's stable sort by the rest of it, ties in part order:
        ``phase_order``'s order, without its numpy calls a group, ~10 rows): ``{column: list}``."""
        self._index.sort(key=lambda e: (e[0], e[1]))
        i, n = 0, len(self._index)
        while i < n:
            j = i + 1
            while j < n and self._index[j][0] == self._index[i][0]:
                j += 1
            chunks = [self._read(e[2]) for e in self._index[i:j]]
            vals = chunks[0] if len(chunks) == 1 else {c: [x for ch in chunks for x in ch[c]] for c in self.columns}
            dev, start, phase = vals["device"], vals["start_ns"], vals["phase"]   # (the rest of ``row_key``)
            o = sorted(range(len(dev)), key=lambda k: (dev[k], -1 if start[k] is None else start[k],
                                                       "" if phase[k] is None else phase[k]))
            yield {c: [v[k] for k in o] for c, v in vals.items()}
            i = j

    def _read(self, rec) -> dict:
        return rec if self._spill is None else pickle.loads(spillfile.read_at(*rec))

    def write(self, outdir, name: str) -> list:
        """Table ``name`` (``<name>.parquet`` and ``.csv``) into ``outdir``, as ``events.dataset.write_table``
        writes the rows as dicts completed, sorted by ``row_key`` and made columns by ``column_array``
        (its Parquet rows and schema, its CSV byte for byte): streamed (``explain.write_streamed``) where
        the chunks' kinds type every column (``explain.joined_types``), else (text among numbers, an int
        past int64) from the whole columns, as that definition writes them (and fails: pyarrow's errors).
        Returns the paths."""
        self._fold()
        types = joined_types(self._kinds)
        if self._index and all(types[c][1] is not None for c in self.columns):
            return write_streamed(outdir, name, self.columns, types,      # (made the joined column's dtype at
                                  ({c: np.asarray(v, types[c][0]) for c, v in g.items()}   # once: the values
                                   for g in self._groups()))          # ``column_array`` then a cast gives)
        vals: dict = {c: [] for c in self.columns}
        for group in self._groups():
            for c, v in group.items():
                vals[c] += v
        return write_table(outdir, name, {c: column_array(vals.pop(c)) for c in self.columns}, csv=True)
