"""NCCL NVTX payloads in an Nsight Systems export, on exports built here: the payload bytes are
packed with ``struct`` to the C structs of NVIDIA/nccl ``src/include/nvtx_payload_schemas.h``
(``NcclNvtxParamsCommInitRank``: uint64 communicator, int ranks, int rank, int CUDA device;
``NcclNvtxParamsAllReduce``: uint64 communicator, size_t bytes, int reduction op), the schema
rows as the 3.25 fixture's ``NVTX_PAYLOAD_SCHEMA_ENTRIES`` holds them (first offset NULL).  The
public exports were made without blobs, so these are the only payloads there are."""
from __future__ import annotations

import sqlite3
import struct

import pyarrow.parquet as pq

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.trace.nsys import payload as P
from streamtrace.trace.nsys.db import lenient_text

from support import NSYS_PAYLOAD_SCHEMA

INIT, ALLRED = 16777218, 16777223
COMM_ID = 0xABCDEF0123456789
SCHEMAS = [(1, INIT, 24), (1, ALLRED, 24)]
ENTRIES = [(1, INIT, 0, 18, "NCCL communicator ID", None), (1, INIT, 1, 5, "No. of ranks", 8),
           (1, INIT, 2, 5, "Rank", 12), (1, INIT, 3, 5, "CUDA device", 16),
           (1, ALLRED, 0, 18, "NCCL communicator ID", None), (1, ALLRED, 1, 22, "Message size [bytes]", 8),
           (1, ALLRED, 2, 16777232, "Reduction operation", 16)]


def _gtid(pid, tid):
    return (1 << 48) | (pid << 24) | tid


def build(path, blobs=True, step=False):
    """Two processes (pids 200, 300) whose NCCL ranks (1, 0) are the reverse of pid order; each
    launches an AllReduce kernel (correlationId 7 in both: ids repeat across processes) inside its
    ``ncclAllReduce`` range and a compute kernel (correlationId 8)."""
    c = sqlite3.connect(path)
    c.executescript(NSYS_PAYLOAD_SCHEMA)
    c.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
                                                         (2, "gemm_kernel"), (3, "cudaLaunchKernel_v7000")])
    c.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.25.0')")
    c.executemany("INSERT INTO NVTX_PAYLOAD_SCHEMAS VALUES (?, ?, NULL, 1, NULL, 4, ?, NULL)", SCHEMAS)
    c.executemany("INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES (?, ?, ?, NULL, ?, ?, NULL, NULL, ?)", ENTRIES)
    c.execute("INSERT INTO NVTX_EVENTS VALUES (10, NULL, 75, 'NCCL', ?, NULL, 1, NULL, NULL)", (_gtid(200, 200),))
    for pid, rank, dev in ((200, 1, 1), (300, 0, 0)):
        g = _gtid(pid, pid)
        init = struct.pack("<QiiiI", COMM_ID, 2, rank, dev, 0) if blobs else None
        red = struct.pack("<QQiI", COMM_ID, 1 << 20, 0, 0) if blobs else None
        c.execute("INSERT INTO NVTX_EVENTS VALUES (100, 200, 59, 'ncclCommInitRank', ?, NULL, 1, NULL, ?)", (g, init))
        c.execute("INSERT INTO NVTX_EVENTS VALUES (1000, 3000, 59, 'ncclAllReduce', ?, NULL, 1, NULL, ?)", (g, red))
        if step:
            c.execute("INSERT INTO NVTX_EVENTS VALUES (900, 5000, 59, 'train_step_5', ?, NULL, 0, NULL, NULL)", (g,))
        c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 3)",
                      [(1500, 2000, g, 7), (4000, 4500, g, 8)])
        c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 7, ?, ?, ?, ?)",
                      [(5000, 9000, dev, 7, g & ~0xFFFFFF, 1, 1), (9500, 12000, dev, 8, g & ~0xFFFFFF, 2, 2)])
    c.commit()
    c.close()


def test_struct_layout_follows_schema_offsets():
    blob = struct.pack("<QiiiI", COMM_ID, 8, 5, 3, 0)
    entries = [e[3:5][::-1] + (e[5],) for e in ENTRIES if e[1] == INIT]     # (name, type, offset)
    got = P.decode_struct(blob, [(n, t, o) for n, t, o in entries])
    assert got == {"NCCL communicator ID": COMM_ID, "No. of ranks": 8, "Rank": 5, "CUDA device": 3}


def test_natural_alignment_when_offsets_are_null():
    blob = struct.pack("<QQi", 1, 4096, 2)
    got = P.decode_struct(blob, [(P.COMM, 18, None), (P.SIZE, 22, None), (P.REDOP, 1 << 24, None)])
    assert got == {P.COMM: 1, P.SIZE: 4096, P.REDOP: 2}


def test_json_text_payload():
    assert P.decode("ncclAllReduce", None, '{"Message size [bytes]": 64}', []) == {P.SIZE: 64}


def test_lenient_text_decodes_windows_1252():
    assert lenient_text("Geiß".encode("cp1252")) == "Geiß"
    assert lenient_text("Geiß".encode()) == "Geiß"


