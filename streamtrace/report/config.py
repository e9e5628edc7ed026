"""The report's configuration section and its conventions for what is unknown, one for every
table: an iteration that no ``iteration_N/`` folder (or ``_iter_N`` name) gives is shown as
``-`` and said once as "no iteration folder" (never ``-1`` or ``?``); parallel sizes that no
topology names are not printed as ``?``: the section says what is known (the world size and
where it comes from) and that the layout is "not named in the trace".

It also says which ranks had their forward phase inferred (analyze's fallback for traces
without forward annotations, ``streamtrace.analyze.phases.infer_forward``), read from the
analysed folders' ``summary.json`` (``phases_inferred`` per rank), and which step names analyze
used when they are not ``ProfilerStep#N`` (``step_patterns`` per rank, ``streamtrace.aggregate.steps``).
"""
from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

import ijson

from ..analyze.outputs import Analysis
from .escape import md_code, md_text
from .section import SectionBase, md_table

DIMS = ("tp", "cp", "ep", "dp", "pp")
NO_ITERATION = "no iteration folder"


def iteration_cell(i) -> str:
    """An iteration number as a table cell: ``-`` when unknown (None or negative)."""
    return "-" if i is None or int(i) < 0 else f"{int(i)}"


def iterations_text(iterations) -> str:
    """The configuration's iterations: ``4, 5``; ``no iteration folder`` for unknown ones."""
    known = [str(int(i)) for i in iterations if i is not None and int(i) >= 0]
    unknown = len(known) < len(list(iterations))
    return ", ".join(known + ([NO_ITERATION] if unknown else [])) or NO_ITERATION


