"""The step names of one analysed part: the one place after ``analyze`` that says which CPU op (or
NVTX range) of a rank is a training step, and its step number.

``analyze`` marks steps by the patterns of ``streamtrace.analyze.patterns`` (``ProfilerStep#N``
for a Kineto trace; an Nsight Systems export's NVTX ``step N``, ``iteration N``, ... too; or the
user's ``--step-pattern``, ``streamtrace.trace.steps``) and records them per rank in
``summary.json`` (``ranks[*].step_patterns``,
``step_patterns``) when they are not the Kineto default.  Every later
stage (the step table, per-step rows, the critical path, the op table) finds the step windows with
``step_names`` of the part, so the ranges it uses are the ones that gave the kernels their
``step`` column.  A folder whose summary records none (the Kineto default, or an older analysis)
gets ``^ProfilerStep#(\\d+)$``, as before."""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..analyze.outputs import Analysis
from ..runtime.errors import DataError
from ..trace.steps import KINETO_STEP_PATTERNS, step_number, step_regex


class StepNames:
    """Compiled step patterns (``patterns``: tuple of str; ``regex``: one
    ``step_regex``, searched as analyze searches it,
    ``streamtrace.analyze.classify.name_flags``)."""

    def __init__(self, patterns):
        self.patterns = tuple(patterns)
        self.regex: re.Pattern = step_regex(self.patterns)
        self.default = self.patterns == tuple(KINETO_STEP_PATTERNS)

    def number(self, name) -> int:
        """The step number of the op name ``name`` (str or None), -1 when it is no step (or its
        number group is not a number: ``step_number``)."""
        m = self.regex.search(name) if name else None
        return step_number(m) if m else -1

    def numbers(self, names) -> np.ndarray:
        """int64 array, shape (len(names),): ``number`` of each of ``names`` (a list of str)."""
        return np.asarray([self.number(x) for x in names], np.int64) if len(names) else np.zeros(0, np.int64)

    def generic(self, name: str) -> str:
        """``name`` with its step number written ``*`` (``ProfilerStep#12`` -> ``ProfilerStep#*``,
        ``iteration 3`` -> ``iteration *``); a name that is no step unchanged."""
        m = self.regex.search(name) if name else None
        if not m or step_number(m) < 0:
            return name
        g = next(i for i in range(1, len(m.groups()) + 1) if m.group(i) is not None)
        return name[:m.start(g)] + "*" + name[m.end(g):]


@lru_cache(maxsize=64)
def _compiled(patterns: tuple) -> StepNames:
    return StepNames(patterns)


def step_names(patterns=None) -> StepNames:
    """``StepNames`` of ``patterns`` (a list of str, e.g. a part's ``step_patterns``); None or
    empty: the Kineto default ``^ProfilerStep#(\\d+)$``.  Compiled once per distinct list.  Raises
    ``re.error`` for a bad pattern."""
    return _compiled(tuple(patterns) if patterns else tuple(KINETO_STEP_PATTERNS))


def step_patterns_of(dir_, rank_entry):
    """The step patterns of one ``summary.json`` rank entry (``Analysis.step_patterns``), checked:
    ``DataError`` naming the file for one that does not compile."""
    pats = Analysis.step_patterns(rank_entry)
    try:
        step_names(pats)
    except re.error as e:
        raise DataError(Path(dir_) / Analysis.marker, f"rank {rank_entry['rank']}: bad step pattern ({e})") from None
    return pats
