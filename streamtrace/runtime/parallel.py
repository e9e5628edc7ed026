"""The batch layer: run one function over many tasks, on any
``concurrent.futures.Executor``.

* default: a local process pool (fork on Linux) with ``jobs`` workers; workers can
  report progress through a shared int64 array (one slot per task);
* ``scheduler="tcp://host:8786"`` (or the ``STREAMTRACE_SCHEDULER`` environment
  variable): the executor of a ``dask.distributed`` Client (``pip install
  'streamtrace[dask]'``); workers then read inputs from the shared filesystem and
  write their outputs there directly, so only small per-task summaries travel
  back through the scheduler (no progress bars in that mode);
* or any executor the caller passes (``executor=``).

Results come back in input order.  With ``keep_going`` a failed task is retried
``retries`` times and then returned as a ``TaskFailure``; without it the first
failure cancels the rest and is raised.  Errors that would fail again the same way are
not retried: a ``StreamtraceError`` (bad input) and an ``OSError``
(a full disk, a read-only folder); an ``OutputError`` or an
``OSError`` is raised even with ``keep_going`` (no other task can succeed either).

Local workers die with the command's process (``die_with_parent``)
and are stopped at once when it leaves the pool on an exception (Ctrl-C, SIGTERM, an error).

Every task sent to an executor first runs ``tune_malloc`` once in its worker
process (see there: dask's nanny otherwise makes glibc ``mmap`` every array).
"""
from __future__ import annotations

import concurrent.futures as cf
import gc
import multiprocessing as mp
import os
import queue
import sys
import time
from dataclasses import dataclass

from .errors import OutputError, StreamtraceError
from .lifecycle import die_with_parent, forking, worker_signals
from .tuning import trim, tune_malloc

PROGRESS = None  # set in each worker: the shared progress array
TICK_S = 0.2     # on_tick's period, seconds


@dataclass
class TaskFailure:
    """A task that failed after its retries: ``args`` (the task's arguments),
    ``error`` (one line), ``attempts``."""
    args: tuple
    error: str
    attempts: int


class InWorker:
    """``fn`` as sent to an executor: calls ``tune_malloc``, then ``fn(*args)``.
    Keeps ``fn``'s name (dask names its tasks after it)."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "task")

    def __call__(self, *args):
        tune_malloc()
        return self.fn(*args)


def init_worker(arr):
    global PROGRESS
    PROGRESS = arr


def _start_worker(arr, parent):
    """Initializer of a local pool worker: its signals, death with ``parent``, progress array."""
    worker_signals()
    die_with_parent(parent)
    init_worker(arr)


class Pool(cf.ProcessPoolExecutor):
    """A local process pool whose workers die with the command's process, and which, left on
    an exception (Ctrl-C, SIGTERM, a failed task), kills its workers instead of waiting for
    the tasks they are running."""

    def submit(self, *args, **kwargs):
        """``ProcessPoolExecutor.submit``, which forks workers on demand: under
        ``forking`` (no signal lost in a fork)."""
        with forking():
            return super().submit(*args, **kwargs)

    def __exit__(self, et, ev, tb):
        try:
            if et is not None:
                self.stop_workers()
            return super().__exit__(et, ev, tb)
        finally:
            gc.unfreeze()

    def stop_workers(self):
        """Cancel what has not started and kill the worker processes now.  The processes are
        taken before ``shutdown``, which forgets them (``_processes = None``): killed after it,
        none was, and the command's process then joined workers still waiting on their queue
        (issue 33: Ctrl-C hung the epilogue's analyze and aggregate stages)."""
        procs = list((getattr(self, "_processes", None) or {}).values())
        self.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            try:
                p.kill()
            except (OSError, AttributeError, ValueError):
                pass
        for p in procs:
            try:
                p.join(5)
            except (OSError, AssertionError, ValueError):
                pass


def pool(jobs, arr=None) -> Pool:
    """A local ``Pool`` of ``jobs`` workers (forked on Linux); ``arr``: the shared
    progress array the workers see as ``PROGRESS``.

    Before forking, the parent's freed heap is handed back to the system
    (``trim``): pages the parent no longer uses would otherwise
    stay resident in it for the pool's lifetime.  Measured: ``aggregate -j 2`` at 1,024 ranks of
    20,339 GPU events forked from a parent of 438 MB RSS of which ~180 MB was freed heap (the job's
    metadata and the collectives, read and dropped); trimmed first, the tree's peak PSS fell from
    645 to 564 MB."""
    ctx = mp.get_context("fork") if sys.platform.startswith("linux") else mp.get_context()
    gc.freeze()      # the forked workers' collections leave the parent's objects (and their pages) alone
    trim()           # the parent's freed heap is not kept resident (nor shared into the workers)
    return Pool(max_workers=jobs, mp_context=ctx, initializer=_start_worker, initargs=(arr, os.getpid()))


def scheduler_address(scheduler=None):
    """The dask scheduler to use: the argument, else ``$STREAMTRACE_SCHEDULER``, else None."""
    return scheduler or os.environ.get("STREAMTRACE_SCHEDULER") or None


def dask_executor(address):
    """``(executor, client)`` for a dask.distributed scheduler address.  Raises
    ``StreamtraceError`` when dask is missing or unreachable."""
    try:
        from distributed import Client
    except ImportError:
        raise StreamtraceError("--scheduler needs dask.distributed: pip install 'streamtrace[dask]'") from None
    try:
        client = Client(address, timeout=30)
    except (OSError, TimeoutError) as e:
        raise StreamtraceError(f"cannot reach the dask scheduler at {address}: {e}") from None
    return client.get_executor(pure=False), client


def _retryable(e: BaseException) -> bool:
    """False for errors that would come back the same: bad input, a full or read-only disk."""
    return not isinstance(e, (StreamtraceError, OSError))


def _fatal(e: BaseException) -> bool:
    """True for errors no other task can escape (an output that cannot be written)."""
    return isinstance(e, (OutputError, OSError))


def _error_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}" if not hasattr(e, "path") else (msg[0] if msg else "")


