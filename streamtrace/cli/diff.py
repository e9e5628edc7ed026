"""``streamtrace diff``: what changed between two runs (kernels, CPU ops, groups, ranks)."""
from __future__ import annotations

from ..runtime.console import printable
from .common import Console, option, parse_jobs, parse_list

EXAMPLES = """
  streamtrace diff runs/job41/streamtrace runs/job42/streamtrace -o diff-41-42      # two epilogue outputs
  streamtrace diff an_before an_after --steps 12-13 --labels before,after           # analysed folders
  streamtrace diff old/iteration_10 new/iteration_10 -o d --ranks 0-7 -j 4          # traces, analysed on the fly
  streamtrace diff jobA jobB --base-ranks 0 --test-ranks 8 --base-steps 4 --test-steps 7 --name-key short
"""


@option("base", help="the run compared against: an analysed folder (streamtrace analyze -o), an aggregate or "
        "epilogue output, or traces / a folder of rank traces (analysed into OUTDIR/analysis-base)")
@option("test", help="the run compared, in the same forms (traces are analysed into OUTDIR/analysis-test)")
@option("-o", "--outdir", help="output folder, relative to the current folder (default: streamtrace-diff)")
@option("--ranks", "--rank", help="ranks compared on both sides, e.g. 0-7,12, or all (every rank of each side, "
        "unpaired); default: the ranks both sides have")
@option("--base-ranks", "--base-rank", help="base ranks, paired in order with --test-ranks, e.g. 0-7")
@option("--test-ranks", "--test-rank", help="test ranks, paired in order with --base-ranks, e.g. 8-15")
@option("--steps", "--step", help="step numbers compared on both sides (the N of ProfilerStep#N, or of a custom step "
        "range), e.g. 12-13 (default: all)")
@option("--base-steps", "--base-step", help="step numbers of the base side")
@option("--test-steps", "--test-step", help="step numbers of the test side")
@option("--labels", help="names of the two sides in diff.md, e.g. before,after (default: base,test)")
@option("--name-key", choices=["full", "short"],
        help="full: names as in the traces (default); short: without template arguments and argument lists")
@option("--top", type=int, help="rows per list in diff.md (default: 10)")
@option("--no-charts", action="store_true", help="skip the chart")
@option("-j", "--jobs", type=int, help="worker processes (default: 0 = all cores)")
@option("-q", "--quiet", action="store_true", help="print only the result's path, warnings and errors")
@option("-v", "--verbose", action="store_true", help="print more (and tracebacks of errors)")
def diff(base, test, *, outdir="streamtrace-diff", ranks=None, base_ranks=None, test_ranks=None, steps=None,
         base_steps=None, test_steps=None, labels="base,test", name_key="full", top=10, no_charts=False, jobs=0,
         quiet=False, verbose=False):
    """Compare two runs: per kernel, CPU op, kernel class/phase/collective/dimension and rank, per rank-step."""
    from ..runtime.errors import UsageError
    from ..report.diff import DiffOptions, diff as do_diff    # (the CLI's convention: see streamtrace.cli)
    con = Console(quiet, verbose)
    lab = tuple(x.strip() for x in str(labels).split(","))
    if len(lab) != 2 or not all(lab):
        raise UsageError(f"bad --labels {labels!r}: two names, e.g. before,after")
    ls = lambda v, opt: parse_list(v, opt) if v is not None else None  # noqa: E731
    opt = DiffOptions(ranks="all" if str(ranks).strip() == "all" else ls(ranks, "--ranks"),
                      base_ranks=ls(base_ranks, "--base-ranks"), test_ranks=ls(test_ranks, "--test-ranks"),
                      steps=ls(steps, "--steps"), base_steps=ls(base_steps, "--base-steps"),
                      test_steps=ls(test_steps, "--test-steps"), name_key=name_key, top=top, labels=lab,
                      charts=not no_charts, jobs=parse_jobs(jobs), progress=con.progress)
    res = do_diff(base, test, outdir, opt)
    m = res.summary
    for w in m.get("warnings", []):
        con.warn(w)
    for n in m["notices"]:
        con.notice(n)
    s = m["summary"]
    ch = m["changes"]["kernels"]
    con.info(f"{m['labels'][0]}: {m['base']['cells']} rank-step(s), {m['labels'][1]}: {m['test']['cells']} "
             f"rank-step(s); kernel time per rank-step {s['kernel_time_ns']['base'] / 1e6:,.3f} -> "
             f"{s['kernel_time_ns']['test'] / 1e6:,.3f} ms ({s['kernel_time_ns']['delta'] / 1e6:+,.3f}); kernels: "
             + ", ".join(f"{ch.get(c, 0)} {c}" for c in ("added", "deleted", "increased", "decreased", "unchanged")))
    k = res.kernels
    if k.num_rows and k["delta_ns"][0].as_py() > 0:
        con.detail(f"largest regression: {k['name'][0].as_py()[:100]} {k['delta_ns'][0].as_py() / 1e6:+,.3f} ms")
    print(printable(f"diff: {res.path / res.MARKDOWN} ({m['seconds']:.2f} s)"))


diff.EXAMPLES = EXAMPLES
