"""The ``streamtrace`` command line: a thin layer (argh) over the Python API.

Exit codes: 0 success, 1 user/input error (one line on stderr, no traceback),
2 usage error (argparse).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import argh

from . import __version__
from .errors import StreamtraceError


def _version_text():
    import ijson
    note = "" if ijson.backend == "yajl2_c" else "  (warning: not the C backend yajl2_c; reading is slower)"
    return f"streamtrace {__version__}\nijson backend: {ijson.backend}{note}"


def _parse_window(spec):
    try:
        a, b = spec.split(":", 1)
        lo, hi = float(a), float(b)
    except ValueError:
        raise StreamtraceError(f"bad --window {spec!r}: expected START_MS:END_MS, e.g. 100:250") from None
    if hi < lo:
        raise StreamtraceError(f"bad --window {spec!r}: end before start")
    return lo, hi


def _parse_steps(spec):
    try:
        if "-" in spec:
            a, b = spec.split("-", 1)
            return int(a), int(b)
        return int(spec), int(spec)
    except ValueError:
        raise StreamtraceError(f"bad --steps {spec!r}: expected N or N-M, e.g. 12-13") from None


def _default_output(inputs):
    if len(inputs) == 1 and os.path.isdir(inputs[0]):
        d = os.path.abspath(inputs[0]).rstrip("/")
        return os.path.join(os.path.dirname(d), os.path.basename(d) + "_merged.json.gz")
    return "merged.json.gz"


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
    from .discover import parse_ranks
    from .merge import MergeOptions, merge as do_merge
    inputs = list(inputs) + list(input_dir or [])
    if not inputs:
        raise argh.CommandError("give at least one INPUT (or -i DIR)")
    out = output_file or _default_output(inputs)
    if output_file and os.path.dirname(output_file) == "" and len(inputs) == 1 and os.path.isdir(inputs[0]):
        # as Megatron's script: a bare file name goes beside the input folder
        out = os.path.join(os.path.dirname(os.path.abspath(inputs[0]).rstrip("/")), output_file)
    opt = MergeOptions(ranks=parse_ranks(ranks) if ranks else None,
                       drop_cat=frozenset(c.strip() for c in drop_cat.split(",") if c.strip()) if drop_cat else frozenset(),
                       steps=_parse_steps(steps) if steps else None, gpu_only=gpu_only,
                       window_ms=_parse_window(window) if window else None, align=align,
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
            _report_validation(res["output"], quiet=True)
    print("open it at https://ui.perfetto.dev (Open trace file)")


def _report_validation(path, quiet=False):
    from .validate import validate as do_validate
    rep = do_validate(path)
    bad = {k: v for k, v in rep["problems"].items() if v}
    if bad or not quiet:
        status = "OK" if rep["ok"] else "PROBLEMS"
        print(f"validate {path}: {status}: {rep['events']:,} events, {rep['tracks']:,} tracks, {rep['flows']:,} flows")
        for k, v in rep["problems"].items():
            print(f"  {k}: {v}")
        for k, v in rep["notices"].items():
            print(f"  {k}: {v} (notice)")
    return rep


@argh.arg("inputs", help="trace files, folders of rank traces, globs, or a merged multi-rank trace")
@argh.arg("-o", "--outdir", help="output folder (summary.json, kernels/, ops/)")
@argh.arg("--chunked", help="bounded memory: convert in chunks spilled to disk, then analyse from disk")
@argh.arg("--chunk-events", type=int, help="events held in memory at once: read, sorted and analysed per chunk")
@argh.arg("-j", "--jobs", type=int, help="files analysed in parallel (default: all cores)")
@argh.arg("--patterns", help="TOML file overriding the classification patterns")
@argh.arg("--topology", help="topology file: streamtrace JSON or Megatron-TraceViz unique_parallel_groups_*.txt")
@argh.arg("--rank-map", help="JSON {file: rank} or '<file> <rank>' lines, for files that carry no rank")
@argh.arg("--salvage", help="on a truncated file keep every complete event before the cut")
@argh.arg("--scheduler", help="dask.distributed scheduler address, e.g. tcp://host:8786 (or $STREAMTRACE_SCHEDULER)")
def analyze(*inputs, outdir="streamtrace-analysis", chunked=False, chunk_events=32_768, jobs=0,
            patterns=None, topology=None, rank_map=None, salvage=False, scheduler=None):
    """Classify kernels, build call trees and overlap metrics per rank, as Parquet + JSON."""
    from .analyze import AnalyzeOptions, analyze as do_analyze
    if not inputs:
        raise argh.CommandError("give at least one INPUT")
    opt = AnalyzeOptions(jobs=jobs, chunked=chunked, chunk_events=chunk_events, patterns=patterns,
                         topology=topology, rank_map=rank_map, salvage=salvage, scheduler=scheduler)
    s = do_analyze(inputs, outdir, opt)
    for f in s["failed"]:
        print(f"error: {f['source']}: {f['error']} (after {f['attempts']} attempts)", file=sys.stderr)
    several = len({r["iteration"] for r in s["ranks"]}) > 1
    for r in s["ranks"]:
        for w in r.get("warnings", []):
            print(f"warning: {w}", file=sys.stderr)
        devs = ", ".join(f"GPU {d}: busy {m['busy_us'] / 1e3:,.1f} ms, comm {m['comm_us'] / 1e3:,.1f} ms, "
                         f"overlap {m['overlap_pct'] if m['overlap_pct'] is not None else '-'} %"
                         for d, m in r["devices"].items()) or "no GPU events"
        it = f"iteration {r['iteration']}, " if several else ""
        print(f"{it}rank {r['rank']}: {devs}")
    print(f"analysed {len(s['ranks'])} ranks in {s['seconds']:.2f} s -> {outdir}/summary.json, "
          f"{outdir}/kernels/, {outdir}/ops/ (iteration=N/rank=R/ partitions)")
    if s["failed"]:
        raise _Exit(1)


@argh.arg("trace", help="a trace file (.json or .json.gz)")
@argh.arg("--json", dest="as_json", help="print the report as JSON")
def validate(trace, *, as_json=False):
    """Check a trace for what Perfetto's JSON importer relies on; exit 1 on a problem."""
    if as_json:
        from .validate import validate as do_validate
        rep = do_validate(trace)
        print(json.dumps(rep, indent=1))
    else:
        rep = _report_validation(trace)
    if not rep["ok"]:
        raise _Exit(1)


