"""``merge --steps`` in one pass (``streamtrace.merge.deferred``: each rank rewritten once, the
keep-window decided after the pass) against the two-pass merge it replaces (a survey of every rank,
then the rewrite with the window known), forced by patching
``streamtrace.merge.plan.deferred_filter``, ``--steps`` and ``--window``: the same events in the same order, the same summary
(``events_out``, ``validation``, ``warnings``), the same merged metadata, the same errors.

Real traces from ../shared (skipped when absent) and small synthetic traces written here; the
synthetic cases were the smallest reproducers of the differences these tests found (events through
the Python twin, a ProfilerStep without ts, a flow event whose ts is a number in a string, a dropped
flow with a string id, which rank an error names), all fixed."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streamtrace.merge.deferred as D
import streamtrace.merge.grouped as G
import streamtrace.merge.plan as R
from streamtrace.merge import MergeOptions, merge
from streamtrace.merge.deferred import DeferredFilter
from streamtrace.runtime.errors import StreamtraceError

from support import REAL, SHARED, load_json, need_shared

V100 = REAL / "v100_ddp_rank1_of2.json.gz"
MEGATRON = SHARED / "traces" / "real-multi" / "megatron_tp2_v100x2"
CPU3D = SHARED / "traces" / "cpu-3d"


def _two_pass():
    """The old path: a survey of every rank, then the rewrite with the keep-window known."""
    return mock.patch.object(R, "deferred_filter", lambda opt, splits: False)


def _one_pass_spy():
    """Record what the real ``deferred_filter`` answers (the one-pass path is taken when True)."""
    real, seen = R.deferred_filter, []

    def spy(opt, splits):
        seen.append(real(opt, splits))
        return seen[-1]
    return mock.patch.object(R, "deferred_filter", spy), seen


def _run_both(inputs, tmp_path, opt, name="merged.json"):
    """``(one-pass results, two-pass results)`` of ``merge(inputs, ..., opt)``, each into its own folder
    under ``tmp_path`` with the same output name; asserts the one-pass path was taken."""
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    patch, seen = _one_pass_spy()
    with patch:
        one = merge([str(p) for p in inputs], tmp_path / "one" / name, opt)
    assert seen and all(seen), "the one-pass path was not taken"
    with _two_pass():
        two = merge([str(p) for p in inputs], tmp_path / "two" / name, opt)
    return one, two


def _assert_same(one, two):
    assert len(one) == len(two)
    for a, b in zip(one, two):
        for key in ("events_in", "events_out", "validation", "warnings", "ranks"):
            assert a[key] == b[key], key
        da, db = load_json(a.output), load_json(b.output)
        ea, eb = da.pop("traceEvents"), db.pop("traceEvents")
        assert len(ea) == a["events_out"]
        assert ea == eb
        assert sorted(json.dumps(e, sort_keys=True) for e in ea) == sorted(json.dumps(e, sort_keys=True) for e in eb)
        if a.output.name != b.output.name:
            da.pop("traceName", None)
            db.pop("traceName", None)
        assert da["streamtrace"] == db["streamtrace"]
        assert da == db


def _check(inputs, tmp_path, opt, name="merged.json"):
    one, two = _run_both(inputs, tmp_path, opt, name)
    _assert_same(one, two)
    return one


# -- real traces ---------------------------------------------------------------------------------


@pytest.mark.parametrize("steps, name", [((3, 4), "merged.json"), ((2, 2), "merged.json.gz")])
def test_real_rank_steps(tmp_path, steps, name):
    need_shared()
    one = _check([V100], tmp_path, MergeOptions(steps=steps, jobs=1), name)
    assert 0 < one[0]["events_out"] < one[0]["events_in"]


def test_real_rank_steps_when_their_category_is_dropped(tmp_path):
    """The ProfilerStep events are ``user_annotation``: dropped from the output, the window still
    comes from them."""
    need_shared()
    opt = MergeOptions(steps=(3, 4), jobs=1, drop_cat=frozenset({"user_annotation"}))
    one = _check([V100], tmp_path, opt)
    evs = load_json(one[0].output)["traceEvents"]
    assert evs and not any(e.get("cat") == "user_annotation" for e in evs)


@pytest.mark.parametrize("jobs", [1, 2])
def test_megatron_two_ranks(tmp_path, jobs):
    if not MEGATRON.is_dir():
        pytest.skip("../shared/traces/real-multi is absent")
    one = _check([MEGATRON], tmp_path, MergeOptions(steps=(6, 6), jobs=jobs, split_threshold=None))
    assert len(one[0]["ranks"]) == 2


def test_megatron_without_validation_and_its_step_category_dropped(tmp_path):
    if not MEGATRON.is_dir():
        pytest.skip("../shared/traces/real-multi is absent")
    opt = MergeOptions(steps=(6, 6), jobs=1, validate=False, drop_cat=frozenset({"user_annotation"}))
    one = _check([MEGATRON], tmp_path, opt, "merged.json.gz")
    assert one[0]["validation"] is None


@pytest.mark.parametrize("jobs, name", [(1, "merged.json.gz"), (2, "merged.json")])
def test_cpu3d_eight_ranks(tmp_path, jobs, name):
    if not CPU3D.is_dir():
        pytest.skip("../shared/traces/cpu-3d is absent")
    one = _check([CPU3D], tmp_path, MergeOptions(steps=(3, 3), jobs=jobs, split_threshold=None), name)
    assert len(one[0]["ranks"]) == 8


def test_megatron_gpu_only(tmp_path):
    """Only the GPU processes are kept; the window still comes from the CPU ProfilerStep."""
    if not MEGATRON.is_dir():
        pytest.skip("../shared/traces/real-multi is absent")
    _check([MEGATRON], tmp_path, MergeOptions(steps=(6, 6), jobs=1, gpu_only=True))


def test_cpu3d_some_ranks(tmp_path):
    if not CPU3D.is_dir():
        pytest.skip("../shared/traces/cpu-3d is absent")
    one = _check([CPU3D], tmp_path, MergeOptions(steps=(3, 3), jobs=1, ranks={1, 5}))
    assert len(one[0]["ranks"]) == 2


def test_truncated_rank_salvaged(tmp_path):
    """The first two thirds of a real rank (no trailer), merged with ``salvage``."""
    if not MEGATRON.is_dir():
        pytest.skip("../shared/traces/real-multi is absent")
    raw = gzip.decompress(sorted(MEGATRON.glob("*.json.gz"))[0].read_bytes())
    (tmp_path / "in").mkdir()
    src = tmp_path / "in" / "rank0.json"
    src.write_bytes(raw[:len(raw) * 2 // 3])
    one = _check([src], tmp_path, MergeOptions(steps=(6, 6), jobs=1, salvage=True))
    assert one[0]["events_out"] > 0


def _error(inputs, out, opt):
    with pytest.raises(StreamtraceError) as e:
        merge([str(p) for p in inputs], out, opt)
    return type(e.value), str(e.value)


def test_missing_step_same_error_and_no_leftovers(tmp_path):
    need_shared()
    opt = MergeOptions(steps=(90, 91), jobs=1)
    for d in ("one", "two"):
        (tmp_path / d).mkdir()
    patch, seen = _one_pass_spy()
    with patch:
        one = _error([V100], tmp_path / "one" / "merged.json", opt)
    assert seen and all(seen)
    with _two_pass():
        two = _error([V100], tmp_path / "two" / "merged.json", opt)
    assert one == two
    assert "90-91" in one[1] and str(V100) in one[1]
    assert os.listdir(tmp_path / "one") == [] and os.listdir(tmp_path / "two") == []


# -- synthetic traces ----------------------------------------------------------------------------

STEPS = [
    '{"ph":"X","name":"ProfilerStep#2","cat":"user_annotation","pid":1,"tid":1,"ts":100,"dur":100}',
    '{"ph":"X","name":"Profiler\\u0053tep#3","cat":"user_annotation","pid":1,"tid":1,"ts":200,"dur":100}',
    '{"ph":"X","name":"ProfilerStep#4","cat":"user_annotation","pid":1,"tid":1,"ts":300,"dur":100}',
]
META = ['{"ph":"M","name":"process_name","pid":1,"args":{"name":"python"}}',
        '{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"main"}}']


def _x(name, ts, dur=10, pid=1):
    return '{"ph":"X","name":"%s","cat":"cpu_op","pid":%d,"tid":1,"ts":%s,"dur":%s}' % (name, pid, ts, dur)


def _flow(name, cat, fid, ts_s, ts_f):
    """A flow's two events (raw JSON texts; ``cat`` and ``fid`` as they stand in the file)."""
    return ['{"ph":"s","name":"%s","cat":%s,"id":%s,"pid":1,"tid":1,"ts":%s}' % (name, cat, fid, ts_s),
            '{"ph":"f","name":"%s","cat":%s,"id":%s,"pid":1,"tid":1,"ts":%s,"bp":"e"}' % (name, cat, fid, ts_f)]


