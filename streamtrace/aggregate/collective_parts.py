"""Pass 1 of ``streamtrace.aggregate.collective_spill`` on worker processes: every part's communication
kernels as match rows (``streamtrace.aggregate.collectives.comm_rows``), in part order.

``comm_rows`` reads a part's kernels (and, for point-to-point kernels of a group of more than two ranks,
its CPU ops) and builds its match keys: at 4,096 synthetic ranks 45-60 s of aggregate's parent, serial,
before its rank workers start (~8-12 ms a part, most of it Parquet reads and Python over the kernels).
With ``jobs`` > 1 the parts go to a local process pool (``runtime.parallel.pool``, forked: the job is
inherited, not pickled) in chunks of ``CHUNK_PARTS`` contiguous parts, at most ``IN_FLIGHT`` chunks a
worker sent ahead, their results read back in part order.  A worker numbers a part's match-key prefixes
and signatures itself (first seen first); this process turns them into the job's ids in part order,
which gives the ids a serial pass gives (first seen first over the parts in order), and appends the
warnings a worker's ``comm_rows`` added to its copy of the job (``match_prefixes``' note on peers inferred
from the file), each once, in part order."""
from __future__ import annotations

import sys
from collections import deque
from itertools import islice

import numpy as np

from ..runtime.parallel import pool
from .collectives import comm_rows

CHUNK_PARTS = 32
"""Contiguous parts a worker's task reads (its result: ~160 kernels' rows a synthetic part)."""
IN_FLIGHT = 2
"""Tasks sent ahead a worker: the results held in this process are a few chunks', not the job's."""
MIN_PARTS = 2 * CHUNK_PARTS
"""Fewer parts than this: read in this process (a pool's start costs more than it saves)."""

_JOB = None
"""The job whose parts the workers read: set in this process before the pool forks (``part_rows``)."""


def part_rows(job, pids: dict, sigs: dict, jobs: int = 1):
    """``(part, rows)`` for each of ``job.parts`` in order: ``rows`` as ``comm_rows(job, part, pids, sigs)``
    gives them (None: no communication kernel), ``pids`` / ``sigs`` (``{text: id}``, first seen first)
    added to as a serial pass adds to them.  ``jobs`` > 1 on Linux (fork), with ``MIN_PARTS`` or more
    parts: read by that many worker processes (module docstring).  A generator; an error a part's read
    raises (``StreamtraceError``) is raised here, when that part's turn comes."""
    if jobs <= 1 or len(job.parts) < MIN_PARTS or not sys.platform.startswith("linux"):
        for part in job.parts:
            yield part, comm_rows(job, part, pids, sigs)
        return
    global _JOB
    _JOB = job
    spans = [(lo, min(lo + CHUNK_PARTS, len(job.parts))) for lo in range(0, len(job.parts), CHUNK_PARTS)]
    jobs = min(jobs, len(spans))                       # (no worker forked that would get no chunk)
    try:
        with pool(jobs) as ex:
            chunks = iter(spans)
            sent = deque(ex.submit(_chunk_rows, *c) for c in islice(chunks, jobs * IN_FLIGHT))
            while sent:
                got = sent.popleft().result()
                for c in islice(chunks, 1):
                    sent.append(ex.submit(_chunk_rows, *c))
                for at, rows, pre, sig, notes in got:
                    yield job.parts[at], _job_ids(job, rows, pre, sig, notes, pids, sigs)
    finally:
        _JOB = None


def _chunk_rows(lo: int, hi: int) -> list:
    """In a worker: ``(position, rows, prefixes, signatures, notes)`` of the job's parts ``lo`` .. ``hi`` - 1:
    ``comm_rows`` with the part's own ids (``prefixes`` / ``signatures`` the texts by id) and the warnings
    it added to the job."""
    job, out = _JOB, []
    for at in range(lo, hi):
        pids: dict = {}
        sigs: dict = {}
        before = len(job.warnings)
        rows = comm_rows(job, job.parts[at], pids, sigs)
        out.append((at, rows, list(pids), list(sigs), job.warnings[before:]))
    return out


def _job_ids(job, rows, pre: list, sig: list, notes: list, pids: dict, sigs: dict):
    """A worker's part ``rows`` with its prefix and signature ids made the job's (``pids`` / ``sigs``,
    added to in the part's first-seen order), its ``notes`` added to ``job.warnings`` (each once)."""
    for note in notes:
        if note not in job.warnings:
            job.warnings.append(note)
    if rows is None:
        return None
    to_pid = np.asarray([pids.setdefault(x, len(pids)) for x in pre], np.int64)
    to_sig = np.asarray([sigs.setdefault(x, len(sigs)) for x in sig], np.int64)
    rows["prefix"], rows["sig"] = to_pid[rows["prefix"]], to_sig[rows["sig"]]
    return rows
