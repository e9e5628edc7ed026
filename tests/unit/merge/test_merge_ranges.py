"""``merge --jobs N`` on big ranks: a rank trace cut into byte ranges and rewritten by
several workers gives exactly the unsplit merge (decompressed bytes, counts, errors)."""
from __future__ import annotations

import gzip
import importlib
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from streamtrace.runtime.errors import TraceError
from streamtrace.merge import MergeOptions, merge
from streamtrace.runtime.parallel import run_inline
from streamtrace.synth.job import SynthSpec, generate_job
from streamtrace.validate.check import validate

from support import need_shared, real_traces

# where merge looks up run_tasks: the plan (cuts, surveys), the rewrite and its decisions
M = [importlib.import_module(f"streamtrace.merge.{m}") for m in ("plan", "rewrite", "decide")]

SUMMARY = ("ranks", "iteration", "events_in", "events_out", "bytes_in")


def _bytes(path):
    raw = Path(path).read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def same_merge(tmp, inputs, ext=".json", threshold=1, rank_map=None, **opt):
    """Merge unsplit (jobs=1) and split (jobs=2, ``threshold``); assert identical
    output and summary counts; return the split summary."""
    a = merge(inputs, tmp / "a" / f"m{ext}", MergeOptions(jobs=1, **opt), rank_map=rank_map)
    b = merge(inputs, tmp / "b" / f"m{ext}", MergeOptions(jobs=2, split_threshold=threshold, split_always=True, **opt),
              rank_map=rank_map)
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert _bytes(ra["output"]) == _bytes(rb["output"])
        assert {k: ra[k] for k in SUMMARY} == {k: rb[k] for k in SUMMARY}
        assert rb["split"] and not ra["split"]
    assert not [p for p in (tmp / "b").iterdir() if p.name.startswith(".")]     # no temporary left
    return b[0]


# -- (a) real traces, each merged as a rank --------------------------------------------

