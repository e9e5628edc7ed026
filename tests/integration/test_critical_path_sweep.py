"""Every real trace in ``../shared/traces`` (single ranks, cpu-3d, the real multi-rank jobs, the Nsight
Systems exports) gets a critical path for each step, or for the whole capture where the trace has
no step: contiguous, its weights summing to its own span within 0.1 %, no wait that lasts, at most
0.5 % of it named after a zero-length op (the zero-length ops' External ids read from the raw file
with ``json``), and ``aggregate.json`` saying nothing was dropped."""
from __future__ import annotations

import gzip
import json

import pyarrow.parquet as pq
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate import AggregateOptions, aggregate

from support import SHARED

T = SHARED / "traces"
INPUTS = sorted((T / "real").glob("*.json.gz")) + sorted(p for p in (T / "real-multi").glob("*") if p.is_dir()) + \
    [T / "cpu-3d" / "iteration_4"] + sorted((T / "nsys").glob("*.sqlite")) if T.is_dir() else []


def _zero_length_ids(src) -> set:
    """External ids of the CPU ops of zero duration (and of no op with a duration) in Kineto files."""
    files = [src] if src.is_file() else sorted(src.glob("*.json*"))
    zero, some = set(), set()
    for f in files:
        if f.suffix == ".sqlite":
            return set()
        with (gzip.open(f, "rt") if f.suffix == ".gz" else open(f)) as fh:
            for e in json.load(fh)["traceEvents"]:
                ext = (e.get("args") or {}).get("External id")
                if e.get("ph") == "X" and ext is not None and e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime",
                                                                              "cuda_driver", "Runtime", "Operator"):
                    (zero if float(e.get("dur", 0)) == 0 else some).add(int(ext))
    return zero - some


@pytest.mark.slow
@pytest.mark.parametrize("src", INPUTS, ids=lambda p: p.name)
def test_every_real_trace_gets_a_path_that_sums_to_its_span(src, tmp_path):
    if not src.exists():
        pytest.skip(f"{src} is absent")
    analyze([src], tmp_path / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp_path / "an"], tmp_path / "agg", AggregateOptions(jobs=1))
    meta = json.loads((tmp_path / "agg" / "aggregate.json").read_text())
    assert meta["critical_path"]["dropped_edges"] == 0 and meta["critical_path"]["paths_not_summing"] == 0
    segs = pq.read_table(tmp_path / "agg" / "critical_path.parquet").to_pylist()
    assert segs, "no critical path"
    zero = _zero_length_ids(src)
    steps = sorted({(s["iteration"], s["step"]) for s in segs})
    for key in steps:
        ss = [s for s in segs if (s["iteration"], s["step"]) == key]
        for a, b in zip(ss, ss[1:]):
            assert b["start_ns"] == a["end_ns"], (key, a, b)
        total = sum(s["weight_ns"] for s in ss)
        span = ss[-1]["end_ns"] - ss[0]["start_ns"]
        assert abs(total - span) <= 0.001 * span, (key, total, span)
        assert not [s for s in ss if s["category"] == "wait" and s["dur_ns"] > 0]
        named_zero = sum(s["weight_ns"] for s in ss if s["category"] == "cpu_op" and s["external_id"] in zero)
        assert named_zero <= 0.005 * max(total, 1), (key, named_zero, total)
