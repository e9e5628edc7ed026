"""A trace's ``baseTimeNanoseconds`` read as a clock only when it is one (``trace.metadata.base_time_ns``): an
integer from 0 to 2^62 ns; a text, a bool, a fraction, NaN or 1e30 (a hostile-input pass: merge raised
``ValueError``, aggregate ``OverflowError``) is no base time, and the commands go on as for a trace without one."""
from __future__ import annotations

import json
import math

from hypothesis import given, strategies as st

from streamtrace.synth.job import SynthSpec, generate_job
from streamtrace.trace.metadata import base_time_ns

from support import run_cli


def _plain(v):
    """The rule read plainly: a JSON integer (or a float with no fraction) in [0, 2^62], else None."""
    if type(v) is int:
        return v if 0 <= v <= 2 ** 62 else None
    if type(v) is float and math.isfinite(v) and v == math.floor(v) and 0 <= v <= 2.0 ** 62:
        return int(v)
    return None


values = st.one_of(st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                   st.text(max_size=5), st.none(), st.lists(st.integers(), max_size=2),
                   st.sampled_from([0, 2 ** 62, 2 ** 62 + 1, 1661203468002717000, 1e30, -1, 1.5]))


@given(values)
def test_base_time_is_a_clock_or_none(v):
    assert base_time_ns({"baseTimeNanoseconds": v}) == _plain(v)
    assert base_time_ns({}) is None and base_time_ns(None) is None


def test_merge_and_aggregate_go_on_without_a_damaged_base_time(tmp_path):
    for bad in ("x", 10 ** 30, float("nan")):
        job = tmp_path / f"job_{bad}"
        generate_job(job, SynthSpec(world_size=2, tp=2, pp=1, microbatches=1, layers=1))
        first = sorted(job.glob("iteration_*/*.json"))[0]
        doc = json.loads(first.read_text())
        doc["baseTimeNanoseconds"] = bad
        first.write_text(json.dumps(doc))
        r = run_cli("merge", job, "-o", tmp_path / f"m_{len(str(bad))}.json", "-q")
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        an, ag = tmp_path / f"an_{len(str(bad))}", tmp_path / f"ag_{len(str(bad))}"
        for args in (("analyze", job, "-o", an, "-q", "-j", "1"), ("aggregate", an, "-o", ag, "-q", "-j", "1")):
            r = run_cli(*args)
            assert r.returncode == 0 and "Traceback" not in r.stderr, (args[0], r.stderr)
