"""What a rewrite worker of ``streamtrace merge`` hands back, typed: a rank written (``RankResult``),
one byte range of a cut rank (``RangeResult``), or a rank that waits for a decision the parent
makes once every rank is read (``ParkedRank``, ``SplitParked``, ``MissingSteps``), and
the worker's own account (``TaskStats``).  All are immutable (a later step makes a new one with
``dataclasses.replace``) and picklable (they cross process boundaries)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..trace.metadata import share_head


@dataclass(frozen=True)
class Reading:
    """What reading one rank's file told beside its events: ``bytes_in`` (uncompressed bytes read),
    ``warnings`` (lines, in the reader's order), ``truncated`` (a ``--salvage`` read of a cut file),
    ``repaired_events`` (events decoded once their unescaped quotes were escaped), ``dropped_bad_ts``
    (events dropped for a ts or dur that is not a usable number)."""
    bytes_in: int
    warnings: tuple = ()
    truncated: bool = False
    repaired_events: int = 0
    dropped_bad_ts: int = 0


@dataclass(frozen=True)
class RankResult:
    """One rank rewritten into its segments, what the stitch and the summary read.

    Attributes:
        rank: the rank.
        events_in, events_out: events read, events written (merge's process metadata included).
        events_fast: events the byte kernel wrote (the others went through the Python twin).
        process_map: ``{str(merged pid): info}`` of the processes that had events
            (``PidMap``'s ``info``).
        metadata: the rank's top-level keys but ``traceEvents``.
        segments: the files to stitch, in order; an entry ``(file, runs)`` is the byte ranges ``runs``
            (int64[n, 2]) of a plain file (``write_merged``).
        reading: what reading the file told (``Reading``).
        validation: the rank's check (``rank_validation``), or None.
    """
    rank: int
    events_in: int
    events_out: int
    events_fast: int
    process_map: dict
    metadata: dict
    segments: tuple
    reading: Reading
    validation: dict | None = None

    @property
    def gpu(self) -> bool:
        """True when one of the rank's merged processes is a GPU's."""
        return any(v.get("kind") == "gpu" for v in self.process_map.values())


@dataclass(frozen=True)
class RangeResult:
    """One byte range of a cut rank rewritten (``merge_range``).

    Attributes:
        segment: its segment file (with a deferred filter: ``(tentative file, runs)`` once decided).
        events_in, events_out, events_fast: as ``RankResult``'s, of the range.
        first_out: the earliest shifted ts written (ns), or None.
        used: the merged pids that had events (sorted).
        records, assigned: every pid the range registered, in order, and the merged pid it gave each.
        bad_ts: events dropped for an unusable ts or dur.
        validation: ``{"parts": the range's sorted runs, "exact": bool}`` when validating, else None.
        parked: with a deferred filter, the range's ``GroupedFilter``
            until the rank is decided; else None.
        exact: the output's check can be derived from the input's (with a deferred filter).
    """
    segment: object
    events_in: int
    events_out: int
    events_fast: int
    first_out: int | None
    used: list
    records: list
    assigned: list
    bad_ts: int
    validation: dict | None = None
    parked: object | None = None
    exact: bool = True


@dataclass(frozen=True)
class ParkedRank:
    """A rank read in one pass under ``--window``, waiting for the keep-window the parent computes
    (``finish_parked``): its ``Parked`` state."""
    rank: int
    parked: object
    reading: Reading


@dataclass(frozen=True)
class SplitParked:
    """A cut rank whose ranges were read under a deferred filter, waiting for its decision
    (``decide_split``): the ``SplitFile``,
    its ranges' ``RangeResult`` s (file order) and its settled ``PidMap``."""
    split: object
    parts: list
    pids: object


@dataclass(frozen=True)
class MissingSteps:
    """A one-pass ``--steps`` rank without those steps: ``message`` is the error the parent raises
    (for the first such rank in rank order)."""
    rank: int
    message: str
    reading: Reading


@dataclass(frozen=True)
class TaskStats:
    """A rewrite worker's own account of one task: its process id, the input bytes and the busy
    seconds (for merge's "MB/s per worker")."""
    worker: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class TaskDone:
    """One rewrite task's result (a ``RankResult``, ``ParkedRank``, ``MissingSteps`` or
    ``RangeResult``) with its ``TaskStats``."""
    result: object
    stats: TaskStats = field(compare=False)


def share_metadata_head(obj):
    """``obj`` (a merge task's result as its worker hands it back: a ``Survey``, a ``TaskDone``) with
    the repeated parts of the rank metadata it carries (its own ``metadata``, its ``result``'s, a
    parked rank's) shared with the other ranks' (``streamtrace.trace.metadata.share_head``, in
    place): each rank's ``distributedInfo.pg_config`` lists O(world size) members and its
    ``deviceProperties`` every GPU of its node, and both arrive unshared from its worker (at 4,096
    synthetic ranks ~185 KB and ~7 KB of Python objects a rank, once for the surveys and again for
    the rewrites).  Returns ``obj``."""
    res = getattr(obj, "result", None)
    for o in (obj, res, getattr(res, "parked", None)):
        m = getattr(o, "metadata", None)
        if isinstance(m, dict):
            share_head(m)
    return obj
