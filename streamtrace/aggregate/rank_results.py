"""What aggregate's parent keeps of each rank's result (``streamtrace.aggregate.run``'s per-rank task) as
it comes back, in any order, until the job's tables are written: the ranks' top kernels summed as
they come (``TopKernels``), what the job's tables gather and the what-if rows pickled, into the result or
appended to a spill file (``Kept``).  At 4,096 synthetic ranks the
phase rows as dicts held ~52 MiB and every rank's top kernels ~28 MiB (``tracemalloc``, a rank's result
unpickled) while the ranks ran; kept this way (and the explaining tables written a row group at a time),
the parent's heap peak fell 218.3 -> 168.6 MiB (memray, ``--no-critical-path``)."""
from __future__ import annotations

import pickle

import numpy as np

from ..runtime.tuning import trim


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


PHASE, RANK_ROWS, FB, TOP, STEPS, REPLAY, PART = 0, 1, 2, 4, 5, 8, 9
"""The places in a rank's result of its phase rows, its rank rows, its forward/backward compute, its top
kernels, its step durations, its what-if rows (``whatif_spill.spill_rows``' dict, or None) and its part
index."""
GATHERED = (PHASE, RANK_ROWS, FB, STEPS)
"""What the job's tables gather of a rank's result (``Kept.gathered``), in this order."""


class Kept:
    """``run_tasks``' ``on_result`` for aggregate's ranks: each result with its top kernels taken into
    ``top`` (None in their place) and what the job's tables gather of it (``GATHERED``) pickled: into the
    result (the phase rows; the rest as they came), or, with ``spill`` (a file path, created here), appended
    to that file as one record, the record's offset in the result in their place (None in the others), and
    its what-if rows as a second record (their offset in their place).  Spilled, the parent holds none of
    it while the ranks run (at 16,384 synthetic ranks ~7.6 KB a rank: its anonymous memory grew 124 MB over
    the ranks' pass).  ``gathered`` and ``replay_rows`` read them back, a result at a time."""

    def __init__(self, spill=None):
        self.top = TopKernels()
        self.spill = spill
        if spill is not None:
            open(spill, "xb").close()

    def __call__(self, r: tuple) -> tuple:
        self.top.add(r[PART], r[TOP])
        if self.spill is None:
            return (pickle.dumps(r[PHASE], protocol=pickle.HIGHEST_PROTOCOL),) + r[1:TOP] + (None,) + r[TOP + 1:]
        with open(self.spill, "ab") as f:
            at = f.tell()
            pickle.dump(tuple(r[i] for i in GATHERED), f, protocol=pickle.HIGHEST_PROTOCOL)
            replay = None if r[REPLAY] is None else f.tell()
            if replay is not None:
                pickle.dump(r[REPLAY], f, protocol=pickle.HIGHEST_PROTOCOL)
        return tuple(at if i == PHASE else replay if i == REPLAY else None if i in GATHERED or i == TOP else x
                     for i, x in enumerate(r))

    def gathered(self, results):
        """``(phase rows, rank rows, forward/backward compute, step durations)`` of each of ``results``
        (as ``__call__`` kept them), in their order: a generator, which reads the spill file a record at a
        time (a seek and a ``pickle.load`` a result)."""
        if self.spill is None:
            for r in results:
                yield (phase_rows(r[PHASE]),) + tuple(r[i] for i in GATHERED[1:])
            return
        with open(self.spill, "rb") as f:
            for r in results:
                f.seek(r[PHASE])
                yield pickle.load(f)

    def replay_rows(self, results):
        """The what-if rows of each of ``results`` (as ``__call__`` kept them; None where a result has
        none), in their order: a generator, reading the spill file a record at a time."""
        if self.spill is None:
            yield from (r[REPLAY] for r in results)
            return
        with open(self.spill, "rb") as f:
            for r in results:
                if r[REPLAY] is None:
                    yield None
                    continue
                f.seek(r[REPLAY])
                yield pickle.load(f)


def phase_rows(kept) -> list:
    """A result's phase rows (list of dicts), pickled by ``Kept`` or as the task returned them."""
    return pickle.loads(kept) if isinstance(kept, bytes) else kept


