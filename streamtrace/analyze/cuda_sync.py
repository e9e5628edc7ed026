"""One rank's ``cuda_sync`` events (newer Kineto, CUPTI's synchronization activity) as the
per-rank dataset ``cuda_sync/`` (``sync_table``): what the critical path reads to link a
``cudaStreamWaitEvent`` to the ``cudaEventRecord`` it waits on (``streamtrace.aggregate.critical_local``).

Kineto writes one ``ph: X`` event of category ``cuda_sync`` per synchronisation, on the GPU
track of the stream that waits (``pid`` the device, ``tid`` / ``args.stream`` the stream), named by
its kind (``Stream Wait Event``, ``Event Sync``, ``Stream Sync``, ``Context Sync``), with
``args.correlation`` (the runtime call's) and, for the event kinds, ``args.wait_on_stream`` (the
stream the event was recorded on) and ``args.wait_on_cuda_event_record_corr_id`` (the correlation
id of that ``cudaEventRecord`` call).  No other output table holds these rows: kernels stay kernels.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

#: the dataset's columns: device, stream (the waiting one), ts_ns / dur_ns (int64 ns, rank-local),
#: name (the sync kind), correlation (the runtime call's), wait_on_stream, record_correlation
#: (``wait_on_cuda_event_record_corr_id``); -1 where the trace has none
SCHEMA = pa.schema([("device", pa.int64()), ("stream", pa.int64()), ("ts_ns", pa.int64()), ("dur_ns", pa.int64()),
                    ("name", pa.string()), ("correlation", pa.int64()), ("wait_on_stream", pa.int64()),
                    ("record_correlation", pa.int64())])


def sync_table(store, keys, comm_rows, strings, device_mode, pmap) -> pa.Table:
    """The rank's ``("gpusync", rank, pid, tid)`` store rows (``keys``: the rank's store keys, others
    ignored) as a ``SCHEMA`` table, in store order.  ``comm_rows``: the ingest's collective-args
    rows (each sync row's holds ``"@wait_on_stream"`` and ``"@wait_on_cuda_event_record_corr_id"``,
    ``streamtrace.events.ingest.CUDA_SYNC_ARGS``); ``device_mode`` / ``pmap`` as for the GPU
    events (``streamtrace.analyze.file.rank_plan``): the device is the pid, the process map's
    device, or ``args.device``."""
    cols = {f.name: [] for f in SCHEMA}
    for key in (k for k in keys if k[0] == "gpusync"):
        pid, tid = int(key[2]), int(key[3])
        dev = pmap.get(pid, {}).get("device", pid) if device_mode == "pmap" else pid
        for b in store.blocks(key):
            n = len(b)
            cols["device"].append(b["device"] if device_mode == "args" else np.full(n, dev, np.int64))
            cols["stream"].append(np.where(b["stream"] >= 0, b["stream"], tid))
            cols["ts_ns"].append(b["ts"])
            cols["dur_ns"].append(b["dur"])
            cols["name"].append(np.asarray([strings[i] if i >= 0 else "" for i in b["name"].tolist()], object))
            cols["correlation"].append(b["correlation"])
            extra = [comm_rows[i] if i >= 0 else {} for i in b["comm"].tolist()]
            cols["wait_on_stream"].append(np.asarray([r.get("@wait_on_stream", -1) for r in extra], np.int64))
            cols["record_correlation"].append(
                np.asarray([r.get("@wait_on_cuda_event_record_corr_id", -1) for r in extra], np.int64))
    return pa.table({f.name: pa.array(np.concatenate(cols[f.name]) if cols[f.name] else [], f.type)
                     for f in SCHEMA}, schema=SCHEMA)
