"""Merge's validation, done while rewriting instead of in a second pass over the output.

Each rewrite worker reads the fields the checks need from every input event's bytes
(``streamtrace.validate.check.Checker.read``) and records each event twice in one
``Checker``: as read (view ``V_IN``: the input's own problems,
the report ``streamtrace validate RANK_FILE`` gives) and, if the rewrite kept it, as written
(view ``V_OUT``).  The output's view follows from what merge rewrites: every event gets a pid
(a merged one: an input without ``pid`` gets the merged pid of ``null``) and ``args.rank`` = its
rank; ``tid``, ``ph``, ``cat`` and ``dur`` are copied; ``ts`` moves by the rank's constant shift
(the order of a track's slices is unchanged); flow ids become ``rank * 2**40 + id``.  Records
are sorted by the input's track and flow keys, so this holds when merge's pid and id rewrites
are one-to-one and keep the ranks apart, which ``merged_validation`` checks (integer flow ids
in [0, 2**40) on every kept flow end; no merged pid shared by two ranks or two input pids; no
list or object pid).  Otherwise the output file is validated again in full (exact, slower).

A problem *added by merge* is one whose count in a rank's output exceeds its count in that
rank's input (filters only remove events: they can hide an input's problem, not add one), plus
any cross-rank excess when the output had to be validated in full."""
from __future__ import annotations

import numpy as np

from ..kernels import validate as validate_kernels
from ..runtime.files import remove_quietly
from .check import PROBLEMS, ValidateOptions, gather_ranges, validate
from .ordered import OutFilter

ID_LIMIT = 1 << 40
LOG_SUFFIX = ".val"     # a byte range's sorted validation runs: beside its segment, until its rank is checked


def account_batch(check, f: np.ndarray, kept: np.ndarray) -> bool:
    """Record one batch in ``check``: every event (fields ``f``, int64[n, NF]) in ``V_IN``, the
    events the rewrite wrote (``kept``: uint8[n]) in ``V_OUT`` as merge writes them.  Returns
    False when the output's view cannot be derived exactly (a kept flow end whose id is not an
    integer in [0, 2**40))."""
    keep = kept.astype(bool)
    both = validate_kernels.V_IN | validate_kernels.V_OUT
    check.account(f, np.where(keep, both, validate_kernels.V_IN), out_pid=True)
    return not len(inexact_ends(f, keep))


def inexact_ends(f: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """Indices (int64) of the kept (``kept``: bool[n]) flow ends among events with fields ``f``
    whose id is not an integer in [0, 2**40): the output's view of those cannot be derived."""
    ph = f[:, validate_kernels.C_PH]
    flow = kept & ((ph == validate_kernels.PH_S) | (ph == validate_kernels.PH_F))
    if not flow.any():
        return np.zeros(0, np.int64)
    ok = ((f[:, validate_kernels.C_IDK] == validate_kernels.INT) & (f[:, validate_kernels.C_IDV] >= 0)
          & (f[:, validate_kernels.C_IDV] < ID_LIMIT))
    return np.flatnonzero(flow & ~ok)


def rank_validation(reports: list, events_out: int, exact: bool) -> dict:
    """A rank's ``{"input", "output", "exact"}`` from the checker's two reports (the output's
    event count is the rank's ``events_out``: merge's own process metadata events included)."""
    out = dict(reports[1], events=events_out)
    return {"input": reports[0], "output": out, "exact": exact}


def split_validation(parts: list, spill_dir: str, events_out: int, out_filter: OutFilter | None = None) -> dict:
    """Task: a split rank's ``rank_validation`` from its ranges' validation results (in file
    order: ``{"parts": Checker.save_runs(...), "exact"}``); removes their logs.  ``out_filter``: the
    written events a time filter dropped afterwards (``OutFilter``,
    ``dropped_seq`` by the rank's file order across its ranges)."""
    reps = split_reports([p["parts"] for p in parts], spill_dir, out_filter)
    return rank_validation(reps, events_out, all(p["exact"] for p in parts))


def split_reports(counters: list, spill_dir: str, out_filter: OutFilter | None = None) -> list[dict]:
    """A split rank's two reports (``V_IN``, ``V_OUT``: ``reports``)
    from its ranges' sorted runs (``save_runs``, file order),
    merged (``gather_ranges``); removes their logs, also on an error."""
    try:
        with gather_ranges(counters, ValidateOptions(spill_dir=spill_dir)) as chk:
            return chk.reports(out_filter)
    finally:
        for c in counters:
            remove_quietly(c["log"])


def _pids_apart(process_maps: list) -> bool:
    """True when every merged pid stands for one input pid of one rank (no slot shared, no
    list/object pid, no GPU slot running into the next rank's)."""
    seen = set()
    for pmap in process_maps:
        for mpid, info in pmap.items():
            if mpid in seen or isinstance(info["pid"], (list, dict)) or info["slot"] == 99 \
                    or info["slot"] >= 999:
                return False
            seen.add(mpid)
    return True


def _total(reps: list) -> dict:
    tot = {"events": 0, "tracks": 0, "flows": 0, "problems": dict.fromkeys(PROBLEMS, 0), "notices": {}}
    for r in reps:
        for k in ("events", "tracks", "flows"):
            tot[k] += r[k]
        for k, v in r["problems"].items():
            tot["problems"][k] += v
        for k, v in r["notices"].items():
            tot["notices"][k] = tot["notices"].get(k, 0) + v
    tot["ok"] = not any(tot["problems"].values())
    return tot


def merged_validation(vals: list, process_maps: list, output) -> dict:
    """The merge's validation from its ranks' checks (``vals``: ``rank_validation`` of each rank)
    and process maps (``{merged pid: {"pid", "slot", ...}}`` of each rank): ``{"input": totals over the
    input files, "output": the output's report, "added": {problem: count merge added}, "ok": nothing
    added, "exact": the output's report was derived (True) or validated in full (False)}``."""
    inp = _total([v["input"] for v in vals])
    exact = all(v["exact"] for v in vals) and _pids_apart(process_maps)
    if exact:
        out = _total([v["output"] for v in vals])
        added = {k: sum(max(0, v["output"]["problems"][k] - v["input"]["problems"][k]) for v in vals)
                 for k in PROBLEMS}
    else:
        rep = validate(output)
        out = {k: rep[k] for k in ("events", "tracks", "flows", "problems", "notices", "ok")}
        added = {k: max(0, out["problems"][k] - inp["problems"][k]) for k in PROBLEMS}
    return {"input": inp, "output": out, "added": added, "ok": not any(added.values()), "exact": exact}


def validation_summary(val: dict) -> str:
    """One line: what the output's check found (with the GPU kernels overlapping on one stream,
    a notice), which problems the inputs already had, what merge added."""
    had = ", ".join(f"{k} {v:,}" for k, v in val["input"]["problems"].items() if v)
    added = ", ".join(f"{k} {v:,}" for k, v in val["added"].items() if v)
    out = val["output"]
    head = f"validate: {out['events']:,} events, {out['tracks']:,} tracks, {out['flows']:,} flows"
    gpu = out["notices"].get("gpu_stream_overlap", 0)
    if gpu:             # not a problem: Perfetto draws them on an overflow track (issue 33, class 8)
        head += (f" ({gpu:,} GPU kernels overlap another on their stream, gpu_stream_overlap: "
                 f"Perfetto shows them on an overflow track)")
    if added:
        return f"{head}: PROBLEMS added by merge: {added}" + (f" (the inputs had {had})" if had else "")
    if had:
        return f"{head}: OK, merge added no problem (kept from the inputs: {had})"
    return f"{head}: OK"
