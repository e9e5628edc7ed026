"""``streamtrace merge``: many rank traces -> one Perfetto-loadable trace, in flat memory.

``merge`` is the first step, discover: the rank files found in the inputs, checked (no trace
merged already), selected (``ranks``, ``iterations``) and grouped by iteration; each group then goes
down the line of ``streamtrace.merge.line`` (survey/plan, rewrite, stitch, validate).

Each rank is streamed by ``TraceReader`` in a worker
process that rewrites its events and writes them to its own *segment* file
(a gzip member when the output is ``.gz``); the segments are then stitched by
byte copy between a header and a trailer, so peak memory depends on the batch
size only, never on the input size or the number of ranks.  With several workers,
a rank trace of at least ``MergeOptions.split_threshold`` bytes is rewritten in
byte ranges by several of them, one segment per range, with the same output
(``streamtrace.merge.ranges``).

Rewrites (all documented in the README):
  * processes: every (rank, original pid) becomes a distinct process with pid
    ``1 + rank * PID_STRIDE + slot`` (slot 0-99: CPU processes, 100 + d: GPU device d,
    900+: string pids such as ``"Spans"``), named ``Rank 3 · CPU (host h, pid 41523)`` /
    ``Rank 3 · GPU 3 (NVIDIA H100 80GB HBM3)`` and sorted rank by rank, CPU first;
    Kineto's own ``process_name``/``process_labels``/``process_sort_index`` events are
    replaced by these;
  * ids: flow ``id`` (ac2g, fwdbwd, ...), ``args.correlation`` and ``args["External id"]``
    become ``rank * 2**40 + id`` (see ``unique_id``), originals kept as
    ``args["raw correlation"]`` / ``args["raw External id"]`` / ``args["raw id"]``;
    every event gets ``args.rank``;
  * time: ts is shifted by ``baseTimeNanoseconds(rank) - min(baseTimeNanoseconds)`` so all
    ranks share one clock (or, with ``align="first-step"``, so every rank's first
    ``ProfilerStep#`` starts together; with ``align="collectives"``, less each rank's clock
    offset estimated from its collectives, ``streamtrace.merge.clocks``), and written as
    exact decimal microseconds.
"""
from __future__ import annotations

from dataclasses import replace

from ..runtime.errors import StreamtraceError, UnknownRankError
from ..runtime.files import check_output_file
from ..trace.discover import LONE_FILE, TraceFile, discover, nothing_found
from ..trace.peer_merged import peer_merged
from .line import merge_iteration
from .options import MergeOptions
from .output import output_for_iteration
from .result import MergeResult


def merge(inputs, output, opt: MergeOptions | None = None, rank_map=None) -> list[MergeResult]:
    """Merge the rank traces found in ``inputs`` (files, folders, globs) into
    ``output``.  Files from several iterations are merged per iteration
    (``<output>_iter<N>.json[.gz]``) unless ``opt.iterations`` picks one.
    A lone input with no rank is merged as rank 0.

    Parameters
    ----------
    inputs : list of str or Path
        Rank trace files, folders (searched recursively) and glob patterns.
    output : str or Path
        The merged trace (``.json`` or ``.json.gz``); per iteration ``<output>_iter<N>.json[.gz]``.
    opt : MergeOptions, optional
        The options (default ``MergeOptions()``).
    rank_map : str or Path, optional
        A JSON file ``{file name: rank}`` for traces whose rank is in neither the trace nor its name.

    Returns
    -------
    list of MergeResult
        One per trace written (``MergeResult``; its ``summary`` is the
        dict ``merge_files`` describes, also read through it: ``res["events_out"]``).  The first
        one's ``warnings`` start with what was skipped while looking for the traces (unreadable
        folders, files without a ``traceEvents`` array); a lone input adds a ``notices`` entry.

    Raises
    ------
    StreamtraceError
        On bad input (no traces, ``ranks``/``iterations`` selecting none).
    TraceError
        A rank trace that is not readable JSON (its path and byte offset).
    OutputError
        An output that cannot be written (checked before any work where possible: a folder, a
        read-only folder, one of the inputs); nothing is written then.
    """
    opt = opt or MergeOptions()
    if rank_map is not None and opt.rank_map is None:
        opt = replace(opt, rank_map=str(rank_map))       # an export's processes by pid (merge_exports)
    output = check_output_file(output)
    skipped = []
    try:
        files = discover(inputs, rank_map, warn=lambda p, msg: skipped.append(f"{p}: {msg}"))
    except UnknownRankError as e:      # a merged trace beside rank files carries no rank: say what it is
        _refuse_merged([TraceFile(e.path, -1, None, "", _metadata(e.path))])
        raise
    if not files:
        raise nothing_found(inputs, skipped)
    _refuse_merged(files)
    if opt.ranks:
        files = [f for f in files if f.rank in opt.ranks or not f.source.rank_per_file]   # an export: per process
        if not files:
            raise StreamtraceError("--ranks selects none of the ranks found")
    groups = {}
    for f in files:
        groups.setdefault(f.iteration, []).append(f)
    if opt.iterations is not None:
        missing = sorted(set(opt.iterations) - set(groups))
        if missing:
            have = ", ".join(str(k) for k in sorted(k for k in groups if k is not None)) or "none"
            raise StreamtraceError(f"no traces for iteration(s) {', '.join(map(str, missing))} (found: {have})")
        groups = {it: groups[it] for it in opt.iterations}
    order = sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
    todo = [(g, output) for g in groups.values()] if len(groups) == 1 else \
        [(g, output_for_iteration(output, it)) for it, g in order]
    for g, out in todo:
        check_output_file(out, inputs=[tf.path for tf in files])
    summaries = [merge_iteration(g, out, opt) for g, out in todo]   # one per output
    summaries[0]["warnings"][:0] = skipped
    lone = [f.path for f in files if f.rank_source == LONE_FILE]
    if lone:
        summaries[0]["notices"] = [f"{lone[0]}: no rank in the trace or its name (a single-process run?): merged "
                                   f"as rank 0"]
    return [MergeResult(s) for s in summaries]


