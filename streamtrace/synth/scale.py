"""Synthetic jobs of 1,000+ ranks in minutes: ``generate_job_scaled``.

``generate_job`` runs every rank's program (its random draws seeded by its
rank) and keeps every collective's truth; at 1,024 ranks x 20,000 GPU events that is ~15 CPU-min and
tens of GB. Here the ranks of one (tp, pp) position in every DP replica (a *class*) run the same program:
its random draws are seeded by the class's representative, the rank of DP replica 0. Then

* only replica 0 is simulated (``tp * pp`` programs whatever the world size); a DP collective, whose other
  members are the representative's twins, ends when the representative arrives; its end skew is shared by
  every member (their spread is 0 <= END_SKEW_NS);
* each class's events are written once, with markers (``"§P§"``) where a rank's own values go (CPU pid and
  main thread, autograd thread, GPU index, ``Rank``, the TP and PP process groups' name and ranks), and each
  rank's file is that template with its values put in (when ``clock_skew_ns`` is not 0 the timestamps
  differ per rank too, and each rank's program is replayed instead: slow);
* classes are written by ``jobs`` processes; ``.json.gz`` files (``spec.compress``) at zlib level
  ``compresslevel`` (1: ~10x smaller, ~0.1 s per 30 MB file).

What differs from ``generate_job``: the random draws (so the bytes) when dp > 1; with dp = 1 the events are
the same bytes (gzip members may differ: other level). No collective truth (``JobTruth.collectives`` is
empty); a straggler (``straggler_rank``) would break the symmetry and is refused (ValueError). Times are int
ns as in ``job``.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import re
from pathlib import Path

from ..runtime.parallel import run_tasks
from .job import (GPUS_PER_NODE, MONO0_NS, DeviceTruth, JobTruth, RankProgram, SynthSpec, check_spec,
                    process_groups, replay, simulate, trace_frame)

_SLOT = re.compile(rb'"\xc2\xa7([A-Z])\xc2\xa7"|\xc2\xa7([A-Z])\xc2\xa7')   # a marker alone in a string, or in a text


def mark(letter: str) -> str:
    return f"\u00a7{letter}\u00a7"


class _MarkedRanks(list):
    """A process group's ranks whose ``str()`` (written as "Process Group Ranks") is a marker."""

    def __init__(self, ranks, letter):
        super().__init__(ranks)
        self.letter = letter

    def __str__(self):
        return mark(self.letter)


