#!/usr/bin/env python3
"""Inflate an Nsight Systems SQLite export for benchmarks: its activity rows (kernels, memcpy,
memset, CUDA runtime calls, NVTX ranges) replicated in SQL, each copy shifted in time past the
previous ones and given fresh correlation ids, until the file is at least ``--size-mb`` MB.

    python tools/inflate_nsys.py ../shared/traces/nsys/nsysai_mfu_2gpu_before.sqlite /tmp/big.sqlite --size-mb 1024

The source is read through SQLite's backup API (never written); the copy doubles its activity
tables (``INSERT INTO T SELECT ... FROM T``) while it is smaller than asked, so steps, processes,
devices and the mix of rows stay the source's.  Generated at run time; never commit the output."""
from __future__ import annotations

import argparse
import os
import sqlite3
import sys

TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
          "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


def double(conn, tables):
    """Append to every table a copy of its rows, ``start``/``end`` shifted by the span of all
    of them (plus 1 ms), ``correlationId`` by the largest id + 1."""
    lo, hi, top = None, None, 0
    for t in tables:
        a, b, c = conn.execute(f"SELECT min(start), max(coalesce([end], start)), "
                               f"{'max(correlationId)' if 'correlationId' in tables[t] else '0'} FROM [{t}]").fetchone()
        if a is not None:
            lo, hi = min(a, lo if lo is not None else a), max(b, hi if hi is not None else b)
        top = max(top, c or 0)
    shift, cshift = (hi - lo) + 1_000_000, top + 1
    for t, cols in tables.items():
        expr = [f"[{c}] + {shift}" if c in ("start", "end") else f"[{c}] + {cshift}" if c == "correlationId"
                else f"[{c}]" for c in cols]
        names = ", ".join(f"[{c}]" for c in cols)
        conn.execute(f"INSERT INTO [{t}] ({names}) SELECT {', '.join(expr)} FROM [{t}]")
    conn.commit()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source")
    ap.add_argument("output")
    ap.add_argument("--size-mb", type=float, default=1024)
    a = ap.parse_args(argv)
    src = sqlite3.connect(f"file:{a.source}?mode=ro&immutable=1", uri=True)
    if os.path.exists(a.output):
        os.unlink(a.output)
    dst = sqlite3.connect(a.output)
    src.backup(dst)
    src.close()
    dst.execute("PRAGMA journal_mode = OFF")
    dst.execute("PRAGMA synchronous = OFF")
    tables = {}
    for t in TABLES:
        cols = [r[1] for r in dst.execute(f"PRAGMA table_info([{t}])")]
        if cols:
            tables[t] = cols
    copies = 1
    while os.path.getsize(a.output) < a.size_mb * 1e6:
        double(dst, tables)
        copies *= 2
        print(f"{copies} copies: {os.path.getsize(a.output) / 1e6:,.0f} MB", file=sys.stderr)
    dst.close()


if __name__ == "__main__":
    main()
