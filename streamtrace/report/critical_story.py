"""The sentences of "What bounds each step" (``streamtrace.report.critical_path``), one step at a
time, from the aggregate's tables only:

1. **the step's three lengths, reconciled**: the critical path, the span across ranks (first rank's
   step start to last rank's end, GPU work included) and the CPU's step annotation (median over
   the ranks), and why they differ (the path starts at the latest-starting rank the rest waited
   for; it runs past the annotation when the GPU finishes the step's work after the CPU step);
2. **the cause**: the rank holding most of the path and what its part is (its CPU, the backward pass
   on another thread, its GPU, collectives, GPU work queued behind the previous step), compared with
   the same work on the other ranks (the same CPU ops, its kernels) where they exist, how long its
   GPU waited for launches and how long the other ranks waited for it in collectives;
3. **what bounds next and the slack**: the path once the bounding rank is as fast as its peers
   (``critical_path_summary.parquet``'s ``next`` rows), the ranks arriving last at collectives ranked
   by the time they held them alone, the ranks off the path and their slack.

Every figure is read from ``critical_path_summary``, ``critical_path_ranks``, ``critical_path``,
``op_stats``, ``idle_breakdown`` and ``kernel_stats`` (``streamtrace.aggregate.critical_ranks``
defines slack, wait and what bounds next).
"""
from __future__ import annotations

import re
import statistics

import numpy as np

from .escape import md_code
from .units import fmt_time

HOST = ("cpu_op", "host_gap", "launch_delay", "sync", "thread_wait")
"""The categories of a host-bound part: the CPU's own time and the GPU waiting for its launches."""
GPU = ("compute_kernel", "memcpy", "kernel_gap")
WAITING = re.compile(r"Synchronize|^(cuda|hip)Memcpy$|wait|barrier|_local_scalar_dense|^aten::item$|^nccl:|^c10d::|"
                     r"^gloo:|record_param_comms|ProfilerStep#", re.IGNORECASE)
"""Ops whose time is mostly waiting (for the GPU, another rank, another thread): left out when the
bounding rank's CPU work is compared with its peers' (a rank that waits for the bounding rank spends
that time in them)."""
PEERS = 32
"""At most this many other ranks are read to compare the bounding rank's work with (spread over the job)."""


def _pct(a, b) -> float:
    return 100.0 * a / b if b else 0.0


def lengths_sentence(step, total, ranks, step_ns) -> str:
    """Sentence 1: the path, the span and the step annotation (``step_ns``: median over the ranks,
    None when unknown), and why they differ."""
    path, span = total["path_ns"], total["span_ns"]
    label = "The whole capture (no step ranges; `--step-pattern` names them)" if step < 0 else f"Step {step}"
    first = min(ranks, key=lambda r: r["start_ns"]) if ranks else None
    by_start = {r["rank"]: r["start_ns"] for r in ranks}
    s = f"{label}: its critical path is {fmt_time(path)}"
    if step_ns:
        s += f", its step annotation {fmt_time(step_ns)} (median over the ranks)"
    s += f" and its span across the ranks {fmt_time(span)} (first rank's start to last rank's end, GPU work included)"
    origin = total.get("origin_rank")
    late = (by_start.get(origin, 0) - first["start_ns"]) if first is not None and origin in by_start else 0
    why = []
    if late > 0.01 * max(span, 1):
        why.append(f"the path starts at rank {origin}'s step start, {fmt_time(late)} after rank {first['rank']}'s: "
                   "the work before it only waited")
    if step_ns and path > 1.05 * step_ns:
        why.append("the path runs past the CPU's step: the GPU finishes the step's work after it")
    return s + ("; " + "; ".join(why) if why else "") + "."


PHRASES = {"cpu_op": "CPU ops", "host_gap": "host gaps", "launch_delay": "launch delays", "sync": "syncs",
           "thread_wait": "hand-overs between threads", "compute_kernel": "kernels", "memcpy": "copies",
           "kernel_gap": "gaps between kernels", "comm_transfer": "transfers", "queued": "queued GPU work"}


