"""A structured array as one compressed block (``pack``, ``unpack``): its columns one
after the other (struct of arrays), ~sorted columns delta-coded, then zstd level 1 (pyarrow's
codec).  Event rows shrink 10-20x: the default in-memory mode holds the 3.2 M events (184 MB of
rows) of the 1.1 GB benchmark trace in 9 MB.  Used by the stores and the external sort.

``codec="lz4"`` (LZ4 frames, pyarrow's codec too) trades ratio for speed, for blocks that live
briefly: a 8,192-record block of validate's X-slice records (393 KB) packs in ~0.34 ms instead of
~1.07 ms and unpacks in ~0.19 ms instead of ~0.49 ms, into 62 KB instead of 44 KB."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

CODECS = ("zstd", "lz4")
_CODECS = {}


def _codec(name="zstd"):
    c = _CODECS.get(name)
    if c is None:
        if name not in CODECS:
            raise ValueError(f"unknown codec {name!r} (one of {', '.join(CODECS)})")
        c = _CODECS[name] = pa.Codec("zstd", 1) if name == "zstd" else pa.Codec("lz4")
    return c


def _coded(delta):
    """``{field: base}`` from a ``delta`` spec: ``"f"`` codes f as differences from its
    previous value (base None), ``"f-g"`` as f minus field g of the same record (g must come
    before f in the dtype)."""
    return dict((d.split("-", 1)[0], d.split("-", 1)[1]) if "-" in d else (d, None) for d in delta)


def pack(arr, delta=(), codec="zstd") -> bytes:
    """``arr`` (1-d structured array) as compressed bytes: each field's column in turn,
    the fields in ``delta`` as differences (wrapping int64): ``"f"`` from the previous
    value of f, ``"f-g"`` from field g of the same record (e.g. an end from its start);
    ``codec``: one of ``CODECS`` (unpack with the same)."""
    return pack_columns({f: arr[f] for f in arr.dtype.names}, delta, codec)


def pack_columns(cols: dict, delta=(), codec="zstd") -> bytes:
    """``pack`` of the structured array whose fields are the 1-d arrays ``cols`` (``{name:
    column}`` in the dtype's field order, equal lengths): the same bytes, without building the
    array (a sorted run's columns are gathered column by column: ~30x faster than gathering
    records of a structured array)."""
    out = []
    coded = _coded(delta)
    for f, c in cols.items():
        c = np.ascontiguousarray(c)
        if f in coded and len(c):
            c = c - cols[coded[f]] if coded[f] else np.diff(c, prepend=c.dtype.type(0))
        out.append(c.view(np.uint8))
    raw = np.concatenate(out) if out else np.zeros(0, np.uint8)
    return _codec(codec).compress(raw, asbytes=True)


def unpack(data, dtype, n, delta=(), codec="zstd") -> np.ndarray:
    """Inverse of ``pack``: ``n`` records of ``dtype`` (``delta`` and ``codec`` as packed)."""
    dtype = np.dtype(dtype)
    out = np.empty(n, dtype)
    if n == 0:
        return out
    raw = np.frombuffer(_codec(codec).decompress(data, decompressed_size=n * dtype.itemsize,
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
