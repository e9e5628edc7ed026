"""analyze -j 2 loads its per-file tasks' kernels (``runtime.compile.TASKS["analyze"]``) in the parent
before forking the workers: each worker then loads no kernel of its own (numba's set-up and each
kernel's linking once, shared copy-on-write, instead of once per worker)."""
from __future__ import annotations

from streamtrace.synth.job import SynthSpec, generate_job

from support import workers_loaded_kernels


def test_workers_share_the_parents_kernels(tmp_path):
    generate_job(tmp_path / "traces", SynthSpec(world_size=4, tp=2, pp=1, layers=1, microbatches=1))
    spy = tmp_path / "spy"
    spy.mkdir()
    parent, reports = workers_loaded_kernels(
        "streamtrace.analyze.run", "_run_task", "args[0].slot",
        "from streamtrace.analyze import AnalyzeOptions, analyze\n"
        "analyze([sys.argv[1]], os.path.join(sys.argv[2], 'out'), AnalyzeOptions(jobs=2))",
        tmp_path / "traces", spy)
    assert len(reports) == 4 and not any(name.startswith(parent + "-") for name, _ in reports)   # in the workers
    assert [k for _, loaded in reports for k in loaded] == []
