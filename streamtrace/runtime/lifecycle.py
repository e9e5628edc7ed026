"""How streamtrace's processes end: in order when told to, and never as orphans.

* ``exit_on_sigterm`` -- in the command's own process, SIGTERM (a batch scheduler's
  "stop", ``kill``) raises ``Terminated``, a ``KeyboardInterrupt``: every ``finally`` and
  context manager runs, so temporaries and staging folders are removed and worker
  processes stopped, as for Ctrl-C;
* ``die_with_parent`` -- in a worker process (the process pool's, a forked child): the
  kernel kills it when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``), so a
  SIGKILLed command leaves no worker blocked on its queue or writing files; a no-op
  elsewhere;
* ``worker_signals`` -- in a pool worker: SIGTERM kills it (the default), Ctrl-C is the
  parent's to handle;
* ``forking`` -- around code that forks (a stage's process, a pool's workers, track
  children): a signal is never lost nor raised in the middle of a fork (issue 49).  A Python signal
  handler that raises while ``os.fork`` runs its at-fork callbacks (logging's ``_releaseLock``,
  threading's ``_after_fork``) raises into a callback whose exception Python prints ("Exception
  ignored in: <function _releaseLock>") and drops: the command then ran on after SIGTERM, and a
  child that got the signal before its own handlers printed a traceback.  So SIGINT and SIGTERM
  are blocked in the forking thread while it forks, a handler that runs all the same (the signal
  taken by another thread) only records it, and the signal is raised when the block ends, in the
  caller's code; a child keeps them blocked until its own handlers are set (``stop_once``,
  ``child_signals`` of ``fork``, ``worker_signals``), then acts
  on one that came meanwhile (``child_ready``).  Nor is a signal raised inside a finalizer
  (``__del__``, e.g. llvmlite's while numba compiles, or the import system's weak-reference callback),
  where Python would print and drop the exception,
  or inside llvmlite's bindings (an object half made fails in its finalizer), in the command's process
  or a stage's forked child: it is sent again 20 ms later (``resend_later``).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1
_PRCTL = None


class Terminated(KeyboardInterrupt):
    """SIGTERM received by the command's process (see ``exit_on_sigterm``).  A
    ``KeyboardInterrupt``, so code that carries on after ``Exception`` still stops."""

    signum = signal.SIGTERM


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class _State:
    """This process's signal bookkeeping: ``owner`` (the pid whose handlers are installed: a forked
    child runs its parent's until it sets its own), ``forking`` (inside ``forking``),
    ``pending`` (a signal a handler recorded instead of raising it)."""
    owner = os.getpid()
    forking = False
    pending = None


def _deferred(signum) -> bool:
    """True when the handler must only record ``signum`` (``_State``): inside ``forking``,
    or in a forked child that has not set its own handlers yet."""
    if _State.forking or os.getpid() != _State.owner:
        _State.pending = _State.pending or signum
        return True
    return False


WEAKREF_CALLBACKS = {("<frozen importlib._bootstrap>", "cb")}
"""``(file, function)`` of the weak-reference callbacks a signal may interrupt (the import system's,
run when a module's lock is let go: ``_get_module_lock``'s ``cb``): an exception raised in one is
printed ("Exception ignored in: <function _get_module_lock.<locals>.cb>") and dropped, as in a
``__del__``; seen once in CI's SIGTERM sweep over the epilogue, which then ran to its end."""


def _in_finalizer(frame) -> bool:
    """True when ``frame`` (the one a signal handler interrupted) runs inside a ``__del__`` or a
    weak-reference callback (``WEAKREF_CALLBACKS``): an exception raised there is printed ("Exception
    ignored in: <function ObjectRef.__del__>", llvmlite's while numba compiles) and dropped, so the
    signal would be lost; or inside llvmlite's bindings: an exception raised while one of its objects
    is being made leaves it half made, and its finalizer then fails the same way ("'ValueRef' object
    has no attribute '_as_parameter_'")."""
    while frame is not None:
        code = frame.f_code
        if (code.co_name == "__del__" or f"{os.sep}llvmlite{os.sep}" in code.co_filename
                or (code.co_filename, code.co_name) in WEAKREF_CALLBACKS):
            return True
        frame = frame.f_back
    return False


