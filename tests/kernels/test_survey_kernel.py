"""merge's pre-pass kernel (``streamtrace.kernels.survey.scan_survey``) against its twin
``streamtrace.kernels.reference.survey.classify_event_py`` and against
``streamtrace.kernels.scan.scan_events`` (hypothesis property tests), and the pre-pass it
serves (``streamtrace.merge.prepass.prepass_rank``) against the same facts read with ``json``."""
from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtrace.kernels import scan as K
from streamtrace.kernels import survey as KS
from streamtrace.kernels.reference import classify_event_py
from streamtrace.merge.prepass import prepass_rank
from streamtrace.trace.writer import fmt_us
from support import REAL, exact_ns, load_json, need_shared

names = st.sampled_from(["aten::mm", "ProfilerStep#3", "ProfilerStep#12", "ProfilerStep#x", "ProfilerStep",
                         "Profiler\\u0053tep#4", "a\"b", "ac2g"])
cats = st.sampled_from(["ac2g", "fwdbwd", "kernel", "gpu_user_annotation", "cpu_op", "a\\u0063", "é"])
ids = st.integers(0, 2 ** 41) | st.just(10 ** 19) | st.just(-3) | st.text(alphabet="ab1", max_size=3) | st.just(1.5) \
    | st.just(None)
phs = st.sampled_from(["X", "s", "f", "t", "M", "i", "Xy", "", "\\u0058", 7])


@st.composite
def event_text(draw):
    """One event's JSON text: a random subset of ph/name/cat/id/ts/dur/args, random spacing,
    sometimes an escaped key, a key given twice or a nested args object before the others."""
    parts = []
    if draw(st.booleans()):
        parts.append(('"args"', json.dumps(draw(st.dictionaries(st.sampled_from(["ph", "name", "id", "x"]),
                                                                  st.integers(0, 9) | st.just("s"), max_size=3)))))
    for key, strat in (("ph", phs), ("name", names), ("cat", cats), ("id", ids)):
        if draw(st.integers(0, 4)) == 0:
            continue
        v = draw(strat)
        text = f'"{v}"' if isinstance(v, str) and "\\u" in v else json.dumps(v)    # "\\u...": a raw escape
        parts.append((f'"{key}"' if draw(st.integers(0, 9)) else '"p\\u0068"' if key == "ph" else f'"{key}"', text))
    if draw(st.booleans()):
        parts.append(('"ts"', fmt_us(draw(st.integers(0, 10 ** 13))).decode()))
    if draw(st.booleans()):
        parts.append(('"dur"', str(draw(st.integers(0, 10 ** 6)))))
    if parts and draw(st.integers(0, 9)) == 0:
        parts.append(parts[draw(st.integers(0, len(parts) - 1))])      # a key given twice
    order = draw(st.permutations(range(len(parts))))
    sp = draw(st.sampled_from(["", " ", "\n  "]))
    return "{" + "," .join(f"{sp}{parts[i][0]}:{sp}{parts[i][1]}" for i in order) + sp + "}"


def _scan(data: bytes, ncap=64):
    """Run scan_survey over the whole array ``data`` (the ``[`` excluded), growing the cat table."""
    buf = np.frombuffer(data, np.uint8)
    starts, ends, ts, dur, cat_k, fid = (np.zeros(ncap, np.int64) for _ in range(6))
    flags, kind = np.zeros(ncap, np.uint8), np.zeros(ncap, np.uint8)
    sep, info = np.zeros(1, np.int64), np.zeros(2, np.int64)
    texts, k, pos = [], 0, 1
    while True:
        text = np.frombuffer(b"".join(texts) or b"\0", np.uint8)
        off = np.zeros(len(texts) + 1, np.int64)
        off[1:] = np.cumsum([len(t) for t in texts]) if texts else []
        k, status, pos = KS.scan_survey(buf, pos, len(buf), starts, ends, ts, dur, flags, sep, k, kind, cat_k, fid,
                                        text, off, len(texts), info)
        if status != KS.NEW_CAT:
            break
        texts.append(data[int(info[0]):int(info[1])])
    assert status == K.DONE
    return k, starts, ends, ts, dur, flags, kind, cat_k, fid, texts


