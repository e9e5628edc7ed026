"""Words that mislead (issue 47, item 7): the configuration's iteration number in the singular, diff's
regression rows labelled by the time's direction, counts as whole calls."""
from __future__ import annotations

from streamtrace.report.diff.markdown import count_cell, direction


def test_configuration_names_one_iteration_in_the_singular():
    """Issue 47: "iteration | 10" is the iteration's number, not a count of iterations."""
    from streamtrace.report.config import configuration_md
    c = {"devices": ["NVIDIA H100"], "world_size": 8, "iterations": [10], "ranks": 8, "tp": None}
    head = configuration_md(c, lambda h, rows: " | ".join(h))[2]
    assert head.endswith("| iteration")
    c["iterations"] = [10, 11]
    assert configuration_md(c, lambda h, rows: " | ".join(h))[2].endswith("| iterations")


def test_regression_rows_say_the_time_went_up():
    row = {"change": "decreased", "delta_ns": 5_000}           # fewer calls, more time: a regression
    assert direction(row) == "more time, fewer calls"
    assert direction({"change": "increased", "delta_ns": -10}) == "less time, more calls"
    assert direction({"change": "added", "delta_ns": 10}) == "added"


def test_counts_are_whole_calls():
    assert count_cell(1762.5) == "1,763" and count_cell(3.0) == "3" and count_cell(0.25) == "<1"
    assert count_cell(None) == "-" and count_cell(0) == "0"