@argh.arg("folder", help="where to write the demo trace set")
@argh.arg("--world-size", type=int, help="number of ranks")
def demo(folder="streamtrace-demo", *, world_size=8):
    """Write a small realistic 8-rank trace set, merge it, validate it."""
    from .demo import run_demo
    run_demo(folder, world_size=world_size)


@argh.arg("--tp", type=int, help="tensor-parallel size")
@argh.arg("--pp", type=int, help="pipeline-parallel size")
@argh.arg("--cp", type=int, help="context-parallel size")
@argh.arg("--ep", type=int, help="expert-parallel size")
@argh.arg("--etp", type=int, help="expert tensor-parallel size (default: --tp)")
@argh.arg("--order", help="Megatron rank order, first varies fastest (default tp-cp-ep-dp-pp)")
@argh.arg("--world-size", type=int, help="number of ranks (dp = world / (tp*pp*cp))")
@argh.arg("--from", dest="source", help="TraceViz unique_parallel_groups_*.txt, a trace folder (distributedInfo.pg_config) "
          "or a topology JSON")
@argh.arg("--json", dest="as_json", help="print streamtrace's topology JSON")
@argh.arg("--write", help="write the topology to FILE (.txt: TraceViz layout; else JSON)")
def topology(*, tp=None, pp=None, cp=None, ep=None, etp=None, order="tp-cp-ep-dp-pp", world_size=None, source=None,
             as_json=False, write=None):
    """Parallel groups (TP/CP/EP/DP/PP) and model replicas, from sizes + rank order (as Megatron-LM's
    RankGenerator), a TraceViz file, a trace folder's pg_config, or a topology JSON."""
    from .topology import from_sizes, load_topology, write_topology
    if source:
        if any(v is not None for v in (tp, pp, cp, ep, etp, world_size)):
            raise argh.CommandError("give either --from FILE or the sizes (--tp/--pp/... --world-size), not both")
        topo = load_topology(source)
    else:
        if world_size is None:
            raise argh.CommandError("give --world-size N (with --tp/--pp/--cp/--ep), or --from FILE")
        topo = from_sizes(world_size, tp or 1, pp or 1, cp or 1, ep or 1, order, etp)
    if write:
        write_topology(topo, write)
    if as_json:
        print(json.dumps(topo.to_json(), indent=1))
    else:
        print(topo.summary_line())
        for d in ("tp", "cp", "ep", "dp", "pp"):
            if topo.sizes[d] > 1:
                g = topo.groups[d]
                more = f" ... ({len(g)} groups)" if len(g) > 8 else ""
                print(f"  {d.upper()} groups: {' '.join(str(x).replace(' ', '') for x in g[:8])}{more}")
        print(f"  replicas: {' '.join(str(g).replace(' ', '') for g in topo.replicas[:8])}"
              f"{' ...' if len(topo.replicas) > 8 else ''}")
        if write:
            print(f"wrote {write}")


