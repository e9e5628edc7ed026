"""The pipeline tables of ``aggregate``: ``pipeline.parquet`` (one row per iteration, step, PP group
and stage: the pipeline bubble) and ``replicas.parquet`` (one row per iteration, step and model
replica, with its stages' mean bubble), the one definition of the bubble that the report reads
(``streamtrace.report.pipeline``).

**Bubble** (``pipeline_rows``), per (iteration, step, PP group), on the aggregate's aligned time
axis (int64 ns), from the ``rank_phase`` rows of its stages whose phase is forward, backward or
recompute (each row a micro-batch's window, ``start_ns`` .. ``end_ns``):

* ``span_start_ns`` .. ``span_end_ns``, ``span_ns``: the group's first window start to its last
  window end, over all its stages;
* ``microbatch_ns`` = |union of the stage's windows|: the time the stage is inside a micro-batch,
  computing or communicating;
* ``p2p_wait_ns``: the time inside those windows the stage spends in its pipeline sends and
  receives (communication kernels of the PP dimension or ``Send`` / ``Recv`` / ``SendRecv``; on a
  CPU-only rank the ``send`` / ``recv`` communication ops) while it computes nothing: waiting for
  its neighbour stage's activations or gradients (a receive posted early waits in its kernel);
* ``bubble_ns`` = span - (microbatch_ns - p2p_wait_ns): the time the stage waits for its neighbour
  stage, however it waits -- with no micro-batch at all, or blocked in a pipeline receive or send --
  the bubble that the ideal figure below counts (a tensor-parallel all-reduce inside a micro-batch
  stays the stage's own work); ``bubble_pct`` = 100 x bubble / span (None for an empty span);
* ``outside_microbatch_ns`` = span - microbatch_ns (``outside_microbatch_pct``): the other split,
  the time the stage is in no micro-batch at all (pipeline waits inside micro-batches left out);
* ``ideal_bubble_pct`` = 100 x (p - 1) / (m + p - 1), p stages, m micro-batches (PipeDream-Flush /
  Megatron-LM's 1F1B; Narayanan et al., SC'21, section 2.2: the fraction of an iteration each
  stage waits, (p - 1) x (t_f + t_b) of (m + p - 1) x (t_f + t_b));
* ``busy_ns`` (computing) = |union of the stage's forward/backward/recompute compute| and
  ``first_ns`` / ``last_ns`` its first and last compute, ``microbatches`` = m (the forward
  micro-batches seen): shown beside the bubble, not part of it.
"""
from __future__ import annotations

import numpy as np

PHASES = ("forward", "backward", "recompute")


def union_ns(windows) -> int:
    """Length (int ns) of the union of ``windows`` (iterable of (start, end) ints)."""
    total, reach = 0, None
    for s, e in sorted(windows):
        if reach is None or s > reach:
            total, reach = total + e - s, e
        elif e > reach:
            total, reach = total + e - reach, e
    return int(total)


def phase_windows(phase_rows, out: dict | None = None) -> dict:
    """``{(rank, iteration, step): [(start, end)]}`` of the forward / backward / recompute rows (added to
    ``out`` when given: the rows may come a part at a time)."""
    out = {} if out is None else out
    for r in phase_rows:
        if r.get("phase") in PHASES and r.get("start_ns") is not None and r.get("end_ns") is not None:
            out.setdefault((r["rank"], r["iteration"], r["step"]), []).append((int(r["start_ns"]), int(r["end_ns"])))
    return out


