"""The facts of one collective (type, bytes in and out, dtype, group, split sizes, NCCL sequence
number), found in ONE place, in this order, with where the bytes came from (``bytes_source``):

1. ``kernel_args``: the NCCL kernel's own args.  Newer PyTorch (2.x) has the profiler copy the
   collective's ``ParamCommsDebugInfo`` (``torch/csrc/distributed/c10d/ParamCommsUtils.hpp``,
   written by ``saveNcclMeta`` in ``torch/csrc/profiler/util.cpp``) onto the GPU kernel:
   ``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``dtype`` (a c10 ``ScalarType``
   name: ``Float``, ``BFloat16``...), ``Group size``, ``In split size`` / ``Out split size``
   (element counts per group member, as text ``"[a, b]"``), ``Process Group Name`` /
   ``Description`` / ``Ranks``, and in the newest ``Seq`` (the process group's sequence
   number, HolisticTraceAnalysis's ``seq_num``), ``Src Rank`` / ``Dst Rank`` for p2p
   (``a100_resnet_ddp_rank0_of2``, ``megatron_tp2_v100x2``: the keys without ``Seq``).
   ``nvtx_payload``: in an Nsight Systems export, the payload NCCL attaches to its own NVTX range
   around the call (``ncclAllReduce``...; NVIDIA/nccl ``src/include/nvtx_payload_schemas.h``:
   communicator id, message size in bytes), which the nsys reader
   (``streamtrace.trace.nsys.payload.comm_args``) writes as a row of the same keys (size as
   ``uint8`` elements, the communicator id as the process group name) marked
   ``"@source": "nvtx_payload"``; NCCL's own count, so it ranks with the kernel's args.
2. ``record_param_comms``: the CPU op ``RECORD_PARAM_COMMS`` opens around every c10d call.  In
   the PyTorch versions before the kernel carried them it holds the same keys as 1
   (``v100_float_ns_rank0``); older still, only the recorded inputs of the macro's parameter list
   ``(input tensors, seq, process group, rank, collective name, in splits, out splits)``:
   ``Input Dims[0]`` x ``Input type[0]`` is the input tensor, ``Concrete Inputs[1]`` the sequence
   number when ``record_shapes`` wrote concrete values (``param_dlrm_v100x8``: the input tensor).
3. ``annotation_dims``: the recorded shapes (``Input Dims`` x ``Input type``, record_shapes) of
   the ``nccl:*`` / ``gloo:*`` ``user_annotation`` ProcessGroupNCCL/Gloo opens around the call
   (``[[4, 2048, 4096]]`` of ``c10::Half``: one input tensor), then of the enclosing ``c10d::*``
   op (its schema's tensors: ``alltoall_base_`` / ``_allgather_base_`` /
   ``_reduce_scatter_base_`` take ``(output, input, ...)``, the others a TensorList input first).
4. ``unknown``: -1 bytes.

The other fields are taken from the first of those sources that has them: collective type (the
kernel's ``Collective name``, else its name; a ``SendRecv`` kernel launched under an all-to-all op
-- ``c10d::alltoall_base_``, ``nccl:all_to_all``, ``all_to_allv``, a record_param_comms named so --
is ``AllToAll``, real point-to-point stays ``Send``/``Recv``/``SendRecv``; a ``SendRecv`` kernel launched
under one send or receive -- ``ncclSend`` / ``ncclRecv`` NVTX payload, ``nccl:send`` -- is that ``Send`` /
``Recv`` (not under one that names both, ``batch_isend_irecv``): NCCL 2.19+ runs every point-to-point call
as a SendRecv kernel), group size and process
group (args, then the trace's ``pg_config`` by name; with no process group named anywhere and no
``pg_config`` in the trace (older PyTorch), the default group, every rank of
``world_size``, with ``pg_desc`` ``INFERRED_DEFAULT``: an inference, right for the jobs that
use one group, wrong for a job whose old traces hide its subgroups), split sizes (bytes per
group member in group-rank order; an all-to-all with empty split lists is split evenly; ``""``
when unknown or not an all-to-all) and the sequence number (-1 unknown).

Out bytes when only shapes are known: the ``c10d::`` op's output tensor where its schema has one,
else ``in x group size`` for all-gather, ``in / group size`` for reduce-scatter, ``in`` otherwise.
``msg_bytes`` = max(in, out) (nccl-tests' message size for all-gather / reduce-scatter).
"""
from __future__ import annotations

import ast
import bisect
import functools
import re
from dataclasses import dataclass, field

import orjson

from ..events.columns import NO_TS

SOURCES = ("kernel_args", "nvtx_payload", "record_param_comms", "annotation_dims", "unknown")
#: the mark (key ``"@source"``) the nsys reader puts on a collective-args row decoded from NCCL's NVTX payload
NVTX_PAYLOAD = "nvtx_payload"
#: ``pg_desc`` of a collective given the default group for want of any process group in the trace
INFERRED_DEFAULT = "inferred:default_pg"

