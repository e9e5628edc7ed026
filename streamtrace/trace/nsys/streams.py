"""Rows of an export's activity tables as numpy batches in start order: each table read with
``ORDER BY start`` and ``fetchmany`` (:func:`table_batches`), several tables merged into one
start-ordered stream (:func:`merge_sorted`).  Memory: one batch per table at a time."""
from __future__ import annotations

import numpy as np

#: one activity row: ``ts``/``dur`` int64 ns (dur -1: no usable end), ``kind`` (:data:`KINDS` index),
#: ``name`` (a ``StringIds`` id, or a reader-local id < -1; -1 none), ``proc`` (``globalTid >> 24``),
#: ``tid`` (OS thread id; -1 for GPU rows), ``device``/``stream`` (-1 for CPU rows), ``correlation``
#: (``correlationId``, -1 none), ``comm`` (collective-args row, -1 none)
ROW_DTYPE = np.dtype([("ts", "i8"), ("dur", "i8"), ("kind", "u1"), ("name", "i8"), ("proc", "i8"), ("tid", "i8"),
                      ("device", "i8"), ("stream", "i8"), ("correlation", "i8"), ("comm", "i4")])
#: row kinds and the Kineto category each becomes
KINDS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "user_annotation")
KERNEL, MEMCPY, MEMSET, RUNTIME, DRIVER, NVTX = range(len(KINDS))
BATCH = 65536


def col(tables, table, name, expr=None, default="-1"):
    """SQL for column ``name`` of ``table`` (``expr`` with ``{c}`` for it), or ``default`` when the
    export's table has no such column; NULL becomes -1."""
    if name not in tables.get(table, ()):
        return default
    e = (expr or "{c}").format(c=f"[{name}]")
    return f"coalesce({e}, -1)"


def table_batches(conn, sql, fix=None, batch=BATCH, extra=0):
    """Run ``sql`` (its first 10 columns: :data:`ROW_DTYPE`'s, in order; then ``extra`` more) and
    yield :data:`ROW_DTYPE` arrays of up to ``batch`` rows; ``fix(array, rows)`` may rewrite a
    batch with the fetched tuples at hand (the extra columns)."""
    cur = conn.execute(sql)
    n = len(ROW_DTYPE.names)
    while True:
        rows = cur.fetchmany(batch)
        if not rows:
            return
        a = np.array([r[:n] for r in rows] if extra else rows, dtype=ROW_DTYPE)
        if fix is not None:
            a = fix(a, rows)
        yield a


def merge_sorted(streams):
    """Merge iterators of :data:`ROW_DTYPE` batches, each in ``ts`` order, into one stream of
    batches in ``ts`` order (ties: the earlier stream first).  Holds one batch per stream."""
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
        out = np.concatenate(parts)
        yield out[np.argsort(out["ts"], kind="stable")]
