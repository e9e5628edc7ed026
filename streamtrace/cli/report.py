"""``streamtrace report``: Markdown, report.json and charts of an aggregated job."""
from __future__ import annotations

from ..runtime.console import printable
from .aggregate import kernel_delay_ns, steps_text
from .common import (check_efficiency_flags, Console, need, option, parse_formats, parse_jobs, parse_list,
                     prepare_kernels, report_args)

EXAMPLES = """
  streamtrace report job42-agg --tokens-per-step 1048576
  streamtrace report job42-agg --torchtitan-config llama3_8b.toml --nic-gbps 50
  streamtrace report an15 an16 -o job42-report --clock-sync collectives --name job42 --chart-ranks 0-3,12
  streamtrace report job42-agg --global-batch 512 --seq-len 2048 --no-charts -q
"""


@option("dirs", nargs="*",
        help="an aggregate folder (streamtrace aggregate -o), or analysed folders to aggregate first")
@option("-o", "--outdir", help="output folder, relative to the current folder (default: the aggregate folder; "
        "streamtrace-report for analysed folders)")
@option("--name", help="the run's name and the Markdown file's (default: the folder of the job's traces)")
@report_args
@option("--iterations", help="(analysed folders) only these iterations, e.g. 15-16")
@option("--steps",
        help="(analysed folders) only these step numbers (ProfilerStep#N's, or a custom step range's), e.g. 14")
@option("-j", "--jobs", type=int, help="worker processes drawing charts (and aggregating analysed folders); "
        "default: 0 = all cores")
@option("--time-alignment", choices=["global", "individual"],
        help="(analysed folders) time alignment (default: global)")
@option("--clock-sync", choices=["none", "collectives"],
        help="(analysed folders) clock offsets from collectives (default: none)")
@option("--topology", help="(analysed folders) topology file or trace folder")
@option("--consecutive-kernel-delay-us", type=float,
        help="(analysed folders) idle breakdown: kernel-wait threshold in us (default 30, HTA's)")
@option("--force", action="store_true", help="(analysed folders) aggregate folders that look like different jobs")
@option("-q", "--quiet", action="store_true", help="print only the report's path, warnings and errors")
@option("-v", "--verbose", action="store_true", help="print more (and tracebacks of errors)")
def report(*dirs, outdir=None, name=None, tokens_per_step=None, global_batch=None, seq_len=None,
           torchtitan_config=None, peak_tflops=None, flops_per_token=None, nic_gbps=None, gpus_per_node=8,
           no_charts=False,
           chart_format="png", chart_ranks=None, iterations=None, steps=None, jobs=0, time_alignment="global", clock_sync="none",
           topology=None, consecutive_kernel_delay_us=30.0, force=False, quiet=False, verbose=False):
    """Markdown + report.json + charts of where the job's time went (from streamtrace aggregate output)."""
    from ..runtime.errors import UsageError
    from ..aggregate import AggregateOptions            # (the CLI's convention: see streamtrace.cli)
    from ..report import ReportOptions, report as write
    from ..report.run import EfficiencyOptions
    from ..report.run import aggregates
    con = Console(quiet, verbose)
    need(dirs, "an aggregate folder or analysed folders")
    if (global_batch is None) != (seq_len is None):
        raise UsageError("give both --global-batch and --seq-len (or --tokens-per-step)")
    check_efficiency_flags(peak_tflops, flops_per_token, nic_gbps, gpus_per_node)
    if aggregates(dirs):                          # an aggregate folder needs no kernel
        prepare_kernels("report", con, parse_jobs(jobs))
    opt = ReportOptions(name, tokens_per_step, global_batch, seq_len, charts=not no_charts,
                        chart_ranks=parse_list(chart_ranks, "--chart-ranks") if chart_ranks else None,
                        progress=con.progress, chart_formats=parse_formats(chart_format), jobs=parse_jobs(jobs),
                        efficiency=EfficiencyOptions(torchtitan_config, peak_tflops, flops_per_token, nic_gbps,
                                                     gpus_per_node))
    rep = write(list(dirs), outdir, opt, AggregateOptions(
        iterations=parse_list(iterations, "--iterations") if iterations else None,
        steps=parse_list(steps, "--steps") if steps else None, jobs=parse_jobs(jobs),
        time_alignment=time_alignment, clock_sync=clock_sync, topology=topology, force=force, progress=con.progress,
        torchtitan_config=torchtitan_config,
        consecutive_kernel_delay_ns=kernel_delay_ns(consecutive_kernel_delay_us)))
    m = rep["aggregated"]
    if m is not None:
        for w in m["warnings"]:
            con.warn(w)
        con.info(f"aggregated {len(m['ranks'])} ranks, {steps_text(m)} -> {outdir or 'streamtrace-report'}/")
    tp = rep.get("throughput")
    if tp and tp["tokens_per_s"]:
        mfu = rep["efficiency"]["overall"]["mfu_pct"]
        con.info(f"throughput: {tp['tokens_per_s']:,.0f} tokens/s over {tp['steps']} profiled step(s)"
                 + (f", MFU {mfu:.1f} %" if mfu is not None else ""))
    for section, why in rep.get("missing", {}).items():
        con.detail(f"  {section}: {why}")
    print(printable(f"report: {rep['files'][0]}, {rep['files'][1]}"
                    + (f", {len(rep['files']) - 2} chart files" if len(rep["files"]) > 2 else "")))


report.EXAMPLES = EXAMPLES
