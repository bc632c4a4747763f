"""``FrameChain``'s reads (the frames in memory that the JetStream log serves from): a
point read's stored bytes, raw batches, the digest at a seq, and each way a damaged
frame is reported. The JetStream tests reach these through a live cluster; these call
them directly, with exact values (mutation testing found them unpinned without one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eventstore import CorruptLogError, Event
from eventstore.event import encode_batch
from eventstore.frame import GENESIS_DIGEST, encode_frame_parts, encode_row, payload_prefix
from eventstore.framechain import FrameChain
from eventstore.records import StoredEvent

SIZES = (2, 1, 3)  # events per frame: seqs 1-2, 3, 4-6
ATS = (1.5, 2.5, 3.5)


def data(seq: int) -> dict[str, Any]:
    return {"seq": seq, "pad": "x" * seq}


def row(seq: int) -> bytes:
    return encode_row(["chain.test", f"k{seq}", data(seq)])


def payload(first: int, count: int, at: float) -> bytes:
    rows, _ = encode_batch(
        [Event("chain.test", f"k{s}", data(s)) for s in range(first, first + count)], None)
    return payload_prefix(at, None) + rows


def chain() -> tuple[FrameChain, list[bytes]]:
    c = FrameChain("the-stream")
    digests, first = [], 1
    for count, at in zip(SIZES, ATS, strict=True):
        frame, digest = encode_frame_parts(c.head_digest, first, count,
                                           (payload(first, count, at),))
        c.add_checked(frame)
        digests.append(digest)
        first += count
    return c, digests


def test_a_point_read_gives_each_events_stored_bytes() -> None:
    c, _ = chain()
    ats = [1.5, 1.5, 2.5, 3.5, 3.5, 3.5]
    assert [c.raw(s) for s in range(1, 7)] == [
        StoredEvent(s, at, row(s)) for s, at in zip(range(1, 7), ats, strict=True)]
    assert c.raw(0) is None and c.raw(-1) is None and c.raw(7) is None


def test_the_digest_at_a_seq_is_known_at_frame_ends_only() -> None:
    c, d = chain()
    got = {s: c.digest_at(s) for s in range(-1, 8)}
    assert got == {-1: None, 0: GENESIS_DIGEST, 1: None, 2: d[0], 3: d[1], 4: None,
                   5: None, 6: d[2], 7: None}


def test_raw_batches_from_a_frame_up_to_a_seq() -> None:
    c, _ = chain()

    def firsts(i: int, n: int, to_seq: int | None) -> list[tuple[int, float, int]]:
        return [(b.first_seq, b.at, len(b.rows)) for b in c.raw_batches(i, n, to_seq)]

    everything = [(1, 1.5, 2), (3, 2.5, 1), (4, 3.5, 3)]
    assert firsts(0, 3, None) == everything
    assert firsts(0, 3, 6) == everything and firsts(0, 3, 4) == everything
    assert firsts(0, 3, 3) == everything[:2]
    assert firsts(0, 3, 2) == everything[:1] and firsts(0, 3, 1) == everything[:1]
    assert firsts(1, 3, None) == everything[1:] and firsts(0, 2, None) == everything[:2]
    rows = [r for b in c.raw_batches(0, 3, None) for r in b.rows]
    assert rows == [row(s) for s in range(1, 7)]


def replaced(c: FrameChain, i: int, frame: bytes) -> FrameChain:
    """The chain with frame ``i``'s bytes replaced (as damage in memory would)."""
    c.frames[i] = frame
    return c


def test_a_frame_that_claims_other_seqs_fails_a_point_read() -> None:
    c, d = chain()
    other, _ = encode_frame_parts(d[0], 9, 1, (payload(9, 1, 2.5),))
    replaced(c, 1, other)
    with pytest.raises(CorruptLogError) as info:
        c.raw(3)
    e = info.value
    assert (e.segment, e.offset, e.reason) == (
        Path("the-stream"), c.offsets[1], "frame starts at seq 9, expected 3")
    assert c.raw(2) == StoredEvent(2, 1.5, row(2))  # the other frames still read


