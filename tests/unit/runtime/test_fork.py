"""streamtrace.runtime.fork: call_in_child returns the child's result, relays its messages, turns
its failures (an exception, a killed process) into ChildError, and frees the child's memory."""
import os
import signal

import pytest

from streamtrace.runtime.fork import ChildError, call_in_child, run_forked

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def test_result_comes_back_from_another_process():
    parent = os.getpid()
    pid, data = call_in_child(lambda: (os.getpid(), {"ranks": [0, 1], "x": b"\0" * 10}))
    assert pid != parent
    assert data == {"ranks": [0, 1], "x": b"\0" * 10}


def test_messages_arrive_in_order_before_the_result():
    got = []
    box = {}

    def setup(send):
        box["send"] = send

    def fn():
        for i in range(100):
            box["send"](("line", i))
        return "done"
    assert call_in_child(fn, setup, got.append) == "done"
    assert got == [("line", i) for i in range(100)]


def test_child_exception_becomes_child_error_with_message_kind_and_traceback():
    def fn():
        raise ValueError("rank 3: truncated trace")
    with pytest.raises(ChildError) as e:
        call_in_child(fn)
    assert str(e.value) == "rank 3: truncated trace"
    assert e.value.kind == "ValueError"
    assert "raise ValueError" in e.value.details


def test_killed_child_is_a_child_error_naming_the_signal():
    def fn():
        os.kill(os.getpid(), signal.SIGKILL)
    with pytest.raises(ChildError, match="SIGKILL: out of memory"):
        call_in_child(fn)


def test_child_exit_without_result_is_a_child_error():
    with pytest.raises(ChildError, match="exit code 3"):
        call_in_child(lambda: os._exit(3))


def test_child_changes_stay_in_the_child():
    state = {"n": 1}

    def fn():
        state["n"] = 2
        return state["n"]
    assert call_in_child(fn) == 2
    assert state == {"n": 1}


def test_child_memory_is_not_kept_by_the_parent():
    psutil = pytest.importorskip("psutil")
    me = psutil.Process()
    before = me.memory_info().rss

    def fn():
        big = bytearray(300 * 2**20)          # touched: resident in the child
        return len(big)
    assert call_in_child(fn) == 300 * 2**20
    assert me.memory_info().rss - before < 100 * 2**20


def test_run_forked_runs_every_function_once(tmp_path):
    marks = [tmp_path / f"m{i}" for i in range(3)]
    run_forked([lambda m=m: m.write_text("x") for m in marks])
    assert all(m.read_text() == "x" for m in marks)