@pytest.mark.parametrize("path", real_traces(), ids=lambda p: p.name)
def test_real_trace_split_equals_unsplit(tmp_path, path):
    need_shared()
    rmap = tmp_path / "ranks.txt"
    rmap.write_text(f"{path.name} 5\n")
    threshold = max(1, len(gzip.decompress(path.read_bytes())) // 12)     # about a dozen ranges
    res = same_merge(tmp_path, [path], ".json", threshold, str(rmap))
    assert validate(res["output"])["problems"] == validate(tmp_path / "a" / "m.json")["problems"]
    same_merge(tmp_path / "gz", [path], ".json.gz", threshold, str(rmap), gpu_only=True)


def test_real_ranks_some_split(tmp_path):
    """Several ranks, of which only the big ones are split, stitched in rank order (54 + 35 +
    2.6 MB on 2 workers: whole, one worker would do 54 MB of an even share of 46: cutting pays)."""
    need_shared()
    names = ["v100_ddp_rank1_of2.json.gz", "a100_rank3_of8.json.gz", "cpu_only_gloo_rank34_of300.json.gz"]
    d = tmp_path / "in"
    d.mkdir()
    for n in names:
        (d / n).symlink_to(next(p for p in real_traces() if p.name == n))
    res = same_merge(tmp_path, [d], ".json.gz", threshold=10 << 20, drop_cat=frozenset({"python_function"}))
    assert set(res["split"]) == {1, 3}
    res = merge([d], tmp_path / "auto.json", MergeOptions(jobs=2, split_threshold=10 << 20))[0]
    assert set(res["split"]) == {1, 3}          # it pays here without split_always too


def test_equal_ranks_are_not_split(tmp_path):
    """As many equal ranks as workers: each is one task (cutting would not shorten the merge)."""
    from streamtrace.merge.plan import split_pays
    assert not split_pays([296, 296], 2) and split_pays([296, 296, 296], 2) and split_pays([1000], 2)
    assert not split_pays([54, 35, 10, 2.6], 2) and split_pays([54, 35, 2.6], 2) and not split_pays([5], 1)
    from streamtrace.synth.job import SynthSpec, generate_job
    generate_job(tmp_path / "in", SynthSpec(world_size=4, tp=2, pp=2))      # 4 ranks of about one size
    res = merge([tmp_path / "in"], tmp_path / "m.json", MergeOptions(jobs=2, split_threshold=1))[0]
    assert res["split"] == {} and res["validation"]["ok"]


# -- (b) the synthetic demo set, many small ranges -----------------------------------------

@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    generate_job(root / "plain", SynthSpec())
    generate_job(root / "gz", SynthSpec(compress=True))
    return root


FILTERS = [{}, {"steps": (10, 10)}, {"gpu_only": True}, {"drop_cat": frozenset({"cpu_op", "cuda_runtime"})},
           {"window_ms": (1.0, 30.0)}, {"align": "first-step"},
           {"align": "first-step", "window_ms": (0.5, 20.0), "drop_cat": frozenset({"python_function"})}]


@pytest.mark.parametrize("kind,ext", [("plain", ".json"), ("gz", ".json.gz")])
@pytest.mark.parametrize("opt", FILTERS, ids=lambda o: ",".join(o) or "none")
def test_demo_split_equals_unsplit(tmp_path, demo, kind, ext, opt):
    res = same_merge(tmp_path, [demo / kind], ext, threshold=16 << 10, **opt)
    assert len(res["split"]) == 8 and min(res["split"].values()) >= 10


@pytest.mark.parametrize("kind,ext", [("plain", ".json.gz"), ("gz", ".json")])
def test_demo_split_cross_compression_validates(tmp_path, demo, kind, ext):
    res = same_merge(tmp_path, [demo / kind], ext, threshold=16 << 10)
    assert validate(res["output"])["ok"]


# -- (c) generated traces: tricky strings, many pids in any order ----------------------------

tricky = st.text(alphabet=st.sampled_from(list('ab{}[]",:\\é😀 \n\u2028')), max_size=8)
PIDS = [41523, 7777, 123456, 0, 1, 3, "Spans", "Traces", "", "ab\"c}"]


@st.composite
def trace_events(draw):
    evs = []
    for _ in range(draw(st.integers(1, 25))):     # (an empty trace is an error of its own: issue 33)
        ph = draw(st.sampled_from(["X", "X", "X", "i", "M", "s", "f"]))
        ev = {"ph": ph, "pid": draw(st.sampled_from(PIDS)), "tid": draw(st.sampled_from([1, 2, "t}"]))}
        if ph == "M":
            ev["name"] = draw(st.sampled_from(["process_name", "thread_name", "process_sort_index"]))
            ev["args"] = {"name": draw(tricky)}
        else:
            ev["name"] = draw(tricky)
            ev["cat"] = draw(st.sampled_from(["cpu_op", "kernel", "ac2g", "python_function", "{]"]))
            ev["ts"] = draw(st.integers(0, 10 ** 6)) + draw(st.sampled_from([0, 0.5, 0.125]))
            if ph == "X":
                ev["dur"] = draw(st.integers(0, 1000))
            if ph in "sf":
                ev["id"] = draw(st.integers(0, 5))
            args = draw(st.dictionaries(tricky, tricky | st.integers(), max_size=3))
            if draw(st.booleans()):
                args["correlation"] = draw(st.integers(0, 10 ** 6))
            if draw(st.booleans()):
                ev["args"] = args
        evs.append(ev)
    return evs


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(trace_events(), st.sampled_from([None, 1]), st.booleans(), st.booleans(),
       st.sampled_from([{}, {"gpu_only": True}, {"drop_cat": frozenset({"python_function", "{]"})}]))
def test_generated_traces_split_equals_unsplit(tmp_path_factory, monkeypatch, events, indent, ascii_only, gz, opt):
    """Strings with braces, brackets, escaped quotes, backslashes and (ensure_ascii)
    unicode escapes; CPU and string pids first seen in any order, so ranges often guess
    their slots wrong and are rewritten.  Workers run inline here (speed); the other
    tests use the process pool."""
    for m in M:
        monkeypatch.setattr(m, "run_tasks", lambda fn, args, *a, **k: run_inline(fn, args, None, None, 0, False))
    tmp = tmp_path_factory.mktemp("g")
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 2}, "traceEvents": events,
           "baseTimeNanoseconds": 5, "traceName": "x]}"}
    data = json.dumps(doc, indent=indent, ensure_ascii=ascii_only).encode()
    src = tmp / ("rank_2.json.gz" if gz else "rank_2.json")
    src.write_bytes(gzip.compress(data) if gz else data)
    a = merge([src], tmp / "a" / "m.json", MergeOptions(jobs=1, **opt))[0]
    b = merge([src], tmp / "b" / "m.json", MergeOptions(jobs=2, split_threshold=1, **opt))[0]
    assert _bytes(a["output"]) == _bytes(b["output"])
    assert {k: a[k] for k in SUMMARY} == {k: b[k] for k in SUMMARY}
    assert bool(b["split"]) == bool(events)
    event(f"ranges redone: {min(b['ranges_redone'], 3)}")


def test_wrong_slot_guess_is_redone(tmp_path):
    """CPU pid B is first seen in a later range than A: that range's provisional slot
    is wrong, so it is rewritten with the final one."""
    evs = [{"ph": "X", "name": f"e{i}", "ts": i, "dur": 1, "pid": pid, "tid": 1}
           for i, pid in enumerate([5010, 5010, 6020, 7030, 6020, "Traces", "Spans", 0, 5010, "Spans"])]
    src = tmp_path / "rank_0.json"
    src.write_text(json.dumps({"traceEvents": evs}, indent=1))
    res = same_merge(tmp_path, [src], threshold=1)
    assert res["ranges_redone"] >= 2
    pmap = json.loads((tmp_path / "b" / "m.json").read_text())["streamtrace"]["process_map"]
    assert {v["pid"]: v["slot"] for v in pmap.values()} == {5010: 0, 6020: 1, 7030: 2, "Traces": 900, "Spans": 901, 0: 100}


