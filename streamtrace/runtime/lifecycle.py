"""How streamtrace's processes end: in order when told to, and never as orphans.

* :func:`exit_on_sigterm` -- in the command's own process, SIGTERM (a batch scheduler's
  "stop", ``kill``) raises :class:`Terminated`, a ``KeyboardInterrupt``: every ``finally`` and
  context manager runs, so temporaries and staging folders are removed and worker
  processes stopped, as for Ctrl-C;
* :func:`die_with_parent` -- in a worker process (the process pool's, a forked child): the
  kernel kills it when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``), so a
  SIGKILLed command leaves no worker blocked on its queue or writing files; a no-op
  elsewhere;
* :func:`worker_signals` -- in a pool worker: SIGTERM kills it (the default), Ctrl-C is the
  parent's to handle.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1
_PRCTL = None


class Terminated(KeyboardInterrupt):
    """SIGTERM received by the command's process (see :func:`exit_on_sigterm`).  A
    ``KeyboardInterrupt``, so code that carries on after ``Exception`` still stops."""

    signum = signal.SIGTERM


def _raise_terminated(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)        # a second SIGTERM must not cut the clean-up
    raise Terminated()


def exit_on_sigterm() -> None:
    """In the main thread of the command's process: make SIGTERM raise :class:`Terminated`."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)


def _ignore(signum, frame):
    """A Python-level "ignore": ``SIG_IGN`` set while the other signal is already pending makes
    Python print "Signal 15 ignored due to race condition" on stderr."""


def _raise_once(signum, frame):
    signal.signal(signal.SIGINT, _ignore)      # the clean-up the first one starts runs to its end
    signal.signal(signal.SIGTERM, _ignore)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def stop_once() -> None:
    """In a stage's child process (:func:`~streamtrace.runtime.fork.call_in_child`): the first
    SIGINT or SIGTERM raises ``KeyboardInterrupt`` / :class:`Terminated`, the next ones are
    ignored.  Ctrl-C reaches the whole process group and the parent then asks the child to stop
    (SIGTERM): the child's clean-up (staging folders, workers) must not be cut by that second
    signal."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _raise_once)
        signal.signal(signal.SIGTERM, _raise_once)


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
    its workers)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
