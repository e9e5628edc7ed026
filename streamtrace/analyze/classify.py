"""Kernel classification for one rank: phase, micro-batch and iteration, from the call tree and
the CPU annotations (a collective's facts: ``streamtrace.analyze.collective_facts``).

All inputs are numpy arrays over the rank's CPU events (``cpu_*``) and GPU events
(``gpu_*``); times are int64 ns.  See ``streamtrace.analyze.patterns`` for the
patterns and ``streamtrace.analyze.analyze_rank`` for how this is called.
"""
from __future__ import annotations

import numpy as np

from ..trace.steps import step_number

PHASES = ("other", "forward", "backward", "recompute", "optimizer")



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
            step[i] = step_number(m)
        stack_dim[i] = pats.first(pats.stack_dim, s) or ""
    return phase, fallback, recompute, step, np.asarray(stack_dim, dtype=object)


def windows(start, end, mask):
    """Sorted (start, end, index) of the events selected by ``mask``."""
    idx = np.flatnonzero(mask)
    o = np.argsort(start[idx], kind="stable")
    idx = idx[o]
    return start[idx], end[idx], idx