class RowRules:
    """How a per-rank table's rows are completed before they are written (``RowColumns``, ``rank_phase.PhaseTable``):
    ``coords`` ``{rank: {column: value}}``, set in place of a row's own values (as ``row.update(coords.get(rank,
    {}))`` sets them), then ``derived`` ``{column: (f, inputs)}``, the column ``f(*values)`` of the row's completed
    values of ``inputs`` (as ``row[column] = f(row[inputs[0]], ...)`` sets it)."""

    def __init__(self, coords: dict | None = None, derived: dict | None = None):
        self.coords = coords or {}
        self.derived = derived or {}
        self._coord_columns = frozenset(c for v in self.coords.values() for c in v) - set(self.derived)

    def sets(self, c) -> bool:
        """Whether column ``c``'s values are not (all) the rows' own: derived, or a coordinate."""
        return c in self.derived or c in self._coord_columns

    def column(self, c, raw) -> list:
        """Column ``c`` completed: ``raw(c)`` (the rows' own values of a column, a list of Python objects) with
        the coordinates set, or the derived column of its inputs' completed values."""
        if c in self.derived:
            f, inputs = self.derived[c]
            return list(map(f, *(self.column(x, raw) for x in inputs)))
        vals = raw(c)
        if c in self._coord_columns:
            coords = self.coords
            vals = [coords[r].get(c, v) if r in coords else v for r, v in zip(raw("rank"), vals)]
        return vals


class RowColumns:
    """A table's rows from every rank held as columns, not a dict a row: the ranks' rank rows (``ranks``'; the
    phase rows are streamed, ``rank_phase.PhaseTable``). ``add`` takes a part's rows (dicts; a
    column a row lacks is None), in part order, and keeps each column's values of the part compactly (``_chunk``:
    an int64, float64 or bool array where they are all of that one type or None, as Python objects otherwise).
    ``rules`` (``RowRules``)
    say how to fill the topology's columns and the computed ones (the overlap share, the step time), and
    ``columns`` gives the table's columns as ``run._columns`` gives them for the same rows as dicts, with the
    order to write them in (``rank_phase.row_key``). At 16,384 synthetic ranks the phase rows' columns as lists of
    Python objects held ~4.3 M objects, ~97 MB, in aggregate's parent; at 4,096 ranks the rank rows as dicts
    held 12.3 MB (``tracemalloc``)."""

    def __init__(self, columns, rules: RowRules | None = None):
        self._chunks: dict = {c: [] for c in columns}     # (joined: ``_runs``)
        self._tail: dict = {c: [] for c in columns}       # (the parts' since the last join)
        self.rules = rules or RowRules()
        self._texts: dict = {}
        self.n = self._parts = 0

    def add(self, rows: list):
        """A part's rows; every ``JOIN_PARTS`` parts, each column's chunks of those parts joined (``_runs``)."""
        for c, tail in self._tail.items():
            ch = _chunk([r.get(c) for r in rows])
            if isinstance(ch, list):          # (one str object a distinct text: a part's rows are unpickled
                ch = [self._texts.setdefault(v, v) if type(v) is str else v for v in ch]    # with their own
            tail.append(ch)                   # copies, 48,888 of them at 4,096 synthetic ranks, 2.2 MB)
        self._parts += 1
        if self._parts % JOIN_PARTS == 0:
            self._join()
        self.n += len(rows)

    def _join(self):
        for c, tail in self._tail.items():
            if tail:                                     # (a column ``columns`` made has no chunks left)
                self._chunks[c] += _runs(tail)
                tail.clear()

    def column(self, c) -> list:
        """Column ``c``'s values (Python objects, as the rows held them), rows in part order, completed by
        ``rules``."""
        return self.rules.column(c, self._raw)

    def _raw(self, c) -> list:
        """Column ``c``'s values as the rows held them (None where the rows had no such column)."""
        self._join()
        chunks = self._chunks.get(c)
        return [None] * self.n if chunks is None else \
            [v for ch in chunks for v in (ch.tolist() if isinstance(ch, np.ndarray) else ch)]

    def columns(self, order, rows_of) -> tuple:
        """``(columns, rows)``: the columns ``order`` as arrays (``column_array``), rows in part order, and
        the order to write them in, ``rows_of(cols)`` (int64 row indices; ``cols``: ``{column: array}``, each
        made as asked for, as ``column_array`` makes it, and kept for ``columns``: the sort keys not made
        twice); each column's chunks let go once it is made (the derived and coordinate columns, which read
        others, made first).  Not sorted here: ``events.dataset.write_table(rows=...)`` takes a row group at
        a time (a column's joined chunks are its array, no sorted copy made beside them)."""
        keys = _Columns(self)
        rows = np.asarray(rows_of(keys), np.int64)
        first = [c for c in order if self.rules.sets(c)]
        made, freed = {}, 0
        for c in first + [c for c in order if c not in first]:    # (those that read other columns first)
            made[c] = keys.pop(c) if c in keys else self._array(c)
            if len(made) > len(first):       # (each column's chunks let go once it is made, handed back a few MB
                freed += 8 * self.n if self._chunks.pop(c, None) else 0      # at a time: the table never held
                if freed >= TRIM_BYTES:                                     # twice, 8 MB of aggregate's parent
                    trim()                                                  # at 4,096 synthetic ranks, its peak)
                    freed = 0
        self._chunks = {}
        return {c: made[c] for c in order}, rows

    def _array(self, c) -> np.ndarray:
        """Column ``c`` as ``column_array`` makes it of ``column(c)``, rows in part order: its one typed
        chunk's array, or its chunks of one dtype joined, where none has a None and no coordinate or derived
        value is set in it (without a Python object a value: 163,840 rows at 16,384 synthetic ranks)."""
        self._join()
        chunks = self._chunks.get(c)
        typed = chunks and all(isinstance(ch, np.ndarray) and not isinstance(ch, np.ma.MaskedArray) and
                               ch.dtype.str == chunks[0].dtype.str for ch in chunks)
        if not typed or self.rules.sets(c):
            return column_array(self.column(c))
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