def resend_later(signum, frame) -> bool:
    """True when a handler must not raise now: the interrupted code is a finalizer or llvmlite's
    (see ``_in_finalizer``); the signal is sent again in 20 ms, when that code has most likely returned."""
    if not _in_finalizer(frame):
        return False
    t = threading.Timer(0.02, os.kill, (os.getpid(), signum))
    t.daemon = True
    t.start()
    return True


def _after_fork_in_child():
    _State.pending = None          # the parent's, not this child's


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _raise_terminated(signum, frame):
    if _deferred(signum) or resend_later(signum, frame):
        return
    signal.signal(signal.SIGTERM, signal.SIG_IGN)        # a second SIGTERM must not cut the clean-up
    raise Terminated()


def _interrupted(signum, frame):
    """SIGINT in the command's process: ``KeyboardInterrupt``, as Python's own handler, unless deferred."""
    if _deferred(signum) or resend_later(signum, frame):
        return
    raise KeyboardInterrupt()


def exit_on_sigterm() -> None:
    """In the main thread of the command's process: make SIGTERM raise ``Terminated`` (and
    Ctrl-C ``KeyboardInterrupt``, as Python's own handler does, unless SIGINT is ignored), both
    held back while the process forks (``forking``)."""
    if threading.current_thread() is threading.main_thread():
        _State.owner = os.getpid()
        signal.signal(signal.SIGTERM, _raise_terminated)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _interrupted)


@contextmanager
def forking():
    """Around code that forks: SIGINT and SIGTERM blocked in this thread (a handler that runs all
    the same only records the signal), then raised here once the block ends (see the module
    docstring).  Nests; a no-op for the mask where ``pthread_sigmask`` is missing."""
    outer = _State.forking
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if hasattr(signal, "pthread_sigmask") else None
    _State.forking = True
    try:
        yield
    finally:
        _State.forking = outer
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)     # a pending signal's handler runs here
        if not outer and _State.pending is not None:
            signum, _State.pending = _State.pending, None
            handler = signal.getsignal(signum)
            if callable(handler):
                handler(signum, None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)


def child_ready():
    """In a forked child, once its own handlers are set: unblock SIGINT and SIGTERM (blocked by
    the parent's ``forking``) and return the signal that came before (None when none), which
    the caller acts on; a pending one arriving now goes to the new handlers."""
    _State.owner = os.getpid()
    _State.forking = False
    early, _State.pending = _State.pending, None
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    return early


def _ignore(signum, frame):
    """A Python-level "ignore": ``SIG_IGN`` set while the other signal is already pending makes
    Python print "Signal 15 ignored due to race condition" on stderr."""


def _raise_once(signum, frame):
    if _deferred(signum) or resend_later(signum, frame):
        return
    signal.signal(signal.SIGINT, _ignore)      # the clean-up the first one starts runs to its end
    signal.signal(signal.SIGTERM, _ignore)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def stop_once() -> None:
    """In a stage's child process (``call_in_child``): the first
    SIGINT or SIGTERM raises ``KeyboardInterrupt`` / ``Terminated``, the next ones are
    ignored.  Ctrl-C reaches the whole process group and the parent then asks the child to stop
    (SIGTERM): the child's clean-up (staging folders, workers) must not be cut by that second
    signal.  A signal that came while the child was being forked is raised here
    (``child_ready``)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _raise_once)
        signal.signal(signal.SIGTERM, _raise_once)
        early = child_ready()
        if early is not None:
            _raise_once(early, None)


def die_with_parent(parent_pid: int | None = None) -> None:
    """Ask the kernel to SIGKILL this process when the thread that forked it exits (Linux
    ``PR_SET_PDEATHSIG``; nothing elsewhere), and exit at once if ``parent_pid`` is already
    gone (it died before the request took effect)."""
    global _PRCTL
    if not sys.platform.startswith("linux"):
        return
    if _PRCTL is None:
        try:
            _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            _PRCTL = False
    if _PRCTL:
        _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def worker_signals() -> None:
    """In a pool worker: SIGTERM ends it at once (the default action, not an exception a
    task could catch), SIGINT is ignored (the command's process handles Ctrl-C and stops
    its workers); a SIGTERM that came while it was being forked ends it now."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if child_ready() == signal.SIGTERM:
        os.kill(os.getpid(), signal.SIGTERM)
