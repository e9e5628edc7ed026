"""streamtrace.runtime.fork.Standby: a child forked when the block is entered runs the calls sent
later, in order, with the memory the parent had at the fork (not what it holds at the call); its
results and exceptions come back; a dead child is a ChildError; leaving the block ends the child;
disabled, the calls run here."""
import os
import signal
import threading
import time

import numpy as np
import pytest

from streamtrace.runtime.errors import DataError, UsageError
from streamtrace.runtime.fork import ChildError, Standby

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

STATE = {"n": 0}
HELD = []


def _state():
    return os.getpid(), STATE["n"]


def _add(a, b):
    return a + b


def _raise(kind):
    if kind == "usage":
        raise UsageError("--change 'x': no such change")
    if kind == "data":
        raise DataError("/runs/agg/collectives.parquet", "truncated")
    raise RuntimeError("cannot travel", threading.Lock())        # a lock: no pickling of it succeeds


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def _sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def _die():
    os.kill(os.getpid(), signal.SIGKILL)


def _set_state():
    STATE["n"] = STATE["n"] + 100


def test_setup_runs_in_the_child_once_before_its_calls_and_never_here():
    """``Standby(setup=...)``: the child runs it once, before the first call; this process never does
    (nor when not forked: ``map_big_arrays`` is a child's setting)."""
    STATE["n"] = 1
    with Standby(setup=_set_state) as sb:
        assert sb.call(_state)[1] == 101 and sb.call(_state)[1] == 101
    assert STATE["n"] == 1
    with Standby(False, _set_state) as sb:
        assert sb.call(_state) == (os.getpid(), 1)


def test_map_big_arrays_sets_glibcs_threshold_unless_the_environment_does(monkeypatch):
    """In a child (the setting is the process's): True on glibc; False with ``MALLOC_MMAP_THRESHOLD_`` set."""
    import platform
    from streamtrace.runtime.tuning import map_big_arrays
    with Standby() as sb:
        got = sb.call(map_big_arrays)
    assert got is (platform.libc_ver()[0] == "glibc")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    with Standby() as sb:
        assert sb.call(map_big_arrays) is False


def test_calls_run_in_the_child_forked_at_entry_in_order():
    STATE["n"] = 1
    with Standby() as sb:
        STATE["n"] = 2                                  # after the fork: the child keeps what it had
        pid, n = sb.call(_state)
        assert pid != os.getpid() and n == 1
        assert [sb.call(_add, i, 10) for i in range(5)] == [10, 11, 12, 13, 14]
        assert sb.call(_state)[0] == pid                # the same child for every call
        assert sb.call(_add, np.arange(3), 1).tolist() == [1, 2, 3]


def test_submit_returns_at_once_and_result_waits():
    with Standby() as sb:
        t = time.perf_counter()
        sb.submit(_sleep_then, 0.5, "done")
        assert time.perf_counter() - t < 0.4            # the parent goes on while the child works
        assert sb.result() == "done"
        assert time.perf_counter() - t >= 0.5


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_the_childs_memory_is_the_parents_at_the_fork_not_at_the_call():
    with Standby() as sb:
        before = sb.call(_rss_mb)
        HELD.append(np.ones(200 * 2 ** 20 // 8))       # 200 MB touched in the parent after the fork
        try:
            assert _rss_mb() > before + 150
            assert sb.call(_rss_mb) < before + 20
        finally:
            HELD.clear()


@pytest.mark.parametrize("kind, cls, match", [("usage", UsageError, "no such change"),
                                              ("data", DataError, "truncated")])
def test_an_error_of_the_call_is_raised_here_as_itself(kind, cls, match):
    with Standby() as sb:
        with pytest.raises(cls, match=match):
            sb.call(_raise, kind)
        assert sb.call(_add, 1, 2) == 3                 # the child goes on serving


def test_an_error_that_does_not_pickle_is_a_child_error_with_its_class_and_traceback():
    with Standby() as sb:
        with pytest.raises(ChildError) as e:
            sb.call(_raise, "other")
    assert "cannot travel" in str(e.value) and e.value.kind == "RuntimeError"
    assert 'raise RuntimeError("cannot travel"' in e.value.details


def test_a_killed_child_is_a_child_error_naming_the_signal():
    with Standby() as sb:
        with pytest.raises(ChildError, match="SIGKILL"):
            sb.call(_die)
        assert sb.call(_add, 2, 3) == 5                 # no child left: later calls run here


def test_leaving_the_block_ends_the_child():
    with Standby() as sb:
        pid = sb.call(_state)[0]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_leaving_on_an_error_stops_a_child_still_working():
    t = time.perf_counter()
    with pytest.raises(RuntimeError, match="parent failed"):
        with Standby() as sb:
            pid = sb.call(_state)[0]
            sb.submit(_sleep_then, 60, None)
            raise RuntimeError("parent failed")
    assert time.perf_counter() - t < 30
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_disabled_runs_each_call_here():
    with Standby(enabled=False) as sb:
        assert sb.call(_state)[0] == os.getpid()
        sb.submit(_add, 1, 2)
        assert sb.result() == 3
        sb.submit(_raise, "usage")                      # raised by result, as from a child
        with pytest.raises(UsageError):
            sb.result()