def cause_sentence(top, segs, cats_top, peers, gpu_wait_ns, others_wait_ns, short, shares=()) -> str:
    """Sentence 2: why rank ``top`` (its ``critical_path_ranks`` row) bounds the step.  ``segs``:
    the step's path segments (row dicts), at least those of rank ``top`` on threads other than the
    step's; ``cats_top``: ``{category: ns}`` of its part; ``peers``:
    ``{"cpu": compare_ops(...), "gpu": compare_kernels(...)}`` (None where unknown);
    ``gpu_wait_ns``: its GPU's wait for launches (None unknown); ``others_wait_ns``: ``(n other
    ranks, their summed wait)``; ``shares``: ``[(rank, pct)]`` of the other ranks on the path, named
    when the bounding rank holds less than half of it."""
    r, part = top["rank"], max(sum(cats_top.values()), 1)
    host = sum(cats_top.get(c, 0) for c in HOST)
    gpu = sum(cats_top.get(c, 0) for c in GPU)
    comm, queued = cats_top.get("comm_transfer", 0), cats_top.get("queued", 0)
    if queued >= max(host, gpu, comm):
        who = "The GPU bounds it (the CPU runs ahead of it)"
    elif comm >= max(host, gpu):
        who = "Collectives bound it"
    elif gpu >= host:
        who = f"Rank {r}'s GPU bounds it"
    else:
        who = f"Rank {r}'s CPU bounds it"
    mix = sorted(cats_top.items(), key=lambda kv: -kv[1])
    mix = ", ".join(f"{PHRASES.get(c, c)} {_pct(ns, part):.0f} %" for c, ns in mix[:3] if _pct(ns, part) >= 1)
    s = f"{who}: rank {r} holds {top['path_pct']:.0f} % of the path ({mix})"
    if top["path_pct"] < 50 and shares:
        s += ", " + ", ".join(f"rank {x} {p:.0f} %" for x, p in shares[:3])
    if who.endswith("CPU bounds it"):
        s += _threads(top, segs)
        ratio = (peers or {}).get("cpu")
        if ratio and ratio[0] >= 1.1:
            x, n, worst = ratio
            ex = ", ".join(f"{md_code(short(nm))} {fmt_time(a)} vs {fmt_time(b)}" for nm, a, b in worst)   # escaped
            s += f"; its CPU takes {x:.1f}x the median of the other {n} rank{'s' if n > 1 else ''} of its stage on the " \
                 f"same ops ({ex})"
        if gpu_wait_ns and gpu_wait_ns >= 0.05 * top["path_ns"]:
            s += f"; its GPU waits {fmt_time(gpu_wait_ns)} for launches"
    elif who.endswith("GPU bounds it"):
        ratio = (peers or {}).get("gpu")
        if ratio and ratio[0] >= 1.1:
            s += f"; its kernels take {ratio[0]:.1f}x the median of the other {ratio[1]} rank{'s' if ratio[1] > 1 else ''}" \
                 f" of its stage ({fmt_time(ratio[2])} vs {fmt_time(ratio[3])})"
    n, w = others_wait_ns
    if n and w > 0:
        s += f"; the other {n} ranks wait {fmt_time(w)} in collectives" if n > 1 else \
            f"; the other rank waits {fmt_time(w)} in collectives"
    return s + "."


def _threads(top, segs) -> str:
    """The part of the bounding rank's path on threads other than the step's, named by role."""
    main = f"thread {top['thread']}"
    by: dict = {}
    for s in segs:
        if s["rank"] == top["rank"] and s["lane"].startswith("thread ") and s["lane"] != main \
                and s["category"] != "thread_wait":
            by.setdefault(s["lane"], {})
            by[s["lane"]][s["name"]] = by[s["lane"]].get(s["name"], 0) + s["weight_ns"]
    out = []
    for lane, names in sorted(by.items(), key=lambda kv: -sum(kv[1].values())):
        ns = sum(names.values())
        if ns >= 0.05 * max(top["path_ns"], 1):
            what = "the backward pass on" if lane.endswith("(backward)") else "on"
            out.append(f"{fmt_time(ns)} of it {what} {lane.removesuffix(' (backward)')} while {main} waits for it")
    return ("; " + ", ".join(out[:2])) if out else ""


