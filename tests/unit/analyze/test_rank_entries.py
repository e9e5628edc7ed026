"""analyze's rank entries spilled as the tasks finish and written into ``summary.json`` one at a time
(``streamtrace.analyze.rank_entries``): what ``analyze`` returns is the file's list, read from it; each
rank's process groups are the ones its own trace lists; nothing of the spill is left behind."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.analyze.outputs import rank_trace_metadata
from streamtrace.analyze.rank_entries import RankEntries, read_rank_entries
from streamtrace.runtime.errors import DataError, StreamtraceError
from streamtrace.synth.job import SynthSpec, generate_job


def _raw_groups(traces: Path) -> dict:
    """``{rank: distributedInfo.pg_config}`` read from the generated trace files with plain json."""
    out = {}
    for p in sorted(traces.rglob("*.json*")):
        with (gzip.open(p, "rt") if p.suffix == ".gz" else open(p)) as f:
            doc = json.load(f)
        di = doc.get("distributedInfo")
        if isinstance(di, dict):
            out[di["rank"]] = di["pg_config"]
    return out


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    d = tmp_path_factory.mktemp("ranks")
    generate_job(d / "traces", SynthSpec(world_size=8, tp=2, pp=2, microbatches=2, steps=1))
    res = analyze([d / "traces"], d / "out", AnalyzeOptions(jobs=2, progress=False))
    return d, res, res["ranks"]          # (the sequence as returned: ``res.summary`` reads it into a list)


def test_analyze_returns_the_list_summary_json_holds(analysed):
    d, res, ranks = analysed
    plain = json.loads((d / "out" / "summary.json").read_bytes())
    assert isinstance(ranks, RankEntries) and len(ranks) == len(plain["ranks"]) == 8
    assert ranks == plain["ranks"] and list(ranks) == plain["ranks"] and ranks != plain["ranks"][:-1]
    assert ranks[0] == plain["ranks"][0] and ranks[-1] == plain["ranks"][-1]
    assert ranks[2:7:2] == plain["ranks"][2:7:2] and [r["rank"] for r in ranks] == list(range(8))
    with pytest.raises(IndexError):
        ranks[8]
    assert not [p.name for p in (d / "out").iterdir() if p.name.startswith(".streamtrace-ranks-")]
    assert type(res.summary["ranks"]) is list and res.summary == plain
    assert json.loads(json.dumps(res.summary)) == plain


def test_each_ranks_process_groups_are_the_ones_its_trace_lists(analysed):
    d, _, _ = analysed
    plain = json.loads((d / "out" / "summary.json").read_bytes())
    raw = _raw_groups(d / "traces")
    assert sorted(raw) == list(range(8)) and len(plain["pg_entries"]) < sum(len(v) for v in raw.values())
    for entry in plain["ranks"]:
        assert rank_trace_metadata(plain, entry)["pg_entries"] == raw[entry["rank"]]


def test_entries_of_a_replaced_file_raise_a_data_error(analysed, tmp_path):
    d, _, given = analysed
    p = tmp_path / "summary.json"
    p.write_bytes((d / "out" / "summary.json").read_bytes())
    ranks = RankEntries(p, given._spans)
    assert ranks[3]["rank"] == 3
    p.write_text('{"ranks": []}')
    with pytest.raises(DataError, match="replaced"):
        ranks[3]
    p.unlink()
    with pytest.raises(DataError, match="cannot read"):
        list(ranks)


def test_read_rank_entries_gives_what_json_loads_gives_one_at_a_time(analysed, tmp_path):
    d, _, _ = analysed
    plain = json.loads((d / "out" / "summary.json").read_bytes())
    meta: dict = {}
    got = list(read_rank_entries(d / "out", meta))
    assert got == plain["ranks"] and meta == {k: v for k, v in plain.items() if k != "ranks"}
    (tmp_path / "summary.json").write_text('{"ranks": [{"rank": 0, "x": NaN, "big": 123456789012345678901234567890, '
                                           '"s": "a\\"b\\u00e9"}], "pg_entries": [], "failed": []}')
    meta = {}
    got = list(read_rank_entries(tmp_path, meta))
    want = json.loads((tmp_path / "summary.json").read_text())
    assert got[0]["big"] == want["ranks"][0]["big"] and got[0]["s"] == 'a"bé' and got[0]["x"] != got[0]["x"]
    assert meta == {"pg_entries": [], "failed": []}


@pytest.mark.parametrize("text, match", [
    ('{"pg_entries": []}', "not an analysis summary"),
    ('{"ranks": {"rank": 0}}', "not an analysis summary"),
    ('[{"rank": 0}]', "not an analysis summary"),
    ('{"ranks": [{"rank": 0, "source": "a"}, {"rank": 0, "source": "b"}]}', "listed twice"),
    ('{"ranks": [{"rank": -1}]}', "is not"),
    ('{"ranks": [{"rank": 0}, 7]}', "invalid JSON"),
    ('{"ranks": [{"rank": 0}', "invalid JSON"),
])
def test_read_rank_entries_of_a_damaged_summary_raise_a_data_error(tmp_path, text, match):
    (tmp_path / "summary.json").write_text(text)
    with pytest.raises(DataError, match=match):
        list(read_rank_entries(tmp_path, {}))
    with pytest.raises(StreamtraceError, match="not an analysed folder"):
        list(read_rank_entries(tmp_path / "nowhere", {}))