@argh.arg("dirs", help="analysed folders (the -o of streamtrace analyze), e.g. one per iteration")
@argh.arg("-o", "--outdir", help="output folder")
@argh.arg("--iterations", nargs="+", type=int, help="only these iterations (folder iteration_N or ProfilerStep#N)")
@argh.arg("-j", "--jobs", type=int, help="ranks processed in parallel")
@argh.arg("--time-alignment", choices=["global", "individual"],
          help="one time base for all ranks (baseTimeNanoseconds) or each rank from its own start")
@argh.arg("--clock-sync", choices=["none", "collectives"], help="estimate clock offsets from collective ends")
@argh.arg("--topology", help="topology file or trace folder (default: the traces' distributedInfo.pg_config)")
def aggregate(*dirs, outdir="streamtrace-aggregate", iterations=None, jobs=1, time_alignment="global",
              clock_sync="none", topology=None):
    """Whole-job tables: per rank x phase x micro-batch, pipeline bubbles, replicas, iterations, collectives."""
    from .aggregate import AggregateOptions, aggregate as do_aggregate
    if not dirs:
        raise argh.CommandError("give at least one analysed folder")
    m = do_aggregate(dirs, outdir, AggregateOptions(iterations=iterations, jobs=jobs, time_alignment=time_alignment,
                                                    clock_sync=clock_sync, topology=topology))
    for w in m["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    c = m["collectives"]
    print(f"aggregated {len(m['ranks'])} ranks, iteration(s) {', '.join(map(str, m['iterations']))}: "
          f"{c['instances']:,} collective instances ({c['complete']:,} complete) in {m['seconds']:.2f} s -> {outdir}/")
    if m["clock_offsets_ns"]:
        print("estimated clock offsets (us): " + ", ".join(f"rank {r}: {v / 1e3:+,.1f}"
                                                          for r, v in m["clock_offsets_ns"].items()))


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
    from pathlib import Path

    from .discover import parse_ranks
    from .report import write_report
    if not dirs:
        raise argh.CommandError("give an aggregate folder or analysed folders")
    if len(dirs) == 1 and (Path(dirs[0]) / "aggregate.json").is_file():
        aggdir = dirs[0]
    else:
        from .aggregate import AggregateOptions, aggregate as do_aggregate
        aggdir = outdir or "streamtrace-report"
        m = do_aggregate(dirs, aggdir, AggregateOptions(iterations=iterations, jobs=jobs, time_alignment=time_alignment,
                                                        clock_sync=clock_sync, topology=topology))
        for w in m["warnings"]:
            print(f"warning: {w}", file=sys.stderr)
        print(f"aggregated {len(m['ranks'])} ranks -> {aggdir}/")
    rep = write_report(aggdir, outdir, name, tokens_per_step, global_batch, seq_len, charts=not no_charts,
                       chart_ranks=sorted(parse_ranks(chart_ranks)) if chart_ranks else None)
    tp = rep.get("throughput")
    if tp and tp["tokens_per_s"]:
        print(f"throughput: {tp['tokens_per_s']:,.0f} tokens/s over {tp['steps']} profiled step(s)")
    print(f"report: {rep['files'][0]}, {rep['files'][1]}"
          + (f", {len(rep['files']) - 2} chart files" if len(rep["files"]) > 2 else ""))


_ALIASES = {"--input_dir": "--input-dir", "--output_file": "--output-file"}


@argh.arg("run_dir", help="the training run's output folder (traces, topology)")
@argh.arg("--full", help="merge every event, not only GPU processes")
@argh.arg("--in-memory", help="analyse in memory instead of --chunked")
@argh.arg("-j", "--jobs", type=int, help="worker processes (default: all cores)")
@argh.arg("--max-memory", type=float, help="cap in GB: limits parallel workers (~0.6 GB each)")
@argh.arg("--strict", help="exit 1 when anything failed (default: always exit 0)")
@argh.arg("--name", help="run name for the report (default: the folder name)")
def epilogue(run_dir, *, full=False, in_memory=False, jobs=0, max_memory=None, strict=False, name=None):
    """After a training job: analyse, merge, aggregate, report and chart every iteration."""
    from .epilogue import run
    s = run(run_dir, full=full, chunked=not in_memory, jobs=jobs, max_memory_gb=max_memory, strict=strict,
            name=name)
    if s["report"]:
        print(f"report: {s['report']}")
    if strict and s["failures"]:
        raise _Exit(1)


class _Exit(Exception):
    def __init__(self, code):
        self.code = code


def _skip_numba_blas():
    """Keep numba from importing SciPy's BLAS bindings in the ``streamtrace`` command's
    own process.  At the first kernel it loads, numba registers its NumPy
    implementations and probes ``scipy.linalg.cython_blas`` (for ``np.dot`` and
    friends inside jitted code) whenever SciPy is installed; that import costs about
    0.3-0.5 s and 18 MB of RSS per process, and no streamtrace kernel does linear
    algebra.  Marking ``scipy.linalg`` unimportable makes numba record "no BLAS".
    Only the command-line process (and the workers it forks) do this: a program that
    imports streamtrace as a library keeps SciPy as it is."""
    if "scipy.linalg" not in sys.modules:
        sys.modules["scipy.linalg"] = None


def _arrow_system_pool():
    """Make the system allocator Arrow's default memory pool in the ``streamtrace``
    command's process (and the workers it forks), unless ``ARROW_DEFAULT_MEMORY_POOL``
    says otherwise.  The Parquet writer takes its encoders' and pages' buffers (~8 MB per
    row group of ops) from Arrow's process-wide default pool whatever ``memory_pool`` it is
    given, and the wheels' default, mimalloc, keeps the memory it frees mapped: ~12 MB of
    resident memory beside glibc's heap, which would reuse it for the numpy arrays of the
    next step (peak RSS of ``analyze`` on the 1.1 GB benchmark trace: -12 MB).  Arrow reads
    the variable once, when pyarrow is imported; a program that imports streamtrace as a
    library chooses its own pool."""
    if "pyarrow" not in sys.modules:
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


def main(argv=None):
    _skip_numba_blas()
    _arrow_system_pool()
    argv = sys.argv[1:] if argv is None else argv
    # Megatron's merge script spells these with underscores; accept both.
    argv = [_ALIASES.get(a.split("=", 1)[0], a.split("=", 1)[0]) + (a[a.index("="):] if "=" in a else "")
            if a.startswith("--") else a for a in argv]
    if argv and argv[0] in ("--version", "-V", "version"):
        print(_version_text())
        return 0
    parser = argparse.ArgumentParser(prog="streamtrace", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="store_true", help="print the version and the ijson backend")
    argh.add_commands(parser, [merge, analyze, validate, demo, epilogue, topology, aggregate, report],
                      name_mapping_policy=argh.assembling.NameMappingPolicy.BY_NAME_IF_KWONLY)
    try:
        argh.dispatch(parser, argv=argv)
    except _Exit as e:
        return e.code
    except StreamtraceError as e:
        print(f"streamtrace: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:       # e.g. piped into `head`
        return 0
    except KeyboardInterrupt:
        print("streamtrace: interrupted", file=sys.stderr)
        return 130
    return 0


def command():
    """Entry point of the ``streamtrace`` command: :func:`main`, then leave the process at
    once with its exit code (``os._exit`` after flushing stdout and stderr).  Every output
    is written and closed by then; what the skipped interpreter teardown would do is
    destroy numba's and llvmlite's compiled code objects and the modules one by one,
    ~0.3-0.4 s of every run (measured on a 0.05 MB trace: 1.48 -> 1.13 s median of 6).
    Usage errors (argparse's ``SystemExit``) keep their code; an unexpected exception
    still ends the normal way, with its traceback."""
    try:
        code = main()
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):        # a closed pipe: nothing more to say
            pass
    os._exit(code)


if __name__ == "__main__":
    command()
