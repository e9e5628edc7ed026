"""``merge --steps`` / ``--window``: the events kept, every one of them (flows included), against
the same selection made from the raw trace with plain ``json`` (the rule of docs/merge.md: an
event is kept when ``[ts, ts + dur]`` meets the keep-window, a flow when every event of its
``(cat, id)`` has its ts inside it, Kineto's process metadata replaced), unsplit and split."""
from __future__ import annotations

import os
from collections import Counter

import pytest

from streamtrace.merge import ID_BITS, MergeOptions, merge
from streamtrace.validate.check import validate

from support import REAL, exact_ns, load_json, need_shared

SRC = "a100_resnet_ddp_rank0_of2.json.gz"
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
PROCESS_META = {"process_name", "process_labels", "process_sort_index"}


def _raw():
    return load_json(REAL / SRC, decimal=True)["traceEvents"]


def _expected(events, lo, hi):
    """The events merge keeps of ``events`` under the keep-window [lo, hi] (ns), as comparable keys."""
    flows = {}
    for e in events:
        if e.get("ph") in ("s", "f", "t") and "ts" in e:
            t = exact_ns(e["ts"])
            a, b = flows.get((e.get("cat"), e.get("id")), (t, t))
            flows[(e.get("cat"), e.get("id"))] = (min(a, t), max(b, t))
    kept = Counter()
    for e in events:
        if e.get("ph") == "M":
            if e.get("name") not in PROCESS_META:
                kept[_key(e, 0)] += 1
            continue
        t = exact_ns(e["ts"])
        end = t + max(exact_ns(e.get("dur", 0)), 0)
        if end < lo or t > hi:
            continue
        if e.get("ph") in ("s", "f", "t"):
            a, b = flows[(e.get("cat"), e.get("id"))]
            if a < lo or b > hi:
                continue
        kept[_key(e, 0)] += 1
    return kept


def _key(e, rank, merged=False):
    """An event as (ph, name, cat, ts in ns, raw flow id), the merged one mapped back."""
    fid = e.get("id")
    if merged and fid is not None and e.get("ph") in ("s", "f", "t"):
        fid -= rank << ID_BITS
    return (e.get("ph"), e.get("name"), e.get("cat"), exact_ns(e["ts"]) if "ts" in e else None, fid)


def _merged(out):
    evs = load_json(out, decimal=True)["traceEvents"]
    mine = [e for e in evs if not (e.get("ph") == "M" and e.get("name") in PROCESS_META)]
    return Counter(_key(e, 0, merged=True) for e in mine)


def _steps(events):
    steps = {}
    for e in events:
        name = e.get("name")
        if e.get("ph") == "X" and isinstance(name, str) and name.startswith("ProfilerStep#") \
                and e.get("cat") not in GPU_CATS:
            t = exact_ns(e["ts"])
            a, b = steps.get(int(name[13:]), (t, t + exact_ns(e["dur"])))
            steps[int(name[13:])] = (min(a, t), max(b, t + exact_ns(e["dur"])))
    return steps


@pytest.mark.parametrize("split", [False, True])
def test_steps_keep_exactly_the_expected_events(tmp_path, split):
    need_shared()
    d = tmp_path / "in"
    d.mkdir()
    os.symlink(REAL / SRC, d / SRC)
    events = _raw()
    steps = _steps(events)
    a = b = sorted(steps)[1]
    out = tmp_path / "s.json"
    opt = dict(jobs=2, split_threshold=1 << 20, split_always=True) if split else dict(jobs=1)
    res = merge([d], out, MergeOptions(steps=(a, b), **opt))
    if split:
        assert res[0]["split"]
    want = _expected(events, steps[a][0], steps[b][1])
    assert _merged(out) == want
    assert sum(1 for k in want if k[0] == "f") > 100        # flows kept ...
    assert sum(want.values()) < len(events) * 0.8           # ... and many events dropped
    assert validate(out)["ok"]


@pytest.mark.parametrize("split", [False, True])
def test_window_keeps_exactly_the_expected_events(tmp_path, split):
    need_shared()
    d = tmp_path / "in"
    d.mkdir()
    os.symlink(REAL / SRC, d / SRC)
    events = _raw()
    t0 = min(exact_ns(e["ts"]) for e in events if e.get("ph") != "M" and "ts" in e)
    out = tmp_path / "w.json"
    opt = dict(jobs=2, split_threshold=1 << 20, split_always=True) if split else dict(jobs=1)
    merge([d], out, MergeOptions(window_ms=(40, 90.5), **opt))
    want = _expected(events, t0 + 40_000_000, t0 + 90_500_000)
    assert _merged(out) == want
    assert sum(1 for k in want if k[0] == "s") > 100
    assert validate(out)["ok"]