def run_tasks(fn, args_list, jobs=1, arr=None, on_tick=None, executor=None, scheduler=None,
              retries=0, keep_going=False, on_done=None, on_result=None, more=None, more_at=0):
    """Run ``fn(*args)`` for each args tuple and return the results in input order.

    ``jobs`` > 1 uses a local process pool; ``executor`` (any
    ``concurrent.futures.Executor``) or ``scheduler`` (a dask address) take
    precedence.  ``arr``: shared progress array handed to local workers;
    ``on_tick()`` is called about every 0.2 s.  A failed task is retried
    ``retries`` times; then, with ``keep_going``, returned as ``TaskFailure``
    (the others finish), else its exception is raised and the rest cancelled.  ``on_done()`` is
    called once per finished task (e.g. a progress bar's ``update``); ``on_result(result)`` on each
    result in this process as it comes back, its return value kept in its place (e.g. to share what
    equal results hold while one result at a time is held twice).  ``more()``: called once in this
    process after the first ``more_at`` tasks are sent (with workers: while they run them), returns
    more args tuples, which are sent next, before the rest; their results come last (work this
    process does meanwhile, whose outcome decides further tasks: the report's Markdown)."""
    address = scheduler_address(scheduler)
    client = None
    if executor is None and address:
        executor, client = dask_executor(address)
    tail = (more, more_at) if more is not None else None
    try:
        if executor is None and (jobs <= 1 or (len(args_list) <= 1 and more is None)):
            out = run_inline(fn, args_list, arr, on_tick, retries, keep_going, on_done, on_result)
            return out if more is None else out + run_inline(fn, list(more()), arr, on_tick, retries, keep_going,
                                                             on_done, on_result)
        if executor is not None:
            return _run_on(executor, fn, args_list, on_tick, retries, keep_going, on_done, on_result, tail)
        with pool(jobs, arr) as ex:
            return _run_on(ex, fn, args_list, on_tick, retries, keep_going, on_done, on_result, tail)
    finally:
        if client is not None:
            client.close()


def run_inline(fn, args_list, arr, on_tick, retries, keep_going, on_done=None, on_result=None):
    """``run_tasks`` in this process, one task after the other (same retries and failures)."""
    out = []
    try:
        for a in args_list:
            if arr is not None:
                init_worker(arr)
            for attempt in range(1, retries + 2):
                try:
                    res = fn(*a)
                    out.append(on_result(res) if on_result else res)
                    break
                except Exception as e:   # noqa: BLE001 - retried, then reported or raised
                    if attempt <= retries and _retryable(e):
                        continue
                    if not keep_going or _fatal(e):
                        raise
                    out.append(TaskFailure(a, _error_line(e), attempt))
                    break
            if on_done:
                on_done()
            if on_tick:
                on_tick()
    finally:
        init_worker(None)
    return out


def _run_on(ex, fn, args_list, on_tick, retries, keep_going, on_done=None, on_result=None, tail=None):
    # Every task is submitted at once; each future puts itself on ``finished`` when it completes, so a
    # completion costs O(1) here.  (``cf.wait(pending, FIRST_COMPLETED)`` installs and removes a waiter
    # on every pending future per call: O(tasks) per completion, 20 CPU-s of a 4,096-rank merge.)
    fn = InWorker(fn)
    finished: queue.SimpleQueue = queue.SimpleQueue()
    futs: dict = {}

    def submit(i, attempt):
        f = ex.submit(fn, *args_list[i])
        futs[f] = (i, attempt)
        f.add_done_callback(finished.put)
    args_list = list(args_list)
    n = len(args_list)
    first = n if tail is None else min(max(tail[1], 0), n)
    ticked = time.monotonic()
    try:
        for i in range(first):
            submit(i, 1)
        if tail is not None:                  # this process' own work while the workers run
            args_list += list(tail[0]())
            for i in range(n, len(args_list)):
                submit(i, 1)
        for i in range(first, n):
            submit(i, 1)
        results = [None] * len(args_list)
        while futs:
            try:
                f = finished.get(timeout=TICK_S)
            except queue.Empty:
                f = None
            if f is not None:
                i, attempt = futs.pop(f)
                e = f.exception()
                if e is None:
                    results[i] = on_result(f.result()) if on_result else f.result()
                    if on_done:
                        on_done()
                elif attempt <= retries and _retryable(e):
                    submit(i, attempt + 1)
                elif not keep_going or _fatal(e):
                    raise e
                else:
                    results[i] = TaskFailure(args_list[i], _error_line(e), attempt)
                    if on_done:
                        on_done()
            if on_tick and (f is None or not futs or time.monotonic() - ticked >= TICK_S):
                on_tick()
                ticked = time.monotonic()
    except BaseException:
        if not isinstance(ex, Pool):   # a Pool cancels its own (Pool.stop_workers): futures cancelled
            for f in futs:             # here as well made its manager thread fail on them (InvalidStateError)
                f.cancel()
        raise
    return results