def test_a_damaged_frame_header_fails_a_point_read_at_its_offset() -> None:
    c, _ = chain()
    frame = bytearray(c.frames[2])
    frame[0] ^= 0xFF  # the frame magic
    replaced(c, 2, bytes(frame))
    with pytest.raises(CorruptLogError) as info:
        c.raw(5)
    assert info.value.segment == Path("the-stream")
    assert info.value.offset == c.offsets[2] == len(c.frames[0]) + len(c.frames[1])
    assert info.value.reason == "bad frame header"


@pytest.mark.parametrize("body", [b"\xff\xfe\xfd", None], ids=["not-cbor", "too-few-rows"])
def test_event_bounds_that_do_not_check_out_fail_a_point_read(body: bytes | None) -> None:
    c, d = chain()
    # frame 3 claims seqs 4-6 but its payload holds other bytes, or one event only
    parts = (body,) if body is not None else (payload(4, 1, 3.5),)
    frame, _ = encode_frame_parts(d[1], 4, 3, parts)
    replaced(c, 2, frame)
    with pytest.raises(CorruptLogError) as info:
        c.raw(6)
    assert (info.value.offset, info.value.reason) == (c.offsets[2],
                                                      "event bounds do not check out")
    if body is None:
        assert c.raw(4) == StoredEvent(4, 3.5, row(4))  # the one it holds still reads


def test_a_damaged_frame_fails_raw_batches_at_its_offset() -> None:
    c, d = chain()
    bad, _ = encode_frame_parts(d[0], 3, 1, (b"\xff\xfe\xfd",))
    replaced(c, 1, bad)  # chains, but its payload does not decode
    it = c.raw_batches(0, 3, None)
    assert next(it).first_seq == 1
    with pytest.raises(CorruptLogError) as info:
        next(it)
    assert info.value.segment == Path("the-stream") and info.value.offset == c.offsets[1]
    assert info.value.reason.startswith("payload does not decode")
    c, _ = chain()
    frame = bytearray(c.frames[2])
    frame[-1] ^= 0xFF  # the footer: the frame no longer walks
    replaced(c, 2, bytes(frame))
    assert [b.first_seq for b in c.raw_batches(0, 2, None)] == [1, 3]
    with pytest.raises(CorruptLogError) as info:
        list(c.raw_batches(2, 3, None))
    e = info.value
    assert (e.segment, e.offset, e.reason) == (Path("the-stream"), c.offsets[2],
                                               "bad frame footer")


def test_checked_frames_and_their_problems() -> None:
    c, d = chain()
    assert [(b.first_seq, [e.seq for e in b.events]) for b in c.batches(0, 3, None)] == [
        (1, [1, 2]), (3, [3]), (4, [4, 5, 6])]
    assert c.problems(3) == []
    bad, _ = encode_frame_parts(d[0], 3, 2, (payload(3, 1, 2.5),))  # says 2, holds 1
    replaced(c, 1, bad)
    with pytest.raises(CorruptLogError) as info:
        c.checked(1)
    e = info.value
    assert (e.segment, e.offset, e.reason) == (
        Path("the-stream"), c.offsets[1], "frame header says 2 events, payload holds 1")
    assert [(p.segment, p.offset, p.error) for p in c.problems(3)] == [
        ("the-stream", c.offsets[1], "frame header says 2 events, payload holds 1")]


def test_a_slot_holding_two_frames_is_damage() -> None:
    c, d = chain()
    second, _ = encode_frame_parts(d[1], 4, 3, (payload(4, 3, 3.5),))
    replaced(c, 1, c.frames[1] + second)
    with pytest.raises(CorruptLogError) as info:
        c.checked(1)
    assert (info.value.offset, info.value.reason) == (c.offsets[1],
                                                      "frame does not fill its slot")


def test_junk_after_a_frame_in_its_slot_is_damage_at_the_junk() -> None:
    """The walk fails inside the slot, past the frame: the offset is the junk's own
    (the slot's offset plus where the walk failed in it)."""
    c, _ = chain()
    frame_len = len(c.frames[1])
    replaced(c, 1, c.frames[1] + b"\x00" * 100)
    with pytest.raises(CorruptLogError) as info:
        c.checked(1)
    assert info.value.offset == c.offsets[1] + frame_len > c.offsets[1]
