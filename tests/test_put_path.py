"""The put path and point reads: encode once, fold from memory, authenticate by content."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import blake3
import cbor2
import pytest
from cache_strategies import packets
from hypothesis import example, given, settings
from hypothesis import strategies as st

from eventstore import Event, Ledger, LedgerError, MemoryLog
from eventstore.event import build_event
from eventstore.frame import FOOTER_SIZE, FRAME_HEADER, FRAME_HEADER_SIZE, SEGMENT_HEADER_SIZE
from projections import ContextStore, cache_key_of, canonical_bytes
from projections.packet import encode_packet, packet_bytes_in_row, packet_data
from projections.store import store_dir

_keys = st.text(alphabet="abcé_z\u4e00", min_size=0, max_size=6)
_plain = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=5),
              st.floats(allow_nan=False)),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=12,
)


@given(st.dictionaries(_keys, _plain, max_size=6))
@example({"b": 1, "a": 2, "aa": 3, "é": 4, "z" * 30: 5, "y" * 25: 6})
@example({"f": 1.5, "n": [1.0, -0.0]})
def test_encode_packet_equals_canonical_cbor(packet: dict[str, Any]) -> None:
    """The fast path (sorted copy + plain CBOR) is byte for byte the canonical encoding."""
    body, canon, depth = encode_packet(packet)
    assert canon == canonical_bytes(packet)
    assert body == cbor2.loads(canon)
    assert list(_all_keys(body)) == list(_all_keys(cbor2.loads(canon)))  # same key order
    assert depth == _depth(body)


def _all_keys(v: Any) -> Any:
    if isinstance(v, dict):
        for k, x in v.items():
            yield k
            yield from _all_keys(x)
    elif isinstance(v, list):
        for x in v:
            yield from _all_keys(x)


def _depth(v: Any) -> int:
    if isinstance(v, dict):
        return 1 + max((_depth(x) for x in v.values()), default=0)
    if isinstance(v, list):
        return 1 + max((_depth(x) for x in v), default=0)
    return 0


def test_build_event_equals_event() -> None:
    a = build_event("k.x", "key", {"a": [1]}, 7, 1.5)
    assert a == Event("k.x", "key", {"a": [1]}, seq=7, at=1.5)
    assert repr(a) == repr(Event("k.x", "key", {"a": [1]}, seq=7, at=1.5))


@settings(max_examples=30, deadline=None)
@given(packets())
def test_packet_bytes_stand_verbatim_at_the_end_of_the_row(packet: dict[str, Any]) -> None:
    body, canon, depth = encode_packet(packet)
    for meta in (None, {"tool": "x", "n": 2}):
        with MemoryLog() as log:
            log.append([Event("cache.put", cache_key_of(canon), packet_data(canon, depth, meta))])
            stored = log.read_raw(1)
            assert stored is not None
            assert packet_bytes_in_row(stored.row, len(canon)) == canon
            assert stored.event().data["packet"] == body


def test_a_store_over_memory_log_matches_the_file_store(tmp_path: Path) -> None:
    pkts = [{"target": "t.a", "summary": f"auth gap {i}", "paths": [f"src/m{i}.py"]}
            for i in range(50)]
    with MemoryLog() as log:
        with ContextStore.open(tmp_path / "mem", log=log) as mem, \
                ContextStore.open(tmp_path / "file") as disk:
            a = [r.cache_key for r in mem.put_many(pkts)]
            b = [r.cache_key for r in disk.put_many(pkts)]
            assert a == b
            assert mem.get(a[3]).body == disk.get(b[3]).body  # type: ignore[union-attr]
            ha = [(h.cache_key, h.score) for h in mem.recall("auth gap 7")]
            hb = [(h.cache_key, h.score) for h in disk.recall("auth gap 7")]
            assert ha == hb and ha
        assert log.head == 50  # the store leaves a log it was given open


def test_put_many_folds_from_memory_without_reading_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkts = [{"target": "t", "summary": f"s {i}"} for i in range(3000)]
    with ContextStore.open(tmp_path) as store:
        store.put_many(pkts[:10])
        store.recall("s")  # both views loaded
        def no_reads(*a: Any, **k: Any) -> Any:
            raise AssertionError("put_many read the log back")
        monkeypatch.setattr(store.ledger, "read", no_reads)
        monkeypatch.setattr(store.ledger, "read_batches", no_reads)
        res = store.put_many(pkts[10:])
        monkeypatch.undo()
        assert store.get(res[-1].cache_key).body == pkts[-1]  # type: ignore[union-attr]
        assert len(store.recall("s", limit=5000)) == 3000


def test_checkpoints_keep_to_a_tenth_of_a_writers_time(tmp_path: Path) -> None:
    from projections.config import StoreConfig

    cfg = StoreConfig(checkpoint_every_events=1, checkpoint_every_seconds=1e9)
    with ContextStore.open(tmp_path, config=cfg) as store:
        store.put({"target": "t", "summary": "a"})
        runner = store.runner
        assert runner.views["cache"].checkpointed_seq == 1
        runner._ckpt_seconds = 1e6  # the last checkpoint "took" very long: wait 9x that
        store.put({"target": "t", "summary": "b"})
        assert runner.views["cache"].checkpointed_seq == 1
        runner._ckpt_seconds = 0.0
        store.put({"target": "t", "summary": "c"})
        assert runner.views["cache"].checkpointed_seq == 3


def _rewrite_last_frame(seg: Path, old: bytes, new: bytes) -> None:
    """Replace ``old`` by ``new`` (same length) in the last frame's payload and recompute
    its header crc and chain digest: what an attacker who read docs/format.md can do."""
    data = bytearray(seg.read_bytes())
    assert len(old) == len(new) and data.count(old) == 1
    data[data.index(old) : data.index(old) + len(old)] = new
    prev = data[24:56]  # the segment header's prev_digest: this is the segment's only frame
    off = SEGMENT_HEADER_SIZE
    magic, _crc, n, count, first, _digest = FRAME_HEADER.unpack_from(data, off)
    h = blake3.blake3(bytes(prev))
    h.update(bytes(data[off + 8 : off + 24]))
    h.update(bytes(data[off + FRAME_HEADER_SIZE : off + FRAME_HEADER_SIZE + n]))
    data[off + 24 : off + 56] = h.digest()
    data[off + 4 : off + 8] = struct.pack("<I", zlib.crc32(bytes(data[off + 8 : off + 56])))
    assert len(data) >= off + FRAME_HEADER_SIZE + n + FOOTER_SIZE
    seg.write_bytes(bytes(data))


def test_a_rewritten_body_with_recomputed_checksums_is_never_served(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path) as store:
        key = store.put({"target": "t", "summary": "pay alice"}).cache_key
    seg = next((store_dir(tmp_path) / "log").glob("*.seg"))
    _rewrite_last_frame(seg, b"pay alice", b"pay mallo")
    with Ledger.open(store_dir(tmp_path) / "log", readonly=True) as led:
        assert led.verify().ok  # the chain alone cannot tell (no anchor)
    with ContextStore.open(tmp_path, readonly=True) as store:
        with pytest.raises(LedgerError, match="does not match its cache_key"):
            store.get(key)
        with pytest.raises(LedgerError, match="does not match its cache_key"):
            store.recall("pay")


def test_point_read_of_a_corrupt_body_fails_closed(tmp_path: Path) -> None:
    """Bit rot inside a big batch: the point read's content check fails, the verified
    read then names the segment and offset."""
    from eventstore import CorruptLogError

    with ContextStore.open(tmp_path) as store:
        res = store.put_many([{"target": "t", "summary": f"item {i:05d}"} for i in range(2000)])
        store.put({"target": "t", "summary": "after"})
    seg = next((store_dir(tmp_path) / "log").glob("*.seg"))
    data = bytearray(seg.read_bytes())
    i = data.index(b"item 01234")
    data[i + 5] ^= 0x01
    seg.write_bytes(bytes(data))
    with ContextStore.open(tmp_path, readonly=True) as store:
        assert store.get(res[5].cache_key) is not None  # other events of the batch still serve
        with pytest.raises(CorruptLogError):
            store.get(res[1234].cache_key)


_key32 = st.binary(min_size=32, max_size=32)


@given(st.lists(_key32 | st.sampled_from([b"\0" * 32, b"\xff" * 32, b"\0" * 8 + b"\1" * 24]),
                max_size=300, unique=True), _key32, st.data())
def test_find_key_equals_binary_search(keys: list[bytes], probe: bytes, data: Any) -> None:
    from projections.cache import find_key, find_key_plain

    keys.sort()
    buf = memoryview(b"".join(keys))
    for k in [probe, *(keys[:3]), *(keys[-3:]), *([data.draw(st.sampled_from(keys))] if keys
                                                   else [])]:
        assert find_key(buf, len(keys), k) == find_key_plain(buf, len(keys), k)


@given(st.dictionaries(_keys, st.none(), max_size=8))
def test_canonical_order_equals_the_keyed_sort(d: dict[str, Any]) -> None:
    from projections.packet import canonical_order, canonical_order_plain

    assert canonical_order(d) == canonical_order_plain(d)
    assert canonical_order(dict(d)) == canonical_order_plain(d)  # from the cache
