"""Step, phase and micro-batch of every GPU event, from the annotation windows of the CPU tracks
(``ProfilerStep#N``, Megatron's ``forward_step``/``backward_step``, ``## forward ##``,
``Optimizer.step#...``, recompute windows; ``streamtrace.analyze.patterns``): windows are
collected per block while the tracks are walked (``add_windows``), then every GPU event takes
the innermost window around its launch time (``attribute_phases``); and the GPU-side
annotation of every GPU event (``gpu_annotations``)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..kernels.windows import WindowIndex, shortest_overlapping
from . import classify


#: the kernels table's ``attributed_by`` values, by code: where a GPU event's step, phase and
#: micro-batch come from (its launch's CPU time, or its own GPU start when no launch claims it)
ATTRIBUTED_BY = ("gpu_start", "launch")


@dataclass
class Windows:
    """Annotation windows collected from a rank's CPU tracks: lists of ``(start, end, value)``
    array triples (int64 ns; ``value`` the step number, or None) per kind: ``step``
    (``ProfilerStep#N``), ``recompute``, ``phase[code]`` and ``fallback[code]`` for each phase
    code of ``streamtrace.analyze.classify.PHASES`` but 0."""
    step: list = field(default_factory=list)
    recompute: list = field(default_factory=list)
    phase: dict = field(default_factory=lambda: {c: [] for c in range(1, len(classify.PHASES))})
    fallback: dict = field(default_factory=lambda: {c: [] for c in range(1, len(classify.PHASES))})

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
    for code in range(1, len(classify.PHASES)):
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


def outer_ordinals(ws, we, step_pos):
    """Micro-batch index of each window of one phase (``ws``/``we`` int64 ns, sorted by start;
    ``step_pos`` int64: the position of the ProfilerStep window holding its start, -1 none): the
    ordinal of its *outermost* window among the outermost windows of that phase in the same step.
    A window is outermost when it starts at or after the end of the last outermost one before it
    (the rule of ``streamtrace.aggregate.run``'s CPU rows); a window inside it (Megatron's
    ``## forward ##`` inside ``forward_step``) takes its number.  int64 array of ``len(ws)``."""
    n = len(ws)
    out = np.zeros(n, np.int64)
    if not n:
        return out
    o = np.lexsort((-we, ws))                    # start asc, end desc: an outer window before its inner ones
    s, e = ws[o].tolist(), we[o].tolist()
    outer_of = np.empty(n, np.int64)
    reach, cur = None, -1
    for k in range(n):
        if reach is None or s[k] >= reach:
            cur, reach = k, e[k]
        outer_of[k] = cur
    is_outer = outer_of == np.arange(n)
    steps = np.asarray(step_pos, np.int64)[o]
    seen: dict = {}
    ordinal = np.zeros(n, np.int64)
    for k in np.flatnonzero(is_outer).tolist():
        st = int(steps[k])
        ordinal[k] = seen.get(st, 0)
        seen[st] = ordinal[k] + 1
    out[o] = ordinal[outer_of]
    return out


def attribute_phases(gpu, win, rows=65536):
    """Step, phase and micro-batch of every GPU event, from the exact innermost window
    (``streamtrace.kernels.windows``: latest start, then shortest) containing its launch time
    ``gpu.ctx["t_launch"]`` (int64 ns; the GPU start for a kernel whose launch is not in the
    trace), ``rows`` GPU events at a time:

    * step: ``N`` of the innermost ``ProfilerStep#N`` window;
    * phase: of the phase windows of every code, the innermost (latest start; on equal starts
      the later code of ``PHASES``); where none contains the
      launch, a fallback window's phase (``phase_fallback``); ``backward`` inside a recompute
      window becomes ``recompute``;
    * micro-batch (forward / backward only): the number of the phase window's outermost window
      of that phase within its step (``outer_ordinals``).

    Returns ``(iteration, phase, micro-batch)``: int32 (int64 when a step number needs it),
    int8, int32; -1 / 0 / -1 when unknown."""
    M, t_launch = gpu.M, gpu.ctx["t_launch"]
    ws, we, wval = _cat_windows(win.step)
    steps = WindowIndex(ws, we)
    phase_w = {}
    for code in range(1, len(classify.PHASES)):
        ps, pe, _ = _cat_windows(win.phase[code])
        if len(ps):
            phase_w[code] = (WindowIndex(ps, pe), ps, outer_ordinals(ps, pe, steps.innermost(ps)))
    fb_w = [(code, WindowIndex(*_cat_windows(win.fallback[code])[:2])) for code in range(1, len(classify.PHASES))]
    recompute = WindowIndex(*_cat_windows(win.recompute)[:2])
    narrow = not len(wval) or (-2 ** 31 <= int(wval.min()) and int(wval.max()) < 2 ** 31)
    iteration = np.empty(M, np.int32 if narrow else np.int64)
    ph = np.zeros(M, np.int8)
    micro = np.full(M, -1, np.int32)              # ordinals within a step
    backward, recomp = classify.PHASES.index("backward"), classify.PHASES.index("recompute")
    for a in range(0, M, rows):
        t = t_launch[a:a + rows]
        step_pos = steps.innermost(t)
        iteration[a:a + rows] = np.where(step_pos >= 0, wval[np.maximum(step_pos, 0)] if len(wval) else -1, -1)
        p, mi = ph[a:a + rows], micro[a:a + rows]
        ph_start = np.full(len(t), np.iinfo(np.int64).min)
        for code, (index, ps, mb) in phase_w.items():
            pos = index.innermost(t)
            better = (pos >= 0) & (ps[np.maximum(pos, 0)] >= ph_start)
            p[better] = code
            mi[better] = mb[pos[better]] if classify.PHASES[code] in ("forward", "backward") else -1
            ph_start[better] = ps[pos[better]]
        for code, index in fb_w:
            hit = (p == 0) & (index.innermost(t) >= 0)
            p[hit] = code
        p[(recompute.innermost(t) >= 0) & (p == backward)] = recomp
    return iteration, ph, micro


INFERRED_FORWARD = "work of the step launched before its first autograd (backward) op"
"""How ``infer_forward`` names its rule (``summary.json``: ``phases_inferred``)."""


def infer_forward(gpu, win, ph, rows=65536) -> dict:
    """The forward phase of a rank whose traces carry no forward annotation (a Megatron-LM run
    without the patch's ``forward_step``; only the autograd engine's backward ops and the
    optimizer are named): in each ``ProfilerStep#`` window that holds a backward window
    (``backward_step`` / ``## backward ##``, or the fallback ``autograd::engine::evaluate_function``),
    a GPU event of no phase (``ph`` == 0) launched at or after the step's start and before the
    step's first backward window starts becomes ``forward`` (``ph`` is changed in place; the
    micro-batch stays -1: one forward window per step, no number).  Nothing changes when any
    forward window exists, or no backward one.  ``gpu.ctx["t_launch"]``: int64 ns, as
    ``attribute_phases``.

    The rule is the user's reading of a step: the forward pass is what runs before the backward
    pass starts (PyTorch runs a step's autograd ops only after ``loss.backward()``); data loading
    and anything else unannotated before it count as forward too.  Returns ``{}``, or
    ``{"forward": {"gpu_events": n, "rule": INFERRED_FORWARD}}`` (summary.json's ``phases_inferred``)."""
    fwd, bwd = classify.PHASES.index("forward"), classify.PHASES.index("backward")
    if win.phase[fwd] or not (win.phase[bwd] or win.fallback[bwd]) or not win.step:
        return {}
    ws, we, _ = _cat_windows(win.step)
    bs = np.sort(np.concatenate([_cat_windows(win.phase[bwd])[0], _cat_windows(win.fallback[bwd])[0]]))
    at = np.searchsorted(bs, ws)                         # the first backward start at or after each step start
    first = np.where(at < len(bs), bs[np.minimum(at, len(bs) - 1)] if len(bs) else 0, np.iinfo(np.int64).min)
    first = np.where(first < we, first, np.iinfo(np.int64).min)     # none inside the step: nothing inferred
    steps = WindowIndex(ws, we)
    t_launch, n = gpu.ctx["t_launch"], 0
    for a in range(0, gpu.M, rows):
        t = t_launch[a:a + rows]
        pos = steps.innermost(t)
        hit = (ph[a:a + rows] == 0) & (pos >= 0) & (t < first[np.maximum(pos, 0)]) & (t >= ws[np.maximum(pos, 0)])
        ph[a:a + rows][hit] = fwd
        n += int(hit.sum())
    return {"forward": {"gpu_events": n, "rule": INFERRED_FORWARD}} if n else {}


def gpu_annotations(store, gpu, anno_keys, dtype=np.int32):
    """The GPU-side annotation of every GPU event: of the ``gpu_user_annotation`` events on the
    same GPU track (``("gpuanno", rank, pid, tid)`` beside the event's ``("gpu", rank, pid, tid)``:
    the same device and stream) that overlap the event, the shortest (ties: the latest start,
    then the last in file order; ``streamtrace.kernels.windows.shortest_overlapping``), as
    HolisticTraceAnalysis labels kernels.  Returns name ids (``dtype``, -1 none) in ``gpu``'s
    row order; the annotation keys' rows are dropped from ``store``."""
    out = np.full(gpu.M, -1, dtype)
    by_track = {k[1:]: k for k in anno_keys}
    first = 0
    for key, size in zip(gpu.keys, gpu.sizes):
        ak = by_track.get(key[1:])
        if ak is not None and size:
            a = store.get(ak)
            pos = shortest_overlapping(a["ts"], a["ts"] + a["dur"], gpu.start[first:first + size],
                                       gpu.end[first:first + size])
            out[first:first + size] = np.where(pos >= 0, a["name"][np.maximum(pos, 0)], -1)
        first += size
    for k in anno_keys:
        store.drop(k)
    return out
