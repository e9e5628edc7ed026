"""Point-to-point kernels of an Nsight Systems export matched across its processes (issue 47, item 1).

The real export ``nsysai_mfu_2gpu_before.sqlite`` (2 x H100, torchrun, NCCL, exported without blobs: no
payload names a communicator or a peer) holds two processes whose ``ncclDevKernel_SendRecv`` kernels are
the two sides of one exchange each; the expected pairs (the k-th kernel of each process, both running at
once) are read here from the export with ``sqlite3``.  The built export's ``ncclSend`` / ``ncclRecv``
payloads (NCCL's ``NcclNvtxParamsSendRecv``: communicator, bytes, peer) name the communicator, whose
members ``ncclCommInitRank`` gives."""
from __future__ import annotations

import sqlite3
import struct

import numpy as np
import pyarrow.parquet as pq
import pytest

from streamtrace.aggregate.collectives import instance_tables
from streamtrace.aggregate.options import AggregateOptions
from streamtrace.aggregate.run import aggregate
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.report.markdown import write_report
from streamtrace.report.options import ReportOptions

from support import NSYS_PAYLOAD_SCHEMA, SHARED

EXPORT = SHARED / "traces" / "nsys" / "nsysai_mfu_2gpu_before.sqlite"


def _sql_nccl_kernels():
    """{pid: [(start, end)]} of the NCCL kernels of each process, in start order, by plain SQL."""
    c = sqlite3.connect(f"file:{EXPORT}?mode=ro&immutable=1", uri=True)
    rows = c.execute("SELECT (k.globalPid >> 24) & 16777215, k.start, k.[end] FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                     "JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE 'ncclDevKernel%' "
                     "ORDER BY k.start").fetchall()
    c.close()
    out: dict = {}
    for pid, a, b in rows:
        out.setdefault(pid, []).append((a, b))
    return out


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    if not EXPORT.is_file():
        pytest.skip("../shared/traces/nsys is absent")
    d = tmp_path_factory.mktemp("nsys_p2p")
    s = analyze([str(EXPORT)], str(d / "an"), AnalyzeOptions(jobs=1, progress=False))
    aggregate([str(d / "an")], str(d / "agg"), AggregateOptions(jobs=1, progress=False, critical_path=False))
    write_report(d / "agg", opt=ReportOptions(charts=False))
    pid_rank = {p["pid"]: r["rank"] for r in s["ranks"] for p in r["nsys"]["processes"]}
    return d, pid_rank


def test_export_sendrecv_matched_pairwise(real):
    d, pid_rank = real
    raw = _sql_nccl_kernels()
    assert sorted(len(v) for v in raw.values()) == [33, 33]
    pairs = list(zip(*raw.values()))
    assert all(max(a[0], b[0]) < min(a[1], b[1]) for a, b in pairs)      # each pair ran at once
    inst = pq.read_table(d / "agg" / "collectives.parquet").to_pandas()
    assert len(inst) == 33
    assert set(inst["n_ranks"]) == {2} and inst["complete"].all() and set(inst["group_size"]) == {2}
    assert set(inst["ranks"]) == {"0,1"}
    mem = pq.read_table(d / "agg" / "collectives_ranks.parquet").to_pandas().sort_values(["instance", "rank"])
    for pid, ks in raw.items():
        mine = mem[mem["rank"] == pid_rank[pid]].sort_values("start_ns")
        assert mine["dur_ns"].tolist() == [b - a for a, b in ks]
        assert mine["instance"].tolist() == sorted(inst["instance"])     # the k-th kernel in the k-th instance


def test_report_claims_only_the_matches_made(real):
    d, _ = real
    md = next((d / "agg").glob("*.md")).read_text()
    assert "33 collective instances matched across ranks (33 with every member, 0 inconsistent)" in md
    assert "66 collective" not in md
    assert "33 two-way Send/Recv exchanges" in md
    assert "No point-to-point transfers matched" not in md


def test_one_sided_point_to_point_is_not_complete():
    c = {"instance": np.zeros(1, np.int64), "start": np.array([10]), "end": np.array([20]), "dur": np.array([10]),
         "collective": np.array(["SendRecv"], object), "send": np.array([-1]), "recv": np.array([-1]),
         "bytes": np.array([-1]), "src": np.array([-1]), "dst": np.array([-1]), "group_size": np.array([-1]),
         "rank": np.array([0]), "part": np.array([0]), "iteration": np.array([-1]), "step": np.array([-1]),
         "dim": np.array(["unknown"], object), "pg_name": np.array([""], object),
         "pg_ranks": np.array([""], object), "phase": np.array(["other"], object), "microbatch": np.array([-1]),
         "by": np.array(["order"], object), "cpu": np.array([0]), "correlation": np.array([1]),
         "stream": np.array([7]), "in_splits": np.array([""], object), "out_splits": np.array([""], object)}
    inst, _ = instance_tables(c)
    assert inst["group_size"].tolist() == [2] and inst["complete"].tolist() == [False]


