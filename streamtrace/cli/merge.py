"""``streamtrace merge``: many rank traces -> one Perfetto-loadable trace."""
from __future__ import annotations

import os
import sys

import argh

from ..trace.discover import parse_ranks
from .common import default_output, parse_steps, parse_window, print_validation


@argh.arg("inputs", help="trace files, folders (searched recursively) or globs")
@argh.arg("-i", "--input-dir", dest="input_dir", action="append", help="input folder (also --input_dir, as in Megatron's script)")
@argh.arg("-o", "--output-file", dest="output_file",
          help="output .json or .json.gz (default: <input folder>_merged.json.gz beside the folder)")
@argh.arg("--ranks", help="keep only these ranks, e.g. 0-7,12")
@argh.arg("--drop-cat", help="drop events of these categories, e.g. python_function,cpu_instant_event")
@argh.arg("--steps", help="keep only this ProfilerStep window, e.g. 12-13")
@argh.arg("--gpu-only", help="keep only GPU processes (kernels, memcpy, memset, GPU annotations)")
@argh.arg("--window", help="keep START_MS:END_MS from the start of the merged timeline")
@argh.arg("--align", choices=["global", "first-step"], help="one clock via baseTimeNanoseconds, or align each rank's first ProfilerStep")
@argh.arg("--iteration", type=int, help="merge only this iteration (default: each iteration folder into its own output)")
@argh.arg("--rank-map", help="JSON {file: rank} or '<file> <rank>' lines, for files that carry no rank")
@argh.arg("-j", "--jobs", type=int, help="worker processes (default: all cores)")
@argh.arg("--salvage", help="on a truncated file keep every complete event before the cut")
@argh.arg("--no-validate", help="skip validating the output")
@argh.arg("--scheduler", help="dask.distributed scheduler address, e.g. tcp://host:8786 (or $STREAMTRACE_SCHEDULER)")
def merge(*inputs, input_dir=None, output_file=None, ranks=None, drop_cat=None, steps=None,
          gpu_only=False, window=None, align="global", iteration=None, rank_map=None, jobs=0,
          salvage=False, no_validate=False, scheduler=None):
    """Merge per-rank traces into one Perfetto-loadable trace."""
    from ..merge import MergeOptions, merge as do_merge      # (the CLI's convention: see streamtrace.cli)
    inputs = list(inputs) + list(input_dir or [])
    if not inputs:
        raise argh.CommandError("give at least one INPUT (or -i DIR)")
    out = output_file or default_output(inputs)
    if output_file and os.path.dirname(output_file) == "" and len(inputs) == 1 and os.path.isdir(inputs[0]):
        # as Megatron's script: a bare file name goes beside the input folder
        out = os.path.join(os.path.dirname(os.path.abspath(inputs[0]).rstrip("/")), output_file)
    opt = MergeOptions(ranks=parse_ranks(ranks) if ranks else None,
                       drop_cat=frozenset(c.strip() for c in drop_cat.split(",") if c.strip()) if drop_cat else frozenset(),
                       steps=parse_steps(steps) if steps else None, gpu_only=gpu_only,
                       window_ms=parse_window(window) if window else None, align=align,
                       iteration=iteration, jobs=jobs, salvage=salvage, scheduler=scheduler)
    results = do_merge(inputs, out, opt, rank_map=rank_map)
    for res in results:
        for w in res["warnings"]:
            print(f"warning: {w}", file=sys.stderr)
        mb_in, mb_out = res["bytes_in"] / 1e6, res["bytes_out"] / 1e6
        it = f" iteration {res['iteration']}," if res["iteration"] is not None else ""
        print(f"merged {len(res['ranks'])} ranks,{it} {res['events_in']:,} events in, {res['events_out']:,} out, "
              f"{mb_in:,.1f} MB read, {mb_out:,.1f} MB written in {res['seconds']:.2f} s "
              f"({mb_in / max(res['seconds'], 1e-9):,.0f} MB/s, {res['jobs']} jobs; per worker process "
              f"{', '.join(f'{x:,.0f}' for x in res['worker_mb_per_s']) or '-'} MB/s) -> {res['output']}")
        if not no_validate:
            print_validation(res["output"], quiet=True)
    print("open it at https://ui.perfetto.dev (Open trace file)")
