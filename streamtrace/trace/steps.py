"""The names that mark a training step, as one regular expression (``step_regex``) and the step
number of a match (``step_number``).

Defaults (``STEP_PATTERNS``; each pattern's first group is the step number):

* ``ProfilerStep#N``: the range ``torch.profiler``'s ``step()`` opens for step N (a Kineto
  ``user_annotation``; an NVTX range too when the PyTorch profiler runs inside an Nsight Systems
  capture with ``emit_nvtx``).
* NVTX ranges only (``NVTX_STEP_PATTERNS``, used for Nsight Systems exports): ``step N``,
  ``step_N``, ``step#N``, ``iteration N``, ``iterationN``, ``iter_N``, ``train_step_N`` (any case),
  the per-step ranges that NVIDIA's PyTorch guide for Nsight Systems (``range_push("iteration{}")``)
  and training-loop callbacks (``range_push(f"step_{global_step}")``) open.

Megatron-LM opens no numbered step range under ``--profile`` with Nsight Systems (read at
NVIDIA/Megatron-LM d98e8a6: ``megatron/training/training.py`` and ``profiling.py`` call
``cudaProfilerStart`` at ``--profile-step-start`` and ``cudaProfilerStop`` after
``--profile-step-end``, with ``emit_nvtx`` op ranges under ``--record-shapes``; ``--nvtx-ranges``
adds ranges named ``<module>.<function>``, e.g. the interleaved pipeline schedule's
``...forward_backward_pipelining_with_interleaving.warmup``, never numbered): such a capture has no
step unless the training loop opens one of the ranges above, or ``--step-pattern`` names its own.
The Megatron-LM branches of the zero-bubble pipeline schedules (pull requests to NVIDIA/Megatron-LM,
2023-2024, not merged into its main branch) push ``Iteration N`` around each iteration under
``--profile``: matched by the NVTX names above."""
from __future__ import annotations

import re

from ..runtime.errors import StreamtraceError

#: the step range of Kineto traces (and of exports)
KINETO_STEP_PATTERNS = [r"^ProfilerStep#(\d+)$"]
#: the step ranges also looked for in an Nsight Systems export's NVTX ranges
NVTX_STEP_PATTERNS = [r"(?i)^(?:step|iteration|iter|train_step)[ _#:-]?(\d+)$"]
STEP_PATTERNS = KINETO_STEP_PATTERNS + NVTX_STEP_PATTERNS


def step_regex(patterns) -> re.Pattern:
    """One compiled expression matching any of ``patterns`` (a list of str; a pattern's inline
    flags such as ``(?i)`` apply to it alone).  Raises ``re.error`` for a bad pattern."""
    parts = []
    for p in patterns:
        m = re.match(r"^\(\?([aiLmsux]+)\)", p)
        parts.append(f"(?{m.group(1)}:{p[m.end():]})" if m else f"(?:{p})")
    return re.compile("|".join(parts))


def user_step_regex(pattern: str) -> re.Pattern:
    """``pattern`` (a ``--step-pattern``) compiled by ``step_regex``.  Raises
    ``StreamtraceError`` for a bad expression or one without a
    group for the step number."""
    try:
        rx = step_regex([pattern])
    except re.error as e:
        raise StreamtraceError(f"--step-pattern {pattern!r}: {e}") from None
    if rx.groups < 1:
        raise StreamtraceError(f"--step-pattern {pattern!r}: needs a group for the step number, e.g. (\\d+)")
    return rx


#: the largest step number: steps are int64 columns (the kernels' and ops' ``step``); a name whose
#: number is larger (``ProfilerStep#99999999999999999999``) is no step, as one whose number is no number
MAX_STEP = (1 << 63) - 1


def step_number(m) -> int:
    """The step number of a ``step_regex`` match: its first group that matched (-1 when that
    group is not a number from 0 to ``MAX_STEP``)."""
    g = next((x for x in m.groups() if x is not None), None)
    return int_step(g)


def int_step(text) -> int:
    """``text`` (a str, or None) as a step number: -1 when it is not a number from 0 to ``MAX_STEP``."""
    try:
        n = int(text)
    except (TypeError, ValueError):
        return -1
    return n if 0 <= n <= MAX_STEP else -1


_PROFILER_STEP = re.compile(KINETO_STEP_PATTERNS[0])


def profiler_step_number(name: str) -> int:
    """N of a ``ProfilerStep#N`` name, read by the Kineto step pattern as ``analyze`` reads it (``step_number``);
    -1 for any other name: ``int()`` of the text after ``#`` also took ``ProfilerStep# 3``, ``#+3`` and
    ``#1_000`` for steps (merge's pre-passes), which ``analyze`` does not."""
    m = _PROFILER_STEP.match(name)
    return step_number(m) if m else -1
