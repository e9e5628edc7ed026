"""``op_perf``: per-op FLOPs, bytes and roofline of one analysed rank (``analyze --op-perf``).

One more pass over the trace file (``costed_ops``) finds the CPU ops whose recorded shapes
(``record_shapes=True``: ``Input Dims``, ``Input type``) ``op_cost``
can cost; only the events holding ``"Input Dims"`` are decoded.  Of a nest of costed ops on one
thread (``aten::linear`` > ``aten::addmm``; ``aten::scaled_dot_product_attention`` >
``aten::_scaled_dot_product_flash_attention`` > ``aten::_flash_attention_forward``) only the
innermost is kept, so FLOPs are counted once (``_innermost``).  Each kept op joins its row of the rank's ``ops``
table on ``(pid, tid, ts_ns, name)`` for the GPU time of the kernels it launched
(``kernel_count``, ``kernel_time_ns`` and ``gpu_busy_ns``: the union of its subtree's kernels).

Against the GPU of the trace (``deviceProperties``, ``streamtrace.topology.hardware.gpu_spec``)
each op gets the roofline (Williams, Waterman & Patterson, CACM 2009): ``intensity`` = FLOPs /
bytes; ``bound`` = ``"compute"`` when the intensity reaches the GPU's ridge point (peak FLOP/s /
memory bandwidth, for the op's dtype), else ``"memory"``; ``bound_ns`` = max(FLOPs / peak,
bytes / bandwidth), the fastest the op can run; ``lost_ns`` = ``gpu_busy_ns`` - ``bound_ns``
(>= 0), the time lost against that bound; ``achieved_tflops`` / ``achieved_gbps`` over
``gpu_busy_ns``; ``pct_of_bound`` = 100 x ``bound_ns`` / ``gpu_busy_ns``.

Output: ``op_perf/iteration=N/rank=R/part-0.parquet`` beside ``kernels/`` and ``ops/``, and
``kernel_perf/``: each GPU event's share of its op's FLOPs and bytes (``kernel_costs``), joining
``kernels`` on ``correlation``.
"""
from __future__ import annotations

import io
import re

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..events.dataset import partition_files, partition_path, read_partition
from ..runtime.files import atomic_output
from ..topology.hardware import gpu_spec
from ..trace.reader import TraceReader
from .opcost import COSTED, op_cost
from .outputs import KERNEL_PERF, KERNELS, OP_PERF, OPS, schema_of

_KEY = b'"Input Dims"'
PROBE_EVENTS = 65536     # events read before concluding that a trace has no recorded shapes
COLUMNS = ("pid", "tid", "ts_ns", "dur_ns", "name", "external_id", "dtype", "input_dims", "flops", "bytes")


