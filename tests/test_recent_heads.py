"""``segments.recent_heads``: a segment's last frames read backwards, footer by footer
(what the batch-id window folds), compared value by value with the frames written.

Each frame's head comes from the bytes a writer produces, or, for a payload of another
shape (an older writer's, an integer time), from decoding the payload; a payload that
does not decode is corruption at that frame's offset; a footer that does not check out
ends the walk there. (Mutation testing found these rules unpinned: docs/reliability.md.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import cbor2
import pytest
from segments_by_hand import segment_of_frames

from eventstore import CorruptLogError, Event
from eventstore.event import encode_batch
from eventstore.frame import (
    SEGMENT_HEADER_SIZE,
    payload_prefix,
)
from eventstore.segments import recent_heads


def rows(first: int, count: int) -> bytes:
    return encode_batch([Event("h.h", None, {"i": first + j}) for j in range(count)], None)[0]


def build(tmp_path: Path, payloads: list[tuple[int, bytes]]) -> tuple[Path, list[int]]:
    """A segment of frames (count, payload) from seq 1; returns it and each frame's offset."""
    data, offsets = segment_of_frames(payloads)
    path = tmp_path / "seg"
    path.write_bytes(data)
    return path, offsets


@contextmanager
def opened(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDONLY)
    try:
        yield fd
    finally:
        os.close(fd)


def heads(path: Path, end: int | None = None) -> list[tuple[int, int, float, str | None]]:
    with opened(path) as fd:
        size = os.fstat(fd).st_size
        return list(recent_heads(path, fd, SEGMENT_HEADER_SIZE, size if end is None else end))


PAYLOADS = [
    (2, payload_prefix(1.5, "first") + rows(1, 2)),
    # another writer's shape: the time an integer, no fast read: the payload is decoded
    (1, cbor2.dumps([7, "old", [["h.h", None, {"i": 3}]]])),
    (3, payload_prefix(2.25, None) + rows(4, 3)),
    (1, payload_prefix(3.0, "b" * 30) + rows(7, 1)),  # a longer id (a two-byte length head)
]


def test_every_frame_newest_first(tmp_path: Path) -> None:
    path, _ = build(tmp_path, PAYLOADS)
    assert heads(path) == [(7, 1, 3.0, "b" * 30), (4, 3, 2.25, None), (3, 1, 7.0, "old"),
                           (1, 2, 1.5, "first")]
    got = heads(path)
    assert all(type(at) is float for _f, _c, at, _b in got)


def test_the_walk_ends_where_it_is_told_to(tmp_path: Path) -> None:
    path, offsets = build(tmp_path, PAYLOADS)
    assert heads(path, offsets[2]) == [(3, 1, 7.0, "old"), (1, 2, 1.5, "first")]
    assert heads(path, offsets[1]) == [(1, 2, 1.5, "first")]
    assert heads(path, SEGMENT_HEADER_SIZE) == []
    assert heads(path, SEGMENT_HEADER_SIZE + 63) == []


def test_a_footer_that_does_not_check_out_ends_the_walk(tmp_path: Path) -> None:
    path, offsets = build(tmp_path, PAYLOADS)
    data = bytearray(path.read_bytes())
    data[offsets[3] - 1] ^= 0xFF  # the footer magic of the frame before the last
    path.write_bytes(bytes(data))
    assert heads(path) == [(7, 1, 3.0, "b" * 30)]


def test_a_footer_longer_than_the_segment_ends_the_walk_without_reading_before_it(
    tmp_path: Path,
) -> None:
    # the room a footer may claim is what lies between the segment header and it; a
    # length reaching into or before the header is damage, never a read at a negative
    # offset (which fails with EINVAL)
    path, offsets = build(tmp_path, PAYLOADS)
    data = bytearray(path.read_bytes())
    end = len(data)
    for claimed in (end - SEGMENT_HEADER_SIZE + 1, end, end + 1, end + SEGMENT_HEADER_SIZE):
        data[end - 8 : end - 4] = claimed.to_bytes(4, "little")
        path.write_bytes(bytes(data))
        assert heads(path) == [], claimed