def compare_ops(ops: dict, top: int, step) -> tuple | None:
    """``(ratio, peers, [(name, top's ns, peers' median ns)] * 3)``: the bounding rank ``top``'s CPU
    self time, op name by op name, against the median of the other ranks' on the same name (0 where
    a rank does not run it; ops that wait, ``WAITING``, left out), and the three names it
    exceeds most; None without peers.  ``ops``: ``op_stats`` columns (``rank``, ``name``,
    ``cat``, ``self_ns``, ``step``) of the step."""
    if not len(ops.get("rank", [])):
        return None
    m = (ops["step"] == step) & ~np.char.startswith(ops["cat"].astype(str), "gpu")
    rank, name, self_ns = ops["rank"][m], ops["name"][m].astype(str), ops["self_ns"][m]
    peers = sorted(set(rank.tolist()) - {top})
    if not peers or top not in set(rank.tolist()):
        return None
    mine: dict = {}
    theirs: dict = {}
    waits: dict = {}                                    # name -> it waits (one search per distinct name)
    for r, nm, v in zip(rank.tolist(), name.tolist(), self_ns.tolist()):
        w = waits.get(nm)
        if w is None:
            w = waits[nm] = WAITING.search(nm) is not None
        if w:
            continue
        if r == top:
            mine[nm] = mine.get(nm, 0) + v
        else:
            theirs.setdefault(nm, {}).setdefault(r, 0)
            theirs[nm][r] += v
    common = list(mine)                                 # an op the others do not run counts as 0 there
    if not common:
        return None
    med = {nm: float(statistics.median([theirs.get(nm, {}).get(p, 0) for p in peers])) for nm in common}
    a, b = sum(mine[nm] for nm in common), sum(med.values())
    worst = sorted(common, key=lambda nm: -(mine[nm] - med[nm]))[:3]
    return (a / b if b else 0.0, len(peers), [(nm, mine[nm], med[nm]) for nm in worst if mine[nm] > med[nm]])


def compare_kernels(kern: dict, top: int, step) -> tuple | None:
    """``(ratio, peers, top's ns, peers' median ns)``: the bounding rank's compute-kernel time in the
    step against the median of the other ranks' (``kernel_stats`` columns ``rank``, ``step``,
    ``kind``, ``total_ns``); None without peers."""
    if not len(kern.get("rank", [])):
        return None
    m = (kern["step"] == step) & (kern["kind"].astype(str) == "compute")
    tot: dict = {}
    for r, v in zip(kern["rank"][m].tolist(), kern["total_ns"][m].tolist()):
        tot[r] = tot.get(r, 0) + v
    peers = [v for r, v in tot.items() if r != top]
    if top not in tot or not peers:
        return None
    med = float(np.median(peers))
    return (tot[top] / med if med else 0.0, len(peers), tot[top], med)


def next_sentence(total, nxt, ranks) -> str:
    """Sentence 3: what bounds the step next (``nxt``: the ``next`` summary rows), the ranks that
    arrive last at collectives by the time they held them alone (``lead_ns``: the second straggler
    is the second name), and the slack of the ranks off the path."""
    parts = []
    if nxt:
        new = nxt[0]["path_ns"]
        held = ", ".join(f"rank {r['rank']} ({r['pct']:.0f} %)" for r in nxt[:3])
        parts.append(f"Next: were {nxt[0]['key']}, the path would be {fmt_time(new)} "
                     f"({100.0 * (new - total['path_ns']) / max(total['path_ns'], 1):+.0f} %), held by {held}")
    late = sorted((r for r in ranks if r.get("last_count")), key=lambda r: -r["lead_ns"])
    if len(ranks) > 1 and late and late[0]["lead_ns"] > 0:
        held = ", ".join(f"rank {r['rank']} at {r['last_count']} of {r['collectives']} ({fmt_time(r['lead_ns'])} held "
                         "alone)" for r in late[:3])
        parts.append(f"{'a' if parts else 'A'}rriving last at collectives: {held}")
    off = sorted((r for r in ranks if not r["on_path"]), key=lambda r: -r["slack_ns"])
    on = [r for r in ranks if r["on_path"]]
    if len(ranks) < 2:
        parts.append(f"Rank {ranks[0]['rank']} is the only rank of the step" if ranks else "No rank holds the path")
    elif not off:
        parts.append(f"every rank ({len(on)}) is on the path: none has slack")
    else:
        most = ", ".join(f"rank {r['rank']}: {fmt_time(r['slack_ns'])}" for r in off[:3])
        parts.append(f"{'off' if parts else 'Off'} the path ({len(off)} rank{'s' if len(off) > 1 else ''}), the most "
                     f"slack, how much later a rank's work could finish without lengthening the step: {most}"
                     f"{', ...' if len(off) > 3 else ''}")
    return "; ".join(parts) + "."