class CostedOps:
    """The costed CPU ops of one trace, gathered batch by batch (``add``, in file order) from the
    ``decode=False`` batches of a ``TraceReader``: analyze's own reading
    pass hands its batches here, so the ops cost no pass of their own (``costed_ops`` is the
    standalone pass).  ``rows()``: ``{column: list}`` with ``COLUMNS`` and ``rank`` (``args.rank``, -1
    when absent), innermost of each nest only.  A trace whose first ``PROBE_EVENTS`` events hold no
    ``"Input Dims"`` (profiled without ``record_shapes``) is not looked at further (``done``)."""

    def __init__(self):
        self._out: list = []            # one tuple per costed op: COLUMNS + ("rank",)
        self._costs: dict = {}
        self._named = np.zeros(1, bool)  # per string id (+1: the -1 of "no name"), see _costed_ids
        self.shapes = False
        self.done = False

    def add(self, b, cols=None, table=None) -> None:
        """Take the costed ops of batch ``b`` (its ``buf``, ``starts``, ``ends``, ``ts_ns``, ``dur_ns``).
        ``cols``, ``table``: the batch's columns (``EVENT_DTYPE``, one row per event, as
        ``streamtrace.events.columns.column_batches`` yields them) and their ``StringTable``, when
        the caller read them: then only the complete events named like a costed op are looked at,
        else every event whose text holds ``"Input Dims"``, its name read from its bytes."""
        if self.done:
            return
        buf, starts, ends = b.buf, b.starts, b.ends
        s0, e1 = int(starts[0]), int(ends[-1])
        here = buf.find(_KEY, s0, e1) >= 0
        self.shapes = self.shapes or here
        if not self.shapes and b.index + len(starts) >= PROBE_EVENTS:
            self.done = True            # recorded without record_shapes: no need to read on
            return
        if not here:
            return
        if cols is not None:
            named = np.flatnonzero((cols["ph"] == ord("X")) & self._costed_ids(table)[cols["name"]]).tolist()
            idx = [i for i in named if buf.find(_KEY, int(starts[i]), int(ends[i])) >= 0]
        else:
            idx = _shaped(buf, starts, ends)
        if not idx:
            return
        ts, dur, out = b.ts_ns, b.dur_ns, self._out
        for i in idx:                   # (one at a time: the garbage collector never walks a batch of them)
            e = orjson.loads(buf[int(starts[i]):int(ends[i])])
            name = e.get("name")
            if name not in COSTED or e.get("ph") != "X":
                continue
            a = e.get("args") or {}
            dims = orjson.dumps(a.get("Input Dims")).decode()
            c = self._cost(name, dims, a)
            if c is None:
                continue
            pid, tid = e.get("pid"), e.get("tid")
            out.append((pid if isinstance(pid, int) else -1, tid if isinstance(tid, int) else -1, int(ts[i]),
                        int(dur[i]), name, a.get("External id", -1), c[2], dims, c[0], c[1], a.get("rank", -1)))

    def _costed_ids(self, table) -> np.ndarray:
        """Per string id of ``table`` (int, >= 0; -1, no name, reads the last entry: False): whether it
        names a costed op; extended as the table grows."""
        n = len(table.strings)
        if len(self._named) < n + 1:
            new = np.fromiter((t in COSTED for t in table.strings[len(self._named) - 1:]), bool)
            self._named = np.concatenate([self._named[:-1], new, [False]])
        return self._named

    def _cost(self, name, dims: str, args):
        """``op_cost`` of an op, remembered by its name, ``Input Dims``
        text and ``Input type`` (a step repeats its layers' shapes: most ops are costed once)."""
        key = (name, dims, orjson.dumps(args.get("Input type")))
        if key not in self._costs:
            self._costs[key] = op_cost(name, args.get("Input Dims"), args.get("Input type"))
        return self._costs[key]

    def rows(self) -> dict:
        """``{column: list}`` (``COLUMNS`` and ``rank``) of the costed ops taken, innermost of each nest only."""
        cols = COLUMNS + ("rank",)
        return _innermost({c: list(v) for c, v in zip(cols, zip(*self._out))} if self._out else
                          {c: [] for c in cols})


def costed_ops(path) -> tuple[dict, dict]:
    """The costed CPU ops of the trace ``path`` in a pass of their own (``CostedOps``): ``(rows,
    metadata)``; the metadata as far as read (a trace without recorded shapes is not read past
    ``PROBE_EVENTS`` events).  Raises ``TraceError`` for an
    unreadable trace."""
    ops = CostedOps()
    reader = TraceReader(path)
    for b in reader.raw_batches(decode=False):
        ops.add(b)
        if ops.done:
            break
    return ops.rows(), reader.metadata


_NAME = re.compile(rb'"name"\s*:\s*"([^"\\]*)"')
_COSTED_BYTES = {n.encode() for n in COSTED}