def test_ranks_and_bytes_from_payloads(tmp_path):
    build(tmp_path / "node.sqlite")
    s = analyze([str(tmp_path / "node.sqlite")], str(tmp_path / "a"), AnalyzeOptions(jobs=1, progress=False))
    by_rank = {r["rank"]: r for r in s["ranks"]}
    assert sorted(by_rank) == [0, 1]
    assert by_rank[0]["nsys"]["processes"] == [{"pid": 300, "host": 1, "rank_source": "NCCL payload"}]
    assert list(by_rank[0]["devices"]) == ["0"] and list(by_rank[1]["devices"]) == ["1"]
    for r in by_rank.values():
        assert r["links"]["linked"] == 2
        assert r["nsys"]["collective_bytes"] == "from NCCL NVTX payloads"
    k = pq.read_table(tmp_path / "a" / "kernels").to_pandas()
    comm = k[k["kind"].astype(str) == "communication"]
    assert len(comm) == 2
    assert set(comm["msg_bytes"]) == {1 << 20}
    assert set(comm["collective"].astype(str)) == {"AllReduce"}
    assert set(comm["group_size"]) == {2}
    assert set(comm["pg_name"].astype(str)) == {hex(COMM_ID)}


def test_without_blobs_bytes_are_unknown_and_ranks_by_pid(tmp_path):
    build(tmp_path / "node.sqlite", blobs=False)
    s = analyze([str(tmp_path / "node.sqlite")], str(tmp_path / "a"), AnalyzeOptions(jobs=1, progress=False))
    assert [(r["rank"], r["nsys"]["processes"][0]["pid"]) for r in s["ranks"]] == [(0, 200), (1, 300)]
    assert all(r["nsys"]["collective_bytes"].startswith("unknown") for r in s["ranks"])
    k = pq.read_table(tmp_path / "a" / "kernels").to_pandas()
    assert set(k[k["kind"].astype(str) == "communication"]["msg_bytes"]) == {-1}


def test_merge_of_export_opens_with_ranks_and_gpus_named(tmp_path):
    import gzip
    import json

    from support import run_cli
    build(tmp_path / "node.sqlite")
    r = run_cli("merge", tmp_path / "node.sqlite", "-o", tmp_path / "m.json.gz", "-q")
    assert r.returncode == 0, r.stderr
    doc = json.load(gzip.open(tmp_path / "m.json.gz"))
    names = sorted(e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name")
    assert names == ["Rank 0 · CPU (host 1, pid 300)", "Rank 0 · GPU 0", "Rank 1 · CPU (host 1, pid 200)",
                     "Rank 1 · GPU 1"]
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(x) == 2 * (2 + 2 + 2)          # per process: 2 kernels, 2 runtime calls, 2 NVTX ranges
    v = run_cli("validate", tmp_path / "m.json.gz")
    assert v.returncode == 0, v.stdout + v.stderr


def test_epilogue_on_a_folder_of_exports(tmp_path):
    from support import run_cli
    run = tmp_path / "run"
    run.mkdir()
    build(run / "node0.sqlite")
    r = run_cli("epilogue", run, "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (run / "streamtrace" / "report.json").is_file()
    assert (run / "streamtrace" / "aggregate" / "aggregate.json").is_file()


def test_step_pattern_marks_steps_from_nvtx(tmp_path):
    build(tmp_path / "node.sqlite", step=True)
    opt = AnalyzeOptions(jobs=1, progress=False, step_pattern=r"^train_step_(\d+)$")
    analyze([str(tmp_path / "node.sqlite")], str(tmp_path / "a"), opt)
    k = pq.read_table(tmp_path / "a" / "kernels").to_pandas()
    assert sorted(k["step"].tolist()) == [5, 5, 5, 5]          # both launches of both ranks are inside it
    analyze([str(tmp_path / "node.sqlite")], str(tmp_path / "b"), AnalyzeOptions(jobs=1, progress=False))
    # train_step_N is one of an export's default NVTX step names (streamtrace.trace.steps)
    assert set(pq.read_table(tmp_path / "b" / "kernels").to_pandas()["step"]) == {5}
    opt = AnalyzeOptions(jobs=1, progress=False, step_pattern=r"^ProfilerStep#(\d+)$")     # given: only it
    analyze([str(tmp_path / "node.sqlite")], str(tmp_path / "c"), opt)
    assert set(pq.read_table(tmp_path / "c" / "kernels").to_pandas()["step"]) == {-1}


def test_rank_map_by_pid(tmp_path):
    build(tmp_path / "node.sqlite", blobs=False)
    (tmp_path / "ranks.txt").write_text("200 1\n300 0\n")
    s = analyze([str(tmp_path / "node.sqlite")], str(tmp_path / "a"),
                AnalyzeOptions(jobs=1, progress=False, rank_map=str(tmp_path / "ranks.txt")))
    assert [(r["rank"], r["nsys"]["processes"]) for r in s["ranks"]] == \
        [(0, [{"pid": 300, "host": 1, "rank_source": "rank map"}]), (1, [{"pid": 200, "host": 1, "rank_source": "rank map"}])]


def test_merge_of_export_keeps_the_ranks_asked(tmp_path):
    import gzip
    import json

    from support import run_cli
    build(tmp_path / "node.sqlite")
    r = run_cli("merge", tmp_path / "node.sqlite", "-o", tmp_path / "m.json.gz", "-q", "--ranks", "1")
    assert r.returncode == 0, r.stderr
    doc = json.load(gzip.open(tmp_path / "m.json.gz"))
    assert {e["args"]["rank"] for e in doc["traceEvents"] if e["ph"] == "X"} == {1}
