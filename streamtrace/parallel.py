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
``retries`` times and then returned as a :class:`TaskFailure`; without it the first
failure cancels the rest and is raised.

Every task sent to an executor first runs :func:`tune_malloc` once in its worker
process (see there: dask's nanny otherwise makes glibc ``mmap`` every array).
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import sys
from dataclasses import dataclass

PROGRESS = None  # set in each worker: the shared progress array

# glibc mallopt(): M_MMAP_THRESHOLD, and the ceiling glibc's own adaptive threshold
# reaches on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
# environment variables that make glibc freeze its mmap threshold at 128 KiB
_FREEZING_ENV = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
_MALLOC_TUNED = None


@dataclass
class TaskFailure:
    """A task that failed after its retries: ``args`` (the task's arguments),
    ``error`` (one line), ``attempts``."""
    args: tuple
    error: str
    attempts: int


def tune_malloc() -> bool:
    """Let glibc reuse freed arrays again in a worker started by dask's nanny; once
    per process, a no-op elsewhere.  Returns True when it changed the setting.

    The nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536`` (config
    ``distributed.nanny.pre-spawn-environ``).  Setting any of those variables also
    switches off glibc's adaptive mmap threshold, so every allocation above 128 KiB --
    each numpy array a task builds -- is a fresh ``mmap`` whose pages the kernel faults
    in and zeroes, then ``munmap``.  Measured on 126 MB ranks: 3-4x the page faults,
    0.8 s instead of 0.3 s system CPU per rank, +25-40 % CPU per task.  This restores
    the threshold glibc's adaptive rule would reach, :data:`MMAP_THRESHOLD` (32 MiB);
    the trim threshold (memory handed back to the OS) is left as configured.  Costs
    about 30 MB more peak RSS per worker (126 MB ranks: 336 MB instead of ~300 MB).  An
    explicit ``MALLOC_MMAP_THRESHOLD_`` is respected."""
    global _MALLOC_TUNED
    if _MALLOC_TUNED is not None:
        return False
    _MALLOC_TUNED = False
    env = os.environ
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in env \
            or not any(k in env for k in _FREEZING_ENV):
        return False
    try:
        import ctypes
        _MALLOC_TUNED = bool(ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):    # not glibc
        pass
    return _MALLOC_TUNED


class InWorker:
    """``fn`` as sent to an executor: calls :func:`tune_malloc`, then ``fn(*args)``.
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


def pool(jobs, arr=None):
    ctx = mp.get_context("fork") if sys.platform.startswith("linux") else mp.get_context()
    return cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx,
                                  initializer=init_worker, initargs=(arr,))


def scheduler_address(scheduler=None):
    """The dask scheduler to use: the argument, else ``$STREAMTRACE_SCHEDULER``, else None."""
    return scheduler or os.environ.get("STREAMTRACE_SCHEDULER") or None


def dask_executor(address):
    """``(executor, client)`` for a dask.distributed scheduler address.  Raises
    :class:`~streamtrace.errors.StreamtraceError` when dask is missing or unreachable."""
    from .errors import StreamtraceError
    try:
        from distributed import Client
    except ImportError:
        raise StreamtraceError("--scheduler needs dask.distributed: pip install 'streamtrace[dask]'") from None
    try:
        client = Client(address, timeout=30)
    except (OSError, TimeoutError) as e:
        raise StreamtraceError(f"cannot reach the dask scheduler at {address}: {e}") from None
    return client.get_executor(pure=False), client


def _error_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}" if not hasattr(e, "path") else (msg[0] if msg else "")


def run_tasks(fn, args_list, jobs=1, arr=None, on_tick=None, executor=None, scheduler=None,
              retries=0, keep_going=False):
    """Run ``fn(*args)`` for each args tuple and return the results in input order.

    ``jobs`` > 1 uses a local process pool; ``executor`` (any
    ``concurrent.futures.Executor``) or ``scheduler`` (a dask address) take
    precedence.  ``arr``: shared progress array handed to local workers;
    ``on_tick()`` is called about every 0.2 s.  A failed task is retried
    ``retries`` times; then, with ``keep_going``, returned as :class:`TaskFailure`
    (the others finish), else its exception is raised and the rest cancelled."""
    address = scheduler_address(scheduler)
    client = None
    if executor is None and address:
        executor, client = dask_executor(address)
    try:
        if executor is None and (jobs <= 1 or len(args_list) <= 1):
            return _run_inline(fn, args_list, arr, on_tick, retries, keep_going)
        if executor is not None:
            return _run_on(executor, fn, args_list, on_tick, retries, keep_going)
        with pool(jobs, arr) as ex:
            return _run_on(ex, fn, args_list, on_tick, retries, keep_going)
    finally:
        if client is not None:
            client.close()


def _run_inline(fn, args_list, arr, on_tick, retries, keep_going):
    out = []
    try:
        for a in args_list:
            if arr is not None:
                init_worker(arr)
            for attempt in range(1, retries + 2):
                try:
                    out.append(fn(*a))
                    break
                except Exception as e:   # noqa: BLE001 - retried, then reported or raised
                    if attempt <= retries:
                        continue
                    if not keep_going:
                        raise
                    out.append(TaskFailure(a, _error_line(e), attempt))
            if on_tick:
                on_tick()
    finally:
        init_worker(None)
    return out


def _run_on(ex, fn, args_list, on_tick, retries, keep_going):
    fn = InWorker(fn)
    futs = {ex.submit(fn, *a): (i, 1) for i, a in enumerate(args_list)}
    results = [None] * len(args_list)
    try:
        pending = set(futs)
        while pending:
            done, pending = cf.wait(pending, timeout=0.2, return_when=cf.FIRST_COMPLETED)
            for f in done:
                i, attempt = futs.pop(f)
                e = f.exception()
                if e is None:
                    results[i] = f.result()
                elif attempt <= retries:
                    nf = ex.submit(fn, *args_list[i])
                    futs[nf] = (i, attempt + 1)
                    pending.add(nf)
                elif not keep_going:
                    raise e
                else:
                    results[i] = TaskFailure(args_list[i], _error_line(e), attempt)
            if on_tick:
                on_tick()
    except BaseException:
        for f in futs:
            f.cancel()
        raise
    return results

