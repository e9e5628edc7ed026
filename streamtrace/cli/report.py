"""``streamtrace report``: Markdown, report.json and charts of an aggregated job."""
from __future__ import annotations

import sys

import argh

from ..trace.discover import parse_ranks


@argh.arg("dirs", help="an aggregate folder (streamtrace aggregate -o), or analysed folders to aggregate first")
@argh.arg("-o", "--outdir", help="output folder (default: the aggregate folder; streamtrace-report for analysed folders)")
@argh.arg("--name", help="the run's name (default: from the folder)")
@argh.arg("--tokens-per-step", type=int, help="tokens per training step, for tokens/s")
@argh.arg("--global-batch", type=int, help="global batch size (sequences), with --seq-len, for tokens/s")
@argh.arg("--seq-len", type=int, help="sequence length, with --global-batch")
@argh.arg("--no-charts", help="skip the PNG/SVG charts")
@argh.arg("--chart-ranks", help="ranks that get per-rank charts, e.g. 0-3,12 (default: all up to 8, else a selection)")
@argh.arg("--iterations", nargs="+", type=int, help="(analysed folders) only these iterations")
@argh.arg("-j", "--jobs", type=int, help="(analysed folders) ranks processed in parallel")
@argh.arg("--time-alignment", choices=["global", "individual"], help="(analysed folders) time alignment")
@argh.arg("--clock-sync", choices=["none", "collectives"], help="(analysed folders) clock offsets from collectives")
@argh.arg("--topology", help="(analysed folders) topology file or trace folder")
def report(*dirs, outdir=None, name=None, tokens_per_step=None, global_batch=None, seq_len=None, no_charts=False,
           chart_ranks=None, iterations=None, jobs=1, time_alignment="global", clock_sync="none", topology=None):
    """Markdown + report.json + charts of where the job's time went (from streamtrace aggregate output)."""
    from ..job import AggregateOptions            # (the CLI's convention: see streamtrace.cli)
    from ..report import ReportOptions, report as write
    if not dirs:
        raise argh.CommandError("give an aggregate folder or analysed folders")
    opt = ReportOptions(name, tokens_per_step, global_batch, seq_len, charts=not no_charts,
                        chart_ranks=sorted(parse_ranks(chart_ranks)) if chart_ranks else None)
    rep = write(list(dirs), outdir, opt, AggregateOptions(iterations=iterations, jobs=jobs,
                                                          time_alignment=time_alignment, clock_sync=clock_sync,
                                                          topology=topology))
    m = rep["aggregated"]
    if m is not None:
        for w in m["warnings"]:
            print(f"warning: {w}", file=sys.stderr)
        print(f"aggregated {len(m['ranks'])} ranks -> {outdir or 'streamtrace-report'}/")
    tp = rep.get("throughput")
    if tp and tp["tokens_per_s"]:
        print(f"throughput: {tp['tokens_per_s']:,.0f} tokens/s over {tp['steps']} profiled step(s)")
    print(f"report: {rep['files'][0]}, {rep['files'][1]}"
          + (f", {len(rep['files']) - 2} chart files" if len(rep["files"]) > 2 else ""))
