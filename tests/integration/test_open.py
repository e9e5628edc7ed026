"""``streamtrace.open(TRACES)``: analyse and aggregate into a cache beside the traces, reusing what is
unchanged (issue 29, item 3)."""
from __future__ import annotations

import gzip
import json
import os

import pytest

import streamtrace
from streamtrace.synth.job import SynthSpec, generate_job


def _mtimes(cache):
    return {p: p.stat().st_mtime_ns for p in cache.rglob("*.parquet")}


def _ranks_in(folder):
    """The ranks of the traces, read from the files with plain json (distributedInfo.rank)."""
    ranks = set()
    for p in folder.rglob("*.trace.json*"):
        with (gzip.open(p, "rt") if p.suffix == ".gz" else open(p)) as f:
            ranks.add(json.load(f)["distributedInfo"]["rank"])
    return ranks


def test_open_reuses_the_cache_and_reanalyses_a_changed_trace(tmp_path):
    d = tmp_path / "tb"
    generate_job(d, SynthSpec(world_size=4, tp=2, pp=1, compress=True))
    job = streamtrace.open(d, jobs=1)
    cache = d / ".streamtrace-cache"
    assert job.kind == "aggregate" and job.path == cache / "aggregate"
    assert set(job.to_pandas("ranks")["rank"]) == _ranks_in(d)
    before = _mtimes(cache)
    assert before
    # second call: nothing changed, nothing analysed or aggregated again
    again = streamtrace.open(d, jobs=1)
    assert _mtimes(cache) == before and again.summary == job.summary
    state = json.loads((cache / "open.json").read_text())["summary"]["stages"]
    assert set(state.values()) == {"reused"}
    # a changed trace (newer mtime): its iteration is analysed again, and the job aggregated again
    trace = sorted(d.rglob("*.json.gz"))[0]
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    streamtrace.open(d, jobs=1)
    after = _mtimes(cache)
    changed = [p for p in before if after.get(p) != before[p]]
    assert changed and any("analysis" in str(p) for p in changed)
    state = json.loads((cache / "open.json").read_text())["summary"]["stages"]
    assert "done" in state.values()


def test_open_takes_files_and_a_cache_folder(tmp_path):
    d = tmp_path / "tb"
    generate_job(d, SynthSpec(world_size=2, tp=2, pp=1, compress=True))
    job = streamtrace.open(str(d / "**" / "*.json.gz"), cache=tmp_path / "c", jobs=1)
    assert job.path == tmp_path / "c" / "aggregate"
    assert set(job.to_pandas("ranks")["rank"]) == _ranks_in(d)


def test_open_without_traces_is_one_line(tmp_path):
    with pytest.raises(streamtrace.StreamtraceError, match="no such file"):
        streamtrace.open(tmp_path / "nothing-here")


def test_open_skips_another_jobs_file_as_the_epilogue_does(tmp_path):
    """A rank file of another job (a restart at world size 2) among a 4-rank job's: left out of the
    aggregate and named in its warnings (issue 33's discovery, shared with the epilogue)."""
    d = tmp_path / "tb"
    generate_job(d, SynthSpec(world_size=4, tp=2, pp=1, compress=True))
    src = sorted(d.rglob("rank_0002_*.trace.json.gz"))[0]
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    doc["distributedInfo"]["world_size"] = 2
    odd = src.parent / "restart_rank_0002.trace.json"
    odd.write_text(json.dumps(doc))
    job = streamtrace.open(d, jobs=1)
    ranks = job.to_pandas("ranks")["rank"]
    assert sorted(ranks) == sorted(_ranks_in(src.parent) - {None}) and len(ranks) == 4   # each rank once
    warnings = json.loads((job.path / "aggregate.json").read_text()).get("warnings") or []
    assert any(odd.name in w and "world size" in w for w in warnings), warnings
