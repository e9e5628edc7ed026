"""The default step names (``streamtrace.trace.steps``), written out by hand: which range names
mark a step and the number each gives."""
from __future__ import annotations

import pytest

from streamtrace.runtime.errors import StreamtraceError
from streamtrace.trace.steps import (KINETO_STEP_PATTERNS, STEP_PATTERNS, step_number, step_regex,
                                     user_step_regex)

MARKS = {"ProfilerStep#12": 12, "iteration7": 7, "iteration 7": 7, "Iteration 8": 8, "step 3": 3, "step_3": 3,
         "Step#4": 4, "iter_9": 9, "train_step_5": 5, "STEP:6": 6}
NOT_MARKS = ["ProfilerStep#", "profilerstep#3", "stepper 3", "aten::step", "iteration 3 done", "Optimizer.step#SGD.step",
             "megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_with_interleaving.warmup",
             "forward_step", "step"]


@pytest.mark.parametrize("name", sorted(MARKS))
def test_default_step_names(name):
    m = step_regex(STEP_PATTERNS).search(name)
    assert m is not None and step_number(m) == MARKS[name]


@pytest.mark.parametrize("name", NOT_MARKS)
def test_names_that_are_no_step(name):
    assert step_regex(STEP_PATTERNS).search(name) is None


def test_kineto_default_is_profiler_step_only():
    rx = step_regex(KINETO_STEP_PATTERNS)
    assert rx.search("ProfilerStep#2") and not rx.search("iteration 2")


def test_a_given_pattern_needs_a_group():
    assert step_number(user_step_regex(r"(?i)^my_step_(\d+)$").search("MY_STEP_4")) == 4
    with pytest.raises(StreamtraceError, match="needs a group"):
        user_step_regex("^my_step")
    with pytest.raises(StreamtraceError, match="--step-pattern"):
        user_step_regex("^(")
