"""``streamtrace merge``: many rank traces -> one Perfetto-loadable trace."""
from __future__ import annotations

import argparse
import os

from .common import Console, Exit, need, option, parse_jobs, parse_list, parse_steps, parse_window, prepare_kernels

EXAMPLES = """
  streamtrace merge runs/job42/profile_traces/iteration_10 -o job42_iter10.json.gz
  streamtrace merge 'runs/job42/torch_profile/rank-*.json.gz' -o merged.json --gpu-only --ranks 0-7
  streamtrace merge runs/job42/tb --iterations 11 --steps 10-10 -o step10.json.gz
"""


#: Megatron's merge script spells its options with underscores; spelled so, a bare output file name goes beside
#: the input folder, as in that script (rewritten by streamtrace.cli.main before parsing)
ALIASES = {"--input_dir": "--legacy-input-dir", "--output_file": "--legacy-output-file"}


def default_output(inputs, legacy=False) -> str:
    """merge's default output: ``<folder>_merged.json.gz`` for a single input folder, else
    ``merged.json.gz``, in the current folder (``legacy``, Megatron's spelling: beside the folder)."""
    if len(inputs) == 1 and os.path.isdir(inputs[0]):
        d = os.path.abspath(inputs[0]).rstrip("/")
        name = os.path.basename(d) + "_merged.json.gz"
        return os.path.join(os.path.dirname(d), name) if legacy else name
    return "merged.json.gz"


@option("inputs", nargs="*", help="trace files, folders (searched recursively) or globs")
@option("--input-dir", "-i", dest="input_dir", action="append", help="an input folder (same as giving it as INPUT)")
@option("-o", "--output-file", dest="output_file",
        help="output .json or .json.gz, relative to the current folder (default: <input folder>_merged.json.gz)")
@option("--ranks", help="keep only these ranks, e.g. 0-7,12")
@option("--drop-cat", help="drop events of these categories, e.g. python_function,cpu_instant_event")
@option("--steps", help="keep only this ProfilerStep window, e.g. 12-13 (ProfilerStep#12 to #13; in an Nsight "
        "export also NVTX ranges 'step N', 'iteration N': docs/nsight.md)")
@option("--gpu-only", action="store_true", help="keep only GPU processes (kernels, memcpy, memset, GPU annotations); "
        "a CPU-only run keeps its CPU processes, with a warning")
@option("--window", help="keep START_MS:END_MS from the start of the merged timeline")
@option("--align", choices=["global", "first-step", "collectives"],
        help="global: one clock via baseTimeNanoseconds (default); first-step: align each rank's first "
             "ProfilerStep; collectives: the global clock corrected by offsets estimated from the ends of "
             "matched collectives")
@option("--iterations", help="merge only these iterations (the trace folder's iteration_N), e.g. 10 or 10-12 "
        "(default: each iteration into its own output)")
@option("--rank-map", help="JSON {file: rank} or '<file> <rank>' lines, for files that carry no rank")
@option("-j", "--jobs", type=int, help="worker processes (default: 0 = all cores)")
@option("--salvage", action="store_true", help="on a truncated file keep every complete event before the cut")
@option("--no-validate", action="store_true",
        help="skip checking the inputs and the output (exit 1 when merge added a problem)")
@option("--scheduler", help="dask.distributed scheduler address, e.g. tcp://host:8786 (or $STREAMTRACE_SCHEDULER)")
@option("--legacy-input-dir", action="append", help=argparse.SUPPRESS)      # --input_dir (see ALIASES)
@option("--legacy-output-file", help=argparse.SUPPRESS)                    # --output_file
@option("--iteration", dest="legacy_iteration", type=int, help=argparse.SUPPRESS)     # 0.1's --iteration N
@option("--critical-path", help="an aggregate folder of the same traces: mark its critical path in the output "
        "(args.critical_path on the path's events, flow arrows of category critical_path)")
@option("-q", "--quiet", action="store_true", help="print only warnings and errors")
@option("-v", "--verbose", action="store_true", help="print more (and tracebacks of errors)")
@option("--step-pattern", help="Nsight exports: regular expression of the NVTX range that marks a step, its first "
        "group the step number (default: ProfilerStep#N, step N, iteration N, ...: docs/nsight.md)")