def _shaped(buf, starts, ends) -> list:
    """Indices of the events of a batch whose text holds ``"Input Dims"`` and whose name is a costed op's
    (``_costed_name``)."""
    s0, e1 = int(starts[0]), int(ends[-1])
    hits, pos = [], buf.find(_KEY, s0, e1)
    while pos >= 0:
        hits.append(pos)
        pos = buf.find(_KEY, pos + 1, e1)
    idx = np.unique(np.searchsorted(ends, np.asarray(hits, np.int64), side="right"))
    return [i for i in idx[idx < len(starts)].tolist() if _costed_name(buf, int(starts[i]), int(ends[i]))]


def _costed_name(buf, start: int, end: int) -> bool:
    """Whether the event in ``buf[start:end]`` is named like a costed op (read without decoding it;
    an escaped name is decoded to be sure)."""
    m = _NAME.search(buf, start, end)
    return m is None or m.group(1) in _COSTED_BYTES


def _innermost(rows: dict) -> dict:
    """Keep each nest's innermost costed op (same pid and tid): an op with FLOPs is dropped when it
    encloses another op with FLOPs (``linear`` > ``addmm``); a bytes-only op (elementwise,
    normalisation) when it encloses any costed op, or lies inside an op with FLOPs (the ``copy_``
    inside an ``addmm``: its kernels are the GEMM's)."""
    n = len(rows["name"])
    if not n:
        return rows
    pid, tid, ts, dur = rows["pid"], rows["tid"], rows["ts_ns"], rows["dur_ns"]
    has_flops = [f > 0 for f in rows["flops"]]
    order = np.lexsort((-np.asarray(dur, np.int64), np.asarray(ts, np.int64), np.asarray(tid, np.int64),
                        np.asarray(pid, np.int64)))
    drop = [False] * n
    stack: list = []
    for i in order.tolist():             # (plain lists: a numpy scalar per look-up costs ~10x)
        while stack and (pid[stack[-1]] != pid[i] or tid[stack[-1]] != tid[i]
                         or ts[stack[-1]] + dur[stack[-1]] <= ts[i]):
            stack.pop()
        if has_flops[i]:
            for a in stack:
                if has_flops[a]:
                    drop[a] = True
        elif any(has_flops[a] for a in stack):
            drop[i] = True
        else:
            for a in stack:
                drop[a] = True
        stack.append(i)
    keep = [i for i in range(n) if not drop[i]]
    return {k: [v[i] for i in keep] for k, v in rows.items()}


def _ops_gpu_time(outdir, rank, iteration, starts=None) -> dict:
    """``{(pid, tid, ts_ns, name): (kernel_count, kernel_time_ns, gpu_busy_ns)}`` of the rank's ops
    (only those starting at one of ``starts``, int ns, when given: the ops to be joined)."""
    t = read_partition(partition_files(outdir, OPS, rank, iteration),
                       ["pid", "tid", "ts_ns", "name", "kernel_count", "kernel_time_ns", "gpu_busy_ns"], schema_of(OPS))
    if starts is not None:
        t = t.filter(pc.is_in(t.column("ts_ns"), value_set=pa.array(sorted(set(starts)), pa.int64())))
    names = t.column("name")
    if names.num_chunks and pa.types.is_dictionary(names.type):
        names = names.cast(pa.string())
    t = t.filter(pc.is_in(names, value_set=pa.array(sorted(COSTED))))          # the costed ops' rows only
    cols = [t.column(c).to_pylist() for c in t.column_names]
    return {(p, d, s, n): (k, kt, gb) for p, d, s, n, k, kt, gb in zip(*cols)}


