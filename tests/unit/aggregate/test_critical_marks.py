"""``merge --critical-path AGGDIR`` (``streamtrace.aggregate.critical_marks``): the path's events are
marked and linked by flows of their own category in the merged trace, which still validates.  The
expected events are found in the merged file with ``json`` (the injected stall, the path's
correlations), not by the code under test."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from streamtrace.runtime.errors import StreamtraceError
from streamtrace.merge import MergeOptions, merge
from streamtrace.aggregate.critical_marks import CATEGORY, mark_critical_path
from streamtrace.synth.job import SynthSpec, generate_job
from streamtrace.synth.faults import LOADER
from streamtrace.validate.check import validate

from support import load_json, run_cli, stalled_job


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp = stalled_job(tmp_path_factory.mktemp("marks"), rank=2, delay_ns=3_000_000)
    merge([tmp / "traces"], tmp / "merged.json", MergeOptions(jobs=1))
    return tmp


def test_marked_trace_validates_and_holds_the_path(job, tmp_path):
    before = load_json(job / "merged.json")
    res = mark_critical_path(job / "merged.json", job / "agg", tmp_path / "marked.json")
    rep = validate(tmp_path / "marked.json")
    assert rep["ok"], rep["problems"]
    doc = load_json(tmp_path / "marked.json")
    ev = doc["traceEvents"]
    marked = [e for e in ev if "critical_path" in (e.get("args") or {})]
    assert len(marked) == res["marked"] > 0
    stall = [e for e in marked if e["name"] == LOADER]
    assert len(stall) == 1 and stall[0]["args"]["rank"] == 2
    # every GPU segment of the path is a marked event with its merged correlation (rank * 2**40 + id)
    segs = pq.read_table(job / "agg" / "critical_path.parquet").to_pylist()
    want = {(s["rank"] << 40) | s["correlation"] for s in segs
            if s["category"] in ("compute_kernel", "memcpy", "comm_transfer")}
    got = {e["args"]["correlation"] for e in marked if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    assert want == got
    flows = [e for e in ev if e.get("cat") == CATEGORY]
    assert len(flows) == 2 * res["flows"] == 2 * (len(marked) - 1)
    assert {e["ph"] for e in flows} == {"s", "f"}
    # nothing else changed: the same events (less the marks and flows) and the same top-level keys
    strip = lambda e: {k: ({a: b for a, b in v.items() if a != "critical_path"} if k == "args" else v)  # noqa: E731
                       for k, v in e.items() if not (k == "args" and v == {"critical_path": v.get("critical_path")})}
    assert [strip(e) for e in ev if e.get("cat") != CATEGORY] == [strip(e) for e in before["traceEvents"]]
    head = lambda d: {k: v for k, v in d.items() if k != "traceEvents"}  # noqa: E731
    assert head(doc) == head(before)
    assert list(doc) == list(before)                    # in their order


def test_cli_and_errors(job, tmp_path):
    r = run_cli("merge", job / "traces", "-o", tmp_path / "m.json.gz", "--critical-path", job / "agg", "-j", "1")
    assert r.returncode == 0, r.stderr
    assert "events marked" in r.stdout + r.stderr
    assert validate(tmp_path / "m.json.gz")["ok"]
    with pytest.raises(StreamtraceError):
        mark_critical_path(job / "merged.json", tmp_path, tmp_path / "x.json")


def test_epilogue_marks_its_merged_trace(tmp_path):
    from streamtrace.epilogue import run
    d = tmp_path / "tb"
    generate_job(d, SynthSpec(world_size=4, tp=2, pp=1, layers=1, microbatches=1))
    s = run(d, jobs=1)
    assert s["stages"]["critical path marks"] == "done"
    merged = d / "streamtrace" / "iteration_10" / "merged_gpu.json.gz"
    assert validate(merged)["ok"]
    ev = load_json(merged)["traceEvents"]
    segs = pq.read_table(d / "streamtrace" / "aggregate" / "critical_path.parquet").to_pylist()
    want = {(s["rank"] << 40) | s["correlation"] for s in segs if s["category"] in ("compute_kernel", "comm_transfer")}
    got = {e["args"]["correlation"] for e in ev if "critical_path" in (e.get("args") or {}) and e["cat"] == "kernel"}
    assert want == got and want
    first = load_json(merged)
    s2 = run(d, jobs=1)                              # nothing changed: the marked file is reused as it is
    assert s2["stages"]["critical path marks"] == "reused"
    assert load_json(merged) == first
    merged.unlink()                                  # a new merged trace is marked again
    s3 = run(d, jobs=1)
    assert s3["stages"]["iteration_10/merge"] == "done" and s3["stages"]["critical path marks"] == "done"
    assert load_json(merged) == first


def test_spacing_and_earlier_marks(job, tmp_path):
    """Events not separated by single commas (whitespace, one per line) are copied one by one and marked
    alike; marking a marked trace again gives the same bytes (the earlier marks and arrows replaced)."""
    doc = load_json(job / "merged.json")
    spaced = tmp_path / "spaced.json"
    spaced.write_text('{"traceEvents": [\n' + ",\n ".join(json.dumps(e) for e in doc["traceEvents"]) + "\n], "
                      + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items() if k != "traceEvents")
                      + "}")
    mark_critical_path(job / "merged.json", job / "agg", tmp_path / "a.json")
    mark_critical_path(spaced, job / "agg", tmp_path / "b.json")
    a, b = load_json(tmp_path / "a.json"), load_json(tmp_path / "b.json")
    assert a == b and any("critical_path" in (e.get("args") or {}) for e in a["traceEvents"])
    mark_critical_path(tmp_path / "a.json", job / "agg", tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == (tmp_path / "a.json").read_bytes()


@pytest.fixture(scope="module")
def gz_job(job):
    res = merge([job / "traces"], job / "merged.json.gz", MergeOptions(jobs=1))
    (job / "members.json").write_text(json.dumps(res[0]["members"]))
    return job


def _text(path) -> bytes:
    import gzip
    return gzip.decompress(path.read_bytes())


def test_by_member_equals_the_whole_pass(gz_job, tmp_path):
    """A gzip trace as merge writes it (a member per rank): the ranks off the path are copied as their
    compressed bytes (found in the output as they were in the input), and the text is the whole pass's
    byte for byte; marking the output again keeps both."""
    from streamtrace.trace.members import gzip_members
    src = gz_job / "merged.json.gz"
    whole = mark_critical_path(src, gz_job / "agg", tmp_path / "whole.json.gz", by_member=False)
    fast = mark_critical_path(src, gz_job / "agg", tmp_path / "fast.json.gz")
    assert fast == whole | {"output": str(tmp_path / "fast.json.gz")} and fast["marked"] > 0
    assert _text(tmp_path / "fast.json.gz") == _text(tmp_path / "whole.json.gz")
    path_ranks = {e["args"]["rank"] for e in load_json(tmp_path / "whole.json.gz")["traceEvents"]
                  if "critical_path" in (e.get("args") or {}) and "rank" in (e.get("args") or {})}
    raw_in, raw_out = src.read_bytes(), (tmp_path / "fast.json.gz").read_bytes()
    ins = list(gzip_members(src))
    segments = [m for m in ins if m.head.startswith(b"{\"ph\"") or m.head.startswith(b'{"name"')]
    kept = [m for m in segments if raw_in[m.start:m.end] in raw_out]
    assert len(segments) == 4 and 0 < len(kept) <= 4 - len(path_ranks)       # 4 ranks; those on the path redone
    assert len(list(gzip_members(tmp_path / "fast.json.gz"))) == len(ins) + 1  # + the arrows' member
    again = mark_critical_path(tmp_path / "fast.json.gz", gz_job / "agg", tmp_path / "again.json.gz")
    assert again["marked"] == fast["marked"] and _text(tmp_path / "again.json.gz") == _text(tmp_path / "fast.json.gz")
    one = mark_critical_path(tmp_path / "whole.json.gz", gz_job / "agg", tmp_path / "one.json.gz")  # one member
    assert one["marked"] == fast["marked"] and _text(tmp_path / "one.json.gz") == _text(tmp_path / "fast.json.gz")


@pytest.mark.parametrize("damage", ["garbage after", "cut"])
def test_damaged_gzip_takes_the_whole_pass(gz_job, tmp_path, damage):
    """Bytes that are no gzip member after the last, or a member cut: the member walk gives up and the
    whole pass answers as it did before (the same result, or the same error)."""
    data = (gz_job / "merged.json.gz").read_bytes()
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(data + b"\x00junk" if damage == "garbage after" else data[:-40])
    outcome = []
    for by in (False, True):
        try:
            r = mark_critical_path(bad, gz_job / "agg", tmp_path / f"{by}.json.gz", by_member=by)
            outcome.append(("ok", r["marked"], _text(tmp_path / f"{by}.json.gz")))
        except Exception as e:   # noqa: BLE001 - the same error either way
            outcome.append((type(e).__name__, str(e).replace(str(tmp_path), "")))
    assert outcome[0] == outcome[1]


def test_members_merge_recorded_skip_the_walk(gz_job, tmp_path, monkeypatch):
    """merge records its gzip members' byte ranges (``members``); marking with them gives the bytes of
    the walk that inflates every member, without that walk; ranges that are not the file's fall back
    to the walk (the same bytes)."""
    from streamtrace.aggregate import critical_marks
    from streamtrace.trace.members import gzip_members
    src = gz_job / "merged.json.gz"
    members = json.loads((gz_job / "members.json").read_text())
    assert members == [[m.start, m.end] for m in gzip_members(src)]          # as an independent walk finds them
    walked = mark_critical_path(src, gz_job / "agg", tmp_path / "walked.json.gz")
    calls = []
    monkeypatch.setattr(critical_marks, "gzip_members", lambda *a: calls.append(a) or gzip_members(*a))
    known = mark_critical_path(src, gz_job / "agg", tmp_path / "known.json.gz", members=members)
    assert not calls and known["marked"] == walked["marked"] > 0
    assert (tmp_path / "known.json.gz").read_bytes() == (tmp_path / "walked.json.gz").read_bytes()
    joined = [[members[0][0], members[1][1]]] + members[2:]                 # tiles, but two members in one
    for bad in ([[0, 10]] + members[1:], [[a + 1, b] for a, b in members], members[:-1], joined):
        r = mark_critical_path(src, gz_job / "agg", tmp_path / "bad.json.gz", members=bad)
        assert r["marked"] == walked["marked"]
        assert (tmp_path / "bad.json.gz").read_bytes() == (tmp_path / "walked.json.gz").read_bytes()
    assert len(calls) == 4                                                   # each bad list: walked