@settings(max_examples=300, deadline=None)
@given(st.lists(event_text(), min_size=1, max_size=10))
def test_scan_survey_matches_twin_and_scan_events(evs):
    data = ("[" + ",".join(evs) + "]").encode()
    k, starts, ends, ts, dur, flags, kind, cat_k, fid, texts = _scan(data)
    assert k == len(evs)
    # the scan part: scan_events' byte ranges, times and flags
    buf = np.frombuffer(data, np.uint8)
    s2, e2, t2, d2 = (np.zeros(64, np.int64) for _ in range(4))
    f2 = np.zeros(64, np.uint8)
    k2, _, _ = K.scan_events(buf, 1, len(buf), s2, e2, t2, d2, f2, np.zeros(1, np.int64))
    assert k2 == k
    for a, b in ((starts, s2), (ends, e2), (ts, t2), (dur, d2), (flags, f2)):
        assert a[:k].tolist() == b[:k].tolist()
    # the classification: as the twin's on the decoded event, or left to Python
    for i, text in enumerate(evs):
        want = classify_event_py(json.loads(text))
        got = int(kind[i])
        if want[0] in ("step", "decode"):
            assert got == KS.S_DECODE, (text, want)
        elif got == KS.S_FLOW:
            assert want == ("flow", texts[cat_k[i]].decode(), int(fid[i])), text
        elif got != KS.S_DECODE:
            assert (want[0], got) in (("other", KS.S_OTHER), ("meta", KS.S_META)), (text, want, got)


def test_typical_events_are_read_by_the_kernel():
    """Guard for the property test: Kineto's usual events are classified without Python."""
    evs = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2,
            "args": {"External id": 5, "correlation": 9}},
           {"ph": "f", "id": 9, "pid": 0, "tid": 7, "ts": 1.5, "cat": "ac2g", "name": "ac2g", "bp": "e"},
           {"ph": "s", "id": 9, "pid": 0, "tid": 7, "ts": 1, "cat": "ac2g", "name": "ac2g"},
           {"name": "thread_name", "ph": "M", "pid": 41523, "tid": 1, "ts": 0, "args": {"name": "main"}},
           {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 1, "dur": 5}]
    data = json.dumps(evs, indent=2).encode()
    k, *_, kind, cat_k, fid, texts = _scan(data)
    assert kind[:k].tolist() == [KS.S_OTHER, KS.S_FLOW, KS.S_FLOW, KS.S_META, KS.S_DECODE]
    assert texts == [b"ac2g"] and fid[1] == fid[2] == 9


def _expected(events):
    """first ts (ns), ProfilerStep windows and flow extents of ``events`` (decoded with json,
    floats as Decimal), by the rule merge documents: ``ts`` in us, exact to the ns."""
    ns = exact_ns
    first, steps, flows = None, {}, {}
    gpu = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
    for ev in events:
        if "ts" not in ev:
            continue
        t = ns(ev["ts"])
        if ev.get("ph") != "M":
            first = t if first is None else min(first, t)
        name = ev.get("name")
        if ev.get("ph") == "X" and isinstance(name, str) and name.startswith("ProfilerStep#") \
                and ev.get("cat") not in gpu and name[13:].isdigit():
            end = t + ns(ev.get("dur", 0))
            lo, hi = steps.get(int(name[13:]), (t, end))
            steps[int(name[13:])] = (min(lo, t), max(hi, end))
        elif ev.get("ph") in ("s", "f", "t"):
            k = (ev.get("cat"), ev.get("id"))
            lo, hi = flows.get(k, (t, t))
            flows[k] = (min(lo, t), max(hi, t))
    return first, steps, flows


def test_prepass_matches_json(tmp_path):
    """The pre-pass on a real trace: its earliest ts, ProfilerStep windows and flow extents are
    those read from the same file with ``json``."""
    need_shared()
    path = REAL / "v100_ddp_rank1_of2.json.gz"
    raw = load_json(path, decimal=True)
    events = raw["traceEvents"]
    meta, first, steps, flows = prepass_rank(str(path), want_flows=True)
    want_first, want_steps, want_flows = _expected(events)
    assert (first, steps) == (want_first, want_steps)
    assert len(steps) >= 2 and len(want_flows) > 1000
    assert flows.as_dict() == want_flows
    assert set(meta) == set(raw) - {"traceEvents"}
