"""Writing the merged trace: the ranks' segments stitched by byte copy between a header and a
trailer (``write_merged``), the merged header (``merged_metadata``: enough to split a
merged trace back into its ranks exactly), and the per-iteration output names."""
from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path

from .. import __version__
from ..runtime.files import atomic_output
from ..trace.merged_groups import PG_ENTRIES, share_rank_groups
from ..trace.metadata import host_name
from ..trace.writer import dumps_event
from .pids import ID_BITS, PID_STRIDE

def append_file(src, dst):
    """Append file ``src`` to the open binary file ``dst``, in the kernel when the
    platform allows (``os.copy_file_range``), else through a buffer."""
    with open(src, "rb") as f:
        _copy_range(f, dst, 0, os.fstat(f.fileno()).st_size, True)


def copy_runs(src_path: str, runs, dst, plain: bool) -> None:
    """Write the byte ranges ``runs`` (int64[n, 2]: start, end) of file ``src_path`` to the binary
    stream ``dst``, comma separated: in the kernel (``os.copy_file_range``) when ``plain`` (``dst``
    is a plain file) and the platform allows, else through a buffer."""
    with open(src_path, "rb") as f:
        for k, (a, b) in enumerate(runs.tolist()):
            if k:
                dst.write(b",")
            _copy_range(f, dst, a, b, plain)


def _copy_range(f, dst, a: int, b: int, plain: bool) -> None:
    """Bytes ``a:b`` of the open binary file ``f`` to the end of ``dst``: in the kernel when ``plain``
    and the platform allows (a failure part-way raises: the caller's atomic output is then
    discarded), the rest through a buffer."""
    if plain and hasattr(os, "copy_file_range"):
        dst.flush()
        while a < b:
            n = os.copy_file_range(f.fileno(), dst.fileno(), b - a, a)
            if n == 0:
                break
            a += n
        dst.seek(0, os.SEEK_END)
    f.seek(a)
    while a < b:
        data = f.read(min(b - a, 1 << 22))
        if not data:
            raise OSError(f"{f.name}: ended at byte {a} of a copy to {b}")
        dst.write(data)
        a += len(data)


def gzip_piece(data: bytes, compress, level):
    """``data`` as one gzip member when ``compress``, else as is."""
    return gzip.compress(data, compresslevel=level, mtime=0) if compress else data


def merged_metadata(plan, results, time) -> dict:
    """The merged trace's top-level keys after ``traceEvents`` (README, "What merge rewrites"):
    ``schemaVersion``, ``displayTimeUnit``, ``baseTimeNanoseconds`` (``time.out_base``, ns), ``traceName``
    and ``streamtrace`` (ranks with their sources, shifts and metadata, the process groups of their
    ``distributedInfo`` listed once in ``pg_entries`` when they list any, ``streamtrace.trace.merged_groups``;
    the process map).
    ``plan``: the ``MergePlan`` (files, options, output); ``results``: each
    file's ``RankResult``; ``time``: the
    ``TimePlan``.  With ``time.clock`` (``--align collectives``,
    ``streamtrace.merge.clocks.plan_clock_sync``): each rank's ``clock_offset_ns``,
    ``clock_residual_ns``, ``clock_instances``, ``clock_applied``, and ``streamtrace.clock_sync``
    (method, applied, one_host, reference rank per component)."""
    opt, clock = plan.opt, time.clock
    first = results[0].metadata
    ranks = []
    pmap = {}
    for tf, res in zip(plan.files, results):
        m = res.metadata
        ranks.append({"rank": tf.rank, "source": os.path.abspath(tf.path), "iteration": tf.iteration,
                      "rank_source": tf.rank_source,
                      "baseTimeNanoseconds": m.get("baseTimeNanoseconds"), "time_shift_ns": time.shifts[tf.rank],
                      "distributedInfo": m.get("distributedInfo"), "deviceProperties": m.get("deviceProperties"),
                      "host": host_name(m), "events_in": res.events_in, "events_out": res.events_out,
                      "dropped_bad_ts": res.reading.dropped_bad_ts, "truncated": res.reading.truncated})
        ranks[-1]["repaired_events"] = res.reading.repaired_events    # Kineto's unescaped quotes (issue 33)
        if clock is not None:
            c = clock["ranks"][tf.rank]
            ranks[-1].update({"clock_offset_ns": c["offset_ns"], "clock_residual_ns": c["residual_ns"],
                              "clock_instances": c["instances"], "clock_component": c["component"],
                              "clock_applied": c["applied"]})
        pmap.update(res.process_map)
    groups = share_rank_groups(ranks)
    out = {
        "schemaVersion": first.get("schemaVersion", 1),
        "displayTimeUnit": first.get("displayTimeUnit", "ms"),
        "baseTimeNanoseconds": time.out_base,
        "traceName": plan.output.name,
        "streamtrace": {
            "version": __version__, "kind": "merged", "align": opt.align,
            "filters": {"ranks": sorted(opt.ranks) if opt.ranks else None, "drop_cat": sorted(opt.drop_cat),
                        "steps": list(opt.steps) if opt.steps else None, "gpu_only": opt.gpu_only,
                        "window_ms": list(opt.window_ms) if opt.window_ms else None},
            "id_transform": f"rank * 2**{ID_BITS} + raw id",
            "pid_transform": f"1 + rank * {PID_STRIDE} + slot",
            **({PG_ENTRIES: groups} if groups else {}),
            "ranks": ranks,
            "process_map": pmap,
        },
    }
    if clock is not None:
        out["streamtrace"]["clock_sync"] = {k: clock[k] for k in ("method", "applied", "one_host", "references")}
    return out


