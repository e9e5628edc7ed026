#!/usr/bin/env python3
"""The competitor of ``bench_nsys.py``: per-device GPU metrics of an Nsight Systems export the way
one writes them by hand with plain ``sqlite3`` + pandas (``pd.read_sql`` of the kernel, memcpy and
memset tables, names joined from ``StringIds``), the definitions of ../shared/traces/README.md
(busy / compute / communication / memory = lengths of interval unions, overlap = communication
intersected with compute).  Prints ``{"<pid>/<device>": {metric: us}}`` as JSON.

    python bench/nsys_pandas_metrics.py EXPORT.sqlite"""
from __future__ import annotations

import json
import sqlite3
import sys

import numpy as np
import pandas as pd


def union(s, e):
    """Length of the union of intervals [s, e) (int64 ns arrays)."""
    if not len(s):
        return 0
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(s)) - 1
    return int((reach[ends] - s[starts]).sum())


def main(path):
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    k = pd.read_sql("SELECT k.start, k.[end], k.deviceId, k.globalPid, s.value AS name FROM "
                    "CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName", conn)
    k["cls"] = np.where(k["name"].str.contains("nccl|rccl", case=False, regex=True), "comm", "compute")
    parts = [k.drop(columns="name")]
    for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        m = pd.read_sql(f"SELECT start, [end], deviceId, globalPid FROM {t}", conn)
        m["cls"] = "memory"
        parts.append(m)
    g = pd.concat(parts, ignore_index=True)
    g = g[(g["start"] >= 0) & (g["end"] >= g["start"])]
    g["pid"] = g["globalPid"] // 0x1000000 % 0x1000000
    out = {}
    for (pid, dev), d in g.groupby(["pid", "deviceId"]):
        s, e = d["start"].to_numpy(), d["end"].to_numpy()
        cls = d["cls"].to_numpy()
        u = {c: union(s[cls == c], e[cls == c]) for c in ("comm", "compute", "memory")}
        both = (cls == "comm") | (cls == "compute")
        ov = u["comm"] + u["compute"] - union(s[both], e[both])
        out[f"{pid}/{dev}"] = {"gpu_events": len(d), "busy_us": union(s, e) / 1e3, "compute_us": u["compute"] / 1e3,
                               "comm_us": u["comm"] / 1e3, "memory_us": u["memory"] / 1e3, "overlap_us": ov / 1e3}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
