"""Writing column dicts (numpy arrays) as Parquet (zstd) and CSV, atomically."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def to_arrow(columns: dict, order=None):
    """A ``pyarrow.Table`` from ``{name: array}`` in ``order`` (default: dict order).  Object arrays
    of str become string columns; None stays null."""
    import pyarrow as pa
    names = list(order or columns)
    arrays = []
    for n in names:
        v = columns[n]
        if isinstance(v, np.ndarray) and v.dtype == object:
            arrays.append(pa.array(v.tolist()))
        else:
            arrays.append(pa.array(np.asarray(v)))
    return pa.Table.from_arrays(arrays, names=names)


def write_table(outdir, name: str, columns: dict, order=None, csv: bool = False) -> list:
    """Write ``outdir/<name>.parquet`` (and ``<name>.csv`` with ``csv``) atomically; returns the paths."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq
    from .io import atomic_output
    t = to_arrow(columns, order)
    out = []
    p = Path(outdir) / f"{name}.parquet"
    with atomic_output(p, compress=False) as f:
        pq.write_table(t, f, compression="zstd")
    out.append(p)
    if csv:
        p = Path(outdir) / f"{name}.csv"
        with atomic_output(p, compress=False) as f:
            pcsv.write_csv(t, f)
        out.append(p)
    return out


def read_table(path) -> dict:
    """A Parquet file as ``{name: numpy array}`` (strings as object arrays)."""
    import pyarrow.parquet as pq
    t = pq.read_table(path)
    return {n: t[n].to_numpy(zero_copy_only=False) for n in t.column_names}
