"""The stores give back each key's rows in the order they were added, whatever mix of small keys
(kept in a flush's shared block) and large ones, flushes, drops and exports: checked against a plain
``{key: [rows]}`` model."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtrace.events.store import STORE_DTYPE, MemoryStore, SpillStore, load_block


def _rows(n, start):
    r = np.zeros(n, STORE_DTYPE)
    r["ts"] = np.arange(start, start + n) * 7 - 50
    r["dur"] = np.arange(n) % 5
    r["name"] = np.arange(n) % 3
    r["correlation"] = np.arange(start, start + n)
    return r


ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 5), st.sampled_from([1, 2, 3, 8, 9, 30])),
    st.tuples(st.just("flush"), st.just(0), st.just(0)),
    st.tuples(st.just("drop"), st.integers(0, 5), st.just(0))), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops, st.sampled_from([4, 16, 64]), st.booleans(), st.booleans(), st.sampled_from([1, 300, 1 << 28]))
def test_store_gives_rows_back_in_order(tmp_path_factory, script, chunk, spill, export, file_bytes):
    folder = tmp_path_factory.mktemp("s")
    store = SpillStore(folder, chunk) if spill else MemoryStore(chunk)
    store.FILE_BYTES = file_bytes       # (a spill file per block, a few blocks a file, one file)
    model: dict = {}
    dropped = set()             # (the analysis adds nothing to a key after dropping it)
    at = 0
    for op, k, n in script:
        key = ("cpu", 0, 100, k)
        if op == "add" and key not in dropped:
            store.add(key, _rows(n, at))
            model.setdefault(key, []).append(_rows(n, at))
            at += n
        elif op == "flush":
            store.flush()
        elif op == "drop" and key in model:
            store.drop(key)
            del model[key]
            dropped.add(key)
    if export:
        refs = store.export()
        assert sorted(refs, key=repr) == sorted(model, key=repr)
        for key, want in model.items():
            assert np.concatenate([load_block(r) for r in refs[key]]).tobytes() == np.concatenate(want).tobytes()
        return
    assert store.keys() == sorted(model, key=repr)
    for key, want in model.items():
        want = np.concatenate(want)
        assert store.rows(key) == len(want)
        got = list(store.blocks(key))
        assert np.concatenate(got).tobytes() == want.tobytes() == store.get(key).tobytes()
        rows, first, last = store.block_spans(key)
        assert rows.tolist() == [len(b) for b in got]
        assert first.tolist() == [int(b["ts"].min()) for b in got]
        assert last.tolist() == [int((b["ts"] + b["dur"]).max()) for b in got]
        assert all(store.block(key, j).tobytes() == b.tobytes() for j, b in enumerate(got))
    for key in model:
        store.drop(key)
        assert store.rows(key) == 0 and store.get(key).size == 0
    assert store.keys() == [] and all(b[0] is None for b in getattr(store, "shared", []))
    if spill:                           # every key dropped: no file left but the one being written
        assert len(list(folder.iterdir())) <= 1


def test_spill_files_are_shared_by_keys_and_removed_when_their_keys_are(tmp_path):
    """Keys' blocks share a spill file until it holds FILE_BYTES (a file created per key was ~1 ms
    of CPU each on ext4 here); a full file goes once every key with a block in it is dropped."""
    store = SpillStore(tmp_path, 4)
    for k in range(10):
        store.add(("cpu", 0, 100, k), _rows(8, 10 * k))
    store.flush()
    assert len(list(tmp_path.iterdir())) == 1
    store.FILE_BYTES = 1                # from now on, a new file for every block
    for k in range(2):
        store.add(("cpu", 0, 200, k), _rows(4, 10 * k))
    files = sorted(tmp_path.iterdir())
    assert len(files) == 3
    store.drop(("cpu", 0, 200, 0))      # its file is full (not the one being written): removed
    assert sorted(tmp_path.iterdir()) == [f for f in files if f.name != "1.bin"]
    for k in range(10):
        store.drop(("cpu", 0, 100, k))
    assert [f.name for f in tmp_path.iterdir()] == ["2.bin"]
    assert store.get(("cpu", 0, 200, 1)).tobytes() == _rows(4, 10).tobytes()


def test_one_event_keys_share_a_block():
    """A million one-event threads (issue 49): their rows in one shared block, not a block each."""
    store = MemoryStore(1000)
    for k in range(2500):
        store.add(("cpu", 0, k, k), _rows(1, k))
    store.flush()
    assert not store.refs and len(store.small) == 2500 and len(store.shared) == 3
    assert store.get(("cpu", 0, 7, 7)).tobytes() == _rows(1, 7).tobytes()


def test_merged_store_removes_a_spill_file_when_its_last_key_is_dropped(tmp_path):
    """Split ranges' stores merged (``MergedStore``): keys share their range's spill file, so dropping
    one key keeps the file for the others; the file goes with its last key."""
    from streamtrace.events.store import MergedStore
    merged, want = MergedStore(4), {}
    for r in range(2):
        store = SpillStore(tmp_path / f"r{r}", 4)
        store.folder.mkdir()
        for k in range(3):
            rows = _rows(6, 100 * r + 10 * k)
            store.add(("cpu", 0, 100, k), rows)
            want.setdefault(("cpu", 0, 100, k), []).append(rows)
        merged.add_range(store.export(), np.arange(8, dtype=np.int64), 0)      # (string ids as they are)
    files = sorted(tmp_path.glob("r*/*.bin"))
    assert len(files) == 2                           # one a range, every key's blocks in it
    for k in range(3):
        key = ("cpu", 0, 100, k)
        assert merged.get(key).tobytes() == np.concatenate(want[key]).tobytes()
        merged.drop(key)
        assert sorted(tmp_path.glob("r*/*.bin")) == (files if k < 2 else [])
