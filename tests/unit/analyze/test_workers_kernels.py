"""analyze -j 2 loads its per-file tasks' kernels (``runtime.compile.TASKS["analyze"]``) in the parent
before forking the workers: each worker then loads no kernel of its own (numba's set-up and each
kernel's linking once, shared copy-on-write, instead of once per worker)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from streamtrace.synth.job import SynthSpec, generate_job

from support import ROOT

_WORKERS_LOAD = textwrap.dedent("""
    import importlib, json, os, sys
    from numba.core.registry import CPUDispatcher
    from streamtrace.analyze import AnalyzeOptions, analyze
    run = importlib.import_module("streamtrace.analyze.run")

    def loaded():
        return {(m.__name__, k, sig) for m in list(sys.modules.values())
                if getattr(m, "__name__", "").startswith("streamtrace.kernels")
                for k, v in list(vars(m).items()) if isinstance(v, CPUDispatcher) for sig in v.overloads}

    task = run._run_task

    def spy(t):
        before = loaded()
        out = task(t)
        with open(os.path.join(sys.argv[2], f"{os.getpid()}-{t.slot}.json"), "w") as f:
            json.dump([f"{m}.{k}" for m, k, _ in loaded() - before], f)
        return out
    run._run_task = spy
    analyze([sys.argv[1]], os.path.join(sys.argv[2], "out"), AnalyzeOptions(jobs=2))
    print(os.getpid())
""")


def test_workers_share_the_parents_kernels(tmp_path):
    generate_job(tmp_path / "traces", SynthSpec(world_size=4, tp=2, pp=1, layers=1, microbatches=1))
    spy = tmp_path / "spy"
    spy.mkdir()
    p = subprocess.run([sys.executable, "-c", _WORKERS_LOAD, str(tmp_path / "traces"), str(spy)],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    parent = p.stdout.split()[-1]
    reports = sorted(spy.glob("*.json"))
    assert len(reports) == 4 and not any(r.name.startswith(parent + "-") for r in reports)   # in the workers
    assert {k for r in reports for k in json.loads(r.read_text())} == set()