def representative(spec: SynthSpec, rank: int) -> int:
    """The rank of DP replica 0 at ``rank``'s (tp, pp) position."""
    return rank % spec.tp + spec.tp * spec.dp * (rank // (spec.tp * spec.dp))


def own_group(pgs: list, desc: str, rank: int):
    """(pg_name, pg_desc, ranks) of ``rank``'s group ``desc``."""
    return next(p for p in pgs[1:] if p[1] == desc and rank in p[2])


class ClassProgram(RankProgram):
    """Rank ``rank``'s program with the random draws (so the timing) of ``rep``; ``rank=None``: markers
    instead of the rank's own values (see the module docstring)."""

    UNEVEN_ALLTOALL = False   # one template serves every DP replica: its all-to-all splits must not depend on the rank

    def __init__(self, spec: SynthSpec, pgs: list, rank, rep: int, sink=None):
        super().__init__(spec, pgs, rep, sink)
        cursor = self.cur[self.main]
        if rank is None:
            pid, auto, self.dev, self.rank_arg = mark("P"), mark("A"), mark("D"), mark("R")
            for dim, (name, ranks) in {"TP": "TU", "PP": "QV"}.items():
                self.pg[dim] = (mark(name), self.pg[dim][1], _MarkedRanks(self.pg[dim][2], ranks))
        else:
            pid, auto, self.dev, self.rank_arg = 40000 + 7 * rank, 40003 + 7 * rank, rank % GPUS_PER_NODE, rank
            self.pg = {d: own_group(pgs, p[1], rank) for d, p in self.pg.items()}
            self.off = MONO0_NS + rank * spec.clock_skew_ns
        self.pid = self.main = pid
        self.auto = auto
        self.cur, self.stack = {pid: cursor, auto: 0}, {pid: [], auto: []}


def slot_values(pgs: list, rank: int) -> dict:
    """Marker letter -> (bytes for a marker alone in a string: the JSON value, bytes inside a text)."""
    def both(v):
        return (json.dumps(v).encode(), str(v).encode())
    _, _, tp = tp_g = own_group(pgs, "TENSOR_MODEL_PARALLEL_GROUP", rank)
    _, _, pp = pp_g = own_group(pgs, "PIPELINE_MODEL_PARALLEL_GROUP", rank)
    return {"P": both(40000 + 7 * rank), "A": both(40003 + 7 * rank), "D": both(rank % GPUS_PER_NODE),
            "R": both(rank), "T": both(tp_g[0]), "U": both(str(tp)), "Q": both(pp_g[0]), "V": both(str(pp))}


class Template:
    """One class's events (bytes) split at the markers: ``lits`` (n + 1 bytes) around ``slots`` (n (letter,
    alone) pairs)."""

    def __init__(self, body: bytes):
        parts = _SLOT.split(body)   # [lit, alone-letter | None, inner-letter | None, lit, ...]
        self.lits = parts[0::3]
        self.slots = [(a or b).decode() + ("1" if a else "0") for a, b in zip(parts[1::3], parts[2::3])]

    def fill(self, values: dict) -> bytes:
        """The events with ``values`` (``slot_values``) put in."""
        v = {k + a: values[k][1 - int(a)] for k in values for a in "01"}
        pieces = [b""] * (2 * len(self.lits) - 1)
        pieces[0::2] = self.lits
        pieces[1::2] = [v[s] for s in self.slots]
        return b"".join(pieces)


def _rank_truth(spec: SynthSpec, t, rank: int, path: Path, prog_off: int):
    """``t`` (the class program's RankTruth) as rank ``rank``'s: its identity, device and clock offset."""
    off, dev = MONO0_NS + rank * spec.clock_skew_ns, rank % GPUS_PER_NODE
    d = off - prog_off

    def sh(a):
        return a + d if d else a
    (dt,) = t.devices.values()
    ivs = {c: type(iv)(sh(iv.start), sh(iv.end)) for c in ("compute", "comm", "memory") for iv in [getattr(dt, c)]}
    return dataclasses.replace(
        t, rank=rank, path=path, pid=40000 + 7 * rank, clock_offset_ns=off, devices={dev: DeviceTruth(dev, **ivs)},
        coords={"tp": rank % spec.tp, "dp": (rank // spec.tp) % spec.dp, "pp": rank // (spec.tp * spec.dp)},
        base_time_ns=spec.base_time_ns + rank * spec.clock_skew_ns, steps=sh(t.steps), forward=sh(t.forward),
        backward=sh(t.backward), forward_gpu=sh(t.forward_gpu), backward_gpu=sh(t.backward_gpu))


def _write(out: Path, spec: SynthSpec, pgs: list, rank: int, body: bytes, level: int) -> Path:
    rel, head, tail = trace_frame(spec, pgs, rank)
    data = head + body + tail
    (out / rel).write_bytes(gzip.compress(data, compresslevel=level, mtime=0) if spec.compress else data)
    return out / rel


def write_class(out: Path, spec: SynthSpec, pgs: list, rep: int, replies: list, ranks: list, level: int) -> list:
    """Write the files of ``ranks`` (all of class ``rep``, whose program gets ``replies``); their RankTruths."""
    chunks: list = []
    if spec.clock_skew_ns == 0:
        prog = ClassProgram(spec, pgs, None, rep, chunks.append)
        replay(prog.run(), replies)
        tpl, t = Template(b"".join(chunks)), prog.truth(None)
        chunks.clear()
        return [_rank_truth(spec, t, r, _write(out, spec, pgs, r, tpl.fill(slot_values(pgs, r)), level), prog.off)
                for r in ranks]
    truths = []
    for r in ranks:   # each rank's timestamps differ: replay each
        prog = ClassProgram(spec, pgs, r, rep, chunks.append)
        replay(prog.run(), replies)
        truths.append(_rank_truth(spec, prog.truth(None), r, _write(out, spec, pgs, r, b"".join(chunks), level), prog.off))
        chunks.clear()
    return truths


def generate_job_scaled(out_dir, spec: SynthSpec, jobs: int = 1, compresslevel: int = 1) -> JobTruth:
    """Write the job of ``spec`` as ``generate_job`` does (same files, layout and
    topology), DP replicas sharing one program (module docstring); ``jobs`` processes. Returns a JobTruth
    with every rank (int64 ns, rank-local) and no collectives. ValueError: a bad spec, or a straggler."""
    topo = check_spec(spec)
    if spec.straggler_rank is not None:
        raise ValueError("generate_job_scaled: a straggler breaks the replicas' symmetry; use generate_job")
    out = Path(out_dir)
    (out / f"iteration_{spec.iteration}").mkdir(parents=True, exist_ok=True)
    (out / "streamtrace_topology.json").write_text(json.dumps(topo) + "\n")
    pgs = process_groups(spec, topo)
    reps = sorted({representative(spec, r) for r in range(spec.world_size)})
    _, replies = simulate(spec, pgs, ranks=reps, truth=False)
    members: dict = {}
    for r in range(spec.world_size):
        members.setdefault(representative(spec, r), []).append(r)
    tasks = [(out, spec, pgs, rep, replies[rep], members[rep], compresslevel) for rep in reps]
    ranks = [t for part in run_tasks(write_class, tasks, jobs=jobs) for t in part]
    return JobTruth(spec, out, topo, sorted(ranks, key=lambda t: t.rank), [])