def merge(*inputs, input_dir=None, output_file=None, ranks=None, drop_cat=None, steps=None,
          gpu_only=False, window=None, align="global", iterations=None, rank_map=None, jobs=0,
          salvage=False, no_validate=False, scheduler=None, legacy_input_dir=None, legacy_output_file=None,
          legacy_iteration=None, critical_path=None, quiet=False, verbose=False, step_pattern=None):
    """Merge per-rank traces into one Perfetto-loadable trace.

    Megatron's merge script's spelling (--input_dir DIR --output_file NAME) is accepted and, as in
    that script, a bare NAME goes beside DIR."""
    from ..merge import MergeOptions, merge as do_merge      # (the CLI's convention: see streamtrace.cli)
    from ..validate.merged import validation_summary
    con = Console(quiet, verbose)
    legacy = bool(legacy_input_dir or legacy_output_file)
    inputs = list(inputs) + list(input_dir or []) + list(legacy_input_dir or [])
    need(inputs, "at least one INPUT (a trace file, a folder of rank traces or a glob)")
    output_file = output_file or legacy_output_file
    out = output_file or default_output(inputs, legacy)
    if legacy and output_file and os.path.dirname(output_file) == "" and len(inputs) == 1 and os.path.isdir(inputs[0]):
        out = os.path.join(os.path.dirname(os.path.abspath(inputs[0]).rstrip("/")), output_file)
    its = parse_list(iterations, "--iterations") if iterations else None
    if legacy_iteration is not None:
        its = [legacy_iteration]
    opt = MergeOptions(ranks=set(parse_list(ranks, "--ranks")) if ranks else None,
                       drop_cat=frozenset(c.strip() for c in (drop_cat or "").split(",") if c.strip()),
                       steps=parse_steps(steps) if steps else None, gpu_only=gpu_only,
                       window_ms=parse_window(window) if window else None, align=align,
                       iterations=its, jobs=parse_jobs(jobs), salvage=salvage, scheduler=scheduler,
                       progress=con.progress, validate=not no_validate, step_pattern=step_pattern)
    prepare_kernels("merge", con, opt.jobs)
    results = do_merge(inputs, out, opt, rank_map=rank_map)
    added = False
    for res in results:
        for n in res.get("notices", []):
            con.notice(n)
        for w in res["warnings"]:
            con.warn(w)
        mb_in, mb_out = res["bytes_in"] / 1e6, res["bytes_out"] / 1e6
        it = f" iteration {res['iteration']}," if res["iteration"] is not None else ""
        con.info(f"merged {len(res['ranks'])} ranks,{it} {res['events_in']:,} events in, {res['events_out']:,} out, "
                 f"{mb_in:,.1f} MB read, {mb_out:,.1f} MB written in {res['seconds']:.2f} s -> {res['output']}")
        if res.get("clock_offsets_ns"):
            con.info("clock offsets applied (us, subtracted): " + ", ".join(
                f"rank {r}: {v / 1e3:+,.1f}" for r, v in sorted(res["clock_offsets_ns"].items())))
        con.detail(f"  {mb_in / max(res['seconds'], 1e-9):,.0f} MB/s, {res['jobs']} jobs; per worker process "
                   f"{', '.join(f'{x:,.0f}' for x in res['worker_mb_per_s']) or '-'} MB/s")
        if res["validation"] is not None:
            ok = res["validation"]["ok"]
            (con.info if ok else print)(validation_summary(res["validation"]))
            added |= not ok
        if critical_path:
            from ..aggregate.critical_marks import mark_critical_path      # (the CLI's convention, as above)
            m = mark_critical_path(res["output"], critical_path, iteration=res["iteration"])
            con.info(f"critical path of {critical_path}: {m['marked']:,} events marked, {m['flows']:,} flow arrows "
                     f"-> {m['output']}")
    con.info("open it at https://ui.perfetto.dev (Open trace file)")
    if added:
        raise Exit(1)


merge.EXAMPLES = EXAMPLES
