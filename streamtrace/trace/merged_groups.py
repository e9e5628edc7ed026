"""The process groups of a streamtrace-merged trace's header, listed once for the job.

Each rank's Kineto ``distributedInfo.pg_config`` lists every process group the rank is in with its
member list, so O(world size) a rank (25 KB at 4,096 synthetic ranks, the default group alone
listing all 4,096): copied into every rank's entry of the merged header (``streamtrace.ranks``) it
made that header quadratic in ranks (99 MB of JSON at 4,096 ranks, 855 MB once parsed).  As
``summary.json`` does (``streamtrace.analyze.outputs.share_process_groups``), merge writes each
distinct entry once, in ``streamtrace.pg_entries`` (first seen first), and a rank's entry keeps
its ``distributedInfo`` without ``pg_config`` plus ``pg_groups``: the indices of its entries in that
table, a list for Kineto's list form, ``{name: index}`` for the dict form some versions write.

* ``share_rank_groups`` -- merge's side: moves the ranks' groups to the table;
* ``rank_distributed_info`` -- a reader's side: a rank entry's ``distributedInfo`` as the rank's
  trace had it (``pg_config`` put back); a header written before (full ``distributedInfo`` per
  rank, no table) is returned as it is.
"""
from __future__ import annotations

import json

import orjson

#: the merged header's (``streamtrace``) table of the job's distinct ``pg_config`` entries
PG_ENTRIES = "pg_entries"
#: a rank entry's key of the indices of its ``pg_config`` entries in ``PG_ENTRIES``
PG_GROUPS = "pg_groups"


def group_key(entry) -> bytes | str | None:
    """The JSON text identifying the process group ``entry`` (keys sorted), or None when it cannot be
    written: orjson's (fast), else ``json``'s when orjson refuses it (an integer past 64 bits) or wrote
    a ``null`` (orjson writes NaN as null: ``json`` tells them apart).  Equal entries get equal keys."""
    try:
        text = orjson.dumps(entry, option=orjson.OPT_SORT_KEYS)
        if b"null" not in text:
            return text
    except (TypeError, orjson.JSONEncodeError):
        pass
    try:
        return json.dumps(entry, sort_keys=True)
    except (TypeError, ValueError):
        return None


class GroupTable:
    """The job's distinct process-group entries, first seen first (``entries``), each found by its
    ``group_key``.  ``by_object``: an object seen again is looked up by identity, not written again
    (the table then holds every object it was given until it is dropped: for entries shared already,
    as trace discovery's are, ``streamtrace.trace.metadata.share_head``)."""

    def __init__(self, by_object: bool = False):
        self.entries: list = []
        self._index: dict = {}
        self._objects: dict | None = {} if by_object else None

    def index(self, entry) -> int | None:
        """``entry``'s index in ``entries`` (added when new); None when it cannot be written."""
        seen = self._objects.get(id(entry)) if self._objects is not None else None
        if seen is not None:
            return seen[0]
        text = group_key(entry)
        if text is None:
            return None
        k = self._index.setdefault(text, len(self.entries))
        if k == len(self.entries):
            self.entries.append(entry)
        if self._objects is not None:
            self._objects[id(entry)] = (k, entry)          # held: its id is not reused while we run
        return k


def share_rank_groups(ranks: list) -> list:
    """Move the ``distributedInfo.pg_config`` entries of the merged header's rank entries ``ranks``
    (dicts with a ``distributedInfo``) to one table, in place: returns the distinct entries, first
    seen first; each rank's entry gets a copy of its ``distributedInfo`` without ``pg_config`` and
    ``PG_GROUPS``, the entries' indices (a list, or ``{name: index}`` when ``pg_config`` is a dict).
    A rank whose ``pg_config`` is neither, or holds a value that cannot be written, is left as it is.
    The given ``distributedInfo`` dicts are not changed (merge's ranks' metadata still holds them).
    Equal entries are found by their JSON text (``GroupTable``); one object seen again (the groups
    the trace discovery shares, ``streamtrace.trace.metadata.share_head``) is written once."""
    table = GroupTable(by_object=True)
    for r in ranks:
        di = r.get("distributedInfo")
        cfg = di.get("pg_config") if isinstance(di, dict) else None
        if not isinstance(cfg, (list, dict)):
            continue
        items = list(cfg.items()) if isinstance(cfg, dict) else list(enumerate(cfg))
        ids = []
        for _, e in items:
            k = table.index(e)
            if k is None:
                break
            ids.append(k)
        else:
            r["distributedInfo"] = {k: v for k, v in di.items() if k != "pg_config"}
            r[PG_GROUPS] = dict(zip((n for n, _ in items), ids)) if isinstance(cfg, dict) else ids
    return table.entries


def rank_distributed_info(header: dict, entry: dict):
    """The ``distributedInfo`` of the merged header ``header`` (the ``streamtrace`` value)'s rank
    entry ``entry`` as the rank's trace had it: with ``pg_config`` resolved from ``PG_GROUPS`` and the
    header's ``PG_ENTRIES`` (an index outside the table is left out); as it stands when the entry has
    no ``PG_GROUPS`` (a header written before the table, or a rank without groups).  A new dict: the
    header is not changed."""
    di = entry.get("distributedInfo") if isinstance(entry, dict) else None
    ids = entry.get(PG_GROUPS) if isinstance(entry, dict) else None
    if not isinstance(di, dict) or not isinstance(ids, (list, dict)):
        return di
    table = header.get(PG_ENTRIES) if isinstance(header.get(PG_ENTRIES), list) else []
    ok = lambda i: type(i) is int and 0 <= i < len(table)  # noqa: E731
    if isinstance(ids, dict):
        cfg = {k: table[i] for k, i in ids.items() if ok(i)}
    else:
        cfg = [table[i] for i in ids if ok(i)]
    return {**di, "pg_config": cfg}