def merge_files(files: list[TraceFile], output, opt: MergeOptions | None = None) -> MergeResult:
    """Merge the given rank traces (one iteration) into ``output`` (``.json`` or
    ``.json.gz``).  Returns a ``MergeResult``, whose ``summary``
    (also readable through it as a mapping) holds: ``output``, ``ranks``, ``iteration``, ``events_in``,
    ``events_out``, ``bytes_in``, ``bytes_out``, ``seconds``, ``jobs``, ``warnings``, ``split``
    (ranks rewritten in byte ranges: their range count), ``ranges_redone``,
    ``worker_mb_per_s``, ``cpu_only`` (no rank has a GPU process; with ``gpu_only`` the CPU
    processes are merged instead, with a warning), ``validation``
    (``streamtrace.validate.merged.merged_validation``; None when ``opt.validate`` is off), ``members``
    (a gzip output's members as written, ``[[start, end], ...]`` compressed byte offsets, or None:
    ``streamtrace.merge.output.write_merged``).
    Raises ``StreamtraceError`` / ``TraceError`` on bad input;
    the output is then not created (an unexpected failure on one rank is a
    ``TraceError`` naming its file); ``OutputError`` when the
    output cannot be written.

    With more than one worker, a trace of at least ``opt.split_threshold`` bytes is
    rewritten in byte ranges by several workers (``streamtrace.merge.ranges``) when that
    balances the work (``split_pays``); the output is the same.  The steps
    of that merge: ``streamtrace.merge.line``."""
    return MergeResult(merge_iteration(files, output, opt))


def _metadata(path) -> dict:
    """Every top-level key of ``path`` but its events ({} when it cannot be read)."""
    from ..trace.reader import TraceReader
    try:
        return TraceReader(path, salvage=True).read_metadata()
    except StreamtraceError:
        return {}


def _refuse_merged(files):
    """Raise ``StreamtraceError`` naming the first of ``files`` that streamtrace merged
    already (its ``streamtrace.kind`` header) or a peer tool merged (TraceLens TraceFusion,
    Megatron-LM's ``merge_profiler_traces.py``: ``peer_merged``):
    merged again, all its ranks would be folded into the one rank the file is given (issue 33)."""
    for tf in files:
        st = tf.head.get("streamtrace")
        if isinstance(st, dict) and st.get("kind") == "merged":
            n = len(st.get("ranks") or [])
            raise StreamtraceError(f"{tf.path}: already a merged trace ({n} ranks, written by streamtrace merge); "
                                   f"merged again its ranks would be folded into one: merge the rank files it "
                                   f"came from, or analyze it (analyze splits it into its ranks)")
        peer = peer_merged(tf.path, tf.head) if tf.source.json else None
        if peer is not None:
            raise StreamtraceError(f"{tf.path}: already a merged trace (written by {peer}); merged again its ranks "
                                   f"would be folded into one: merge the rank files it came from")
