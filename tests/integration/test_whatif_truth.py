"""The what-if replay against the truth of the synthetic generator (``streamtrace.synth.faults``):
a 64-rank TP2 x PP4 x DP8 job with an all-to-all (EP-like) per step, generated with each fault and
without it (same seed); the what-if that removes the fault must predict the clean job's step span
(read from the clean job's raw files with ``json``: the last rank's end - the first rank's
``ProfilerStep`` start, an end the later of the step's end and its last GPU end) within 3 %, and the
faulty job's measured span must differ from it by more than that (the fault mattered)."""
from __future__ import annotations

import dataclasses

import pytest

import streamtrace
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate import AggregateOptions, aggregate
from streamtrace.synth.faults import Fault
from streamtrace.synth.job import SynthSpec, generate_job

from support import step_span

pytestmark = pytest.mark.slow
SPEC = SynthSpec(world_size=64, tp=2, pp=4, layers=1, microbatches=4, alltoalls=1)
FAULTS = {
    "data-loader stall on rank 5": (Fault("cpu_stall", 5, delay_ns=5_000_000), ["median:rank=5",
                                                                                   "ops:name=DataLoader,rank=5"]),
    "rank 9's GEMMs 3x slower": (Fault("slow_gemm", 9, factor=3.0), ["median:rank=9,what=gpu"]),
    "stage 2's sends 2 ms slower": (Fault("slow_send", 33, delay_ns=2_000_000), ["comm:rank=32-47,median"]),
    "rank 20's collectives 3x slower": (Fault("slow_coll", 20, factor=3.0), ["comm:rank=20,median",
                                                                              "median:rank=20,what=comm"]),
}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    d = tmp_path_factory.mktemp("clean")
    generate_job(d / "traces", SPEC)
    return step_span(d / "traces")


@pytest.mark.parametrize("what", list(FAULTS))
def test_removing_the_fault_predicts_the_clean_job(what, clean, tmp_path):
    fault, changes = FAULTS[what]
    generate_job(tmp_path / "traces", dataclasses.replace(SPEC, faults=(fault,)))
    faulty = step_span(tmp_path / "traces")
    assert abs(faulty - clean) > 0.03 * clean                      # the fault shows
    analyze([tmp_path / "traces"], tmp_path / "an", AnalyzeOptions(jobs=2))
    aggregate([tmp_path / "an"], tmp_path / "agg", AggregateOptions(jobs=2))
    agg = streamtrace.load(tmp_path / "agg")
    for change in changes:
        row = agg.whatif(change).to_pylist()[0]
        assert abs(row["measured_span_ns"] - faulty) <= 1_000                # the same step, to the ns of the text
        assert abs(row["predicted_span_ns"] - clean) <= 0.03 * clean, (change, row["predicted_span_ns"], clean)
        assert not row["flag"]