#: bytes per element: c10 ``ScalarType`` names (kernel / record_param_comms ``dtype``), the C++
#: names Kineto writes in ``Input type`` (``float``, ``c10::Half``, ``long int``...) and torch's
#: Python names; keys lower-case, without ``c10::`` / ``torch.``
DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "byte": 1, "uint8": 1, "unsigned char": 1, "char": 1, "int8": 1, "signed char": 1, "bool": 1,
    "short": 2, "int16": 2, "short int": 2, "unsigned short": 2, "uint16": 2,
    "int": 4, "int32": 4, "unsigned int": 4, "uint32": 4,
    "long": 8, "int64": 8, "long int": 8, "long long": 8, "long long int": 8, "int64_t": 8,
    "unsigned long": 8, "uint64": 8,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "complexhalf": 4, "complex<half>": 4, "complexfloat": 8, "complex<float>": 8, "complex64": 8,
    "complexdouble": 16, "complex<double>": 16, "complex128": 16,
    "qint8": 1, "quint8": 1, "qint32": 4}

_ALLTOALL = re.compile(r"all_?to_?all", re.I)
_P2P_KERNEL = ("SendRecv", "Send", "Recv")
_OUT_FIRST = re.compile(r"^c10d::(alltoall_base_|_allgather_base_|_reduce_scatter_base_|allgather_into_tensor"
                        r"|reduce_scatter_tensor)")


def dtype_bytes(v) -> int:
    """Bytes per element of a dtype text (``"BFloat16"``, ``"c10::Half"``, ``"long int"``,
    ``"torch.float32"``; case-insensitive); 0 when unknown or not a string."""
    if not isinstance(v, str):
        return 0
    return DTYPE_BYTES.get(v.strip().lower().replace("c10::", "").replace("torch.", ""), 0)


def parse_ranks(v) -> list:
    """A rank or split list written as text (``"[0, 1]"``) or a JSON list, as ints; [] when empty,
    None when absent or unreadable."""
    if isinstance(v, list):
        return [int(x) for x in v if isinstance(x, int)]
    if isinstance(v, str):
        r = _ranks_text(v)
        return None if r is None else list(r)
    return None


@functools.lru_cache(maxsize=4096)
def _ranks_text(v: str) -> tuple | None:
    """``parse_ranks`` of a text, once per distinct text: every collective of a process group
    repeats its member list (4,096 ranks: 256 members, ~1.5 KB, in every data-parallel call)."""
    try:
        r = ast.literal_eval(v.strip() or "[]")
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return tuple(int(x) for x in re.findall(r"-?\d+", v))
    if isinstance(r, (list, tuple)):
        return tuple(int(x) for x in r if isinstance(x, int))
    return (int(r),) if isinstance(r, int) else None


def _int(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"\s*-?\d+\s*", v):
        return int(v)
    return None


def arg(row: dict, key: str):
    """An args value of a collective-args row; the shape args ingest keeps as JSON text
    (``streamtrace.events.columns``) decoded."""
    v = row.get(key)
    return orjson.loads(v) if isinstance(v, (bytes, bytearray)) else v


def nelems(dims) -> int | None:
    """Elements of one recorded ``Input Dims`` entry: a tensor's shape (``[4, 2048]``: 8192; ``[]``
    of a scalar tensor or a non-tensor: None) or a TensorList's shapes (``[[16, 128], [4]]``: summed)."""
    if not isinstance(dims, list) or not dims:
        return None
    if all(isinstance(x, int) for x in dims):
        n = 1
        for x in dims:
            n *= x
        return n
    parts = [nelems(x) for x in dims if isinstance(x, list)]
    parts = [p for p in parts if p is not None]
    return sum(parts) if parts else None


@dataclass
class Reading:
    """What one source says (None: it does not say)."""
    coll: str | None = None          # collective name text
    in_n: int | None = None          # elements in / out
    out_n: int | None = None
    dtype: str | None = None
    group_size: int | None = None
    pg_name: str | None = None
    pg_desc: str | None = None
    ranks: list | None = None
    in_split: list | None = None
    out_split: list | None = None
    seq: int | None = None


def read_args(row: dict) -> Reading:
    """The NCCL metadata keys (source 1 on a kernel, 2 on record_param_comms)."""
    g = row.get
    pg = g("Process Group Name")
    ranks = parse_ranks(g("Process Group Ranks"))
    return Reading(coll=g("Collective name") if isinstance(g("Collective name"), str) else None,
                   in_n=_int(g("In msg nelems")), out_n=_int(g("Out msg nelems")),
                   dtype=g("dtype") if isinstance(g("dtype"), str) else None, group_size=_int(g("Group size")),
                   pg_name=None if pg is None else str(pg),
                   pg_desc=g("Process Group Description") if isinstance(g("Process Group Description"), str) else None,
                   ranks=ranks or None, in_split=parse_ranks(g("In split size")),
                   out_split=parse_ranks(g("Out split size")), seq=_int(g("Seq")))


