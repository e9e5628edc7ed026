"""Forked children for work on data the parent already holds (copy-on-write): run functions at
once in children, reap them, and the signal handling a child needs (``run_forked``, used by
``streamtrace.analyze.trackfork``); one call in a child whose memory is returned to the system
when it ends (``call_in_child``, used by ``streamtrace.epilogue`` for each stage); a child forked
early, while this process is small, that runs calls sent to it later (``Standby``, used by
``streamtrace.aggregate`` for the job's critical path and what-if replay).  Needs ``os.fork`` (Linux, macOS); elsewhere
each runs everything in this process."""
from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

from .lifecycle import child_ready, die_with_parent, forking, resend_later, stop_once

# seconds a stage's process is given to clean up and end once told to stop, before SIGKILL
STOP_GRACE = 20.0


class ChildError(RuntimeError):
    """``call_in_child``'s function raised, or its process died: the message is the child's
    exception message (or how the process ended); ``kind`` the exception's class name (None when
    the process died), ``details`` the child's traceback text."""

    def __init__(self, message: str, kind: str | None = None, details: str = ""):
        super().__init__(message)
        self.kind = kind
        self.details = details

def _exit_on_term(signum, frame):
    if resend_later(signum, frame):          # not inside a finalizer or llvmlite's bindings
        return
    raise SystemExit(1)


def child_signals(parent_pid=None):
    """In a child: SIGTERM (the parent gave up) becomes ``SystemExit``, so that a
    half-written output file is deleted; Ctrl-C is the parent's to handle; the child dies
    with its parent ``parent_pid`` (``die_with_parent``); a SIGTERM
    that came while it was being forked is that ``SystemExit`` now."""
    signal.signal(signal.SIGTERM, _exit_on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent_pid)
    if child_ready() == signal.SIGTERM:
        raise SystemExit(1)


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
            with forking():                                      # no signal lost in the fork (issue 49)
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


def call_in_child(fn: Callable[[], Any], setup: Callable[[Callable], None] | None = None,
                  on_message: Callable[[Any], None] | None = None) -> Any:
    """``fn()`` run in a forked child process; returns its result (pickled back to this process).

    Made for a stage that builds large transient state (e.g. the epilogue's analyze of 1,024
    ranks): whatever the child allocates is returned to the system when it exits, so the next
    stage does not start on top of it.  The child sees this process's data (copy-on-write).
    ``setup(send)`` runs first in the child: ``send(message)`` passes a picklable message to
    ``on_message(message)``, called here at once (e.g. log lines).  Signals as in this process
    (Ctrl-C and SIGTERM reach the child, which cleans up as this process would); the child dies
    with this process.

    Raises ``ChildError`` when ``fn`` raised an ``Exception`` (its message, class name and
    traceback) or the child ended without a result (killed, e.g. by the kernel's out-of-memory
    killer); ``KeyboardInterrupt`` when the child was interrupted.  Without ``os.fork``: ``fn()``
    here, its messages passed on directly."""
    if not hasattr(os, "fork"):
        if setup is not None:
            setup(on_message or (lambda message: None))
        return fn()
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_main, args=(fn, setup, send, os.getpid()), daemon=False)
    answered = False
    try:
        with forking():                  # a signal during the fork is raised after it, here (issue 49)
            proc.start()
        send.close()
        while True:
            try:
                kind, payload = recv.recv()
            except EOFError:
                break
            if kind == "message":
                if on_message is not None:
                    on_message(payload)
                continue
            answered = True
            if kind == "result":
                return payload
            if kind == "interrupted":
                raise KeyboardInterrupt()
            raise ChildError(*payload)
        answered = True
        proc.join()
        raise ChildError(_ended(proc.exitcode))
    finally:
        recv.close()
        if not answered and proc.pid is not None and proc.is_alive():   # interrupted: stop the child
            _stop(proc)
        if proc.pid is not None:
            proc.join()


def _stop(proc):
    """Ask the child to stop (SIGTERM: it removes what it half-wrote; one that already got the
    Ctrl-C ignores it, ``stop_once``), give it
    ``STOP_GRACE`` seconds, then SIGKILL it (its pool workers die with it)."""
    proc.terminate()
    proc.join(STOP_GRACE)
    if proc.is_alive():
        proc.kill()


def _ended(code, who: str = "the stage's process") -> str:
    """How a child (``who``) that sent no result ended (its exit code, negative: the signal's number)."""
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        why = ": out of memory?" if -code == signal.SIGKILL else ""
        return f"{who} was killed by {name}{why}"
    return f"{who} ended with exit code {code} and no result"


def _child_main(fn, setup, send, parent_pid):
    """The child of ``call_in_child``: run ``fn``, send back its result or its failure, and
    leave with ``os._exit``: multiprocessing's own exit would join the child's children and
    threads (a process pool's manager thread) after an interruption, which could wait forever."""
    code = 1

    def message(payload):
        send.send(("message", payload))
    try:
        die_with_parent(parent_pid)
        stop_once()                      # (raises a signal that came during the fork)
        if setup is not None:
            setup(message)
        result = fn()
    except Exception as e:   # noqa: BLE001 - sent to the parent, which raises it
        send.send(("error", (str(e), type(e).__name__, traceback.format_exc())))
    except KeyboardInterrupt:
        send.send(("interrupted", None))
    else:
        send.send(("result", result))
        code = 0
    finally:
        _leave(code)