def roofline(flops, nbytes, busy_ns, spec, dtype) -> dict:
    """The roofline columns of one op (module docstring); None values without a GPU spec or GPU
    time.  ``spec``: a ``GpuSpec`` or None."""
    out = dict.fromkeys(("intensity", "bound", "bound_ns", "lost_ns", "achieved_tflops", "achieved_gbps",
                         "pct_of_bound"))
    out["intensity"] = flops / nbytes if nbytes else None
    if busy_ns:
        out["achieved_tflops"] = flops / busy_ns / 1e3
        out["achieved_gbps"] = nbytes / busy_ns
    peak = spec.peak(dtype or "fp32") if spec else None
    if not peak:
        return out
    ridge = spec.ridge(dtype or "fp32")
    out["bound"] = "compute" if out["intensity"] is not None and out["intensity"] >= ridge else "memory"
    out["bound_ns"] = max(flops / (peak * 1e3), nbytes / spec.mem_gbps)
    if busy_ns:
        out["lost_ns"] = max(busy_ns - out["bound_ns"], 0.0)
        out["pct_of_bound"] = 100.0 * out["bound_ns"] / busy_ns
    return out


ROOFLINE = ("intensity", "bound", "bound_ns", "lost_ns", "achieved_tflops", "achieved_gbps", "pct_of_bound")
EXACT = 1 << 53          # integers below it convert to float64 exactly


def roofline_columns(flops, nbytes, busy_ns, spec, dtypes) -> dict:
    """``roofline`` of many ops: ``{column: pyarrow Array}`` (``ROOFLINE``; ``bound`` string, the others
    float64, null where ``roofline`` gives None), equal value for value to ``roofline``'s.  ``flops``,
    ``nbytes``, ``busy_ns``: lists of int >= 0, one per op; ``dtypes``: their dtype names (or None).
    Vectorised when every integer is below 2**53 (converted to float64 exactly, numpy's IEEE
    division then rounds as Python's int / int does), else op by op."""
    n = len(flops)
    if not all(0 <= x < EXACT for v in (flops, nbytes, busy_ns) for x in v):
        rows = [roofline(f, b, g, spec, d) for f, b, g, d in zip(flops, nbytes, busy_ns, dtypes)]
        return {k: pa.array([r[k] for r in rows], pa.string() if k == "bound" else pa.float64()) for k in ROOFLINE}
    f, b, g = (np.asarray(v, np.float64).reshape(n) for v in (flops, nbytes, busy_ns))
    has_b, busy = b != 0, g != 0
    one = lambda x, ok: np.where(ok, x, 1.0)  # noqa: E731  (a divisor where the result is null)
    out = {"intensity": (f / one(b, has_b), has_b),
           "achieved_tflops": (f / one(g, busy) / 1e3, busy), "achieved_gbps": (b / one(g, busy), busy)}
    kinds = sorted(set(d or "fp32" for d in dtypes))
    peaks = {d: spec.peak(d) if spec else None for d in kinds}
    at = np.asarray([kinds.index(d or "fp32") for d in dtypes], np.int64).reshape(n)
    peak = np.asarray([peaks[d] or 0.0 for d in kinds], np.float64)[at]
    ridge = np.asarray([spec.ridge(d) if peaks[d] else 0.0 for d in kinds], np.float64)[at]
    has_p = peak != 0
    bound_ns = np.maximum(f / (one(peak, has_p) * 1e3), b / (spec.mem_gbps if spec else 1.0))
    out["bound_ns"] = (bound_ns, has_p)
    out["lost_ns"] = (np.maximum(g - bound_ns, 0.0), has_p & busy)
    out["pct_of_bound"] = (100.0 * bound_ns / one(g, busy), has_p & busy)
    compute = has_b & (out["intensity"][0] >= ridge)
    cols = {k: pa.array(v, pa.float64(), mask=~ok) for k, (v, ok) in out.items()}
    cols["bound"] = pa.array(np.where(compute, "compute", "memory").astype(object), pa.string(), mask=~has_p)
    return {k: cols[k] for k in ROOFLINE}


