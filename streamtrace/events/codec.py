"""A structured array as one compressed block (:func:`pack`, :func:`unpack`): its columns one
after the other (struct of arrays), ~sorted columns delta-coded, then zstd level 1 (pyarrow's
codec).  Event rows shrink 10-20x: the default in-memory mode holds the 3.2 M events (184 MB of
rows) of the 1.1 GB benchmark trace in 9 MB.  Used by the stores and the external sort."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

_CODEC = None


def _codec():
    global _CODEC
    if _CODEC is None:
        _CODEC = pa.Codec("zstd", 1)
    return _CODEC


def _coded(delta):
    """``{field: base}`` from a ``delta`` spec: ``"f"`` codes f as differences from its
    previous value (base None), ``"f-g"`` as f minus field g of the same record (g must come
    before f in the dtype)."""
    return dict((d.split("-", 1)[0], d.split("-", 1)[1]) if "-" in d else (d, None) for d in delta)


def pack(arr, delta=()) -> bytes:
    """``arr`` (1-d structured array) as compressed bytes: each field's column in turn,
    the fields in ``delta`` as differences (wrapping int64): ``"f"`` from the previous
    value of f, ``"f-g"`` from field g of the same record (e.g. an end from its start)."""
    cols = []
    coded = _coded(delta)
    for f in arr.dtype.names:
        c = np.ascontiguousarray(arr[f])
        if f in coded and len(c):
            c = c - arr[coded[f]] if coded[f] else np.diff(c, prepend=c.dtype.type(0))
        cols.append(c.view(np.uint8))
    raw = np.concatenate(cols) if cols else np.zeros(0, np.uint8)
    return _codec().compress(raw, asbytes=True)


def unpack(data, dtype, n, delta=()) -> np.ndarray:
    """Inverse of :func:`pack`: ``n`` records of ``dtype``."""
    dtype = np.dtype(dtype)
    out = np.empty(n, dtype)
    if n == 0:
        return out
    raw = np.frombuffer(_codec().decompress(data, decompressed_size=n * dtype.itemsize,
                                            memory_pool=pa.system_memory_pool()), np.uint8)
    pos = 0
    coded = _coded(delta)
    for f in dtype.names:
        t = dtype.fields[f][0]
        c = raw[pos:pos + n * t.itemsize].view(t)
        pos += n * t.itemsize
        if f not in coded:
            out[f] = c
        elif coded[f]:
            np.add(c, out[coded[f]], out=out[f])
        else:
            np.cumsum(c, dtype=t, out=out[f])
    return out
