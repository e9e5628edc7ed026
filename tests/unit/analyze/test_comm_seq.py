"""NCCL's sequence number (``Seq``) on the kernels: analyze's kernels table has each kernel's own
(while kernels of equal args still share one reading of their facts), and merge's fast column
reader hands it to the collective matcher.  Expected values from the raw JSON (plain json)."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.dataset as ds

import streamtrace.analyze.comm as comm
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.merge.survey import survey_columns
from streamtrace.synth.job import SynthSpec, generate_job


def _raw_comm_kernels(path):
    ev = json.loads(Path(path).read_text())["traceEvents"]
    return [e for e in ev if e.get("cat") == "kernel" and "nccl" in e["name"].lower()]


def test_each_kernel_keeps_its_seq_and_equal_args_share_their_facts(tmp_path, monkeypatch):
    spec = SynthSpec(world_size=4, tp=2, pp=1, layers=2, microbatches=2, comm_format="kernel_args_seq")
    truth = generate_job(tmp_path / "job", spec)
    calls = []
    real = comm.collective_facts

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(comm, "collective_facts", counted)
    analyze([str(tmp_path / "job")], tmp_path / "out", AnalyzeOptions(jobs=1))
    k = ds.dataset(tmp_path / "out" / "kernels", format="parquet", partitioning="hive").to_table().to_pandas()
    k = k[k["kind"] == "communication"].set_index(["rank", "correlation"])
    n = 0
    for r in truth.ranks:
        for e in _raw_comm_kernels(r.path):
            if "Seq" in e["args"]:
                assert k.loc[(r.rank, e["args"]["correlation"]), "seq"] == e["args"]["Seq"]
                n += 1
    assert n > 0 and len(set(k["seq"])) > 4                # distinct numbers, not one cached value
    assert 0 < len(calls) < n                              # the cache held: fewer readings than kernels


def test_merge_column_reader_passes_seq_to_the_matcher(tmp_path):
    truth = generate_job(tmp_path / "job", SynthSpec(world_size=4, tp=2, pp=1, comm_format="kernel_args_seq"))
    for r in truth.ranks:
        raw = [e for e in _raw_comm_kernels(r.path) if "Seq" in e["args"]]
        log = survey_columns(r.path).collectives
        assert raw and all(x >= 0 for x in log.seq)
        assert sorted(log.seq) == sorted(e["args"]["Seq"] for e in raw)