class _Columns(dict):
    """``RowColumns._array`` of a name (``column_array``'s array of ``column``: a typed column's chunks joined,
    no list of Python objects), made once when first asked for."""

    def __init__(self, cols: RowColumns):
        super().__init__()
        self._cols = cols

    def __missing__(self, c):
        self[c] = v = self._cols._array(c)
        return v


TRIM_BYTES = 1 << 21
"""Bytes of columns ``RowColumns.columns`` lets go (8 a row a column) between two hand-backs to the OS."""

JOIN_PARTS = 256
"""Parts whose chunks of a column ``RowColumns`` joins at once: at 16,384 synthetic ranks (10 rows a
part, 40 columns) the parts' own chunks were 655,360 small arrays, ~43 MB of aggregate's parent."""


def _runs(chunks: list) -> list:
    """``chunks`` (``_chunk``'s, in order) with each run of neighbours of one kind joined: arrays of one
    dtype concatenated (a masked one among them: ``np.ma.concatenate``, which keeps the None rows), lists of
    objects as one list; empty ones dropped.  The values, in order, are ``chunks``' (``tolist`` of an array,
    a list as it is)."""
    out, run = [], []

    def kind(ch):                 # (not the dtype itself: numpy takes None for float64 in ``dtype == None``)
        return ch.dtype.str if isinstance(ch, np.ndarray) else ""

    def flush():
        if run:
            out.append(run[0] if len(run) == 1 else [v for ch in run for v in ch] if not kind(run[0]) else
                       np.ma.concatenate(run) if any(isinstance(ch, np.ma.MaskedArray) for ch in run) else
                       np.concatenate(run))
    for ch in chunks:
        if len(ch) == 0:
            continue
        if run and kind(ch) != kind(run[0]):
            flush()
            run = []
        run.append(ch)
    flush()
    return out


def _chunk(vals: list):
    """A part's values of one column, held compactly and given back exactly (``tolist``): an int64,
    float64 or bool array when every value is of that one Python type (ints within int64), a masked one
    (``np.ma``, the None rows masked) when every value but None is, an int64 one all masked when every
    value is None, else ``vals``.  (At 4,096 synthetic ranks the phase rows' ``compute_start_ns`` /
    ``compute_end_ns``, an int or None, and the topology's columns, None until ``RowRules`` sets them, held
    ~4 MB of Python objects.)"""
    types = set(map(type, vals))                       # (one pass, in C)
    has_none = type(None) in types
    types.discard(type(None))
    if not types:
        return np.ma.masked_all(len(vals), np.int64) if vals else vals
    t = types.pop()
    if types or t not in (int, float, bool):
        return vals
    dtype = {int: np.int64, float: np.float64, bool: np.bool_}[t]
    try:
        if not has_none:
            return np.asarray(vals, dtype)
        none = np.fromiter((v is None for v in vals), np.bool_, len(vals))
        return np.ma.masked_array(np.asarray([t() if v is None else v for v in vals], dtype), mask=none)
    except OverflowError:                               # (an int past int64: kept as it is)
        return vals


def column_array(vals: list) -> np.ndarray:
    """A table column's values as an array: an object array where a value is None or a str (pyarrow makes
    it a nullable or a string column), else ``np.asarray``'s (int64, float64, bool)."""
    return np.asarray(vals, object) if any(v is None or isinstance(v, str) for v in vals) else np.asarray(vals)
