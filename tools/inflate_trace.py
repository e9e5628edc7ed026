#!/usr/bin/env python3
"""Build a large benchmark input by inflating one real Kineto trace.

    python tools/inflate_trace.py SRC.json.gz OUT_DIR --ranks 4 --size-mb 250 [--gz]

writes ``OUT_DIR/rank_000R.pt.trace.json`` (``.json.gz`` with ``--gz``) for R in
0..ranks-1, each holding at least ``--size-mb`` MB (10**6 bytes) of uncompressed JSON.

How a file is built: SRC's events are read once (SRC is small) and then written
again and again, copy k being SRC's events with

  * ``ts`` shifted by ``k * (span + gap)`` (span: first event start to last event end
    in SRC, metadata events excluded), written as exact decimal microseconds from
    the reader's integer nanoseconds;
  * fresh ids: integer flow ``id``, ``args.correlation`` and ``args["External id"]``
    offset by ``k * (max id + 1)`` (one max over the three, so a flow id still equals
    the correlation of the launch it links), hence no id repeats within a rank.

Metadata events (``ph == "M"``: process/thread names, sort indices) are written
once, in copy 0, as in a real long trace.  Whole copies are written until the size
is reached, so a flow is never cut in half.  Every rank file gets the same events;
only ``distributedInfo.rank`` / ``world_size`` differ.  The other top-level keys are
kept, in SRC's order: the keys that stood before ``traceEvents`` are written before
it and the others (``traceName``, ``baseTimeNanoseconds`` ...) after it, as Kineto
does.

Memory is bounded by SRC's events plus one chunk: each chunk of a copy is serialised
once and appended to every rank's file (``streamtrace.trace.writer.TraceWriter``),
so the output is never held.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from streamtrace.trace.reader import TraceReader  # noqa: E402
from streamtrace.trace.writer import TraceWriter, dumps_event, dumps_events, fmt_us  # noqa: E402

DEFAULT_SRC = ROOT.parent / "shared" / "traces" / "real" / "v100_ddp_rank1_of2.json.gz"
CHUNK = 16384
HAS_TS, TS_BAD, HAS_DUR, DUR_BAD = 1, 4, 2, 8
ID_ARGS = ("correlation", "External id")


class _KinetoWriter(TraceWriter):
    """A TraceWriter that puts the ``head`` keys before ``traceEvents`` (Kineto's
    layout; TraceWriter itself writes all metadata after the events) and counts the
    uncompressed bytes written."""

    def __init__(self, path, head, metadata, compresslevel=1):
        super().__init__(path, metadata=metadata, compresslevel=compresslevel)
        self._opening = (b"{" + b"".join(dumps_event(k) + b":" + dumps_event(v) + b"," for k, v in head.items())
                         + b'"traceEvents":[')
        self.nbytes = len(self._opening)

    def __enter__(self):
        # as TraceWriter.__enter__, with the head keys in the opening bytes
        self._f = self._cm.__enter__()
        self._f.write(self._opening)
        return self

    def write_raw(self, data: bytes, count: int):
        if data:
            self.nbytes += len(data) + (1 if self.count else 0)
        super().write_raw(data, count)


def load_source(src):
    """Read SRC once: (events, ts_ns list (None where absent/unreadable), head keys,
    tail keys)."""
    r = TraceReader(src)
    events, ts = [], []
    for b in r.raw_batches():
        t, fl = b.ts_ns.tolist(), b.flags.tolist()
        events.extend(b.events)
        ts.extend(t[i] if (fl[i] & HAS_TS and not fl[i] & TS_BAD) else None for i in range(len(t)))
    meta = r.metadata
    head = {k: meta[k] for k in r.head_keys if k in meta}
    tail = {k: v for k, v in meta.items() if k not in head}
    return events, ts, head, tail


def _span_and_ids(events, ts):
    lo = hi = None
    max_id = -1
    for ev, t in zip(events, ts):
        if ev.get("ph") != "M" and t is not None:
            d = ev.get("dur")
            end = t + (int(round(d * 1000)) if isinstance(d, (int, float)) and d > 0 else 0)
            lo = t if lo is None or t < lo else lo
            hi = end if hi is None or end > hi else hi
        v = ev.get("id")
        if type(v) is int and v > max_id:
            max_id = v
        a = ev.get("args")
        if isinstance(a, dict):
            for k in ID_ARGS:
                v = a.get(k)
                if type(v) is int and v > max_id:
                    max_id = v
    return (hi - lo if lo is not None else 0), max_id


def _copy_events(events, ts, shift_ns, id_off, first_copy):
    """Copy ``k`` of the events (new dicts; the source dicts are not touched)."""
    Fragment = orjson.Fragment
    out = []
    for ev, t in zip(events, ts):
        ph = ev.get("ph")
        if ph == "M":
            if first_copy:
                out.append(ev)
            continue
        e = dict(ev)
        if t is not None:
            e["ts"] = Fragment(fmt_us(t + shift_ns))
        if id_off:
            v = e.get("id")
            if type(v) is int:
                e["id"] = v + id_off
            a = e.get("args")
            if isinstance(a, dict) and ("correlation" in a or "External id" in a):
                a = e["args"] = dict(a)
                for k in ID_ARGS:
                    v = a.get(k)
                    if type(v) is int:
                        a[k] = v + id_off
        out.append(e)
    return out


def inflate(src, out_dir, ranks=4, size_mb=250.0, gz=False, gap_us=1000, compresslevel=1, log=print):
    """Write the rank files; returns a list of (path, uncompressed bytes, events)."""
    t0 = time.time()
    events, ts, head, tail = load_source(src)
    span, max_id = _span_and_ids(events, ts)
    step_ns = span + int(gap_us * 1000)
    id_step = max_id + 1
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = ".pt.trace.json.gz" if gz else ".pt.trace.json"
    paths = [out_dir / f"rank_{r:04d}{suffix}" for r in range(ranks)]
    target = int(size_mb * 1e6)
    copies = 0
    with contextlib.ExitStack() as stack:
        writers = []
        for r, p in enumerate(paths):
            h = dict(head)
            di = dict(h.get("distributedInfo") or tail.get("distributedInfo") or {})
            di["rank"], di["world_size"] = r, ranks
            t_ = dict(tail)
            if "distributedInfo" in t_ and "distributedInfo" not in head:
                t_["distributedInfo"] = di
            else:
                h["distributedInfo"] = di
            writers.append(stack.enter_context(_KinetoWriter(p, h, t_, compresslevel)))
        while writers[0].nbytes < target:
            for i in range(0, len(events), CHUNK):
                chunk = _copy_events(events[i:i + CHUNK], ts[i:i + CHUNK], copies * step_ns,
                                     copies * id_step, copies == 0)
                if chunk:
                    data = dumps_events(chunk)
                    for w in writers:
                        w.write_raw(data, len(chunk))
            copies += 1
        counts = [(str(w.path), w.nbytes, w.count) for w in writers]
    log(f"inflate: {src} ({len(events):,} events, span {span / 1e9:.3f} s, max id {max_id}) x {copies} copies "
        f"-> {ranks} files of {counts[0][1] / 1e6:,.1f} MB uncompressed, {counts[0][2]:,} events each, "
        f"in {time.time() - t0:.1f} s")
    return counts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", nargs="?", default=str(DEFAULT_SRC),
                    help=f"source trace (default: {os.path.relpath(DEFAULT_SRC, ROOT)} relative to the repo root)")
    ap.add_argument("out_dir", help="folder to write rank_000R.pt.trace.json[.gz] into")
    ap.add_argument("--ranks", type=int, default=4, help="number of rank files (default 4)")
    ap.add_argument("--size-mb", type=float, default=250.0,
                    help="minimum uncompressed size of each file in MB of 10**6 bytes (default 250)")
    ap.add_argument("--gz", action="store_true", help="write .json.gz (gzip level 1)")
    ap.add_argument("--gap-us", type=float, default=1000.0, help="idle gap between copies, us (default 1000)")
    a = ap.parse_args(argv)
    if a.ranks < 1 or a.size_mb <= 0:
        ap.error("--ranks and --size-mb must be positive")
    # with one positional given it is OUT_DIR (SRC takes its default)
    inflate(a.src, a.out_dir, a.ranks, a.size_mb, a.gz, a.gap_us)
    return 0


if __name__ == "__main__":
    sys.exit(main())
