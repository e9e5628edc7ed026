"""Classification patterns (defaults for Megatron-LM, TorchTitan, DDP and FSDP),
overridable with ``--patterns FILE`` (TOML, same keys; each value a list of
case-insensitive Python regular expressions matched with ``re.search``).

Example ``patterns.toml``::

    comm_kernel = ["nccl", "rccl", "my_allreduce_kernel"]
    [phase]
    forward = ["^forward_step$", "^## forward ##$"]
"""
from __future__ import annotations

import re
import sys
from copy import deepcopy

from ..runtime.errors import StreamtraceError
from ..trace.steps import KINETO_STEP_PATTERNS, NVTX_STEP_PATTERNS, step_regex

DEFAULTS = {
    # GPU events: Kineto categories (legacy names after the slash)
    "gpu_kernel_cats": ["kernel", "Kernel"],
    "gpu_memory_cats": ["gpu_memcpy", "gpu_memset", "Memcpy", "Memset"],
    # a kernel is communication when its name matches (the reference metrics use (?i)nccl|rccl)
    "comm_kernel": ["nccl", "rccl"],
    # runtime calls that launch GPU work (linked to GPU events by correlation id)
    "launch": ["^cuda", "^cu[A-Z]", "^hip", "^hsa"],
    # collective type from the kernel name or the `Collective name` arg (first match wins)
    "collective": {
        "AllReduce": ["all_?reduce"],
        "AllGather": ["all_?gather"],
        "ReduceScatter": ["reduce_?scatter"],
        "AllToAll": ["all_?to_?all"],
        "Broadcast": ["broadcast", "bcast"],
        "SendRecv": ["sendrecv"],
        "Send": ["^send$", "_send", "send_"],
        "Recv": ["^recv$", "_recv", "recv_"],
        "Reduce": ["reduce"],
        "Barrier": ["barrier"],
    },
    # phases from the CPU annotations around the launch (Megatron first, then PyTorch/TorchTitan/DDP)
    "phase": {
        "forward": ["^forward_step$", "^## forward ##$", "^forward$", "^model_forward"],
        "backward": ["^backward_step$", "^## backward ##$", "^backward$"],
        "optimizer": ["^optimizer$", "^Optimizer\\.step", "^Optimizer\\.zero_grad", "^optimizer_step"],
    },
    # used only where no window above contains the launch (no micro-batch from these)
    "phase_fallback": {
        "backward": ["^autograd::engine::evaluate_function"],
    },
    "recompute": ["recompute", "^custom_forward$", "CheckpointFunction", "checkpoint"],
    "step": list(KINETO_STEP_PATTERNS),
    # ...and, in an Nsight Systems export, these NVTX ranges too (streamtrace.trace.steps: Megatron-LM
    # opens no numbered step range under nsys; these are the guides' and callbacks' names)
    "nvtx_step": list(NVTX_STEP_PATTERNS),
    # parallel dimension of a communication kernel from its process-group description, after
    # Megatron-LM's exact names (streamtrace.topology.MEGATRON_GROUP_DIM) and the topology's rank
    # sets; first match wins, so the expert data / tensor groups come before EP and TP
    "pg_desc": {
        "EDP": ["EXPERT_DATA", "(^|_)EDP(_|$)"],
        "ETP": ["EXPERT_TENSOR_PARALLEL", "(^|_)ETP(_|$)"],
        "EP": ["EXPERT", "(^|_)EP(_|$)"],
        "TP": ["TENSOR", "(^|_)TP(_|$)"],
        "CP": ["CONTEXT", "(^|_)CP(_|$)"],
        "PP": ["PIPELINE", "(^|_)PP(_|$)"],
        "DP": ["DATA_PARALLEL", "(^|_)DP(_|$)", "DATA"],
    },
    # ...and, failing that, from the launching CPU stack (Megatron's function names)
    "stack_dim": {
        "PP": ["^send_forward", "^recv_forward", "^send_backward", "^recv_backward", "send_forward_recv",
               "send_backward_recv"],
        "DP": ["start_grad_sync", "finish_grad_sync", "start_param_sync", "finish_param_sync",
               "finalize_model_grads"],
    },
}