# -- a built export with NCCL's payloads --------------------------------------------------------------

INIT, P2P = 16777218, 16777226
COMM = 0x1234ABCD
ENTRIES = [(1, INIT, 0, 18, "NCCL communicator ID", None), (1, INIT, 1, 5, "No. of ranks", 8),
           (1, INIT, 2, 5, "Rank", 12), (1, INIT, 3, 5, "CUDA device", 16),
           (1, P2P, 0, 18, "NCCL communicator ID", None), (1, P2P, 1, 22, "Message size [bytes]", 8),
           (1, P2P, 2, 5, "Peer rank", 16)]


def _build(path):
    """Pids 200 (NCCL rank 1) and 300 (rank 0) of one 2-rank communicator: rank 0 sends 4 MiB to rank 1
    twice, each ``ncclSend`` / ``ncclRecv`` range launching one ``ncclDevKernel_SendRecv`` kernel."""
    c = sqlite3.connect(path)
    c.executescript(NSYS_PAYLOAD_SCHEMA)
    c.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage)"),
                                                         (3, "cudaLaunchKernel_v7000")])
    c.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.25.0')")
    c.executemany("INSERT INTO NVTX_PAYLOAD_SCHEMAS VALUES (1, ?, NULL, 1, NULL, 4, 24, NULL)", [(INIT,), (P2P,)])
    c.executemany("INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES (?, ?, ?, NULL, ?, ?, NULL, NULL, ?)", ENTRIES)
    c.execute("INSERT INTO NVTX_EVENTS VALUES (10, NULL, 75, 'NCCL', ?, NULL, 1, NULL, NULL)",
              ((1 << 48) | (200 << 24),))
    for pid, rank, dev in ((200, 1, 1), (300, 0, 0)):
        g = (1 << 48) | (pid << 24) | pid
        call, peer = ("ncclRecv", 0) if rank == 1 else ("ncclSend", 1)
        c.execute("INSERT INTO NVTX_EVENTS VALUES (100, 200, 59, 'ncclCommInitRank', ?, NULL, 1, NULL, ?)",
                  (g, struct.pack("<QiiiI", COMM, 2, rank, dev, 0)))
        for i, t in enumerate((1000, 20000)):
            c.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?, NULL, 1, NULL, ?)",
                      (t, t + 3000, call, g, struct.pack("<QQiI", COMM, 4 << 20, peer, 0)))
            c.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 3)", (t + 500, t + 900, g, 7 + i))
            c.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 7, ?, ?, 1, 1)",
                      (t + 4000 + 100 * rank, t + 9000, dev, 7 + i, g & ~0xFFFFFF))
    c.commit()
    c.close()


def test_payload_send_recv_matched_sender_to_receiver(tmp_path):
    _build(tmp_path / "node.sqlite")
    analyze([str(tmp_path / "node.sqlite")], str(tmp_path / "an"), AnalyzeOptions(jobs=1, progress=False))
    k = pq.read_table(tmp_path / "an" / "kernels").to_pandas()
    comm = k[k["kind"].astype(str) == "communication"].sort_values(["rank", "ts_ns"])
    assert comm["collective"].astype(str).tolist() == ["Send", "Send", "Recv", "Recv"]
    assert set(comm["pg_ranks"].astype(str)) == {"0,1"} and set(comm["msg_bytes"]) == {4 << 20}
    aggregate([str(tmp_path / "an")], str(tmp_path / "agg"), AggregateOptions(jobs=1, progress=False,
                                                                               critical_path=False))
    inst = pq.read_table(tmp_path / "agg" / "collectives.parquet").to_pandas()
    assert len(inst) == 2 and inst["complete"].all()
    assert inst[["src", "dst"]].values.tolist() == [[0, 1], [0, 1]]
    p2p = pq.read_table(tmp_path / "agg" / "p2p.parquet").to_pandas()
    assert p2p[["src", "dst", "count", "bytes"]].values.tolist() == [[0, 1, 2, 2 * (4 << 20)]]