def write_op_perf(path, outdir, ranks, iteration, costed=None) -> list:
    """Cost the ops of the trace ``path`` and write each rank's ``op_perf`` partition (the ranks
    ``ranks`` the file was analysed into; an op without ``args.rank`` belongs to the only one, or
    is skipped when the file holds several); nothing when the trace has no costed op.  ``costed``:
    ``(rows, metadata)`` gathered already (``CostedOps`` fed by analyze's own pass), else
    ``costed_ops`` reads the file once more.  Returns the files written."""
    rows, meta = costed if costed is not None else costed_ops(path)
    if not rows["name"]:
        return []
    props = meta.get("deviceProperties") or []
    spec = gpu_spec(props[0].get("name")) if props and isinstance(props[0], dict) else None
    files = []
    for rank in ranks:
        mine = [i for i, r in enumerate(rows["rank"]) if r == rank or (r == -1 and len(ranks) == 1)]
        gpu = _ops_gpu_time(outdir, rank, iteration, [rows["ts_ns"][i] for i in mine])
        cols = {c: [rows[c][i] for i in mine] for c in COLUMNS}
        gpu_cols = [gpu.get(key, (0, 0, 0)) for key in zip(cols["pid"], cols["tid"], cols["ts_ns"], cols["name"])]
        extra = dict(zip(("kernel_count", "kernel_time_ns", "gpu_busy_ns"),
                         (list(v) for v in zip(*gpu_cols)) if gpu_cols else ([], [], [])))
        roof = roofline_columns(cols["flops"], cols["bytes"], extra["gpu_busy_ns"], spec, cols["dtype"])
        table = pa.table({**{c: pa.array(v, _TYPES.get(c, pa.int64())) for c, v in cols.items()}, **{
            k: pa.array(v, pa.int64()) for k, v in extra.items()}, **roof})
        files.append(_write(table, outdir, OP_PERF, rank, iteration))
        files.append(_write(kernel_costs(outdir, rank, iteration, cols), outdir, KERNEL_PERF, rank, iteration))
    return files


def _write(table, outdir, dataset, rank, iteration):
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    p = partition_path(outdir, dataset, rank, iteration)
    with atomic_output(p, compress=False) as f:
        f.write(buf.getvalue())
    return p


def kernel_costs(outdir, rank, iteration, ops: dict):
    """``kernel_perf``: the FLOPs and bytes of each costed op given to the GPU events it launched
    itself (the rank's kernels whose ``external_id`` is the op's), split in proportion to their
    durations; a table of ``correlation``, ``external_id``, ``op``, ``flops``, ``bytes`` (float64)
    that joins the ``kernels`` table on ``correlation``.  Kernels an op launched through an inner,
    uncosted op (another external id) get none: the op's own row in ``op_perf`` has the total."""
    t = read_partition(partition_files(outdir, KERNELS, rank, iteration), ["correlation", "external_id", "dur_ns"],
                       schema_of(KERNELS))
    ext = np.asarray([e if isinstance(e, int) else -1 for e in ops["external_id"]], np.int64)
    k_ext = t.column("external_id").to_numpy(zero_copy_only=False).astype(np.int64)
    k_dur = t.column("dur_ns").to_numpy(zero_copy_only=False).astype(np.float64)
    keep = np.flatnonzero(np.isin(k_ext, ext[ext >= 0]))
    order = np.argsort(ext, kind="stable")
    at = order[np.searchsorted(ext[order], k_ext[keep])]          # the op of each kept kernel
    total = np.zeros(len(ext))
    np.add.at(total, at, k_dur[keep])
    share = np.divide(k_dur[keep], total[at], out=np.full(len(keep), 1.0), where=total[at] > 0)
    flops, nbytes = np.asarray(ops["flops"], np.float64), np.asarray(ops["bytes"], np.float64)
    return pa.table({"correlation": t.column("correlation").take(pa.array(keep)),
                     "external_id": pa.array(k_ext[keep]), "op": pa.array([ops["name"][i] for i in at.tolist()],
                                                                            pa.string()),
                     "flops": pa.array(flops[at] * share), "bytes": pa.array(nbytes[at] * share)})


_TYPES = {"name": pa.string(), "dtype": pa.string(), "input_dims": pa.string()}
