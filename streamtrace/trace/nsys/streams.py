"""Rows of an export's activity tables as numpy batches: each table read with ``fetchmany``
(``table_batches``), with ``ORDER BY start`` and several tables merged into one start-ordered
stream (``merge_sorted``), or without a sort, table after table (``read_order``).
Memory: one batch per table at a time."""
from __future__ import annotations

from itertools import chain

import numpy as np

#: one activity row: ``ts``/``dur`` int64 ns (dur -1: no usable end), ``kind`` (``KINDS`` index),
#: ``name`` (a ``StringIds`` id, or a reader-local id < -1; -1 none), ``proc`` (``globalTid >> 24``),
#: ``tid`` (OS thread id; -1 for GPU rows), ``device``/``stream`` (-1 for CPU rows), ``correlation``
#: (``correlationId``, -1 none), ``comm`` (collective-args row, -1 none)
ROW_DTYPE = np.dtype([("ts", "i8"), ("dur", "i8"), ("kind", "u1"), ("name", "i8"), ("proc", "i8"), ("tid", "i8"),
                      ("device", "i8"), ("stream", "i8"), ("correlation", "i8"), ("comm", "i4")])
#: row kinds and the Kineto category each becomes
KINDS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "user_annotation")
KERNEL, MEMCPY, MEMSET, RUNTIME, DRIVER, NVTX = range(len(KINDS))
BATCH = 16384       # rows per fetch: ~30 MB of Python tuples and arrays in flight, not ~80
PID_BITS = 24       # globalTid >> 24: the process (see processes.py)


def col(tables, table, name, expr=None, default="-1"):
    """SQL for column ``name`` of ``table`` (``expr`` with ``{c}`` for it), or ``default`` when the
    export's table has no such column; NULL becomes -1."""
    if name not in tables.get(table, ()):
        return default
    e = (expr or "{c}").format(c=f"[{name}]")
    return f"coalesce({e}, -1)"


def table_batches(conn, sql, fields, consts=None, fix=None, batch=BATCH, extra=0, odd=None):
    """Run ``sql`` and yield ``ROW_DTYPE`` arrays of up to ``batch`` rows.  Its columns are
    ``fields`` (names of ``ROW_DTYPE``, or ``"gtid"``: a ``globalTid`` split into ``proc`` and
    ``tid``), int64, then ``extra`` more (any values); the fields it does not select take
    ``consts[name]`` or -1.  ``fix(array, extras)`` may rewrite a batch with the extra columns at
    hand (a structured array, fields ``x0``.., objects).  Fewer columns, fewer Python objects: the
    constants are not selected.  Rows of ints only (no ``extra``) go into numpy through
    ``np.fromiter`` over the flattened tuples (~115 ns a row of 6 against ~195 for ``np.array``).
    A batch holding a value ``int()`` cannot read (TEXT or a BLOB where the exporter writes integers,
    a NULL ``sql`` does not coalesce) is read again value by value (``int_rows``): NULL as -1, the
    others as -1 too, their count appended to the list ``odd`` (as the page reader counts them)."""
    cur = conn.execute(sql)
    wide = np.dtype([(f, "i8") for f in fields] + [(f"x{i}", "O") for i in range(extra)])
    consts = consts or {}
    while True:
        rows = cur.fetchmany(batch)
        if not rows:
            return
        if extra:
            w = np.array(rows, dtype=wide)
        else:                                    # n x k int64, seen as n records of k int64 fields
            try:
                flat = np.fromiter(chain.from_iterable(rows), np.int64, count=len(rows) * len(fields))
            except (ValueError, TypeError, OverflowError):
                flat = int_rows(rows, len(fields), odd)
            w = flat.view(wide)
        del rows
        a = np.empty(len(w), ROW_DTYPE)
        for f in ROW_DTYPE.names:
            if f in fields:
                a[f] = w[f]
            else:
                a[f] = consts.get(f, -1)
        if "gtid" in fields:
            g = w["gtid"]
            a["proc"] = np.where(g >= 0, g >> PID_BITS, -1)
            a["tid"] = np.where(g >= 0, g & 0xFFFFFF, -1)
        if fix is not None:
            a = fix(a, w)
        yield a


def int_rows(rows, k, odd=None) -> np.ndarray:
    """The ``n x k`` values of ``rows`` as one flat int64 array, value by value: what ``int()`` reads
    in int64 as itself, NULL as -1, anything else (non-numeric TEXT, a BLOB, a number past int64) as
    -1, counted into the list ``odd`` when given."""
    out = np.full(len(rows) * k, -1, np.int64)
    bad = 0
    lo, hi = -(1 << 63), (1 << 63) - 1
    for i, v in enumerate(chain.from_iterable(rows)):
        if v is None:
            continue
        try:
            v = int(v)
        except (ValueError, TypeError, OverflowError):
            bad += 1
            continue
        if lo <= v <= hi:
            out[i] = v
        else:
            bad += 1
    if bad and odd is not None:
        odd.append(bad)
    return out


def merge_sorted(streams):
    """Merge iterators of ``ROW_DTYPE`` batches, each in ``ts`` order, into one stream of
    batches in ``ts`` order, each stream's rows in their own order.  Holds one batch per stream."""
    its = [iter(s) for s in streams]
    heads = [next(it, None) for it in its]
    while True:
        live = [i for i, h in enumerate(heads) if h is not None]
        if not live:
            return
        if len(live) == 1:
            i = live[0]
            yield heads[i]
            yield from its[i]
            return
        bound = min(int(heads[i]["ts"][-1]) for i in live)
        parts = []
        for i in live:
            h = heads[i]
            k = int(np.searchsorted(h["ts"], bound, "right"))
            if k:
                parts.append(h[:k])
            heads[i] = h[k:] if k < len(h) else next(its[i], None)
            while heads[i] is not None and not len(heads[i]):
                heads[i] = next(its[i], None)
        out = concat_rows(parts)
        yield take_rows(out, np.argsort(out["ts"], kind="stable"))


_VOID = np.dtype((np.void, ROW_DTYPE.itemsize))


def concat_rows(parts):
    """``np.concatenate`` of ``ROW_DTYPE`` arrays, through a view of each row as one opaque
    item (numpy copies packed structured rows field by field: ~5x slower)."""
    return np.concatenate([p.view(_VOID) for p in parts]).view(ROW_DTYPE)


def take_rows(a, order):
    """``a[order]`` for a ``ROW_DTYPE`` array, as ``concat_rows`` does it."""
    return a.view(_VOID)[order].view(ROW_DTYPE)


def read_order(streams, ordered):
    """The batches of ``streams`` (each in ``ts`` order when ``ordered``) as one stream:
    ``merge_sorted`` when ``ordered``, else one stream after the other, rows as they come.
    Start order costs SQLite a sort of every table (on the 1.2 GB benchmark export 4.9 of the 29.9
    CPU-s the reader alone takes, bench/RESULTS.md); ``analyze`` does not need it: it groups rows by
    key and sorts each CPU track by time itself, as it does a Kineto trace's, whose file order is
    not time order either."""
    return merge_sorted(streams) if ordered else chain.from_iterable(streams)
