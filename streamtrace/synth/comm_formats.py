"""How the synthetic generator writes a collective's facts, by PyTorch era (``SynthSpec.comm_format``),
and the split sizes of its all-to-alls.

=====================  ===========================================================================
format                 what the trace carries (what the real traces of that era carry)
=====================  ===========================================================================
``kernel_args``        the NCCL metadata on the kernel and on ``record_param_comms`` (newer
                       PyTorch 2.x; the default, the generator's original output byte for byte)
``kernel_args_seq``    the same plus ``Seq``, the process group's sequence number (the newest)
``record_param_comms`` the metadata on ``record_param_comms`` only, none on the kernel, old kernel
                       names ``ncclKernel_<Coll>_RING_LL_Sum_<t>(ncclDevComm*, ...)`` (``v100_float_ns_rank0``)
``annotation_dims``    no metadata anywhere: the recorded shapes only (``Input Dims`` x ``Input
                       type``) on the ``nccl:*`` annotation and the ``c10d::*`` op, a
                       ``record_param_comms`` whose only input is a TensorList, old kernel names
                       (older PyTorch, ``param_dlrm_v100x8``)
=====================  ===========================================================================

All-to-all (``SynthSpec.alltoalls``): ``c10d::alltoall_base_`` > ``record_param_comms`` >
``nccl:all_to_all`` launching one SendRecv kernel, ``Collective name`` ``all_to_allv``; member
``src`` sends ``base x (1 + (2 src + dst) mod 4)`` elements to member ``dst`` (indices in the
group), so every rank sends and receives different amounts (``alltoall_splits``).
"""
from __future__ import annotations

from dataclasses import dataclass

FORMATS = ("kernel_args", "kernel_args_seq", "record_param_comms", "annotation_dims")
#: the C++ type name Kineto writes in ``Input type`` for each c10 dtype the generator uses
INPUT_TYPE = {"BFloat16": "c10::BFloat16", "Float": "float"}
#: the kernel name's collective, by the generator's collective kind
KERNEL_COLL = {"allreduce": "AllReduce", "allgather": "AllGather", "reduce_scatter": "ReduceScatter"}
_OUT_FIRST = ("alltoall", "allgather", "reduce_scatter")     # c10d op schema: (output, input, ...)


def alltoall_splits(n_members: int, me: int, base: int, uneven: bool = True):
    """``(in splits, out splits)``: elements member ``me`` sends to / receives from each member
    (group order); ``uneven`` False: ``base`` each."""
    if not uneven:
        return [base] * n_members, [base] * n_members
    size = lambda src, dst: base * (1 + (2 * src + dst) % 4)    # noqa: E731
    return [size(me, j) for j in range(n_members)], [size(j, me) for j in range(n_members)]


@dataclass
class CommArgs:
    """The args of each event of one collective call (dicts; {} none) and its kernel's name."""
    c10d: dict
    record_param_comms: dict
    annotation: dict
    kernel: dict
    kernel_name: str


def kernel_name(fmt: str, kind: str, dtype: str) -> str:
    """The NCCL kernel's name: newer (``ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...)``) or old
    (``ncclKernel_AllReduce_RING_LL_Sum_bf16(ncclDevComm*, ...)``) by format."""
    t = {"BFloat16": "bf16", "Float": "f32"}[dtype]
    coll = KERNEL_COLL.get(kind)
    if fmt in ("kernel_args", "kernel_args_seq"):
        k = {"allgather": "AllGather_RING_LL"}.get(kind, f"{coll}_Sum_{t}_RING_LL" if coll else "SendRecv")
        return f"ncclDevKernel_{k}(ncclDevKernelArgsStorage<4096ul>)"
    k = f"{coll}_RING_LL_Sum_{t}" if coll else "SendRecv_RING_SIMPLE_Sum_int8_t"
    return f"ncclKernel_{k}(ncclDevComm*, unsigned long, ncclWork*)"


def comm_args(fmt: str, kind: str, cargs: dict, dtype: str, seq: int) -> CommArgs:
    """The events' args of one call of ``kind`` whose NCCL metadata is ``cargs`` (the keys and
    order Kineto writes; ``In msg nelems`` / ``Out msg nelems`` the totals) in format ``fmt``;
    ``seq``: its sequence number in its process group.  ValueError for an unknown format."""
    if fmt not in FORMATS:
        raise ValueError(f"comm_format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    name = kernel_name(fmt, kind, dtype)
    if fmt == "kernel_args":
        return CommArgs({}, cargs, {}, cargs, name)
    if fmt == "kernel_args_seq":
        a = cargs | {"Seq": seq}
        return CommArgs({}, a, {}, a, name)
    if fmt == "record_param_comms":
        return CommArgs({}, cargs, {}, {}, name)
    n_in, n_out, t = cargs["In msg nelems"], cargs["Out msg nelems"], INPUT_TYPE[dtype]
    if kind in _OUT_FIRST:
        c10d = {"Input Dims": [[n_out], [n_in], [], [], [], []], "Input type": [t, t, "", "", "", "Scalar"]}
    else:
        c10d = {"Input Dims": [[[n_in]], [], [], []], "Input type": ["TensorList", "", "", "Scalar"]}
    rpc = {"Input Dims": [[]] * 7, "Input type": ["TensorList", "Scalar", "Scalar", "Scalar", "", "", ""]}
    return CommArgs(c10d, rpc, {"Input Dims": [[n_in]], "Input type": [t]}, {}, name)
