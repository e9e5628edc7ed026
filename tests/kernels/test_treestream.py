"""The chunked call-tree pass (numba) against its whole-track twin; the string gather;
the external sorter and the compressed stores."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.kernels import reference as ref
from streamtrace.kernels.treestream import REC_DTYPE, TreeStream, gather_strings
from streamtrace.events.dataset import PartitionWriter, StringPool
from streamtrace.events.codec import CODECS, pack, unpack
from streamtrace.events.sort import ExternalSorter
from streamtrace.events.store import STORE_DTYPE, MemoryStore, SpillStore, load_block

GPU_I32 = ("launch_op", "launching", "annot", "top", "dim", "comm_row")


def _gpu(m, comm0, names=np.int32):
    g = {k: np.full(m, -7, names) for k in GPU_I32}
    g["comm_row"] = np.asarray(comm0, np.int32)
    g["t_launch"] = np.full(m, -7, np.int64)
    return g


@st.composite
def tracks(draw):
    n = draw(st.integers(0, 40))
    big = draw(st.booleans())                 # a few long events make deep nesting and overruns
    span = 200 if big else 60
    s = draw(st.lists(st.integers(0, span), min_size=n, max_size=n))
    d = draw(st.lists(st.integers(0, 80 if big else 25), min_size=n, max_size=n))
    rec = np.zeros(n, REC_DTYPE)
    rec["s"] = s
    rec["e"] = np.asarray(s) + np.asarray(d, np.int64) if n else []
    rec["idx"] = np.asarray(draw(st.permutations(list(range(0, 3 * n, 3)))), np.int64) if n else []
    rec["name"] = draw(st.lists(st.integers(-1, 6), min_size=n, max_size=n))
    rec["flags"] = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    rec["comm"] = draw(st.lists(st.integers(-1, 4), min_size=n, max_size=n))
    m = draw(st.integers(0, 30))
    gs = np.asarray(draw(st.lists(st.integers(0, 300), min_size=m, max_size=m)), np.int64)
    ge = gs + np.asarray(draw(st.lists(st.integers(0, 40), min_size=m, max_size=m)), np.int64)
    owner = draw(st.lists(st.integers(-1, n - 1) if n else st.just(-1), min_size=m, max_size=m))
    comm0 = draw(st.lists(st.sampled_from([-1, -1, 0, 5]), min_size=m, max_size=m))
    rows = sorted(range(m), key=lambda g: (owner[g], draw(st.integers(0, 3))))   # grouped by owner
    rows = [g for g in rows if owner[g] >= 0]
    for i in range(n):
        mine = [k for k, g in enumerate(rows) if owner[g] == i]
        rec["own_off"][i] = mine[0] if mine else 0
        rec["own_cnt"][i] = len(mine)
    clamp = draw(st.sampled_from([0, 1, 3, 1000]))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    return rec, np.asarray(rows, np.int64), gs, ge, comm0, clamp, cuts


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tracks(), st.sampled_from([1, 2, 64]), st.sampled_from([np.int32, np.int16]))
def test_tree_stream_matches_twin(case, arena, names):
    """Also with the name columns as int16 (what the analysis uses for small string tables)."""
    rec, rows, gs, ge, comm0, clamp, cuts = case
    order = np.lexsort((rec["idx"], -rec["e"], rec["s"]))
    srt = rec[order]
    got_gpu, want_gpu = _gpu(len(gs), comm0, names), _gpu(len(gs), comm0)
    ts = TreeStream(rows, gs, ge, got_gpu, clamp_ns=clamp, arena=arena)
    parts = [ts.feed(srt[a:b]) for a, b in zip([0] + cuts, cuts + [len(srt)])] + [ts.finish()]
    got = np.concatenate(parts)
    got = got[np.argsort(got["idx"])]
    want, ncl, nov = ref.tree_stream_ref(rec, rows, gs, ge, want_gpu, clamp)
    assert got.tolist() == want.tolist()
    assert (ts.n_clamped, ts.n_overrun) == (ncl, nov)
    for k in want_gpu:
        assert got_gpu[k].dtype == (names if k in GPU_I32[:5] else want_gpu[k].dtype), k
        assert got_gpu[k].tolist() == want_gpu[k].tolist(), k


def test_tree_stream_rejects_unsorted_input():
    rec = np.zeros(2, REC_DTYPE)
    rec["s"] = [5, 1]
    rec["e"] = [6, 2]
    ts = TreeStream(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), _gpu(0, []))
    with pytest.raises(ValueError, match="order"):
        ts.feed(rec)
    ts.feed(rec[:1])
    with pytest.raises(ValueError, match="order"):
        ts.feed(rec[1:])
    bad = np.zeros(1, REC_DTYPE)
    bad["s"], bad["e"] = 10, 9
    with pytest.raises(ValueError, match="end < start"):
        TreeStream(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), _gpu(0, [])).feed(bad)
    bad["e"], bad["own_cnt"], bad["own_off"] = 11, 2, 0          # only one owned row exists
    with pytest.raises(ValueError, match="outside own_rows"):
        TreeStream(np.zeros(1, np.int64), np.zeros(1, np.int64), np.ones(1, np.int64), _gpu(1, [-1])).feed(bad)
    with pytest.raises(ValueError, match="GPU rows"):
        TreeStream(np.asarray([1]), np.zeros(1, np.int64), np.ones(1, np.int64), _gpu(1, [-1]))
    with pytest.raises(TypeError, match="int32"):
        TreeStream(np.zeros(0, np.int64), np.zeros(2, np.int64), np.ones(2, np.int64), _gpu(1, [-1]))
    mixed = _gpu(1, [-1], np.int16)
    mixed["dim"] = mixed["dim"].astype(np.int32)
    with pytest.raises(TypeError, match="int16"):
        TreeStream(np.zeros(0, np.int64), np.zeros(1, np.int64), np.ones(1, np.int64), mixed)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=6), max_size=8), st.data())
def test_gather_strings_matches_twin(strings, data):
    enc = [s.encode() for s in strings]
    blob = np.frombuffer(b"".join(enc), np.uint8)
    offs = np.concatenate([[0], np.cumsum([len(b) for b in enc])]).astype(np.int64)
    idx = np.asarray(data.draw(st.lists(st.integers(-1, len(strings) - 1), max_size=20)), np.int64)
    o1, d1 = gather_strings(blob, offs, idx)
    o2, d2 = ref.gather_strings_ref(blob, offs, idx)
    assert o1.dtype == o2.dtype == np.int32 and o1.tolist() == o2.tolist() and d1.tobytes() == d2.tobytes()
    assert [d1[o1[i]:o1[i + 1]].tobytes().decode() for i in range(len(idx))] == \
        [strings[j] if j >= 0 else "" for j in idx.tolist()]
    for bad in (len(strings), -2):
        with pytest.raises(ValueError):
            gather_strings(blob, offs, np.asarray([bad]))
        with pytest.raises(ValueError):
            ref.gather_strings_ref(blob, offs, np.asarray([bad]))


# -- store and external sort --------------------------------------------------------------

def _rows(rng, n):
    a = np.zeros(n, STORE_DTYPE)
    for f in STORE_DTYPE.names:
        a[f] = rng.integers(-5, 1 << 40, n) if a[f].dtype == np.int64 else rng.integers(-1, 1000, n)
    return a


def test_pack_roundtrip():
    rng = np.random.default_rng(0)
    a = _rows(rng, 1000)
    a["ts"][0] = np.iinfo(np.int64).max
    a["ts"][1] = np.iinfo(np.int64).min
    assert unpack(pack(a, ("ts",)), STORE_DTYPE, len(a), ("ts",)).tobytes() == a.tobytes()
    assert len(unpack(pack(a[:0]), STORE_DTYPE, 0)) == 0


@pytest.mark.parametrize("spill", [False, True])
def test_stores_keep_order_by_key(tmp_path, spill):
    rng = np.random.default_rng(1)
    store = SpillStore(tmp_path, 37) if spill else MemoryStore(37)
    want: dict = {}
    for _ in range(40):
        key = ("cpu", -1, int(rng.integers(3)), 7)
        rows = _rows(rng, int(rng.integers(0, 20)))
        store.add(key, rows)
        want.setdefault(key, []).append(rows)
    exported = store.export()
    for key, parts in want.items():
        w = np.concatenate(parts)
        assert store.rows(key) == len(w)
        assert store.get(key).tobytes() == w.tobytes()
        assert all(len(b) < 37 + 20 for b in store.blocks(key))      # flushed every 37 rows
        assert np.concatenate([load_block(r) for r in exported[key]]).tobytes() == w.tobytes()
    k = next(iter(want))
    assert store.take(k).tobytes() == np.concatenate(want[k]).tobytes()
    assert k not in store.keys() and store.rows(k) == 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 5)), max_size=200), st.integers(1, 50),
       st.integers(1, 20), st.lists(st.integers(1, 30), max_size=10), st.booleans(), st.sampled_from(CODECS),
       st.one_of(st.none(), st.integers(1, 60)))
def test_external_sorter_sorts(tmp_path, keys, block, sub, adds, on_disk, codec, merge_rows):
    dt = np.dtype([("a", "i8"), ("b", "i4"), ("i", "i8")])
    recs = np.zeros(len(keys), dt)
    recs["a"] = [k[0] for k in keys]
    recs["b"] = [k[1] for k in keys]
    recs["i"] = np.arange(len(keys))
    so = ExternalSorter(dt, lambda r: [r["a"], -r["b"].astype(np.int64), r["i"]], block,
                        folder=tmp_path if on_disk else None, sub_rows=sub, delta=("i",), codec=codec,
                        merge_rows=merge_rows)
    pos = 0
    for n in adds + [len(recs)]:
        so.add(recs[pos:pos + n])
        pos += n
    runs = -(-len(recs) // so.block_rows)
    got = list(so.chunks())
    out = np.concatenate(got) if got else np.zeros(0, dt)
    want = recs[np.lexsort((recs["i"], -recs["b"], recs["a"]))]
    assert out.tobytes() == want.tobytes()
    if merge_rows is not None and runs > 1:
        # the merge's bound: chunks of at most max(merge_rows, 2 sub-blocks) records; more runs
        # than that bound holds sub-blocks are first merged into longer ones
        assert max(len(c) for c in got) <= max(merge_rows, 2 * so.sub_rows)
        fan_in = max(2, merge_rows // so.sub_rows)
        assert (so.passes > 0) == (runs > fan_in)
        assert so.passes <= 2 * runs


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(0, 30), max_size=200), st.integers(1, 40), st.integers(1, 10),
       st.one_of(st.none(), st.integers(1, 30)))
def test_external_sorter_hand_over(tmp_path, keys, block, sub, merge_rows):
    """Runs handed over (through pickle, as to another process) sort as the sorter itself would:
    the records in key order, the named file gone once the taker closes, nothing left behind."""
    import pickle
    folder = tmp_path / f"h{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    dt = np.dtype([("k", "i8"), ("i", "i8")])
    recs = np.zeros(len(keys), dt)
    recs["k"], recs["i"] = keys, np.arange(len(keys))
    mk = dict(sub_rows=sub, delta=("i",), codec="lz4", merge_rows=merge_rows)
    so = ExternalSorter(dt, lambda r: [r["k"], r["i"]], block, folder=folder, path=str(folder / "runs"), **mk)
    so.add(recs)
    handed = pickle.loads(pickle.dumps(so.hand_over()))
    so.close()                                   # the giver lets go of nothing the taker needs
    assert handed["count"] == len(keys)
    taker = ExternalSorter(dt, lambda r: [r["k"], r["i"]], block, folder=folder, **mk)
    taker.take_over(handed)
    assert not any(folder.iterdir())             # unlinked at once: lives while the taker holds it
    got = list(taker.chunks())
    out = np.concatenate(got) if got else np.zeros(0, dt)
    assert out.tobytes() == recs[np.lexsort((recs["i"], recs["k"]))].tobytes()


def test_external_sorter_named_file_removed_without_hand_over(tmp_path):
    dt = np.dtype([("k", "i8")])
    so = ExternalSorter(dt, lambda r: [r["k"]], 4, folder=tmp_path, path=str(tmp_path / "runs"))
    so.add(np.arange(10, dtype=np.int64).view(dt))
    assert (tmp_path / "runs").exists()
    so.close()
    assert not any(tmp_path.iterdir())
    with pytest.raises(ValueError):
        ExternalSorter(dt, lambda r: [r["k"]], 4).hand_over()


@pytest.mark.parametrize("on_disk", [False, True])
def test_external_sorter_bounded_merge_hand_checked(tmp_path, on_disk):
    """12 runs of 4 records, sub-blocks of 2, merge_rows 8: at most 4 runs merged at once (the
    first 9 into longer runs, in three passes), windows of one sub-block; the output is sorted."""
    dt = np.dtype([("k", "i8")])
    vals = np.arange(48)[::-1] % 13
    so = ExternalSorter(dt, lambda r: [r["k"]], 4, folder=tmp_path if on_disk else None, sub_rows=2, merge_rows=8)
    so.add(vals.astype(np.int64).view(dt))
    assert len(so.runs) == 12
    got = list(so.chunks())
    assert np.concatenate(got)["k"].tolist() == sorted(vals.tolist())
    assert max(len(c) for c in got) <= 8
    assert so.passes == 4 + 4 + 3    # 12 runs -> 9 (4 merged), 9 -> 6 (4), 6 -> 4 (3)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(-2**63, 2**63 - 1), st.integers(-2**31, 2**31 - 1)), max_size=300),
       st.sampled_from(CODECS), st.sampled_from([(), ("a",), ("a", "b-a")]))
def test_pack_unpack_round_trip(rows, codec, delta):
    """Every codec and delta coding gives the records back bit for bit (int64 wrapping included)."""
    dt = np.dtype([("a", "i8"), ("b", "i8"), ("c", "i4")])
    recs = np.zeros(len(rows), dt)
    recs["a"] = [r[0] for r in rows]
    recs["b"] = [r[0] // 3 for r in rows]
    recs["c"] = [r[1] for r in rows]
    got = unpack(pack(recs, delta, codec), dt, len(recs), delta, codec)
    assert got.tobytes() == recs.tobytes()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(-3, 3), max_size=120), st.integers(1, 20), st.integers(1, 7))
def test_external_sorter_with_equal_keys(tmp_path, values, block, sub):
    dt = np.dtype([("c", "i8")])
    so = ExternalSorter(dt, lambda r: [r["c"]], block, folder=tmp_path, sub_rows=sub)
    so.add(np.asarray(values, np.int64).view(dt))
    got = [c["c"] for c in so.chunks()]
    assert (np.concatenate(got).tolist() if got else []) == sorted(values)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(0, 40), max_size=6), st.integers(1, 17))
def test_partition_writer_row_groups(tmp_path, sizes, rows):
    """Rows given in pieces come back whole, in row groups of ``rows``; string ids -1 read as ""."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    schema = pa.schema([("s", pa.string()), ("i", pa.int64()), ("d", pa.int32())])
    words = ["", "é", "x" * 300, "aten::mm"]
    pool = StringPool(words)
    rng = np.random.default_rng(len(sizes) * 100 + rows)
    parts = [{"s": rng.integers(-1, 4, n), "i": rng.integers(-5, 1 << 50, n), "d": rng.integers(-9, 9, n)}
             for n in sizes]
    with PartitionWriter(tmp_path, 3, None, schema, "t", {"s": pool}, rows=rows) as w:
        for p in parts:
            w.write(p)
    f = pq.ParquetFile(w.path)
    t = f.read()
    assert t.schema == schema and f.metadata.metadata is None
    n = sum(sizes)
    assert [f.metadata.row_group(g).num_rows for g in range(f.metadata.num_row_groups)] == \
        [rows] * (n // rows) + ([n % rows] if n % rows else [])
    want_s = [words[j] if j >= 0 else "" for p in parts for j in p["s"].tolist()]
    assert t["s"].to_pylist() == want_s
    assert t["i"].to_pylist() == [v for p in parts for v in p["i"].tolist()]
    assert t["d"].to_pylist() == [v for p in parts for v in p["d"].tolist()]