def output_for_iteration(output: Path, iteration) -> Path:
    """``merged.json.gz`` -> ``merged_iter10.json.gz`` (one output per iteration)."""
    name = output.name
    for suf in (".json.gz", ".json"):
        if name.endswith(suf):
            return output.with_name(f"{name[:-len(suf)]}_iter{iteration}{suf}")
    return output.with_name(f"{name}_iter{iteration}")


def write_merged(output: Path, results, meta: dict, compress: bool, level: int) -> list | None:
    """Write the merged trace atomically: ``{"traceEvents":[`` + every result's segments in order
    (``results``: ``RankResult`` s),
    comma separated + ``]`` + ``meta`` + ``}``; each piece a gzip member of its own when
    ``compress`` (segments were written as members already).  A segment is a file, or ``(file,
    runs)``: the byte ranges ``runs`` of a plain file (a deferred filter's kept events,
    ``streamtrace.merge.deferred``).  Returns the pieces' compressed byte ranges ``[[start, end],
    ...]`` (each a gzip member, none holding a critical path's marks: read by
    ``streamtrace.aggregate.critical_marks`` without inflating every member) when ``compress``
    and every segment is a file, else None."""
    ranges: list | None = [] if compress else None
    with atomic_output(output, compress=False) as f:

        def put(write, *args):
            at = f.tell()
            write(*args)
            if ranges is not None:
                ranges.append([at, f.tell()])
        put(f.write, gzip_piece(b'{"traceEvents":[', compress, level))
        first = True
        for res in results:
            if not res.events_out:
                continue
            for seg in res.segments:
                if isinstance(seg, tuple) and not len(seg[1]):
                    continue
                if not first:
                    put(f.write, gzip_piece(b",", compress, level))
                if isinstance(seg, tuple):
                    copy_runs(seg[0], seg[1], f, True)
                    ranges = None
                else:
                    put(append_file, seg, f)
                first = False
        put(_write_pieces, f, trailer_pieces(meta), compress, level)
    return ranges


def trailer_pieces(meta: dict):
    """The merged trace's end, ``]`` + ``,"key":value`` for each of ``meta`` + ``}\n``, as pieces
    (``json_pieces``, two levels down: each rank's entry of ``streamtrace.ranks`` its own): never one
    ``bytes`` of the whole (24 KB a rank: ~190 MB held twice at 16,384 ranks)."""
    yield b"]"
    for k, v in meta.items():
        yield b"," + dumps_event(k) + b":"
        yield from json_pieces(v, 2)
    yield b"}\n"


def json_pieces(value, depth: int):
    """``dumps_event(value)`` in pieces: a dict with string keys, or a list, ``depth`` levels down is
    written member by member (orjson's compact form: ``{"k":v,...}``, ``[a,...]``), anything else
    whole."""
    if depth > 0 and isinstance(value, dict) and all(isinstance(k, str) for k in value):
        yield b"{"
        for i, (k, v) in enumerate(value.items()):
            yield (b"," if i else b"") + dumps_event(k) + b":"
            yield from json_pieces(v, depth - 1)
        yield b"}"
    elif depth > 0 and isinstance(value, list):
        yield b"["
        for i, v in enumerate(value):
            if i:
                yield b","
            yield from json_pieces(v, depth - 1)
        yield b"]"
    else:
        yield dumps_event(value)


PIECE_BYTES = 1 << 16
"""Bytes of ``trailer_pieces`` gathered before they are compressed or written (orjson's ``bytes`` of a
rank's entry, ~300 B of text, each hold a 4 KB allocation: a megabyte of them held ~14 MB)."""


def _write_pieces(f, pieces, compress: bool, level: int) -> None:
    """``pieces`` (bytes) into the binary file ``f``: as one gzip member when ``compress``, the same
    bytes ``gzip_piece`` makes of them joined (one deflate stream fed ``PIECE_BYTES`` at a time, its
    header, CRC-32 and size as ``gzip.compress`` writes them), else as they are."""
    z = zlib.compressobj(level, zlib.DEFLATED, -15) if compress else None
    crc = size = 0
    if z is not None:
        f.write(gzip.compress(b"", compresslevel=level, mtime=0)[:10])       # (the header: no data in it)
    buf: list = []
    held = 0

    def out():
        nonlocal crc, size
        data = b"".join(buf)
        buf.clear()
        if z is None:
            f.write(data)
            return
        crc, size = zlib.crc32(data, crc), size + len(data)
        f.write(z.compress(data))
    for piece in pieces:
        buf.append(piece)
        held += len(piece)
        if held >= PIECE_BYTES:
            out()
            held = 0
    out()
    if z is not None:
        f.write(z.flush() + struct.pack("<LL", crc, size & 0xFFFFFFFF))
