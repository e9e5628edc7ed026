"""Forked children for work on data the parent already holds (copy-on-write): run functions at
once in children, reap them, and the signal handling a child needs.  Used by
:mod:`streamtrace.analyze.trackfork`.  Needs ``os.fork`` (Linux, macOS); elsewhere
:func:`run_forked` runs everything in order in this process."""
from __future__ import annotations

import os
import signal

from .lifecycle import die_with_parent

def _exit_on_term(signum, frame):
    raise SystemExit(1)


def child_signals(parent_pid=None):
    """In a child: SIGTERM (the parent gave up) becomes ``SystemExit``, so that a
    half-written output file is deleted; Ctrl-C is the parent's to handle; the child dies
    with its parent ``parent_pid`` (:func:`~streamtrace.runtime.lifecycle.die_with_parent`)."""
    signal.signal(signal.SIGTERM, _exit_on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent_pid)


def reap(pids):
    """Terminate and wait for the children still running (None entries: already waited)."""
    for pid in pids:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
            except OSError:
                pass


def run_forked(fns, then=None):
    """Run ``fns[0]()`` in this process and each of ``fns[1:]`` in a forked child at the same
    time, then ``then()`` here while the children finish.  A child that fails (any
    exception, or killed) is run again here, so every function has run once successfully
    when this returns.  Exceptions of the functions run here propagate (the children are
    then terminated).  Without ``os.fork`` everything runs here, in order."""
    if not hasattr(os, "fork"):
        for f in fns:
            f()
        if then is not None:
            then()
        return
    pids = []
    parent = os.getpid()
    try:
        for f in fns[1:]:
            pid = os.fork()
            if pid == 0:                                         # the child
                code = 1
                try:
                    child_signals(parent)
                    f()
                    code = 0
                except BaseException:                            # noqa: BLE001 - the parent runs it again
                    pass
                finally:
                    os._exit(code)
            pids.append(pid)
        fns[0]()
        if then is not None:
            then()
        for i, pid in enumerate(pids):
            _, status = os.waitpid(pid, 0)
            pids[i] = None
            if os.waitstatus_to_exitcode(status) != 0:
                fns[i + 1]()
    finally:
        reap(pids)