def _trace(folder: Path, events, rank=0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / f"rank{rank}.json"
    p.write_text('{"traceEvents":[' + ",\n".join(events)
                 + '],"distributedInfo":{"rank":%d,"world_size":2}}' % rank)
    return p


# events the byte kernel rewrites itself (no event handed to the Python twin)
KERNEL_ONLY = META + STEPS + [
    _x("inside", 210), _x("before", 50), _x("across_lo", 190, 20), _x("after", 450), _x("at_hi", 300, 5),
    '{"ph":"i","name":"no_ts","cat":"cpu_op","pid":1,"tid":1,"s":"t"}',
    '{"ph":"M","name":"thread_sort_index","pid":1,"tid":1,"args":{"sort_index":1}}',
    *_flow("s_in_f_after", '"ac2g"', 1, 220, 350), *_flow("inside", '"ac2g"', 2, 220, 280),
    *_flow("before", '"fwdbwd"', 3, 20, 40), *_flow("inside_other_cat", '"fwdbwd"', 4, 230, 290),
    '{"ph":"X","name":"gemm","cat":"kernel","pid":1,"tid":7,"ts":240,"dur":5,"args":{"correlation":9}}',
    '{"ph":"X","name":"missing_tid","cat":"cpu_op","pid":1,"ts":60,"dur":3}',
    '{"ph":"X","name":"missing_dur","cat":"cpu_op","pid":1,"tid":1,"ts":70}',
    _x("negative_dur", 80, -3),
]
# events the one-pass path hands to the Python twin: a string id, a cat with an escape, a ts in a string
PYTHON_EVENTS = [*_flow("string_id", '"ac2g"', '"a1"', 220, 230), *_flow("string_id_after", '"ac2g"', '"a2"', 220, 500),
                 *_flow("escaped_cat", '"fwd\\"x"', 5, 220, 240), *_flow("escaped_cat_after", '"fwd\\"x"', 6, 220, 500),
                 _x("string_ts", '"250.5"'), _x("string_ts_before", '"50"')]


@pytest.mark.parametrize("steps", [(3, 3), (3, 4), (2, 2)])
def test_synthetic_kernel_events(tmp_path, steps):
    src = _trace(tmp_path / "in", KERNEL_ONLY)
    one = _check([src], tmp_path, MergeOptions(steps=steps, jobs=1))
    names = [e.get("name") for e in load_json(one[0].output)["traceEvents"]]
    assert "before" not in names and "no_ts" in names and "thread_sort_index" in names
    if steps == (3, 3):         # window [200, 300] us: the flow (220, 350) crosses its end
        assert "s_in_f_after" not in names and names.count("inside") == 3 and "after" not in names
    if steps == (3, 4):         # [200, 400]: the whole flow is inside
        assert names.count("s_in_f_after") == 2


def test_synthetic_two_ranks_jobs_2(tmp_path):
    srcs = [_trace(tmp_path / "in", KERNEL_ONLY, 0), _trace(tmp_path / "in", KERNEL_ONLY[:-4] + [_x("r1", 260)], 1)]
    _check([tmp_path / "in"], tmp_path, MergeOptions(steps=(3, 4), jobs=2, split_threshold=None))
    assert all(p.exists() for p in srcs)


def test_synthetic_python_events(tmp_path):
    """The brief's trace: flows inside / crossing the window, a string id, an escaped cat, an escaped
    ProfilerStep name, a ts given as a string, events without ts."""
    src = _trace(tmp_path / "in", KERNEL_ONLY + PYTHON_EVENTS)
    _check([src], tmp_path, MergeOptions(steps=(3, 3), jobs=1))


def test_one_event_through_python(tmp_path):
    """Smallest reproducer of the crash: one event whose ts is a number in a string."""
    src = _trace(tmp_path / "in", [STEPS[1], _x("a", '"210"')])
    _check([src], tmp_path, MergeOptions(steps=(3, 3), jobs=1))


def test_profiler_step_without_ts_is_no_step(tmp_path):
    src = _trace(tmp_path / "in", [STEPS[1], '{"ph":"X","name":"ProfilerStep#5","cat":"user_annotation",'
                                              '"pid":1,"tid":1,"dur":100}', _x("a", 210)])
    for d in ("one", "two"):
        (tmp_path / d).mkdir()
    opt = MergeOptions(steps=(5, 5), jobs=1)
    with _two_pass():
        two = _error([src], tmp_path / "two" / "merged.json", opt)
    one = _error([src], tmp_path / "one" / "merged.json", opt)
    assert one == two


def test_profiler_step_without_ts_does_not_widen_the_window(tmp_path):
    src = _trace(tmp_path / "in", [STEPS[1], '{"ph":"X","name":"ProfilerStep#3","cat":"user_annotation",'
                                              '"pid":1,"tid":1,"dur":100}', _x("a", 210), _x("b", 50)])
    _check([src], tmp_path, MergeOptions(steps=(3, 3), jobs=1))


def test_flow_with_string_ts(tmp_path):
    src = _trace(tmp_path / "in", [STEPS[1], *_flow("f", '"ac2g"', 1, '"210"', 220), _x("b", 50)])
    _check([src], tmp_path, MergeOptions(steps=(3, 3), jobs=1))


def test_dropped_flow_with_string_id_keeps_validation_exact(tmp_path):
    src = _trace(tmp_path / "in", [STEPS[1], *_flow("f", '"ac2g"', '"a1"', 210, 500), _x("b", 50)])
    _check([src], tmp_path, MergeOptions(steps=(3, 3), jobs=1))


def test_several_ranks_missing_the_step_same_error(tmp_path):
    srcs = [_trace(tmp_path / "in", [_x("a", 250)], 0), _trace(tmp_path / "in", [_x("a", 250), _x("b", 50)], 1)]
    assert all(p.exists() for p in srcs)
    for d in ("one", "two"):
        (tmp_path / d).mkdir()
    opt = MergeOptions(steps=(3, 3), jobs=1)
    one = _error([tmp_path / "in"], tmp_path / "one" / "merged.json", opt)
    with _two_pass():
        two = _error([tmp_path / "in"], tmp_path / "two" / "merged.json", opt)
    assert one == two


def test_deferred_filter_is_used_on_one_worker(tmp_path):
    """With one worker the rank's filter is decided in this process: the one-pass path did run."""
    src = _trace(tmp_path / "in", KERNEL_ONLY)
    calls = []
    real = DeferredFilter.finish

    def finish(self, path, shift_ns, keep=None):
        d = real(self, path, shift_ns, keep)
        calls.append((d.lo, d.hi, d.kept))
        return d
    with mock.patch.object(DeferredFilter, "finish", finish):
        merge([str(src)], tmp_path / "merged.json", MergeOptions(steps=(3, 3), jobs=1))
    assert calls == [(200_000, 300_000, calls[0][2])] and calls[0][2] > 0


# -- random synthetic traces (events the byte kernel rewrites itself) --------------------------------

TS_US = st.integers(0, 600) | st.integers(0, 600).map(lambda t: t + 0.5)


@st.composite
def kernel_event(draw):
    """One event's JSON text from the shapes the byte kernel rewrites without Python: numeric ts and
    dur (a negative or missing dur, a missing ts or tid among them), flows with plain cats and small
    integer ids, ProfilerStep candidates (escaped name, GPU category), metadata events."""
    ph = draw(st.sampled_from(["X", "X", "X", "s", "f", "t", "i", "M"]))
    parts = {"ph": json.dumps(ph)}
    if ph == "M":
        parts["name"] = json.dumps(draw(st.sampled_from(["thread_name", "process_name", "thread_sort_index"])))
        parts["args"] = '{"name":"x"}'
    elif ph == "X" and draw(st.integers(0, 3)) == 0:
        parts["name"] = '"%s%d"' % (draw(st.sampled_from(["ProfilerStep#", "Profiler\\u0053tep#"])),
                                    draw(st.integers(1, 4)))
    else:
        parts["name"] = json.dumps(draw(st.sampled_from(["a", "b"])))
    parts["cat"] = json.dumps(draw(st.sampled_from(["user_annotation", "gpu_user_annotation", "ac2g", "fwdbwd",
                                                    "cpu_op"])))
    parts["pid"] = draw(st.sampled_from(["1", "2"]))
    if draw(st.integers(0, 15)):
        parts["tid"] = draw(st.sampled_from(["1", "2"]))
    if ph != "M" and (draw(st.integers(0, 15)) or "tep#" in parts["name"]):     # a step without ts: see above
        parts["ts"] = json.dumps(draw(TS_US))
    if ph == "X" and draw(st.integers(0, 9)):
        parts["dur"] = str(draw(st.integers(-5, 200)))
    if ph in "sft":
        parts["id"] = str(draw(st.integers(0, 4)))
    return "{" + ",".join(f'"{k}":{v}' for k, v in parts.items()) + "}"


@st.composite
def kernel_trace(draw):
    first = draw(st.integers(1, 4))
    last = draw(st.integers(first, 4))
    evs = draw(st.lists(kernel_event(), max_size=25))
    for n in {first, last}:
        step = '{"ph":"X","name":"ProfilerStep#%d","cat":"user_annotation","pid":1,"tid":1,"ts":%d,"dur":%d}' % (
            n, draw(st.integers(0, 500)), draw(st.integers(0, 200)))
        evs.insert(draw(st.integers(0, len(evs))), step)
    drop = draw(st.sampled_from([frozenset(), frozenset({"user_annotation"}), frozenset({"ac2g"})]))
    return evs, (first, last), drop, draw(st.booleans()), draw(st.sampled_from([1, 2, 5, D.CHUNK_ROWS]))


@settings(max_examples=100, deadline=None)
@given(kernel_trace())
def test_random_kernel_traces(tmp_path_factory, case):
    """... the rows decided in chunks of any size (DeferredFilter.finish's CHUNK_ROWS) give the same."""
    evs, steps, drop, validate, chunk = case
    tmp = tmp_path_factory.mktemp("rand")
    src = _trace(tmp / "in", evs)
    with mock.patch.object(D, "CHUNK_ROWS", chunk):
        _check([src], tmp, MergeOptions(steps=steps, jobs=1, drop_cat=drop, validate=validate))


@pytest.mark.parametrize("jobs", [1, 2])
def test_one_rank_missing_the_step_same_error_and_no_leftovers(tmp_path, jobs):
    srcs = [_trace(tmp_path / "in", KERNEL_ONLY, 0), _trace(tmp_path / "in", [_x("a", 250), _x("b", 50)], 1)]
    for d in ("one", "two"):
        (tmp_path / d).mkdir()
    opt = MergeOptions(steps=(3, 3), jobs=jobs, split_threshold=None)
    one = _error([tmp_path / "in"], tmp_path / "one" / "merged.json", opt)
    with _two_pass():
        two = _error([tmp_path / "in"], tmp_path / "two" / "merged.json", opt)
    assert one == two and str(srcs[1]) in one[1]
    assert os.listdir(tmp_path / "one") == [] and os.listdir(tmp_path / "two") == []


# -- --window in one pass: the parent decides once every rank's start is known ---------------------

@pytest.mark.parametrize("window, steps", [((0, 0.2), None), ((0.1, 0.25), None), ((0.15, 10), None),
                                           ((0.1, 0.3), (3, 4)), ((5, 6), None)])
def test_synthetic_window(tmp_path, window, steps):
    """The job starts at its earliest event (ts 20 us): a window in ms from there, alone or with
    ``--steps``; the Python twin's events too (a string id, an escaped cat, a ts in a string)."""
    src = _trace(tmp_path / "in", KERNEL_ONLY + PYTHON_EVENTS)
    _check([src], tmp_path, MergeOptions(window_ms=window, steps=steps, jobs=1))


def test_synthetic_window_two_ranks_jobs_2(tmp_path):
    _trace(tmp_path / "in", KERNEL_ONLY, 0)
    _trace(tmp_path / "in", KERNEL_ONLY[:-4] + [_x("r1", 260), _x("r1_first", 5)], 1)
    one = _check([tmp_path / "in"], tmp_path, MergeOptions(window_ms=(0, 0.1), jobs=2, split_threshold=None),
                 "merged.json.gz")
    names = [e.get("name") for e in load_json(one[0].output)["traceEvents"]]
    assert "r1_first" in names and "inside" not in names     # the window starts at rank 1's ts 5 us


def test_window_start_counts_events_a_filter_drops(tmp_path):
    """The window's origin is the earliest event of any kind but metadata, as the survey finds it, also
    when ``--drop-cat`` drops it or its ts is a number in a string."""
    src = _trace(tmp_path / "in", KERNEL_ONLY + [_x("early_string", '"5"')])
    _check([src], tmp_path, MergeOptions(window_ms=(0, 0.2), drop_cat=frozenset({"cpu_op"}), jobs=1))


def test_window_missing_step_same_error(tmp_path):
    src = _trace(tmp_path / "in", KERNEL_ONLY)
    for d in ("one", "two"):
        (tmp_path / d).mkdir()
    opt = MergeOptions(window_ms=(0, 1), steps=(7, 8), jobs=1)
    one = _error([src], tmp_path / "one" / "merged.json", opt)
    with _two_pass():
        two = _error([src], tmp_path / "two" / "merged.json", opt)
    assert one == two and "7-8" in one[1]
    assert os.listdir(tmp_path / "one") == []


def test_real_window(tmp_path):
    need_shared()
    _check([MEGATRON], tmp_path, MergeOptions(window_ms=(0, 300), jobs=2))


def test_real_window_cpu3d(tmp_path):
    need_shared()
    _check([CPU3D], tmp_path, MergeOptions(window_ms=(10, 400), jobs=2), "merged.json.gz")


@settings(max_examples=60, deadline=None)
@given(kernel_trace(), st.floats(0, 0.4), st.floats(0, 0.4), st.booleans())
def test_random_kernel_traces_window(tmp_path_factory, case, a, b, with_steps):
    evs, steps, drop, validate, chunk = case
    tmp = tmp_path_factory.mktemp("randw")
    src = _trace(tmp / "in", evs)
    with mock.patch.object(D, "CHUNK_ROWS", chunk):
        _check([src], tmp, MergeOptions(window_ms=(min(a, b), max(a, b)), steps=steps if with_steps else None,
                                        jobs=1, drop_cat=drop, validate=validate))


# -- ranks cut into byte ranges (merge.split_filter): every range read, then the rank decided ----------

def _split(src: Path, parts=6, **kw) -> MergeOptions:
    """Options cutting ``src`` (plain) into about ``parts`` byte ranges on 2 workers."""
    size = len(gzip.decompress(src.read_bytes())) if src.name.endswith(".gz") else src.stat().st_size
    return MergeOptions(jobs=2, split_threshold=max(1, size // parts), split_always=True, **kw)


@pytest.mark.parametrize("kw", [{"steps": (3, 4)}, {"window_ms": (20, 120)}, {"window_ms": (0, 1e6), "steps": (2, 2)}],
                         ids=["steps", "window", "window+steps"])
def test_split_real_rank(tmp_path, kw):
    """The V100 rank (``.json.gz``, decompressed for its ranges) in about 8 ranges: the ranges' steps,
    earliest events and flows (their two ends often in different ranges) decide the rank."""
    need_shared()
    one = _check([V100], tmp_path, _split(V100, 8, **kw), "merged.json.gz" if "window_ms" in kw else "merged.json")
    assert one[0]["split"] and 0 < one[0]["events_out"] < one[0]["events_in"]


@pytest.mark.parametrize("kw", [{"steps": (3, 3)}, {"steps": (3, 4)}, {"window_ms": (0.1, 0.25)},
                                {"window_ms": (0.1, 0.3), "steps": (3, 4)}])
def test_split_synthetic(tmp_path, kw):
    """Flows (plain and Python-numbered: string ids, escaped cats) whose ends lie in different ranges,
    the steps in another, events through the Python twin."""
    src = _trace(tmp_path / "in", KERNEL_ONLY + PYTHON_EVENTS + KERNEL_ONLY[2:])
    one = _check([src], tmp_path, _split(src, 8, **kw))
    assert one[0]["split"][0] >= 4


@pytest.mark.parametrize("group", [1, 3])
def test_split_groups_made_again(tmp_path, group):
    """Groups of 1 and 3 events (most of them cut by the window, their rows made again from the input
    by rewriting their bytes once more): pids the kernel does not know (a string, a NaN, an object)
    and flows numbered by Python among them, every event around the window's edges."""
    odd = ['{"ph":"X","name":"nan_pid","cat":"cpu_op","pid":NaN,"tid":1,"ts":205,"dur":3}',
           '{"ph":"X","name":"str_pid","cat":"cpu_op","pid":"Spans","tid":1,"ts":199,"dur":3}',
           '{"ph":"X","name":"obj_pid","cat":"cpu_op","pid":{"a":1},"tid":1,"ts":301,"dur":3}']
    src = _trace(tmp_path / "in", KERNEL_ONLY + odd + PYTHON_EVENTS + KERNEL_ONLY[2:] + odd)
    with mock.patch.object(G, "GROUP_EVENTS", group):
        for k, kw in enumerate(({"steps": (3, 3)}, {"window_ms": (0.05, 0.2)})):
            (tmp_path / str(k)).mkdir()
            one = _check([src], tmp_path / str(k), _split(src, 8, **kw))
            assert one[0]["split"][0] >= 4


def test_split_two_ranks_one_cut(tmp_path):
    """One rank cut, the other whole: ``--steps`` decided in the whole rank's worker, the cut one by a
    task; ``--window`` over both."""
    big = _trace(tmp_path / "in", KERNEL_ONLY + PYTHON_EVENTS + KERNEL_ONLY[2:] * 3, 0)
    small = _trace(tmp_path / "in", KERNEL_ONLY[:-4] + [_x("r1", 260), _x("r1_first", 5)], 1)
    assert big.stat().st_size > 4 * small.stat().st_size
    for i, kw in enumerate(({"steps": (3, 4)}, {"window_ms": (0, 0.25)})):
        opt = MergeOptions(jobs=2, split_threshold=small.stat().st_size + 1, **kw)
        (tmp_path / str(i)).mkdir()
        one = _check([tmp_path / "in"], tmp_path / str(i), opt)
        assert list(one[0]["split"]) == [0]


@pytest.mark.parametrize("kw", [{"steps": (7, 8)}, {"steps": (7, 8), "window_ms": (0, 1)}])
def test_split_missing_step_same_error_and_no_leftovers(tmp_path, kw):
    src = _trace(tmp_path / "in", KERNEL_ONLY + KERNEL_ONLY[2:])
    for d in ("one", "two"):
        (tmp_path / d).mkdir()
    one = _error([src], tmp_path / "one" / "merged.json", _split(src, **kw))
    with _two_pass():
        two = _error([src], tmp_path / "two" / "merged.json", _split(src, **kw))
    assert one == two and "7-8" in one[1]
    assert os.listdir(tmp_path / "one") == [] and os.listdir(tmp_path / "two") == []


@pytest.mark.parametrize("kw", [{"steps": (3, 4)}, {"window_ms": (0.1, 0.25)}])
def test_split_gz_output(tmp_path, kw):
    """A ``.json.gz`` output of a cut rank: each range's kept runs compressed by a task of their own."""
    src = _trace(tmp_path / "in", KERNEL_ONLY + PYTHON_EVENTS + KERNEL_ONLY[2:])
    one = _check([src], tmp_path, _split(src, 8, **kw), "merged.json.gz")
    assert one[0]["split"][0] >= 4


@settings(max_examples=40, deadline=None)
@given(kernel_trace(), st.floats(0, 0.4), st.floats(0, 0.4), st.sampled_from(["steps", "window", "both"]),
       st.integers(2, 9))
def test_random_kernel_traces_split(tmp_path_factory, case, a, b, which, parts):
    evs, steps, drop, validate, chunk = case
    tmp = tmp_path_factory.mktemp("rands")
    src = _trace(tmp / "in", evs + evs)              # twice: flows and steps repeat across the ranges
    window = (min(a, b), max(a, b)) if which != "steps" else None
    with mock.patch.object(G, "GROUP_EVENTS", min(chunk, G.GROUP_EVENTS)):
        one = _check([src], tmp, _split(src, parts, window_ms=window, steps=steps if which != "window" else None,
                                        drop_cat=drop, validate=validate))
    assert one[0]["split"], "the rank was merged whole"


# -- a window that holds every event: kept without reading the rows back ----------------------------

def _rows_never_read():
    """keep_rows fails if called (the decisions of a covered rank must not need it); the parent's
    warm-up of it before forking is skipped."""
    import streamtrace.kernels.keeper as KP       # where the deferred filter's facade calls it
    import streamtrace.merge.rank as RK
    return mock.patch.object(KP, "keep_rows", side_effect=AssertionError("keep_rows called")), \
        mock.patch.object(RK, "warm_keep", lambda: None)


@pytest.mark.parametrize("cut, name", [(False, "merged.json"), (True, "merged.json.gz")], ids=["whole", "cut-gz"])
def test_window_holding_every_event(tmp_path, cut, name):
    """The V100 rank under a window wider than the trace, whole and cut into 8 ranges: every event
    kept (the two-pass merge's output), decided from the pass's extremes alone."""
    need_shared()
    opt = _split(V100, 8, window_ms=(0, 1e9)) if cut else MergeOptions(window_ms=(0, 1e9), jobs=1)
    rows, warm = _rows_never_read()
    (tmp_path / "one").mkdir()
    with rows, warm:
        one = merge([str(V100)], tmp_path / "one" / name, opt)
    (tmp_path / "two").mkdir()
    with _two_pass():
        two = merge([str(V100)], tmp_path / "two" / name, opt)
    _assert_same(one, two)
    full = merge([str(V100)], tmp_path / name, MergeOptions(jobs=1))
    assert one[0]["events_out"] == full[0]["events_out"] and bool(one[0]["split"]) == cut


def test_window_missing_one_event_reads_the_rows(tmp_path):
    """The pass's extremes decide alone only when the window holds every event's ts: one that leaves
    out the last event to start makes the rows be read; one that holds every ts but not every end (an
    event that ends after it is kept) does not."""
    src = _trace(tmp_path / "in", KERNEL_ONLY)
    timed = [e for e in load_json(src)["traceEvents"] if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M"]
    first, last = min(e["ts"] for e in timed), max(e["ts"] for e in timed)
    assert max(e["ts"] + e.get("dur", 0) for e in timed) > last     # an event ends after the last start
    rows, warm = _rows_never_read()
    short = MergeOptions(window_ms=(0, (last - first) / 1000 - 1e-4), jobs=1)     # (ms from the earliest event)
    with rows, warm, pytest.raises(AssertionError, match="keep_rows called"):
        merge([str(src)], tmp_path / "m.json", short)
    (tmp_path / "a").mkdir()
    _check([src], tmp_path / "a", short)
    every_ts = MergeOptions(window_ms=(0, (last - first) / 1000 + 1e-5), jobs=1)
    with rows, warm:
        merge([str(src)], tmp_path / "all.json", every_ts)
    (tmp_path / "b").mkdir()
    _check([src], tmp_path / "b", every_ts)