def test_a_header_that_does_not_match_its_footer_ends_the_walk(tmp_path: Path) -> None:
    path, offsets = build(tmp_path, PAYLOADS)
    data = bytearray(path.read_bytes())
    data[offsets[2] + 6] ^= 0xFF  # the third frame's header crc
    path.write_bytes(bytes(data))
    assert heads(path) == [(7, 1, 3.0, "b" * 30)]


def test_a_payload_that_does_not_decode_is_corruption_at_its_frame(tmp_path: Path) -> None:
    path, offsets = build(tmp_path, [PAYLOADS[0], (1, b"\xff\xfe not cbor"), PAYLOADS[2]])
    with opened(path) as fd:
        it = recent_heads(path, fd, SEGMENT_HEADER_SIZE, os.fstat(fd).st_size)
        assert next(it) == (4, 3, 2.25, None)
        with pytest.raises(CorruptLogError) as info:
            next(it)
    e = info.value
    assert (e.segment, e.offset, e.reason) == (
        path, offsets[1], "payload is not valid CBOR: break code encountered where a data "
        "item was expected")


# -- recent_frames: the same, across the segments of a log, up to a limit ---------------


def log_of_two_segments(tmp_path: Path) -> tuple[Path, list[tuple[int, int, float, str | None]]]:
    """A log whose frames fill two segments; its frames' heads, newest first."""
    from eventstore import Ledger

    log = tmp_path / "log"
    ticks = iter(range(1, 1000))
    with Ledger.open(log, segment_bytes=4096, clock=lambda: float(next(ticks))) as led:
        while len(list(log.glob("*.seg"))) < 2 or led.head < 30:
            led.append([Event("h.h", None, {"pad": "x" * 300})], batch_id=f"b{led.head + 1}")
        want = [(b.first_seq, len(b.events), b.at, b.batch_id)
                for b in reversed(list(led.read_batches()))]
    return log, want


def test_recent_frames_newest_first_across_segments_up_to_a_limit(tmp_path: Path) -> None:
    from eventstore.segments import list_segments
    from eventstore.window import recent_frames

    log, want = log_of_two_segments(tmp_path)
    segs = list_segments(log)
    base, path = segs[-1]
    end = path.stat().st_size
    in_last = sum(1 for f in want if f[0] >= base)
    for limit in (0, 1, in_last, in_last + 1, len(want), len(want) + 5):
        assert list(recent_frames(log, base, path, end, limit)) == want[:limit], limit
    # the active segment read only up to the end its writer knows
    short = list(recent_frames(log, base, path, SEGMENT_HEADER_SIZE, len(want)))
    assert short == want[in_last:]
    # segments past the active one are not read
    first = segs[0][1]
    assert list(recent_frames(log, segs[0][0], first, first.stat().st_size, len(want))) == [
        f for f in want if f[0] < segs[1][0]]


def test_recent_frames_names_the_segment_it_could_not_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import eventstore.window as window_mod
    from eventstore import LedgerIOError
    from eventstore.segments import list_segments

    log, want = log_of_two_segments(tmp_path)
    base, path = list_segments(log)[-1]

    def failing(*_a: object, **_k: object) -> Iterator[tuple[int, int, float, str | None]]:
        raise OSError(errno.EIO, "Input/output error")
        yield  # a generator, as recent_heads is

    monkeypatch.setattr(window_mod, "recent_heads", failing)
    with pytest.raises(LedgerIOError) as info:
        list(window_mod.recent_frames(log, base, path, path.stat().st_size, 5))
    assert str(info.value) == f"cannot read {path}: Input/output error"


def test_recent_frames_names_the_segment_whose_payload_does_not_decode(
        tmp_path: Path) -> None:
    from eventstore.frame import FRAME_HEADER_SIZE
    from eventstore.segments import list_segments, segment_content
    from eventstore.window import recent_frames

    log, _want = log_of_two_segments(tmp_path)
    base, path = list_segments(log)[-1]
    content = segment_content(path)
    lo = len(content) - int.from_bytes(content[-8:-4], "little")  # the last frame
    data = bytearray(path.read_bytes())
    data[lo + FRAME_HEADER_SIZE] = 0xFF  # its payload's first byte: a CBOR break code
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError) as info:
        list(recent_frames(log, base, path, len(content), 5))
    assert (info.value.segment, info.value.offset) == (path, lo)
