"""Kernel classification for one rank: GPU class, collective, parallel dimension,
phase, micro-batch and iteration, from the call tree and the CPU annotations.

All inputs are numpy arrays over the rank's CPU events (``cpu_*``) and GPU events
(``gpu_*``); times are int64 ns.  See :mod:`streamtrace.analyze.patterns` for the
patterns and :func:`streamtrace.analyze.analyze_rank` for how this is called.
"""
from __future__ import annotations

import ast
import re

import numpy as np

PHASES = ("other", "forward", "backward", "recompute", "optimizer")
DTYPE_BYTES = {"float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
               "byte": 1, "uint8": 1, "char": 1, "int8": 1, "short": 2, "int16": 2, "int": 4, "int32": 4,
               "long": 8, "int64": 8, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
               "float8_e5m2fnuz": 1, "complexfloat": 8, "complexdouble": 16, "uint16": 2, "uint32": 4,
               "uint64": 8}


def name_flags(strings, pats):
    """Per string id: phase code (PHASES index, 0 = none), fallback phase code,
    recompute flag, step number (-1 = not a ProfilerStep), stack dimension
    (``""`` = none)."""
    n = len(strings)
    phase = np.zeros(n, np.int8)
    fallback = np.zeros(n, np.int8)
    recompute = np.zeros(n, bool)
    step = np.full(n, -1, np.int64)
    stack_dim = [""] * n
    for i, s in enumerate(strings):
        p = pats.first(pats.phase, s)
        if p:
            phase[i] = PHASES.index(p)
        p = pats.first(pats.phase_fallback, s)
        if p:
            fallback[i] = PHASES.index(p)
        recompute[i] = bool(pats.recompute.search(s)) if pats.recompute else False
        m = pats.step.search(s)
        if m:
            step[i] = int(m.group(1))
        stack_dim[i] = pats.first(pats.stack_dim, s) or ""
    return phase, fallback, recompute, step, np.asarray(stack_dim, dtype=object)


def windows(start, end, mask):
    """Sorted (start, end, index) of the events selected by ``mask``."""
    idx = np.flatnonzero(mask)
    o = np.argsort(start[idx], kind="stable")
    idx = idx[o]
    return start[idx], end[idx], idx


def parse_ranks(v):
    """``Process Group Ranks`` as a list of ints (it is a string like ``"[0, 1]"``)."""
    if isinstance(v, list):
        return [int(x) for x in v if isinstance(x, int)]
    if isinstance(v, str):
        try:
            r = ast.literal_eval(v)
            return [int(x) for x in r] if isinstance(r, (list, tuple)) else []
        except (ValueError, SyntaxError, TypeError):
            return [int(x) for x in re.findall(r"\d+", v)]
    return []


def dtype_bytes(v) -> int:
    """Bytes per element of a Kineto ``dtype`` arg (``"BFloat16"``, ``"c10::Half"``, ``"torch.float32"``,
    case-insensitive); 0 when unknown or not a string."""
    if not isinstance(v, str):
        return 0
    return DTYPE_BYTES.get(v.lower().replace("c10::", "").replace("torch.", ""), 0)


def collective_info(row: dict | None, kernel_name: str, pats, pg_config: dict):
    """Collective type, in/out/message bytes, group size, pg name/desc/ranks from a
    kernel's (or its ``record_param_comms`` op's) args and its name.

    Bytes = ``In msg nelems`` / ``Out msg nelems`` x the dtype size; the message
    size is the larger of the two (nccl-tests' convention for all-gather and
    reduce-scatter, whose buffers differ by the group size)."""
    row = row or {}
    coll = pats.collective_type(row.get("Collective name") or "") or pats.collective_type(kernel_name)
    size = dtype_bytes(row.get("dtype"))
    nin, nout = row.get("In msg nelems"), row.get("Out msg nelems")
    in_b = int(nin) * size if isinstance(nin, int) else -1
    out_b = int(nout) * size if isinstance(nout, int) else -1
    ranks = parse_ranks(row.get("Process Group Ranks"))
    pg_name = row.get("Process Group Name")
    pg_desc = row.get("Process Group Description")
    pg = pg_config.get(str(pg_name)) if pg_name is not None else None
    if pg:
        ranks = ranks or list(pg.get("ranks") or [])
        pg_desc = pg_desc or pg.get("pg_desc")
    gs = row.get("Group size")
    gs = int(gs) if isinstance(gs, int) else (len(ranks) if ranks else -1)
    return {"collective": coll or "", "in_bytes": in_b, "out_bytes": out_b, "msg_bytes": max(in_b, out_b),
            "dtype": row.get("dtype") or "", "group_size": gs, "pg_name": "" if pg_name is None else str(pg_name),
            "pg_desc": pg_desc or "", "pg_ranks": ranks}