def pipeline_rows(topo, phase_rows, fb, windows: dict | None = None) -> list:
    """``pipeline.parquet``'s rows (module docstring), one per PP group stage with forward/backward
    work; ``fb``: ``{(rank, iteration, step, device): (first_ns, last_ns, busy_ns, microbatches,
    p2p_wait_ns)}`` of each stage's compute and pipeline waits inside its micro-batches (a 4-tuple of
    before: no wait); ``phase_rows``: the ``rank_phase`` rows (dicts), or ``windows``: their ``phase_windows``
    (``phase_rows`` unused then; a key's windows a list of (start, end) or an (n, 2) int64 array, as
    ``rank_results.RowColumns`` keeps them).  [] without a topology."""
    if topo is None:
        return []
    rows = []
    by_rank: dict = {}                    # (rank, iteration, step) -> [values]: linear in ranks
    for (rr, i2, s2, _), v in fb.items():
        by_rank.setdefault((rr, i2, s2), []).append(v)
    win = phase_windows(phase_rows) if windows is None else windows

    def windows_of(key) -> list:
        w = win.get(key, [])
        return list(map(tuple, w.tolist())) if isinstance(w, np.ndarray) else w
    for it, step in sorted({(it, stp) for (_, it, stp, _) in fb}):
        for gi, g in enumerate(topo.groups["pp"]):
            stages = [(st, r, v) for st, r in enumerate(g) for v in by_rank.get((r, it, step), [])]
            if not stages:
                continue
            every = [w for r in g for w in windows_of((r, it, step))]
            lo = min(w[0] for w in every) if every else min(v[0] for _, _, v in stages)
            hi = max(w[1] for w in every) if every else max(v[1] for _, _, v in stages)
            span, p = hi - lo, len(g)
            for st, r, (first, last, busy, nmb, *rest) in stages:
                inside = union_ns(windows_of((r, it, step)))
                wait = min(int(rest[0]) if rest else 0, inside)
                bubble = span - inside + wait
                rows.append({"iteration": it, "step": step, "pp_group": gi, "stage": st, "rank": r, "stages": p,
                             "microbatches": nmb, "span_start_ns": lo, "span_end_ns": hi, "span_ns": span,
                             "first_ns": first, "last_ns": last, "busy_ns": busy, "microbatch_ns": inside,
                             "p2p_wait_ns": wait, "bubble_ns": bubble,
                             "bubble_pct": 100 * bubble / span if span > 0 else None,
                             "outside_microbatch_ns": span - inside,
                             "outside_microbatch_pct": 100 * (span - inside) / span if span > 0 else None,
                             "ideal_bubble_pct": 100 * (p - 1) / (nmb + p - 1) if nmb + p - 1 > 0 else None})
    return rows


def replica_rows(topo, ranks, pipe) -> list:
    """``replicas.parquet``'s rows: per (iteration, step, model replica) its ranks, PP groups, span,
    the mean per-rank compute / communication / exposed communication / idle (ns), and
    ``bubble_pct_mean`` = the mean of its stages' ``bubble_pct`` (``pipeline_rows``).  ``ranks``: the
    ``ranks`` table's columns (``{column: list}``, its rows in one order; what is read: ``iteration``,
    ``step``, ``rank``, ``start_ns``, ``end_ns`` and the four ``_ns`` means).  [] without a topology."""
    if topo is None:
        return []
    rows = []
    rep_of = {r: ri for ri, g in enumerate(topo.replicas) for r in g}     # one pass each: linear in ranks
    rows_of: dict = {}
    for i, key in enumerate(zip(ranks["iteration"], ranks["step"], map(rep_of.get, ranks["rank"]))):
        rows_of.setdefault(key, []).append(i)
    bub_of: dict = {}
    for p in pipe:
        if p["bubble_pct"] is not None:
            bub_of.setdefault((p["iteration"], p["step"], rep_of.get(p["rank"])), []).append(p["bubble_pct"])
    groups_of: dict = {}
    for gi, pg in enumerate(topo.groups["pp"]):
        if pg and all(rep_of.get(r) == rep_of.get(pg[0]) for r in pg):
            groups_of.setdefault(rep_of.get(pg[0]), []).append(gi)
    for it, step in sorted(set(zip(ranks["iteration"], ranks["step"]))):
        for ri, g in enumerate(topo.replicas):
            rr = rows_of.get((it, step, ri), [])
            if not rr:
                continue
            bub = bub_of.get((it, step, ri), [])
            rows.append({"iteration": it, "step": step, "replica": ri, "ranks": ",".join(map(str, g)), "n_ranks": len(rr),
                         "pp_groups": ",".join(map(str, groups_of.get(ri, [])))}
                        | span_means(ranks, rr, ("compute_ns", "comm_ns", "exposed_comm_ns", "idle_ns"))
                        | {"bubble_pct_mean": float(np.mean(bub)) if bub else None})
    return rows


def span_means(ranks, rows: list, columns) -> dict:
    """The span of the ``ranks`` table's rows ``rows`` (``{column: list}``, row indices): ``start_ns`` the
    earliest start, ``end_ns`` the latest end, ``span_ns`` between them (int ns, None where no row has
    one), and ``<column>_mean`` the mean of each of ``columns`` over them (float)."""
    starts = [x for x in map(ranks["start_ns"].__getitem__, rows) if x is not None]
    ends = [x for x in map(ranks["end_ns"].__getitem__, rows) if x is not None]
    out = {"start_ns": min(starts) if starts else None, "end_ns": max(ends) if ends else None,
           "span_ns": (max(ends) - min(starts)) if starts else None}
    return out | {f"{c}_mean": float(np.mean([ranks[c][i] for i in rows])) for c in columns}
