"""The report's facts from the analysed folders' ``summary.json`` (ranks whose phase was inferred, step
patterns other than ``ProfilerStep#N``): streamed, equal to a plain reading of the whole document, read
once per file for the report's three questions, and a folder that cannot be read is left out."""
from __future__ import annotations

import json
import os

from hypothesis import given, settings, strategies as st

from streamtrace.report import config
from streamtrace.report.config import inferred_phases, step_patterns_used

PHASES = ("forward", "backward", "optimizer")
PATTERNS = ("train_step_(\\d+)", "step(\\d+)", "iter_(\\d+)")


def _plain(docs) -> tuple:
    """Both facts read from each whole document with ``json`` and plain loops (as the report read them before)."""
    phases, patterns = {}, []
    for doc in docs:
        summ = json.loads(doc)
        for r in summ.get("ranks") or []:
            for ph in r.get("phases_inferred") or {}:
                phases.setdefault(ph, set()).add(r["rank"])
            v = r.get("step_patterns")
            if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
                for p in v:
                    if p not in patterns:
                        patterns.append(p)
    return {k: sorted(v) for k, v in phases.items()}, patterns


rank_entry = st.fixed_dictionaries({"rank": st.integers(0, 5000)}, optional={
    "phases_inferred": st.dictionaries(st.sampled_from(PHASES), st.integers(0, 9), max_size=3),
    "step_patterns": st.one_of(st.lists(st.sampled_from(PATTERNS), max_size=3), st.just("x"), st.none()),
    "mfu": st.one_of(st.floats(allow_nan=True, allow_infinity=False), st.integers()),   # NaN: json writes it
})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(rank_entry, max_size=6), min_size=1, max_size=3))
def test_facts_equal_a_plain_reading_of_each_whole_document(tmp_path_factory, folders):
    root = tmp_path_factory.mktemp("facts")
    dirs, docs = [], []
    for i, ranks in enumerate(folders):
        d = root / f"an{i}"
        d.mkdir()
        docs.append(json.dumps({"ranks": ranks, "seconds": 1.5}))
        (d / "summary.json").write_text(docs[-1])
        dirs.append(str(d))
    want_phases, want_patterns = _plain(docs)
    assert inferred_phases(dirs) == want_phases
    assert step_patterns_used(dirs) == want_patterns


def test_one_read_per_file_and_a_changed_file_read_again(tmp_path, monkeypatch):
    d = tmp_path / "an"
    d.mkdir()
    p = d / "summary.json"
    p.write_text(json.dumps({"ranks": [{"rank": 3, "phases_inferred": {"forward": 2}}]}))
    opened = []
    real_open = open
    monkeypatch.setattr(config, "open", lambda f, *a, **k: opened.append(f) or real_open(f, *a, **k), raising=False)
    config._cached_facts.cache_clear()
    assert inferred_phases([d]) == {"forward": [3]} and step_patterns_used([d]) == [] and inferred_phases([d])
    assert opened == [str(p)]
    p.write_text(json.dumps({"ranks": [{"rank": 4, "phases_inferred": {"forward": 1}},
                                       {"rank": 5, "step_patterns": ["iter_(\\d+)"]}]}))
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
    assert inferred_phases([d]) == {"forward": [4]} and step_patterns_used([d]) == ["iter_(\\d+)"]
    assert len(opened) == 2


def test_a_folder_that_cannot_be_read_is_left_out(tmp_path):
    good, bad, cut = tmp_path / "good", tmp_path / "bad", tmp_path / "cut"
    for d in (good, bad, cut):
        d.mkdir()
    (good / "summary.json").write_text(json.dumps({"ranks": [{"rank": 1, "phases_inferred": {"backward": 1}}]}))
    (bad / "summary.json").write_text("[1, 2")
    (cut / "summary.json").write_text(json.dumps({"ranks": [{"rank": 7, "phases_inferred": {"forward": 1}}, {}]})[:-20])
    dirs = [good, bad, cut, tmp_path / "gone"]
    assert inferred_phases(dirs) == {"backward": [1]}       # the cut file's first rank is not taken either
    assert step_patterns_used(dirs) == []


def test_a_file_replaced_in_the_same_tick_with_the_same_size_is_read_again(tmp_path):
    d = tmp_path / "an"
    d.mkdir()
    p = d / "summary.json"
    config._cached_facts.cache_clear()
    p.write_text(json.dumps({"ranks": [{"rank": 3, "phases_inferred": {"forward": 1}}]}))
    before = p.stat()
    assert inferred_phases([d]) == {"forward": [3]}
    new = d / "new.json"                                # an atomic replace: same size, same mtime
    new.write_text(json.dumps({"ranks": [{"rank": 4, "phases_inferred": {"optimiz": 1}}]}))
    assert new.stat().st_size == before.st_size
    os.utime(new, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(new, p)
    assert p.stat().st_mtime_ns == before.st_mtime_ns
    assert inferred_phases([d]) == {"optimiz": [4]}


def test_an_unreadable_file_is_not_kept(tmp_path, monkeypatch):
    d = tmp_path / "an"
    d.mkdir()
    p = d / "summary.json"
    p.write_text(json.dumps({"ranks": [{"rank": 2, "step_patterns": ["iter_(\\d+)"]}]}))
    config._cached_facts.cache_clear()
    real_open = open

    def refuse(f, *a, **k):
        raise PermissionError(13, "Permission denied", str(f))
    monkeypatch.setattr(config, "open", refuse, raising=False)
    assert step_patterns_used([d]) == []
    monkeypatch.setattr(config, "open", real_open, raising=False)
    assert step_patterns_used([d]) == ["iter_(\\d+)"]        # (the file unchanged: read now it can be)


def test_a_rank_entry_without_an_integer_rank_keeps_its_step_patterns(tmp_path):
    d = tmp_path / "an"
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({"ranks": [
        {"rank": None, "phases_inferred": {"forward": 1}, "step_patterns": ["it(\\d+)"]},
        {"rank": "x", "phases_inferred": ["backward"]},
        {"rank": 5, "phases_inferred": {"backward": 2}}]}))
    assert step_patterns_used([d]) == ["it(\\d+)"]
    assert inferred_phases([d]) == {"backward": [5]}