def test_odd_values_split_equal_unsplit(tmp_path):
    """Events that go through the exact JSON fallback (a lone surrogate in a key, args nested
    10,000 deep, a 2**70 id), times merge reads from a string or drops (``"12.5"``, ``1e26``,
    null), and a top-level value nested 10,000 deep (pickled between processes as its text):
    the split merge writes the unsplit merge's bytes, and both keep every event they can."""
    deep = b"[" * 10_000 + b"]" * 10_000
    evs = [b'{"ph":"X","name":"plain%d","ts":%d,"dur":1,"pid":1,"tid":1}' % (i, i) for i in range(40)]
    evs[5] = b'{"ph":"X","name":"surrogate","ts":5,"dur":1,"pid":1,"tid":1,"args":{"\\udc80":1}}'
    evs[12] = b'{"ph":"X","name":"deep","ts":12,"dur":1,"pid":1,"tid":1,"args":{"d":' + deep + b'}}'
    evs[20] = (b'{"ph":"X","name":"string_ts","ts":"20.5","dur":1,"pid":1,"tid":1,'
               b'"args":{"External id":1180591620717411303424}}')
    evs[27] = b'{"ph":"X","name":"huge_ts","ts":1e26,"dur":1,"pid":1,"tid":1}'
    evs[33] = b'{"ph":"X","name":"null_ts","ts":null,"dur":1,"pid":1,"tid":1}'
    src = tmp_path / "rank_0.json"
    src.write_bytes(b'{"deep":' + deep + b',"traceEvents":[' + b",".join(evs) + b'],"baseTimeNanoseconds":1000}')
    res = same_merge(tmp_path, [src], threshold=1)
    assert res["events_in"] == 40 and any("2 event(s) dropped" in w for w in res["warnings"])
    kept = {e.get("name"): e for e in _merged_events(tmp_path / "a" / "m.json")}
    assert {"surrogate", "deep", "string_ts"} <= set(kept) and not {"huge_ts", "null_ts"} & set(kept)
    assert kept["string_ts"]["ts"] == 20.5 and kept["surrogate"]["args"]["\udc80"] == 1


def _merged_events(path):
    """ijson's pure-Python backend: no recursion limit, and lone surrogates as Python keeps them."""
    import ijson
    return list(ijson.get_backend("python").items(_bytes(path), "traceEvents.item", use_float=True))


# -- errors and files that are not split ---------------------------------------------------------

def _events(n):
    return [b'{"ph":"X","name":"a","ts":%d,"dur":1,"pid":1,"tid":1}' % i for i in range(n)]


@pytest.mark.parametrize("bad", [b'{"ph":"X","name":tru,"ts":5,"pid":1}', b'{"ph":"X","ts":5,"pid":1} {"ph":"i"}',
                                 b'{"ph":"X","ts":5,"pid":1},,{"ph":"i"}', b'{"ph":"X","ts":1e999999,"pid":1}'])
def test_errors_as_unsplit(tmp_path, bad):
    evs = _events(40)
    evs[20] = bad
    src = tmp_path / "rank_0.json"
    src.write_bytes(b'{"traceEvents":[' + b",".join(evs) + b'],"distributedInfo":{"rank":0}}')
    errs = []
    for jobs in (1, 2):
        try:
            merge([src], tmp_path / f"{jobs}" / "m.json", MergeOptions(jobs=jobs, split_threshold=1))
            errs.append(None)
        except TraceError as e:
            errs.append(str(e))
        assert not list((tmp_path / f"{jobs}").glob(".*")) if (tmp_path / f"{jobs}").exists() else True
    assert errs[0] == errs[1]


@pytest.mark.parametrize("case", ["truncated", "bare_array", "trailer_garbage", "empty", "trailing_comma",
                                  "missing_comma", "brace_close", "double_close", "comma_close", "form_feed"])
def test_unsplittable_files_merge_unsplit(tmp_path, case):
    body = b",".join(_events(30))
    data = {"truncated": b'{"traceEvents":[' + body[:-20],
            "bare_array": b"[" + body + b"]\n",
            "trailer_garbage": b'{"traceEvents":[' + body + b'],"x":1}}',
            "empty": b'{"traceEvents":[],"x":1}',
            "trailing_comma": b'{"traceEvents":[' + body + b",]}",
            "missing_comma": b'{"traceEvents":[' + b" ".join(_events(30)) + b"]}",
            "brace_close": b'{"traceEvents":[' + body + b"}]}",
            "double_close": b'{"traceEvents":[' + body + b"]]}",
            "comma_close": b'{"traceEvents":[' + body + b"],}",
            "form_feed": b'{"traceEvents":[' + body + b"]}\x0c"}[case]
    src = tmp_path / "rank_0.json"
    src.write_bytes(data)
    out = []
    for jobs in (1, 2):
        try:
            r = merge([src], tmp_path / f"{jobs}" / "m.json", MergeOptions(jobs=jobs, split_threshold=1, salvage=True))[0]
            out.append((_bytes(r["output"]), {k: r[k] for k in SUMMARY}, r["warnings"], r["split"]))
        except TraceError as e:
            out.append(str(e))
    assert out[0] == out[1]
