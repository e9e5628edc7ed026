"""``streamtrace whatif``: what a fix buys, the steps of an aggregate replayed with changes."""
from __future__ import annotations

from ..aggregate.folder import WHATIF, table_file
from .common import Console, option, parse_jobs

EXAMPLES = """
  streamtrace whatif job42-agg --change host_gaps:rank=0                     # rank 0's host gaps removed
  streamtrace whatif job42-agg --change ops:name=data_loading,rank=0          # a region of rank 0 removed
  streamtrace whatif job42-agg --change median:rank=6 --change launches       # two changes together
  streamtrace whatif job42-agg --change kernels:name=gemm,factor=0.5 -o faster-gemm.parquet
  streamtrace whatif job42-agg --change comm:dim=DP,share=0.8                 # DP collectives at 80 % of the link
"""


@option("aggdir", help="an aggregate folder (streamtrace aggregate -o, or an epilogue's aggregate/)")
@option("--change", action="append", help="a change, KIND[:key=value,...] (repeat to combine): host_gaps, "
        "ops, median, kernels, comm, launches (docs/whatif.md)")
@option("-o", "--output", help=f"also write the rows ({table_file(WHATIF)}'s columns) to this Parquet file")
@option("-j", "--jobs", type=int, help="worker processes re-reducing touched ranks (default: 0 = all cores)")
@option("-q", "--quiet", action="store_true", help="print only the result, warnings and errors")
@option("-v", "--verbose", action="store_true", help="print more (and tracebacks of errors)")
def whatif(aggdir, *, change=None, output=None, jobs=0, quiet=False, verbose=False):
    """Replay each step of an aggregate with changes: the predicted step, the saving, what bounds it then."""
    from pathlib import Path

    import pyarrow.parquet as pq

    from ..aggregate.folder import Aggregate
    from ..aggregate.whatif import replay_steps      # (the CLI's convention: see streamtrace.cli)
    from ..runtime.errors import OutputError
    from ..runtime.files import atomic_output, check_output_file
    from ..report.units import fmt_time
    con = Console(quiet, verbose)
    if output:                                       # (before the replay: a bad path said at once)
        out = check_output_file(Path(output))
        if out.parent.resolve() == Path(aggdir).resolve() and Aggregate.owns(out.name):
            raise OutputError(out, f"is one of the aggregate folder's own files ({aggdir}); give another file")
    t = replay_steps(aggdir, list(change or []), parse_jobs(jobs))
    rows = t.to_pylist()
    if rows:
        print(rows[0]["description"])
    for r in rows:
        step = "whole capture" if r["step"] < 0 else f"step {r['step']}"
        print(f"  {step}: {fmt_time(r['measured_span_ns'])} -> {fmt_time(r['predicted_span_ns'])} "
              f"({-r['saving_pct']:+.1f} %); then rank {r['bound_rank']}'s {r['bound_what']} bounds it"
              + (f" [{r['flag']}]" if r["flag"] else ""))
        con.detail(f"    median rank's step {fmt_time(r['measured_step_ns'])} -> {fmt_time(r['predicted_step_ns'])};"
                   f" heaviest segment on the new path: rank {r['top_rank']} {r['top_category']} "
                   f"{str(r['top_name'])[:80]} ({fmt_time(r['top_ns'])}); unmodified replay within "
                   f"{r['fidelity_pct']:.2f} % of every rank's step")
    if output:
        with atomic_output(Path(output), compress=False) as f:
            pq.write_table(t, f, compression="zstd")
        con.info(f"whatif: {output}")


whatif.EXAMPLES = EXAMPLES