def rank_list(ranks) -> str:
    """Sorted ranks as ranges: ``0-3, 6``."""
    rs = sorted(set(int(r) for r in ranks))
    out, i = [], 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(f"{rs[i]}" if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ", ".join(out)


def inferred_phases(inputs) -> dict:
    """``{phase: [ranks]}`` of the ranks whose ``phase`` was inferred by analyze (the analysed
    folders ``inputs``' ``summary.json``, ``ranks[*].phases_inferred``); {} when none (or the
    folders are gone)."""
    out: dict = {}
    for facts in _facts_of(inputs):
        for ph, ranks in facts[0].items():
            out.setdefault(ph, set()).update(ranks)
    return {k: sorted(v) for k, v in out.items()}


def step_patterns_used(inputs) -> list:
    """The step patterns other than ``ProfilerStep#N`` that analyze recorded for the analysed folders
    ``inputs`` (``summary.json``, ``ranks[*].step_patterns``: ``Analysis.step_patterns``), distinct, in
    first-seen order; [] when none (or the folders are gone)."""
    out: dict = {}
    for facts in _facts_of(inputs):
        out.update(dict.fromkeys(facts[1]))
    return list(out)


def _facts_of(inputs) -> list:
    """``summary_facts`` of each folder of ``inputs`` whose ``summary.json`` can be read."""
    out = []
    for d in inputs or []:
        facts = summary_facts(Path(d) / Analysis.marker)
        if facts is not None:
            out.append(facts)
    return out


def _file_key(st) -> tuple:
    """What tells one version of a file from another: device, inode (an atomic replace makes a new
    one), modification and change times (ns), size."""
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size


class _Changed(Exception):
    """The file opened is not the version ``_cached_facts`` was asked for (replaced between ``stat``
    and ``open``): read again, under its new key."""


class _Unreadable(Exception):
    """The file cannot be read, or is not JSON: nothing is kept for it (read again when asked)."""


def summary_facts(path):
    """What the report reads of one analysed folder's ``summary.json`` (``path``): ``({phase: frozenset
    of ranks}, (step patterns, first-seen order))`` (``inferred_phases``, ``step_patterns_used``); None
    when it cannot be read or is not JSON.  Its rank entries are streamed one at a time (ijson), not
    parsed whole: 4,096 ranks' 22 MB held ~55 MB of Python objects a parse, three parses in the
    report's process; a document ijson refuses (``NaN``, which ``json`` writes for a float NaN) is parsed
    whole instead.  Kept per version of the file (``_file_key``: a replaced or rewritten file is read
    again), one read for the report's three questions; an unreadable file is not kept."""
    path = str(path)
    try:
        for _ in range(3):
            try:
                return _cached_facts(path, _file_key(os.stat(path)))
            except _Changed:
                continue
        return _read_facts(path, None)            # (replaced while read, again and again: not kept)
    except (_Unreadable, OSError):
        return None


@lru_cache(maxsize=64)
def _cached_facts(path: str, key: tuple):
    return _read_facts(path, key)


def _read_facts(path: str, key):
    """``summary_facts`` of the file at ``path``.  Raises ``_Unreadable`` when it cannot be read or is
    not JSON, ``_Changed`` when ``key`` is given and the file opened is not that version of it."""
    phases: dict = {}
    patterns: dict = {}

    def take(r):
        if not isinstance(r, dict):
            return
        patterns.update(dict.fromkeys(Analysis.step_patterns(r) or []))
        inferred = r.get("phases_inferred")
        try:
            rank = int(r.get("rank", 0))
        except (TypeError, ValueError):             # (a foreign or hand-edited file: no rank to name)
            return
        for ph in (inferred if isinstance(inferred, dict) else ()):
            phases.setdefault(ph, set()).add(rank)
    try:
        with open(path, "rb") as f:
            if key is not None and _file_key(os.fstat(f.fileno())) != key:
                raise _Changed(path)
            try:
                for r in ijson.items(f, "ranks.item"):
                    take(r)
            except ijson.JSONError:
                phases.clear()
                patterns.clear()
                f.seek(0)
                summ = json.loads(f.read())
                ranks = summ.get("ranks") if isinstance(summ, dict) else None
                for r in ranks if isinstance(ranks, list) else []:
                    take(r)
    except (OSError, ValueError) as e:
        raise _Unreadable(path) from e
    return {k: frozenset(v) for k, v in phases.items()}, tuple(patterns)


def configuration_md(c: dict, table) -> list:
    """Markdown lines of the configuration (``report.json``'s ``configuration``); ``table(head,
    rows)`` formats a table."""
    gpus = ", ".join(c["devices"]) or ("none (CPU only)" if c.get("cpu_only") else "-")
    world = "-" if c["world_size"] is None else f"{c['world_size']:,}"
    its = iterations_text(c["iterations"])
    head = "iterations" if len(list(c["iterations"])) > 1 else "iteration"    # the number of one, not a count
    L = ["## Configuration", ""]
    if c.get("tp") is None:
        L += [table(["world size", "ranks analysed", "GPUs", head], [[world, f"{c['ranks']:,}", gpus, its]]), ""]
        known = (f"World size {world} from {md_text(c['world_size_from'])}. " if c.get("world_size_from") else
                 "World size not named in the trace (ranks analysed shown). ")
        L += [known + "Parallel layout (TP, CP, EP, DP, PP): not named in the trace (no `pg_config` group description "
              "such as TENSOR_MODEL_PARALLEL_GROUP, no topology file beside the traces); give `--topology FILE` to "
              "name it. Sections that need it (pipeline bubbles, replicas, each collective's parallel dimension) "
              "are left out or say `unknown`.", ""]
    else:
        L += [table(["world size", "TP", "CP", "EP", "DP", "PP", "rank order", "GPUs", "ranks analysed", head],
                    [[world, *(f"{c[k]:,}" for k in DIMS), c["order"] or "-", gpus, f"{c['ranks']:,}", its]]), ""]
        src = [f"World size from {md_text(c['world_size_from'])}." if c.get("world_size_from") else "",
               f"Parallel groups from {md_text(c['topology_from'])}." if c.get("topology_from") else "",
               "PP = 1: no pipeline section." if c.get("pp") == 1 else ""]
        if any(src):
            L += [" ".join(x for x in src if x), ""]
    named = c.get("step_patterns")
    if its == NO_ITERATION:
        L += ["The trace paths name no iteration (no `iteration_N/` folder): steps are named by their "
              + ("step range's number" if named else "`ProfilerStep#` number")
              + ", and iteration cells show `-`.", ""]
    if named:
        L += ["Steps are the annotations (NVTX ranges in an Nsight Systems export) that analyze took as steps: "
              "those matching " + ", ".join(md_code(p) for p in named) + " (`summary.json` `step_patterns`).", ""]
    for ph, ranks in (c.get("phases_inferred") or {}).items():
        L += [f"The {ph} phase is **inferred** on rank(s) {rank_list(ranks)}: the traces have no {ph} annotation "
              "(`forward_step`, `## forward ##`), so each step's work launched before its first autograd (backward) "
              "op counts as forward, one window per step (no micro-batch number).", ""]
    return L


class ConfigurationSection(SectionBase):
    """``configuration``'s Markdown (``configuration_md``); its data is the report's frame
    (``streamtrace.report.markdown.build_report``: every section reads it)."""
    key = "configuration"

    def markdown(self, rep: dict, charts: list) -> list:
        return configuration_md(rep[self.key], md_table)
