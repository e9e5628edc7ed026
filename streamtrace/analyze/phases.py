"""Step, phase and micro-batch of every GPU event, from the annotation windows of the CPU tracks
(``ProfilerStep#N``, Megatron's ``forward_step``/``backward_step``, ``## forward ##``,
``Optimizer.step#...``, recompute windows; :mod:`streamtrace.analyze.patterns`): windows are
collected per block while the tracks are walked (:func:`add_windows`), then every GPU event takes
the innermost window around its launch time (:func:`attribute_phases`)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import classify as C


@dataclass
class Windows:
    """Annotation windows collected from a rank's CPU tracks: lists of ``(start, end, value)``
    array triples (int64 ns; ``value`` the step number, or None) per kind: ``step``
    (``ProfilerStep#N``), ``recompute``, ``phase[code]`` and ``fallback[code]`` for each phase
    code of :data:`streamtrace.analyze.classify.PHASES` but 0."""
    step: list = field(default_factory=list)
    recompute: list = field(default_factory=list)
    phase: dict = field(default_factory=lambda: {c: [] for c in range(1, len(C.PHASES))})
    fallback: dict = field(default_factory=lambda: {c: [] for c in range(1, len(C.PHASES))})

    def extend(self, other: "Windows"):
        """Append ``other``'s windows (a later group of tracks) to these."""
        self.step += other.step
        self.recompute += other.recompute
        for c in self.phase:
            self.phase[c] += other.phase[c]
            self.fallback[c] += other.fallback[c]


def add_windows(win, nm, cname, start, end):
    """Phase / micro-batch / iteration windows of one block (from any thread)."""
    for sel, bucket, extra in ((nm.step[cname] >= 0, win.step, nm.step[cname]),
                               (nm.recompute[cname], win.recompute, None)):
        if sel.any():
            bucket.append((start[sel], end[sel], None if extra is None else extra[sel]))
    for code in range(1, len(C.PHASES)):
        for sel, bucket in ((nm.phase[cname] == code, win.phase[code]), (nm.fallback[cname] == code, win.fallback[code])):
            if sel.any():
                bucket.append((start[sel], end[sel], None))


def _cat_windows(parts):
    """Concatenate window lists and sort by start: (start, end, value)."""
    if not parts:
        z = np.zeros(0, np.int64)
        return z, z, z
    s = np.concatenate([p[0] for p in parts])
    e = np.concatenate([p[1] for p in parts])
    v = np.concatenate([p[2] for p in parts]) if parts[0][2] is not None else np.zeros(len(s), np.int64)
    o = np.argsort(s, kind="stable")
    return s[o], e[o], v[o]


def attribute_phases(gpu, win, rows=65536):
    """Step, phase and micro-batch of every GPU event: innermost window containing its
    launch time (``rows`` GPU events at a time).  Returns ``(iteration, phase,
    micro-batch)``: int32 (int64 when a step number needs it), int8, int32; -1 / 0 / -1
    when unknown."""
    M, t_launch = gpu.M, gpu.ctx["t_launch"]
    ws, we, wval = _cat_windows(win.step)
    phase_w = {}
    for code in range(1, len(C.PHASES)):
        ps, pe, _ = _cat_windows(win.phase[code])
        if len(ps):
            phase_w[code] = (ps, pe, C.ordinal_within(C.containing(ws, we, ps), ps))
    fb_w = [(code, *_cat_windows(win.fallback[code])[:2]) for code in range(1, len(C.PHASES))]
    rs, re_, _ = _cat_windows(win.recompute)
    narrow = not len(wval) or (-2 ** 31 <= int(wval.min()) and int(wval.max()) < 2 ** 31)
    iteration = np.empty(M, np.int32 if narrow else np.int64)
    ph = np.zeros(M, np.int8)
    micro = np.full(M, -1, np.int32)              # ordinals within a step
    for a in range(0, M, rows):
        t = t_launch[a:a + rows]
        step_pos = C.containing(ws, we, t)
        iteration[a:a + rows] = np.where(step_pos >= 0, wval[np.maximum(step_pos, 0)] if len(wval) else -1, -1)
        p, mi = ph[a:a + rows], micro[a:a + rows]
        ph_start = np.full(len(t), np.iinfo(np.int64).min)
        for code, (ps, pe, mb) in phase_w.items():
            pos = C.containing(ps, pe, t)
            better = (pos >= 0) & (ps[np.maximum(pos, 0)] >= ph_start)
            p[better] = code
            mi[better] = mb[pos[better]] if C.PHASES[code] in ("forward", "backward") else -1
            ph_start[better] = ps[pos[better]]
        for code, ps, pe in fb_w:
            hit = (p == 0) & (C.containing(ps, pe, t) >= 0)
            p[hit] = code
        p[(C.containing(rs, re_, t) >= 0) & (p == C.PHASES.index("backward"))] = C.PHASES.index("recompute")
    return iteration, ph, micro
