"""The generator's older trace formats and all-to-all (synth/comm_formats.py), and analyze recovering
every collective's type and bytes from each: the expected values are the generator's truth and the
raw JSON read with plain Python."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.synth.job import SynthSpec, generate_job

TYPE = {"allreduce": "AllReduce", "allgather": "AllGather", "reduce_scatter": "ReduceScatter",
        "alltoall": "AllToAll", "sendrecv": ("Send", "Recv", "SendRecv")}
SOURCE = {"kernel_args": "kernel_args", "kernel_args_seq": "kernel_args", "record_param_comms": "record_param_comms",
          "annotation_dims": "annotation_dims"}


def raw_kernels(path):
    """NCCL kernels of one file, by correlation id (plain json)."""
    ev = json.loads(Path(path).read_text())["traceEvents"]
    return {e["args"]["correlation"]: e for e in ev if e.get("cat") == "kernel" and "nccl" in e["name"].lower()}


@pytest.mark.parametrize("fmt", list(SOURCE))
def test_analyze_recovers_the_generators_bytes(tmp_path, fmt):
    spec = SynthSpec(world_size=4, tp=2, pp=1, layers=1, microbatches=1, alltoalls=2, comm_format=fmt)
    truth = generate_job(tmp_path / "job", spec)
    analyze([str(tmp_path / "job")], tmp_path / "out", AnalyzeOptions(jobs=1))
    k = ds.dataset(tmp_path / "out" / "kernels", format="parquet", partitioning="hive").to_table().to_pandas()
    k = k[k["kind"] == "communication"].set_index(["rank", "correlation"])
    assert sum(c.type == "alltoall" for c in truth.collectives) == spec.alltoalls * spec.tp * spec.pp   # per DP group
    raw = {r.rank: raw_kernels(r.path) for r in truth.ranks}
    seen = 0
    for c in truth.collectives:
        for rank, corr in c.correlation.items():
            row = k.loc[(rank, corr)]
            want = TYPE[c.type]
            assert row["collective"] in want if isinstance(want, tuple) else row["collective"] == want, (fmt, c.label)
            assert (row["in_bytes"], row["out_bytes"]) == c.bytes[rank], (fmt, c.label, rank)
            assert row["msg_bytes"] == max(c.bytes[rank])
            assert row["bytes_source"] == SOURCE[fmt]
            a = raw[rank][corr]["args"]
            if fmt == "kernel_args_seq":
                assert row["seq"] == a["Seq"] >= 1
            elif fmt != "annotation_dims":
                assert row["group_size"] == len(c.pg_ranks) and row["pg_name"] == c.pg_name
            if fmt in ("record_param_comms", "annotation_dims"):
                assert "In msg nelems" not in a and raw[rank][corr]["name"].startswith("ncclKernel_")
            if c.type == "alltoall" and fmt.startswith("kernel_args"):
                ins = [int(x) * 2 for x in a["In split size"].strip("[]").split(",")]
                outs = [int(x) * 2 for x in a["Out split size"].strip("[]").split(",")]
                assert row["in_splits"] == ",".join(map(str, ins)) and row["out_splits"] == ",".join(map(str, outs))
                assert sum(ins) == c.bytes[rank][0] and len(set(ins)) > 1      # uneven
            seen += 1
    assert seen == len(k)


def test_unknown_format_is_refused(tmp_path):
    with pytest.raises(ValueError, match="comm_format"):
        generate_job(tmp_path / "bad", SynthSpec(comm_format="nope"))