def _shape(row, i):
    """(elements, dtype text) of recorded input ``i`` of an op (None, None when not a tensor)."""
    dims, types = arg(row, "Input Dims"), arg(row, "Input type")
    if not isinstance(dims, list) or i >= len(dims):
        return None, None
    t = types[i] if isinstance(types, list) and i < len(types) and isinstance(types[i], str) else None
    n = nelems(dims[i])
    return (n, t) if n is not None and dtype_bytes(t) else (n, None) if n is not None else (None, None)


def read_record_param_comms_shapes(row: dict) -> Reading:
    """Source 2 of the oldest era: the macro's recorded inputs (module docstring)."""
    n, t = _shape(row, 0)
    r = Reading(in_n=n, dtype=t)
    types, conc = arg(row, "Input type"), arg(row, "Concrete Inputs")
    if isinstance(conc, list) and isinstance(types, list) and len(types) >= 7 and len(conc) > 1 \
            and types[1] == "Scalar":
        r.seq = _int(conc[1])
    if isinstance(conc, list):
        for c in conc:
            if isinstance(c, str) and re.search(r"[a-z]", c) and not re.fullmatch(r"\[.*\]|True|False", c):
                r.coll = c
                break
    return r


def read_op_shapes(row: dict) -> Reading:
    """Source 3: a ``nccl:*`` / ``gloo:*`` annotation's input, or a ``c10d::*`` op's (out, in)."""
    name = row.get("@op") or ""
    if _OUT_FIRST.match(name):
        out_n, out_t = _shape(row, 0)
        in_n, in_t = _shape(row, 1)
        return Reading(coll=name, in_n=in_n, out_n=out_n, dtype=in_t or out_t)
    dims = arg(row, "Input Dims")
    for i in range(len(dims) if isinstance(dims, list) else 0):
        n, t = _shape(row, i)
        if n is not None:
            return Reading(coll=name, in_n=n, dtype=t)
    return Reading(coll=name)


@dataclass
class Facts:
    """The kernels table's collective columns of one communication kernel."""
    collective: str = ""
    in_bytes: int = -1
    out_bytes: int = -1
    msg_bytes: int = -1
    dtype: str = ""
    group_size: int = -1
    pg_name: str = ""
    pg_desc: str = ""
    pg_ranks: list = field(default_factory=list)
    seq: int = -1
    bytes_source: str = "unknown"
    in_splits: str = ""
    out_splits: str = ""


def _first(readings, attr):
    for _, r in readings:
        v = getattr(r, attr)
        if v is not None:
            return v
    return None


def op_type(text: str, pats) -> str:
    """Collective type of an op or annotation name (``nccl:all_reduce``, ``gloo:send``,
    ``c10d::recv_``: also tried without the ``prefix:`` and trailing ``_``); "" when none."""
    text = text or ""
    return pats.collective_type(text) or pats.collective_type(text.rsplit(":", 1)[-1].strip("_")) or ""


def _type(kernel_name, own: Reading | None, ops: list, pats) -> str:
    k = pats.collective_type((own.coll if own else None) or "") or op_type(kernel_name, pats)
    op = ""
    for _, r in ops:
        op = op_type(r.coll, pats)
        if op:
            break
    alltoall = any(_ALLTOALL.search(r.coll or "") for _, r in ops)
    if alltoall and (k in _P2P_KERNEL or not k):
        return "AllToAll"
    both = any(re.search(r"send", r.coll or "", re.I) and re.search(r"recv", r.coll or "", re.I) for _, r in ops)
    if k == "SendRecv" and op in ("Send", "Recv") and not both:    # NCCL runs a lone send or receive as SendRecv
        return op
    return k or op


def _bytes(readings):
    """(source, in elements, out elements or None, dtype) of the first source with an input size
    and a dtype size."""
    for src, r in readings:
        if r.in_n is not None and dtype_bytes(r.dtype):
            out = r.out_n
            if out is None:                       # an enclosing c10d op's output tensor
                out = next((x.out_n for s, x in readings if s == "annotation_dims" and x.out_n is not None), None)
            return src, r.in_n, out, r.dtype
    return "unknown", None, None, None


