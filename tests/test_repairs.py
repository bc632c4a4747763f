"""Repairs that cannot make things worse (issue 9).

``rebuild`` folds the new views in memory first and replaces checkpoints only
once the whole fold has succeeded; a log that fails closed half-way leaves
every file under ``.ctxledger/`` byte for byte as it was, and the store that
asked keeps serving what it served. The same holds for every other command
that replaces a checkpoint (``checkpoint``, a writer's close).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import blake3
import cbor2
import pytest
from cache_strategies import tree_bytes

from eventstore import CorruptLogError, LedgerError, LedgerIOError, _osio
from eventstore.frame import GENESIS_DIGEST, SEGMENT_HEADER_SIZE, walk_frames
from projections import ContextStore, store_dir
from projections.store import projections


def frames_of(seg: Path) -> list[tuple[int, int, int]]:
    """``(offset, payload start, payload end)`` of every frame of a one-segment log."""
    data = seg.read_bytes()
    return [(off, p0, p1) for off, _e, _f, _c, _d, p0, p1 in
            walk_frames(data, SEGMENT_HEADER_SIZE, GENESIS_DIGEST, 1)]


def only_segment(root: Path) -> Path:
    (seg,) = sorted((store_dir(root) / "log").glob("*.seg"))
    return seg


def corrupt_frame(root: Path, index: int) -> None:
    """Flip one payload byte of frame ``index`` in place (bit rot): valid frames follow."""
    seg = only_segment(root)
    _off, p0, p1 = frames_of(seg)[index]
    raw = bytearray(seg.read_bytes())
    raw[(p0 + p1) // 2] ^= 0xFF
    seg.write_bytes(bytes(raw))


FRUIT = ("apple", "banana", "cherry", "damson", "elder", "fig")


def build(root: Path) -> list[str]:
    """Six batches of one packet each, every view checkpointed at the head; the keys."""
    with ContextStore.open(root) as st:
        keys = [st.put({"target": "t", "summary": f"alpha {w}"}).cache_key for w in FRUIT]
        st.checkpoint()
    return keys


def answers(st: ContextStore, keys: list[str], query: str = "alpha") -> Any:
    got = [st.get(k) for k in keys]
    return (st.list(limit=100), got, [(h.cache_key, h.snippet) for h in st.recall(query)])


@pytest.mark.parametrize("projection", [None, "cache", "recall"])
def test_a_rebuild_that_meets_corruption_changes_no_file(
    tmp_path: Path, projection: str | None
) -> None:
    build(tmp_path)
    corrupt_frame(tmp_path, 2)
    before = tree_bytes(store_dir(tmp_path))
    with ContextStore.open(tmp_path) as st:
        with pytest.raises(CorruptLogError):
            st.rebuild(projection)
    assert tree_bytes(store_dir(tmp_path)) == before
    # and a fresh process still loads the intact checkpoints instead of refolding
    with ContextStore.open(tmp_path, readonly=True) as st:
        assert {v["loaded_from"] for v in st.stats()["views"].values()} == {"primary"}


def test_the_store_that_asked_keeps_serving_after_a_failed_rebuild(tmp_path: Path) -> None:
    keys = build(tmp_path)
    with ContextStore.open(tmp_path) as st:
        # answers that need no byte of the frame about to be damaged
        want = answers(st, [keys[0], keys[-1]], "apple fig")
        states = {n: v.state for n, v in st.runner.views.items()}
        corrupt_frame(tmp_path, 2)  # under the open store
        with pytest.raises(CorruptLogError):
            st.rebuild()
        assert {n: v.state for n, v in st.runner.views.items()} == states
        assert answers(st, [keys[0], keys[-1]], "apple fig") == want
        assert {v["loaded_from"] for v in st.stats()["views"].values()} == {"primary"}
        with pytest.raises(CorruptLogError):  # the damaged range itself still fails closed
            st.get(keys[2])


def test_a_rebuild_replaces_the_checkpoints_by_rename(tmp_path: Path) -> None:
    keys = build(tmp_path)
    ckdir = store_dir(tmp_path) / "checkpoints"
    with ContextStore.open(tmp_path) as st:
        st.put({"target": "t", "summary": "alpha later"})
        st.checkpoint()  # now a primary and a backup of each view
        want = answers(st, keys)
        report = st.rebuild()
        assert report["events"] == 7
        assert answers(st, keys) == want
    # the new primaries only: the old files are neither kept nor rotated into backups
    assert sorted(p.name for p in ckdir.iterdir()) == [
        f"{name}.ckpt" for name in sorted(v.name for v in projections())]
    with ContextStore.open(tmp_path, readonly=True) as st:
        assert {v["loaded_from"] for v in st.stats()["views"].values()} == {"primary"}
        assert answers(st, keys) == want


def test_a_rebuild_whose_checkpoint_write_fails_leaves_the_old_ones(
    tmp_path: Path, monkeypatch: Any
) -> None:
    build(tmp_path)
    before = tree_bytes(store_dir(tmp_path))

    def no_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with ContextStore.open(tmp_path) as st:
        monkeypatch.setattr(_osio, "fsync", no_fsync)
        with pytest.raises(LedgerIOError, match="cannot write checkpoint"):
            st.rebuild()
        monkeypatch.undo()
        after = tree_bytes(store_dir(tmp_path))
    assert after == before


def test_a_checkpoint_that_meets_corruption_changes_no_file(tmp_path: Path) -> None:
    """``checkpoint`` (and a writer's close) write only after every fold succeeded."""
    build(tmp_path)
    ckdir = store_dir(tmp_path) / "checkpoints"
    for name in ("recall.ckpt", "recall.ckpt.bak"):
        (ckdir / name).unlink(missing_ok=True)  # recall must refold, the cache need not
    corrupt_frame(tmp_path, 2)
    before = tree_bytes(store_dir(tmp_path))
    st = ContextStore.open(tmp_path)
    with pytest.raises(CorruptLogError):
        st.checkpoint()
    assert tree_bytes(store_dir(tmp_path)) == before
    st.close()  # its close checkpoint meets the same damage: still nothing written
    assert tree_bytes(store_dir(tmp_path)) == before


def test_a_cache_checkpoint_naming_a_missing_target_is_an_error_rebuild_repairs(
    tmp_path: Path,
) -> None:
    """Regression (the torture suite's forged checkpoint bodies): a cache checkpoint
    whose target numbers point past its list of targets, under a right checksum and
    watermark, made get and list raise IndexError. Now they raise LedgerError naming
    the fix, and ``rebuild`` refolds the view from the log."""
    keys = build(tmp_path)
    with ContextStore.open(tmp_path, readonly=True) as st:
        good = answers(st, keys)
    path = store_dir(tmp_path) / "checkpoints" / "cache.ckpt"
    raw = path.read_bytes()
    (hlen,) = struct.unpack_from("<I", raw, 8)
    body_at = 12 + hlen
    (mlen,) = struct.unpack_from("<I", raw, body_at)
    n = cbor2.loads(raw[body_at + 4 : body_at + 4 + mlen])["n"]
    end = len(raw) - 32
    forged = raw[: end - 4 * n] + struct.pack(f"<{n}i", *[7] * n)  # one target: #0
    path.write_bytes(forged + blake3.blake3(forged).digest())
    with ContextStore.open(tmp_path, readonly=True) as st:
        assert st.stats()["views"]["cache"]["loaded_from"] == "primary"  # it checks out
        with pytest.raises(LedgerError, match="rebuild"):
            st.get(keys[0])
        with pytest.raises(LedgerError, match="rebuild"):
            st.list()
    with ContextStore.open(tmp_path) as st:
        st.rebuild("cache")
    with ContextStore.open(tmp_path, readonly=True) as st:
        assert answers(st, keys) == good
