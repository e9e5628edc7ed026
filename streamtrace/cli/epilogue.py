"""``streamtrace epilogue``: everything after a training job, in one call."""
from __future__ import annotations

from pathlib import Path

from ..runtime.console import printable
from ..runtime.errors import StreamtraceError
from .common import (check_efficiency_flags, Console, Exit, option, parse_formats, parse_jobs, parse_list,
                     kernels_pending, prepare_kernels, report_args)

EXAMPLES = """
  streamtrace epilogue /runs/job42/tb
  streamtrace epilogue /runs/job42/tb -o ~/job42-analysis --tokens-per-step 1048576 -j 4 --max-memory 16
  streamtrace epilogue /runs/job42 --torchtitan-config llama3_8b.toml
  streamtrace epilogue /readonly/runs/job42 -o job42 --topology job42_topology.json --chart-ranks 0-3,12 -q
"""


@option("run_dir", metavar="run-dir", help="the training run's output folder (traces, topology)")
@option("-o", "--outdir", help="output folder, relative to the current folder (default: RUN_DIR/streamtrace)")
@option("--full", action="store_true", help="merge every event, not only GPU processes")
@option("--in-memory", action="store_true", help="analyse in memory instead of --chunked")
@option("-j", "--jobs", type=int, help="worker processes (default: 0 = all cores)")
@option("--max-memory", type=float, help="cap in GB: limits parallel workers (~0.6 GB each)")
@option("--strict", action="store_true", help="exit 1 when anything failed (default: always exit 0)")
@option("--name", help="run name for the report (default: the folder of the job's traces, above iteration_N/, "
        "tb/, ...)")
@option("--topology", help="topology file (default: found under RUN_DIR, else the traces' pg_config)")
@report_args
@option("--step-pattern", help="regular expression of the annotation or NVTX range that marks a training step "
        "(default: ProfilerStep#N; an Nsight export without step ranges is one window, the whole capture)")
@option("-q", "--quiet", action="store_true", help="print only the final line, warnings and errors")
@option("-v", "--verbose", action="store_true", help="print more (and tracebacks of failures)")
def epilogue(run_dir, *, outdir=None, full=False, in_memory=False, jobs=0, max_memory=None, strict=False, name=None,
             topology=None, tokens_per_step=None, global_batch=None, seq_len=None, torchtitan_config=None,
             peak_tflops=None, flops_per_token=None, nic_gbps=None, gpus_per_node=8, no_charts=False,
             chart_format="png", chart_ranks=None, step_pattern=None, quiet=False, verbose=False):
    """After a training job: analyse, merge, aggregate, report and chart every iteration."""
    # (the CLI's convention: see streamtrace.cli)
    from ..epilogue import EpilogueOptions, EpilogueRun, check_paths, run
    from ..runtime.fork import Standby, call_in_child
    from ..runtime.tuning import freeze_for_fork
    con = Console(quiet, verbose)
    from ..report.options import EfficiencyOptions, ReportOptions
    eff = EfficiencyOptions(None, peak_tflops, flops_per_token, nic_gbps, gpus_per_node)   # the config: via aggregate
    rep = ReportOptions(name=name, tokens_per_step=tokens_per_step, global_batch=global_batch, seq_len=seq_len,
                        charts=not no_charts, chart_formats=parse_formats(chart_format),
                        chart_ranks=parse_list(chart_ranks, "--chart-ranks") if chart_ranks else None,
                        efficiency=eff)
    opt = EpilogueOptions(gpu_only=not full, chunked=not in_memory, jobs=parse_jobs(jobs), max_memory_gb=max_memory,
                          strict=strict, outdir=outdir, topology=topology, torchtitan_config=torchtitan_config,
                          progress=con.progress, verbose=verbose, report=rep, step_pattern=step_pattern)
    check_efficiency_flags(peak_tflops, flops_per_token, nic_gbps, gpus_per_node)
    opt.check()
    check_paths(run_dir, opt)     # a run folder that is not there, an output folder not the epilogue's: exit 1
    units = ("epilogue", "nsys") if holds_export(run_dir) else ("epilogue",)   # compile only what it will call
    from ..epilogue.stages import report_imports
    with Standby(opt.isolate, report_imports) as report_process:   # forked before numba: the report's process
        # numba imported here once (the check), which discovery's process and the stages' inherit (the stages set
        # it up here once too: epilogue.stages.share_imports); a compile runs in a child, so its code is not kept
        if opt.isolate and kernels_pending(units):
            call_in_child(lambda: prepare_kernels(units, con, opt.jobs))
        elif not opt.isolate:
            prepare_kernels(units, con, opt.jobs)
        if opt.isolate:
            freeze_for_fork()           # discovery's process does not collect numba's objects it inherits
        s = run(run_dir, opt, report_process=report_process)
    if not s["report"] and not s.get("ranks") and not s.get("iterations"):
        # no job to report on: exit 0 is for the job's sake only when there is one (issue 33, class 11)
        raise StreamtraceError(f"{run_dir}: no rank traces found, so no job to report on; "
                               f"see {Path(s['outdir']) / EpilogueRun.marker}")
    if s["report"]:
        print(printable(f"report: {s['report']}"))
    elif not quiet:
        state = Path(s["outdir"]) / EpilogueRun.marker
        con.info(f"no report; see {state}" if state.is_file() else "no report")
    if strict and s["failures"]:
        raise Exit(1)


def holds_export(run_dir) -> bool:
    """Whether ``run_dir`` holds an Nsight Systems SQLite export (a ``*.sqlite`` file at any depth that is
    one, ``streamtrace.trace.nsys.is_sqlite``): only then are the export readers' kernels compiled
    ahead.  Missed or unreadable: they compile on first use, as without the compile-ahead."""
    from ..trace.nsys import is_sqlite
    try:
        return any(is_sqlite(p) for p in Path(run_dir).rglob("*.sqlite"))
    except OSError:
        return False


epilogue.EXAMPLES = EXAMPLES