def _splits(split, coll, total_bytes, elem, gs) -> str:
    if coll != "AllToAll" or split is None:
        return ""
    if split:
        return ",".join(str(x * elem) for x in split)
    if gs > 0 and total_bytes >= 0 and total_bytes % gs == 0:     # empty list: an even split
        return ",".join([str(total_bytes // gs)] * gs)
    return ""


def collective_facts(kernel_name: str, own: dict | None, ops: list, pats, pg_config: dict,
                     world_size: int = -1) -> Facts:
    """The ``Facts`` of a communication kernel named ``kernel_name`` with its own args row
    ``own`` (None: none) launched under the communication ops ``ops`` (their rows, innermost
    first: ``enclosing_rows``), in the order of the module docstring.  ``pg_config``: the
    trace's process groups by name (``streamtrace.trace.metadata.pg_config``);
    ``world_size``: the job's, -1 unknown."""
    readings = []
    own_r = read_args(own) if own else None
    if own_r is not None:
        readings.append(("kernel_args", own_r))
    ops_r = []
    for row in ops:
        name = row.get("@op") or ""
        if row.get("@source") == NVTX_PAYLOAD:
            ops_r.append((NVTX_PAYLOAD, read_args(row)))
        elif name == "record_param_comms":
            ops_r.append(("record_param_comms", read_args(row)))
            ops_r.append(("record_param_comms", read_record_param_comms_shapes(row)))
        else:
            ops_r.append(("annotation_dims", read_op_shapes(row)))
    ops_r.sort(key=lambda x: SOURCES.index(x[0]))          # stable: innermost first within a source
    readings += ops_r
    f = Facts(collective=_type(kernel_name, own_r, ops_r, pats))
    f.pg_name = _first(readings, "pg_name") or ""
    pg = pg_config.get(f.pg_name) if f.pg_name else None
    f.pg_desc = _first(readings, "pg_desc") or (pg or {}).get("pg_desc") or ""
    f.pg_ranks = _first(readings, "ranks") or list((pg or {}).get("ranks") or [])
    gs = _first(readings, "group_size")
    gs = gs if gs is not None else (len(f.pg_ranks) if f.pg_ranks else -1)
    if gs < 0 and not f.pg_name and not pg_config and world_size > 0:     # the default group
        gs, f.pg_ranks, f.pg_desc = world_size, list(range(world_size)), INFERRED_DEFAULT
    f.group_size = gs
    seq = _first(readings, "seq")
    f.seq = seq if seq is not None else -1
    src, n_in, n_out, dt = _bytes(readings)
    f.bytes_source = src
    if src == "unknown":
        f.dtype = _first(readings, "dtype") or ""
        return f
    elem = dtype_bytes(dt)
    f.dtype = dt
    f.in_bytes = n_in * elem
    if n_out is None:
        n_out = (n_in * gs if f.collective == "AllGather" and gs > 0 else
                 n_in // gs if f.collective == "ReduceScatter" and gs > 0 else
                 -1 if f.collective in ("AllGather", "ReduceScatter") else n_in)
    f.out_bytes = n_out * elem if n_out >= 0 else -1
    f.msg_bytes = max(f.in_bytes, f.out_bytes)
    f.in_splits = _splits(_first(readings, "in_split"), f.collective, f.in_bytes, elem, gs)
    f.out_splits = _splits(_first(readings, "out_split"), f.collective, f.out_bytes, elem, gs)
    return f


class OpIndex:
    """The named communication ops of a collective-args table (rows with ``"@op"``), by thread
    and start, to find the ops enclosing one (``enclosing``)."""

    #: how many earlier ops of the thread are looked at (communication ops nest a few deep; the
    #: ops of earlier calls in between are closed)
    LOOK_BACK = 16

    def __init__(self, comm_rows: list):
        self.rows = comm_rows
        by = {}
        for i, r in enumerate(comm_rows):
            if r is not None and "@op" in r and isinstance(r.get("@ts"), int) and r["@ts"] != NO_TS:
                by.setdefault((repr(r.get("@pid")), repr(r.get("@tid"))), []).append((r["@ts"], -r["@end"], i))
        self.threads = {}
        for k, v in by.items():
            v.sort()
            self.threads[k] = ([x[0] for x in v], [-x[1] for x in v], [x[2] for x in v])

    def enclosing(self, r0: int) -> list:
        """Row ``r0`` (an op's) and the op rows on its thread that contain it, innermost first."""
        row = self.rows[r0]
        if "@op" not in row:
            return [r0]
        starts, ends, idx = self.threads.get((repr(row.get("@pid")), repr(row.get("@tid"))), ([], [], []))
        ts, end = row["@ts"], row["@end"]
        hi = bisect.bisect_right(starts, ts)
        out = [(-starts[j], ends[j], idx[j]) for j in range(hi - 1, max(-1, hi - 1 - self.LOOK_BACK), -1)
               if ends[j] >= end and idx[j] != r0]
        out.sort()
        return [r0] + [x[2] for x in out]
