"""The batch layer: run one function over many tasks in worker processes.

A local process pool (fork on Linux) by default; results come back in input
order; the first failure cancels the rest and is raised.  Workers can report
progress through a shared int64 array (one slot per task).
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import sys

PROGRESS = None  # set in each worker: the shared progress array


def init_worker(arr):
    global PROGRESS
    PROGRESS = arr


def pool(jobs, arr=None):
    ctx = mp.get_context("fork") if sys.platform.startswith("linux") else mp.get_context()
    return cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx,
                                  initializer=init_worker, initargs=(arr,))


def run_tasks(fn, args_list, jobs, arr=None, on_tick=None):
    """Run ``fn(*args)`` for each args tuple, in a process pool when jobs > 1;
    results in input order.  The first failure cancels the rest and is raised."""
    if jobs <= 1 or len(args_list) <= 1:
        out = []
        for i, a in enumerate(args_list):
            if arr is not None:
                init_worker(arr)
            out.append(fn(*a))
            if on_tick:
                on_tick()
        init_worker(None)
        return out
    with pool(jobs, arr) as ex:
        futs = [ex.submit(fn, *a) for a in args_list]
        try:
            pending = set(futs)
            while pending:
                done, pending = cf.wait(pending, timeout=0.2, return_when=cf.FIRST_EXCEPTION)
                for f in done:
                    f.result()
                if on_tick:
                    on_tick()
        except BaseException:
            for f in futs:
                f.cancel()
            raise
        return [f.result() for f in futs]
