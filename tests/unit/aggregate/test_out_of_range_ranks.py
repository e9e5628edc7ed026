"""Ranks and world sizes past ``trace.metadata.MAX_RANK`` in a trace or an analysed folder (a hostile-input
pass: ``distributedInfo.rank`` 10^9 asked aggregate for 7.5 GiB, a process group listing rank 10^12 for every
rank up to it, a ``summary.json`` rank of 10^30 a traceback): not taken as ranks, said in one line."""
from __future__ import annotations

import json
import shutil

import pytest

from streamtrace.synth.job import SynthSpec, generate_job
from streamtrace.trace.metadata import MAX_RANK

from support import run_cli


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("job") / "traces"
    generate_job(d, SynthSpec(world_size=2, tp=2, pp=1, microbatches=1, layers=1))
    return d


def _edited(job, tmp_path, edit):
    d = tmp_path / "traces"
    shutil.copytree(job, d)
    first = sorted(d.glob("iteration_*/*.json"))[0]           # rank_0000_...: the file name says rank 0
    doc = json.loads(first.read_text())
    edit(doc)
    first.write_text(json.dumps(doc))
    return d


def _ok(*args):
    r = run_cli(*args)
    assert r.returncode == 0 and "Traceback" not in r.stderr, (args[0], r.stderr)
    return r


def test_a_trace_rank_past_the_bound_is_not_its_rank(job, tmp_path):
    d = _edited(job, tmp_path, lambda doc: doc.setdefault("distributedInfo", {}).update(rank=10 ** 9))
    _ok("analyze", d, "-o", tmp_path / "an", "-q", "-j", "1")
    summ = json.loads((tmp_path / "an" / "summary.json").read_text())
    assert sorted(r["rank"] for r in summ["ranks"]) == [0, 1]             # the file name's rank
    _ok("aggregate", tmp_path / "an", "-o", tmp_path / "ag", "-q", "-j", "1")


def test_a_process_group_listing_a_huge_rank_is_left_out_with_a_warning(job, tmp_path):
    def edit(doc):
        doc.setdefault("distributedInfo", {})["pg_config"] = [
            {"pg_name": "0", "pg_desc": "TP_GROUP", "pg_size": 2, "ranks": [0, 10 ** 12]}]
    d = _edited(job, tmp_path, edit)
    _ok("analyze", d, "-o", tmp_path / "an", "-q", "-j", "1")
    _ok("aggregate", tmp_path / "an", "-o", tmp_path / "ag", "-q", "-j", "1")
    agg = json.loads((tmp_path / "ag" / "aggregate.json").read_text())
    assert any(f"not a rank from 0 to {MAX_RANK:,}" in w for w in agg["warnings"]), agg["warnings"]


@pytest.mark.parametrize("rank", [10 ** 30, -1, "7", None])
def test_an_analysed_folder_with_a_rank_that_is_none_is_an_input_error(job, tmp_path, rank):
    _ok("analyze", job, "-o", tmp_path / "an", "-q", "-j", "1")
    p = tmp_path / "an" / "summary.json"
    summ = json.loads(p.read_text())
    summ["ranks"][0]["rank"] = rank
    p.write_text(json.dumps(summ))
    r = run_cli("aggregate", tmp_path / "an", "-o", tmp_path / "ag", "-q", "-j", "1")
    assert r.returncode == 1 and "Traceback" not in r.stderr and "ranks[0]" in r.stderr, r.stderr


def test_a_stated_world_size_past_the_bound_is_not_taken(job, tmp_path):
    _ok("analyze", job, "-o", tmp_path / "an", "-q", "-j", "1")
    p = tmp_path / "an" / "summary.json"
    summ = json.loads(p.read_text())
    for r in summ["ranks"]:
        r["trace_metadata"]["world_size"] = 10 ** 12
    p.write_text(json.dumps(summ))
    _ok("aggregate", tmp_path / "an", "-o", tmp_path / "ag", "-q", "-j", "1")
    assert json.loads((tmp_path / "ag" / "aggregate.json").read_text())["world_size"] == 2