class Patterns:
    """Compiled patterns.  ``Patterns.load(path_or_None)``."""

    def __init__(self, spec: dict):
        self.spec = spec
        c = lambda lst: re.compile("|".join(f"(?:{p})" for p in lst), re.I) if lst else None  # noqa: E731
        self.comm = c(spec["comm_kernel"])
        self.launch = re.compile("|".join(f"(?:{p})" for p in spec["launch"]))   # case-sensitive: cu vs Cu
        self.collective = [(k, c(v)) for k, v in spec["collective"].items()]
        self.phase = [(k, c(v)) for k, v in spec["phase"].items()]
        self.phase_fallback = [(k, c(v)) for k, v in spec["phase_fallback"].items()]
        self.recompute = c(spec["recompute"])
        self.step = step_regex(spec["step"])     # the step number: streamtrace.trace.steps.step_number
        self.pg_desc = [(k, c(v)) for k, v in spec["pg_desc"].items()]
        self.stack_dim = [(k, c(v)) for k, v in spec["stack_dim"].items()]
        self.kernel_cats = set(spec["gpu_kernel_cats"])
        self.memory_cats = set(spec["gpu_memory_cats"])
        self.gpu_cats = frozenset(self.kernel_cats | self.memory_cats)   # what ingest stores as GPU events

    @classmethod
    def load(cls, path=None) -> "Patterns":
        """Defaults, updated key by key from a TOML file.  Raises
        ``StreamtraceError`` for an unreadable file, an unknown key or a bad regex."""
        spec = deepcopy(DEFAULTS)
        if path:
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # pragma: no cover
                import tomli as tomllib
            try:
                with open(path, "rb") as f:
                    user = tomllib.load(f)
            except (OSError, tomllib.TOMLDecodeError) as e:
                raise StreamtraceError(f"{path}: cannot read patterns ({e})") from None
            for k, v in user.items():
                if k not in spec:
                    raise StreamtraceError(f"{path}: unknown pattern key {k!r} (known: {', '.join(spec)})")
                if isinstance(spec[k], dict):
                    if not isinstance(v, dict):
                        raise StreamtraceError(f"{path}: {k} must be a table")
                    spec[k].update(v)
                else:
                    spec[k] = v
        try:
            return cls(spec)
        except re.error as e:
            raise StreamtraceError(f"bad pattern: {e}") from None

    def with_step(self, pattern: str | None) -> "Patterns":
        """These patterns with ``pattern`` (a regular expression whose first group is the step
        number, e.g. ``^train_step_(\\d+)$`` for an NVTX range) as the step marker instead of
        ``ProfilerStep#N``; None: unchanged.  Raises ``StreamtraceError`` for a bad
        expression or one without a group."""
        if not pattern:
            return self
        try:
            rx = re.compile(pattern)
        except re.error as e:
            raise StreamtraceError(f"--step-pattern {pattern!r}: {e}") from None
        if rx.groups < 1:
            raise StreamtraceError(f"--step-pattern {pattern!r}: needs a group for the step number, e.g. (\\d+)")
        spec = deepcopy(self.spec)
        spec["step"] = [pattern]
        try:
            return Patterns(spec)
        except re.error as e:          # a flag inside the pattern (step_regex wraps it in a group)
            raise StreamtraceError(f"--step-pattern {pattern!r}: {e}") from None

    def for_export(self) -> "Patterns":
        """These patterns for an Nsight Systems export: its NVTX step ranges (``nvtx_step``) mark
        steps beside ``step`` (``streamtrace.trace.steps``)."""
        spec = deepcopy(self.spec)
        spec["step"] = list(spec["step"]) + [p for p in spec["nvtx_step"] if p not in spec["step"]]
        return Patterns(spec)

    def collective_type(self, text: str):
        for k, rx in self.collective:
            if text and rx.search(text):
                return k
        return None

    def first(self, table, text):
        for k, rx in table:
            if text and rx and rx.search(text):
                return k
        return None
