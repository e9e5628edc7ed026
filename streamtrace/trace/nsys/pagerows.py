"""An activity table's rows as ``ROW_DTYPE`` batches in start
order, read from the file's pages (``page_batches``, through
``scan_columns``) instead of ``SELECT ... ORDER BY start``: the same
rows and values the reader's SQL gives, without SQLite handing each row to Python as a tuple.

The pages give rowid order.  The exporter writes each table nearly in start order (the fixtures'
GPU tables exactly, their runtime tables with a few rows a few microseconds early), so the rows are
put in start order by a bounded merge: a first pass reads the ``start`` column alone and keeps each
batch's smallest and largest start; the second pass emits, after each batch, the rows held so far
whose start is at most the smallest start of every later batch (a stable sort of what is held, so
rows of equal start stay in rowid order), and holds the others.  When the first pass shows that
more than ``HOLD_BATCHES`` batches' rows could be held at once, the table is not read this way
(``None``: the caller uses SQL), so memory stays a few batches."""
from __future__ import annotations

import numpy as np

from .pages import BATCH_BYTES, ColumnBatch, scan_columns, Unscannable
from .streams import PID_BITS, ROW_DTYPE

#: the most rows the start-order merge may hold, in batches; beyond it the table is read with SQL
HOLD_BATCHES = 4
#: field -> how its column becomes the field, as the reader's SQL computes it (NULL -> -1 throughout):
#: ``dur``: ``end - start``; ``proc``: ``globalPid >> 24``; ``gtid``: ``globalTid`` split into
#: ``proc`` (``>> 24``) and ``tid`` (``& 0xFFFFFF``); ``kind``: ``consts["kind"] + (eventClass == 1)``
DERIVED = ("dur", "proc", "gtid", "kind")


def page_batches(path, conn, table, columns, consts=None, fix=None, ordered=True, batch_bytes=BATCH_BYTES,
                 odd=None):
    """Rows of ``table`` as ``ROW_DTYPE`` batches, or None when the page reader cannot give
    them (a table it does not read, or rows too far from start order, see the module docstring).
    ``columns``: ``{field: column}`` (``ts`` from ``start``; the fields of ``DERIVED`` computed as
    the reader's SQL does; any other field copied), the fields not given take ``consts`` or -1;
    ``fix(array, None)`` may rewrite a batch; ``ordered``: start order (else rowid order);
    ``odd``: a list to which the count of non-integer values read as -1 is appended.  Raises
    ``TraceError`` for a damaged file."""
    names = list(dict.fromkeys(list(columns.values()) + (["start"] if "dur" in columns else [])))
    try:
        scan = scan_columns(path, table, names, conn=conn, batch_bytes=batch_bytes)
        first = next(scan, None)                  # the schema checks run on the first next()
    except Unscannable:
        return None
    bounds = None
    if ordered and first is not None and "ts" in columns:
        bounds = _start_bounds(path, conn, table, columns["ts"], batch_bytes)
        if bounds is None:
            return None
    batches = _chain(first, scan)
    if bounds is not None:
        batches = _in_order(batches, columns["ts"], bounds)
    return (_convert(b, columns, consts or {}, fix, odd) for b in batches)


def _start_bounds(path, conn, table, column, batch_bytes):
    """Per batch (min, max) of ``column`` (NULL as -1), or None when the merge could hold more than
    ``HOLD_BATCHES`` batches' rows.  Returns ``(later_min, counts)``: ``later_min[k]`` the
    smallest start of the batches after ``k`` (int64 max for the last)."""
    lo, hi, n = [], [], []
    for b in scan_columns(path, table, [column], conn=conn, batch_bytes=batch_bytes):
        v = b.values[column]
        lo.append(int(v.min()) if len(v) else np.iinfo(np.int64).max)
        hi.append(int(v.max()) if len(v) else np.iinfo(np.int64).min)
        n.append(len(v))
    lo, hi, n = np.asarray(lo, np.int64), np.asarray(hi, np.int64), np.asarray(n, np.int64)
    later = np.minimum.accumulate(lo[::-1])[::-1]
    later = np.append(later[1:], np.iinfo(np.int64).max)
    limit = HOLD_BATCHES * max(int(n.max()) if len(n) else 0, 1)
    for k in np.flatnonzero(np.maximum.accumulate(hi) > later).tolist():   # batches that may hold rows
        if int(n[:k + 1][hi[:k + 1] > later[k]].sum()) > limit:
            return None
    return later


def _chain(first, scan):
    if first is not None:
        yield first
    yield from scan


def _convert(b, columns, consts, fix, odd):
    n = len(b)
    a = np.empty(n, ROW_DTYPE)
    written = set(columns) | ({"proc", "tid"} if "gtid" in columns else set())
    for f in ROW_DTYPE.names:
        if f not in written:
            a[f] = consts.get(f, -1)
    for f, c in columns.items():
        v, null = b.values[c], b.null[c]
        if f == "dur":
            s = b.values["start"]
            a["dur"] = np.where(null | b.null["start"], -1, v - s)
        elif f == "proc":
            a["proc"] = np.where(null, -1, v >> PID_BITS)
        elif f == "gtid":
            a["proc"] = np.where(v >= 0, v >> PID_BITS, -1)
            a["tid"] = np.where(v >= 0, v & 0xFFFFFF, -1)
        elif f == "kind":
            a["kind"] = consts.get("kind", 0) + (v == 1)
        else:
            a[f] = v
    if odd is not None and b.odd:
        odd.append(b.odd)
    return fix(a, None) if fix is not None else a


def _in_order(batches, start, later):
    """The bounded merge of the module docstring, on the scan's int64 columns (a gather of plain
    columns, not of the packed rows): batch ``k``'s rows after those held, stably sorted by
    ``start``; those with ``start <= later[k]`` emitted, the others held."""
    held = None
    for k, b in enumerate(batches):
        if held is not None and len(held):
            b = ColumnBatch(np.concatenate((held.rowid, b.rowid)),
                            {c: np.concatenate((held.values[c], v)) for c, v in b.values.items()},
                            {c: np.concatenate((held.null[c], v)) for c, v in b.null.items()}, b.odd)
        ts = b.values[start]
        if len(ts) > 1 and (ts[1:] < ts[:-1]).any():
            o = np.argsort(ts, kind="stable")
            b = ColumnBatch(b.rowid[o], {c: v[o] for c, v in b.values.items()},
                            {c: v[o] for c, v in b.null.items()}, b.odd)
            ts = b.values[start]
        cut = int(np.searchsorted(ts, later[k], "right")) if k < len(later) else len(ts)
        held = _part(b, cut, None, 0)
        if cut:
            yield _part(b, 0, cut, b.odd)
    if held is not None and len(held):
        yield held


def _part(b, lo, hi, odd):
    return ColumnBatch(b.rowid[lo:hi], {c: v[lo:hi] for c, v in b.values.items()},
                       {c: v[lo:hi] for c, v in b.null.items()}, odd)