def _leave(code: int):
    """End a child here: its output flushed, then ``os._exit(code)`` (no ``atexit`` handlers, no joins)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


class Standby:
    """A child process forked now, when this process is small, that runs the functions sent to it
    later (``call``), one at a time: for a late phase with large transient state in a process that
    has grown by then.  A forked child's resident memory starts at its parent's at the fork (the
    pages it shares copy-on-write count in its RSS), so a phase run in it costs this process's size
    *then* plus the phase, not this process's size when the call comes plus the phase.  Measured:
    ``aggregate -j 2`` of 1,024 synthetic ranks, its critical path and what-if replay run in a standby
    forked before the job is opened: the largest process 489-497 -> 354-364 MiB (bench/RESULTS.md).

    A context manager; ``enabled=False`` or no ``os.fork``: ``call`` runs the function here.  The
    function and its arguments are pickled to the child (a module-level function, small arguments:
    the child already holds what this process held at the fork), its result back.  ``call`` raises
    what the function raised (the exception itself when it survives pickling, else ``ChildError``
    with its message, class name and traceback), ``ChildError`` when the child died (killed, e.g.
    by the out-of-memory killer), ``KeyboardInterrupt`` when it was interrupted.  Leaving the block
    ends the child (its pipe closed; one still running a call after an interruption is stopped as
    ``call_in_child`` stops one); it dies with this process."""

    def __init__(self, enabled: bool = True, setup: Callable[[], Any] | None = None):
        self.enabled = bool(enabled) and hasattr(os, "fork")
        self.setup = setup           # run in the child once, before its first call (not run when not forked)
        self.proc = None
        self.conn = None
        self._here = None            # not forked: the outcome of the call ``submit`` ran here

    def __enter__(self) -> "Standby":
        if self.enabled:
            ctx = multiprocessing.get_context("fork")
            mine, theirs = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=_standby_main, args=(theirs, mine, os.getpid(), self.setup), daemon=False)
            with forking():              # a signal during the fork is raised after it, here (issue 49)
                proc.start()
            theirs.close()
            self.proc, self.conn = proc, mine
        return self

    def call(self, fn: Callable[..., Any], *args) -> Any:
        """``fn(*args)`` in the child (here when not forked); returns its result."""
        self.submit(fn, *args)
        return self.result()

    def submit(self, fn: Callable[..., Any], *args) -> None:
        """Start ``fn(*args)`` in the child and return at once (``result`` waits for it); one call
        at a time.  Not forked: runs it here now (``result`` returns or raises its outcome)."""
        if self.proc is None:
            try:
                self._here = ("result", fn(*args))
            except Exception as e:   # noqa: BLE001 - raised by ``result``
                self._here = ("error", e)
            return
        try:
            self.conn.send((fn, args))
        except OSError:                  # the child died
            self._died()

    def result(self) -> Any:
        """The result of the call ``submit`` started (raises as the class docstring says)."""
        if self.proc is None:
            (kind, value), self._here = self._here, None
            if kind == "error":
                raise value
            return value
        try:
            kind, payload = self.conn.recv()
        except (EOFError, OSError):      # the child died
            self._died()
        if kind == "result":
            return payload
        if kind == "interrupted":
            raise KeyboardInterrupt()
        message, name, details, exc = payload
        if exc is not None:
            raise exc
        raise ChildError(message, name, details)

    def _died(self):
        proc, self.proc = self.proc, None
        self.conn.close()
        proc.join()
        raise ChildError(_ended(proc.exitcode, "it")) from None

    def __exit__(self, et, ev, tb):
        proc, self.proc = self.proc, None
        if proc is None or proc.pid is None:
            return False
        try:
            self.conn.close()            # an idle child reads the end of its pipe and leaves
        finally:
            proc.join(STOP_GRACE if et is None else 1.0)
            if proc.is_alive():          # interrupted while the child ran a call
                _stop(proc)
            proc.join()
        return False


def _standby_main(conn, parent_end, parent_pid, setup=None):
    """The child of ``Standby``: ``setup()`` (when given), then run each ``(fn, args)`` read from
    ``conn`` and send back ``("result", value)``, ``("error", (message, class name, traceback, exception
    or None))`` or ``("interrupted", None)``; leave with ``os._exit`` when the pipe ends."""
    code = 0
    try:
        parent_end.close()
        die_with_parent(parent_pid)
        stop_once()                      # (raises a signal that came during the fork)
        if setup is not None:
            setup()
        while True:
            try:
                fn, args = conn.recv()
            except EOFError:
                break
            try:
                result = fn(*args)
            except Exception as e:   # noqa: BLE001 - sent to the parent, which raises it
                conn.send(("error", (str(e), type(e).__name__, traceback.format_exc(), _portable(e))))
            else:
                conn.send(("result", result))
    except KeyboardInterrupt:
        code = 1
        try:
            conn.send(("interrupted", None))
        except OSError:
            pass
    finally:
        _leave(code)


def _portable(e: BaseException):
    """``e`` when it comes back from pickling as the same class, else None."""
    try:
        back = pickle.loads(pickle.dumps(e))
    except Exception:   # noqa: BLE001 - an exception whose arguments do not pickle
        return None
    return back if type(back) is type(e) else None
