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
from projections.config import StoreConfig
from projections.packet import encode_packet, packet_data, verbatim_packet
from projections.store import store_dir

_keys = st.text(alphabet="abcé_z\u4e00", min_size=0, max_size=6)
_plain = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=5),
              st.floats(allow_nan=False, allow_infinity=False)),  # (non-finite: refused)
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
    plain = "float" not in repr([type(x).__name__ for x in _all_values(packet)])
    assert depth == (_depth(body) if plain else -1)  # -1: not stored verbatim


def _all_keys(v: Any) -> Any:
    if isinstance(v, dict):
        for k, x in v.items():
            yield k
            yield from _all_keys(x)
    elif isinstance(v, list):
        for x in v:
            yield from _all_keys(x)


def _all_values(v: Any) -> Any:
    yield v
    if isinstance(v, dict):
        for x in v.values():
            yield from _all_values(x)
    elif isinstance(v, list):
        for x in v:
            yield from _all_values(x)


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
            data = packet_data(canon, depth, meta, body)
            log.append([Event("cache.put", cache_key_of(canon), data)])
            stored = log.read_raw(1)
            assert stored is not None
            if depth >= 0:  # plain JSON: stored verbatim, last in the row
                assert stored.row.endswith(canon)
                # exactly the row a point read authenticates (only without metadata)
                got = verbatim_packet(stored.row, cache_key_of(canon), len(canon))
                assert (got if got is None else bytes(got)) == (canon if meta is None else None)
                assert verbatim_packet(stored.row, "0" * 64, len(canon)) is None
            assert stored.event().data["packet"] == body


def test_a_store_over_memory_log_matches_the_file_store(tmp_path: Path) -> None:
    pkts = [{"target": "t.a", "summary": f"auth gap {i}", "paths": [f"src/m{i}.py"]}
            for i in range(50)]
    cfg = StoreConfig(recall_recency_weight=0.0)  # the two logs' put times differ a little
    with MemoryLog() as log:
        with ContextStore.open(tmp_path / "mem", log=log, config=cfg) as mem, \
                ContextStore.open(tmp_path / "file", config=cfg) as disk:
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
        store.runner.load_all()  # every view loaded: each takes the batch from memory
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


# --- found in review: inputs the fast path must not let through -------------------------------


def test_a_map_nested_in_a_map_key_cannot_make_the_log_undecodable(tmp_path: Path) -> None:
    from eventstore import InvalidEventError

    key: Any = 1
    for _ in range(396):
        key = cbor2.frozendict({key: 1})
    with ContextStore.open(tmp_path) as store:
        with pytest.raises(InvalidEventError):
            store.put({"target": "t", "a": {key: 1}})
        store.put({"target": "t", "summary": "still fine"})
    with Ledger.open(store_dir(tmp_path) / "log", readonly=True) as led:
        assert led.verify().ok and [e.seq for e in led.read()] == [1]


def test_a_lone_surrogate_is_a_packet_error() -> None:
    from projections.packet import InvalidPacketError, check_packet

    for pkt in ({"target": "t", "summary": "\ud800"}, {"target": "t", "payload": {"\udfff": 1}}):
        with pytest.raises(InvalidPacketError):
            check_packet(pkt)


def test_very_deep_packets_are_refused_before_encoding() -> None:
    from projections.packet import InvalidPacketError, check_packet

    deep: Any = 1
    for _ in range(10_000):
        deep = [deep]
    for pkt in ({"target": "t", "payload": deep}, {"target": "t", "payload": (deep,)}):
        with pytest.raises(InvalidPacketError, match="nests deeper"):
            check_packet(pkt)


def test_packets_whose_canonical_bytes_do_not_survive_decoding_are_refused() -> None:
    """Value-sharing tags mean something else once decoded (and inside a bigger payload):
    the packet's content address could never be checked again, so it is refused."""
    from projections.packet import InvalidPacketError, check_packet

    p = {"target": "t", "v": [cbor2.CBORTag(28, "AAA"), cbor2.CBORTag(29, 0)]}
    with pytest.raises(InvalidPacketError, match="canonical"):
        check_packet(p)
    body, canon = check_packet({"target": "t", "when": 1.5, "b": b"\x00", "t": (1, 2)})
    assert canonical_bytes(body) == canon  # other non-JSON types round-trip: accepted


def test_a_row_rewritten_around_the_real_packet_is_not_served(tmp_path: Path) -> None:
    """Keeping the real packet's bytes at the end of the row but putting another packet
    before them (same length, checksums recomputed) must not serve the other packet."""
    real = {"target": "t", "summary": "pay alice"}
    with ContextStore.open(tmp_path) as store:
        key = store.put(real).cache_key
    with ContextStore.open(tmp_path, readonly=True) as store:
        stored = store.ledger.read_raw(1)
        assert stored is not None
    canon = canonical_bytes(real)
    evil = cbor2.dumps({"target": "t", "summary": "pay mallo"}, canonical=True)
    # {"bytes": n, "packet": EVIL, "q": REAL}: a 3-map instead of a 2-map, same length overall
    forged = (stored.row[: stored.row.index(b"\xa2")] + b"\xa3" + cbor2.dumps("bytes")
              + cbor2.dumps(len(canon)) + cbor2.dumps("packet") + evil + cbor2.dumps("q") + canon)
    assert forged.endswith(canon)
    seg = next((store_dir(tmp_path) / "log").glob("*.seg"))
    data = seg.read_bytes()
    assert data.count(stored.row) == 1 and len(forged) != len(stored.row)
    # a different length moves the frame's end: write the forged frame whole instead
    from eventstore.frame import encode_frame_parts, encode_rows, payload_prefix

    at = stored.at
    payload = payload_prefix(at, None) + encode_rows([["cache.put", key, {"x": 1}]])
    payload = payload.replace(cbor2.dumps(["cache.put", key, {"x": 1}]), forged)
    # offsets: one event, at 0 -- unchanged by the swap
    frame, _digest = encode_frame_parts(data[24:56], 1, 1, (payload,))
    seg.write_bytes(data[:SEGMENT_HEADER_SIZE] + frame)
    with ContextStore.open(tmp_path, readonly=True) as store:
        got = store.ledger.read_raw(1)
        assert got is not None and got.row == forged  # the point read finds the forgery
        with pytest.raises(LedgerError, match="does not match its cache_key"):
            store.get(key)


def test_metadata_is_read_through_the_chain(tmp_path: Path) -> None:
    """Metadata is not covered by the content address: bit rot in it fails closed."""
    from eventstore import CorruptLogError

    with ContextStore.open(tmp_path) as store:
        key = store.put({"target": "t"}, metadata={"tool": "abcdef"}).cache_key
        store.put({"target": "t", "summary": "after"})
        assert store.get(key).metadata["tool"] == "abcdef"  # type: ignore[union-attr]
    seg = next((store_dir(tmp_path) / "log").glob("*.seg"))
    data = bytearray(seg.read_bytes())
    i = data.index(b"abcdef")
    data[i : i + 6] = b"xxxxxx"
    seg.write_bytes(bytes(data))
    with ContextStore.open(tmp_path, readonly=True) as store:
        with pytest.raises(CorruptLogError):
            store.get(key)
