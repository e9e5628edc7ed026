#!/usr/bin/env python3
"""Run ``streamtrace epilogue`` (any checkout's) and measure each of its stages: what ``bench_epilogue.py``
runs, once per measured epilogue (not a bench by itself).

    python bench/epilogue_stages.py --checkout DIR --json OUT.json -- epilogue RUN_DIR -o OUTDIR -q

imports ``streamtrace`` from ``DIR`` (a checkout: this one or the baseline's worktree) and runs its command
line in this process as the ``streamtrace`` command does (``streamtrace.cli.command``: pandas kept out by
``runtime.tuning.skip_pandas``, two malloc arenas by ``few_malloc_arenas`` where the checkout has it, then
``streamtrace.cli.main``; the exit is left to this script).  The epilogue
runs discovery and each stage in a forked child (``streamtrace.runtime.fork.call_in_child``, in every version
since the epilogue isolated its stages), the report since 2026-12-05 in a process forked before numba was
set up (``streamtrace.runtime.fork.Standby.call``); both are wrapped here, so that each call is measured:

* ``wall``: seconds of the call;
* ``cpu_s``: user + system CPU seconds of the child and every process it waited for (its pool workers),
  from ``getrusage(RUSAGE_CHILDREN)`` before and after the call (the standby, which lives on: from its
  ``/proc/PID/stat``, its own and its waited-for children's);
* ``largest_rss``: the largest peak RSS (``VmHWM``) of one process of the child's tree, ``tree_rss`` the
  peak of their RSS summed, polled every 50 ms (``harness.TreePoller``).

A call is named after the stage that made it: the ``name`` of the epilogue's ``run_stage`` frame (``_stage``
before the epilogue's split: ``analyze``, ``merge``, ``aggregate``, ``critical path marks``, ``report +
charts``), ``discover`` for the discovery,
``compile`` for the command line's kernel preparation, else the calling function's name.  Found by
walking the caller's frames: no version's epilogue needs to know it is measured.  A reused stage makes
no call and gets no row.  The JSON: ``{"rc": exit code, "stages": [{"stage", "wall", "cpu_s",
"largest_rss", "tree_rss"}]}``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

from harness import TreePoller


def _stage_name(frame) -> str:
    """The stage a ``call_in_child`` call was made for (see the module docstring)."""
    first = frame.f_code.co_name
    while frame is not None:
        code = frame.f_code.co_name
        if code in ("_stage", "run_stage") and "name" in frame.f_locals:    # (f8b8bc9's name, today's)
            return str(frame.f_locals["name"])
        if code in ("_discover", "discover_paths"):
            return "discover"
        if code == "epilogue" and "con" in frame.f_locals:      # the CLI's compile-ahead
            return "compile"
        frame = frame.f_back
    return first


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _process_cpu(pid) -> float:
    """CPU seconds (user + system) of the live process ``pid`` and of the children it waited for."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _measured(rows, name, call, cpu):
    """``call()`` with the process tree under this process polled meanwhile; one row appended to ``rows``
    (``cpu()``: the CPU seconds that count, read before and after)."""
    poll = TreePoller(os.getpid(), skip_root=True)
    poll.start()
    cpu0, t0 = cpu(), time.perf_counter()
    try:
        return call()
    finally:
        wall = time.perf_counter() - t0
        poll.stop.set()
        poll.join()
        rows.append({"stage": name, "wall": round(wall, 3), "cpu_s": round(cpu() - cpu0, 3),
                     "largest_rss": poll.max_hwm, "tree_rss": poll.peak_sum_rss})


def wrap(rows: list):
    """Replace ``call_in_child`` in ``streamtrace.runtime.fork`` and in every loaded epilogue module by a
    measuring wrapper appending one row per call to ``rows``."""
    import importlib
    import pkgutil

    from streamtrace.runtime import fork
    original = fork.call_in_child

    def measured(fn, *args, **kwargs):
        return _measured(rows, _stage_name(sys._getframe(1)), lambda: original(fn, *args, **kwargs), _children_cpu)

    fork.call_in_child = measured
    standby = getattr(fork, "Standby", None)         # the report's process (a standby) since 2026-12-05
    if standby is not None:
        call, me = standby.call, os.getpid()

        def measured_call(self, fn, *args):
            if os.getpid() != me or self.proc is None:     # (aggregate's own standbys, in its stage's process)
                return call(self, fn, *args)
            pid = self.proc.pid
            return _measured(rows, _stage_name(sys._getframe(1)), lambda: call(self, fn, *args),
                             lambda: _process_cpu(pid))
        standby.call = measured_call
    import streamtrace.epilogue as ep
    mods = [ep]
    if hasattr(ep, "__path__"):                       # a package (after f8b8bc9): its modules too
        mods += [importlib.import_module(f"streamtrace.epilogue.{m.name}") for m in pkgutil.iter_modules(ep.__path__)]
    for m in mods:
        if getattr(m, "call_in_child", None) is original:
            m.call_in_child = measured


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkout", required=True, help="the checkout whose streamtrace runs")
    ap.add_argument("--json", required=True, help="where the per-stage measurements go")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the streamtrace command line")
    a = ap.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    checkout = os.path.abspath(a.checkout)
    sys.path.insert(0, checkout)
    os.environ["PYTHONPATH"] = checkout + os.pathsep + os.environ.get("PYTHONPATH", "")
    rows: list = []
    wrap(rows)
    from streamtrace.cli import main as cli_main
    from streamtrace.runtime import tuning
    tuning.skip_pandas()
    getattr(tuning, "few_malloc_arenas", lambda: None)()     # (as the command; a checkout before it has none)
    try:
        rc = cli_main(cmd)
    except SystemExit as e:           # argh's usage errors
        rc = e.code if isinstance(e.code, int) else 2
    with open(a.json, "w") as f:
        json.dump({"rc": rc, "stages": rows}, f, indent=1)
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
