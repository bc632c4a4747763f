"""``PointReader`` itself, over segments built by hand: every event of frames of every
size, each way the bytes where its index points can fail to hold the event, and how
often it lists the directory and how many files it keeps open.

``Ledger.read_raw`` falls back to a verified read whenever a point read raises
``ValueError``, so a wrong point read is invisible through the ledger: mutation
testing found nearly every rule of this module unpinned (docs/reliability.md).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import cbor2
import pytest

from eventstore import CorruptLogError, Event, LedgerClosedError, LedgerIOError
from eventstore import point as point_mod
from eventstore.event import encode_batch
from eventstore.frame import (
    FRAME_HEADER_SIZE,
    FRAME_OVERHEAD,
    SEGMENT_HEADER_SIZE,
    encode_frame_parts,
    encode_row,
    encode_segment_header,
    payload_prefix,
)
from eventstore.point import FIRST_READ, OPEN_SEGMENTS, NoOffsets, PointReader, _event_in_frame
from eventstore.records import StoredEvent
from eventstore.segments import INDEX_STEP, segment_name

AT = 1.5
D0 = b"\x22" * 32


def data(seq: int, pad: int) -> dict[str, Any]:
    return {"s": seq, "pad": "x" * pad}


def expected(seq: int, pad: int = 0) -> StoredEvent:
    return StoredEvent(seq, AT, encode_row(["point.test", f"k{seq}", data(seq, pad)]))


def frame(prev: bytes, first: int, count: int, pad: int = 0) -> tuple[bytes, bytes]:
    rows, _ = encode_batch(
        [Event("point.test", f"k{s}", data(s, pad)) for s in range(first, first + count)], None)
    return encode_frame_parts(prev, first, count, (payload_prefix(AT, None), rows))


def old_frame(prev: bytes, first: int, count: int, pad: int = 0) -> bytes:
    """A frame whose payload has no per-event offsets (as written before they existed)."""
    payload = cbor2.dumps([AT, None, [["point.test", f"k{s}", data(s, pad)]
                                      for s in range(first, first + count)]])
    return encode_frame_parts(prev, first, count, (payload,))[0]


def pad_for(total: int, count: int = 1) -> int:
    """The pad that makes a frame of ``count`` events exactly ``total`` bytes long."""
    for pad in range(total):
        if len(frame(D0, 1, count, pad)[0]) == total:
            return pad
    raise AssertionError(f"no pad gives a {total}-byte frame")


class Segment:
    """One segment file written frame by frame; ``pads`` says each seq's pad."""

    def __init__(self, log_dir: Path, base: int, prev: bytes = D0) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.path = log_dir / segment_name(base)
        self.next, self.prev = base, prev
        self.before: dict[int, bytes] = {}  # first seq of a frame -> the digest before it
        self.pads: dict[int, int] = {}
        self.path.write_bytes(encode_segment_header(base, prev, 1 << 20))

    def add(self, count: int, pad: int = 0) -> int:
        """Append a frame; returns its byte offset."""
        self.before[self.next] = self.prev
        data_, self.prev = frame(self.prev, self.next, count, pad)
        off = self.path.stat().st_size
        with open(self.path, "ab") as f:
            f.write(data_)
        for s in range(self.next, self.next + count):
            self.pads[s] = pad
        self.next += count
        return off


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_every_event_of_frames_of_every_size(tmp_path: Path) -> None:
    """Frames that fit the first read and frames that do not (the exact bounds around
    FIRST_READ included), single events and batches, in a segment longer than the index
    step of the chain walk (a point read's index has an entry per frame)."""
    seg = Segment(tmp_path, 1)
    seg.add(1)
    seg.add(3)
    for total in (FIRST_READ - 1, FIRST_READ, FIRST_READ + 1, FIRST_READ + FRAME_OVERHEAD,
                  FIRST_READ + FRAME_OVERHEAD + 1):
        seg.add(1, pad_for(total))
    seg.add(3, 1500)  # three events past the first read
    seg.add(50)
    seg.add(1, 9000)
    while seg.path.stat().st_size < 2 * INDEX_STEP:
        seg.add(2, 700)
    seg.add(1)  # a last frame shorter than the first read: the read stops at the file's end
    last = seg.next - 1
    reader = PointReader(tmp_path)
    for seq in [*range(1, last + 1), *range(last, 0, -1)]:
        assert reader.read(seq) == expected(seq, seg.pads[seq]), seq
    for seq in (0, -1, last + 1, last + 100):
        assert reader.read(seq) is None
    reader.close()


def test_a_read_right_after_an_append_and_after_a_roll(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The directory is listed on the first read, then only when a seq is past every
    segment known: once per miss, and never for a frame appended to a segment already
    open (its index is extended)."""
    listed: list[Path] = []
    real = point_mod.list_segments

    def spy(log_dir: Path) -> list[tuple[int, Path]]:
        listed.append(log_dir)
        return real(log_dir)

    monkeypatch.setattr(point_mod, "list_segments", spy)
    seg = Segment(tmp_path, 1)
    seg.add(2)
    reader = PointReader(tmp_path)

    def reads(seq: int) -> tuple[StoredEvent | None, int]:
        before = len(listed)
        return reader.read(seq), len(listed) - before

    assert reads(1) == (expected(1), 1)
    assert reads(2) == (expected(2), 0)
    seg.add(1)
    assert reads(3) == (expected(3), 0)  # the next seq: the open segment's index extended
    assert reads(4) == (None, 1)  # the index extended, then the directory listed again
    new = Segment(tmp_path, 4, seg.prev)  # a roll: a segment the reader has not listed
    new.add(2, 5)
    assert reads(5) == (expected(5, 5), 1)
    assert reads(4) == (expected(4, 5), 0)
    assert reads(1) == (expected(1), 0)
    assert reads(6) == (None, 1)


def test_a_segment_moved_away_after_listing_is_listed_again(tmp_path: Path) -> None:
    first = Segment(tmp_path, 1)
    first.add(3)
    second = Segment(tmp_path, 4, first.prev)
    second.add(3)
    reader = PointReader(tmp_path)
    assert reader.read(1) == expected(1)  # lists both, opens the first only
    second.path.unlink()  # gone (compacted away) before the reader opened it ...
    moved = Segment(tmp_path, 3)  # ... and its events now in a segment listed since
    moved.add(4, 9)
    assert reader.read(5) == expected(5, 9)
    reader.close()


def test_a_stale_index_after_a_cut_and_rewrite_is_built_again(tmp_path: Path) -> None:
    """A frame the index saw was cut and written over (same file, other frames): the
    bytes where the index points no longer hold the seq, so the index is dropped and
    built again, and the event read from the new frames."""
    seg = Segment(tmp_path, 1)
    seg.add(2)
    cut = seg.add(2)  # seqs 3-4 in one frame
    reader = PointReader(tmp_path)
    assert reader.read(3) == expected(3)
    with open(seg.path, "r+b") as f:  # in place: the reader's open fd sees the change
        f.truncate(cut)
    seg.next, seg.prev = 3, seg.before[3]
    seg.add(1, 7)  # seq 3 alone, then seq 4 in a frame of its own
    seg.add(1, 8)
    assert reader.read(4) == expected(4, 8)
    assert reader.read(3) == expected(3, 7)
    reader.close()


def test_damage_where_the_index_points_is_a_value_error(tmp_path: Path) -> None:
    """Bytes the frame header does not cover and that point at the wrong place: the
    footer of a frame read whole, the bounds of an event read alone. Each is a
    ValueError naming the frame (the ledger then reads the batch verified)."""
    seg = Segment(tmp_path, 1)
    small = seg.add(2)
    big = seg.add(3, 1500)
    seg.add(1)
    size = seg.path.stat().st_size
    raw = bytearray(seg.path.read_bytes())
    footer = big - 8  # the small frame's footer: length, then magic

    def damaged(at: int, value: bytes, seq: int, match: str) -> None:
        bad = bytearray(raw)
        bad[at : at + len(value)] = value
        seg.path.write_bytes(bytes(bad))
        reader = PointReader(tmp_path)
        with pytest.raises(ValueError, match=match):
            reader.read(seq)
        reader.close()
        assert len(bad) == size

    damaged(footer + 4, b"CTXF", 1, f"bad frame footer at byte {small}$")
    length = int.from_bytes(raw[footer : footer + 4], "little")
    damaged(footer, (length + 1).to_bytes(4, "little"), 2,
            f"bad frame footer at byte {small}$")
    # the big frame's offsets (seqs 3-5): seq 4 made to end where it starts
    payload = raw[big + FRAME_HEADER_SIZE : big + FRAME_HEADER_SIZE + 64]
    layout = point_mod.payload_layout(bytes(payload), 3)
    assert layout is not None
    _at, offs_start, _rows = layout
    offs = big + FRAME_HEADER_SIZE + offs_start
    second = raw[offs + 4 : offs + 8]
    damaged(offs + 8, second, 4, f"event 4 has bad bounds in the frame at byte {big}$")
    damaged(offs + 8, (1 << 20).to_bytes(4, "little"), 5,  # the last event: past the end
            f"event 5 has bad bounds in the frame at byte {big}$")
    seg.path.write_bytes(bytes(raw))
    reader = PointReader(tmp_path)
    assert [reader.read(s) for s in range(1, 7)] == [
        expected(s, seg.pads[s]) for s in range(1, 7)]


def test_a_damaged_frame_header_ends_the_index_before_it(tmp_path: Path) -> None:
    """The header is checked (crc): a frame whose header went bad after it was indexed
    is not read; the index built again stops before it, so the seq is not there."""
    seg = Segment(tmp_path, 1)
    seg.add(2)
    at = seg.add(2)
    reader = PointReader(tmp_path)
    assert reader.read(3) == expected(3)
    with open(seg.path, "r+b") as f:
        f.seek(at + 20)
        f.write(b"\xff")
    assert reader.read(4) is None and reader.read(3) is None
    assert reader.read(2) == expected(2)
    reader.close()


@pytest.mark.parametrize("pad", [0, 3000], ids=["fits-the-first-read", "read-in-parts"])
def test_a_frame_without_offsets_is_read_whole_by_the_caller(tmp_path: Path, pad: int) -> None:
    (tmp_path).mkdir(exist_ok=True)
    path = tmp_path / segment_name(1)
    path.write_bytes(encode_segment_header(1, D0, 1 << 20) + old_frame(D0, 1, 2, pad))
    reader = PointReader(tmp_path)
    for seq in (1, 2):
        with pytest.raises(NoOffsets, match=f"^frame at byte {SEGMENT_HEADER_SIZE} has no "
                                            "per-event offsets$"):
            reader.read(seq)
    reader.close()


def test_an_event_cut_short_behind_its_index(tmp_path: Path) -> None:
    """``_event_in_frame`` reading a frame bigger than the first read, the file cut
    after that read: the event's offsets or its bytes cut short are a ValueError."""
    seg = Segment(tmp_path, 1)
    off = seg.add(3, 1500)
    raw = seg.path.read_bytes()
    buf = raw[off : off + FIRST_READ]
    n = int.from_bytes(raw[off + 8 : off + 12], "little")
    layout = point_mod.payload_layout(buf[FRAME_HEADER_SIZE:], 3)
    assert layout is not None
    _at, offs_start, rows_start = layout
    offs = off + FRAME_HEADER_SIZE + offs_start
    fd = os.open(seg.path, os.O_RDWR)
    try:
        for i in range(3):
            assert _event_in_frame(fd, off, n, 3, i, i + 1, buf) == expected(i + 1, 1500)
        cuts = [(offs + 6, 0), (offs + 10, 1), (offs + 10, 2),
                (off + FRAME_HEADER_SIZE + rows_start + 10, 0), (len(raw) - 20, 2)]
        for at, i in cuts:
            os.ftruncate(fd, at)
            with pytest.raises(ValueError, match=f"^frame at byte {off} is cut short$"):
                _event_in_frame(fd, off, n, 3, i, i + 1, buf)
            os.pwrite(fd, raw[at:], at)
    finally:
        os.close(fd)


def test_many_segments_keep_at_most_open_segments_open(tmp_path: Path) -> None:
    """Each segment read stays open (its fd and index) up to OPEN_SEGMENTS, the least
    recently used closed first; closing the reader closes them all."""
    prev, segs = D0, []
    for k in range(OPEN_SEGMENTS + 4):
        seg = Segment(tmp_path, 1 + 2 * k, prev)
        seg.add(2, k)
        prev = seg.prev
        segs.append(seg)
    before = open_fds()
    reader = PointReader(tmp_path)
    last = 2 * len(segs)
    for seq in [*range(1, last + 1), *range(last, 0, -1), *range(1, last + 1, 2)]:
        assert reader.read(seq) == expected(seq, (seq - 1) // 2), seq
        assert open_fds() - before <= OPEN_SEGMENTS
    assert open_fds() - before == OPEN_SEGMENTS
    reader.close()
    assert open_fds() == before
    with pytest.raises(LedgerClosedError) as closed:
        reader.read(1)
    assert str(closed.value) == "ledger is closed"


def test_a_segment_with_a_bad_header_is_an_error_and_leaks_nothing(tmp_path: Path) -> None:
    (tmp_path / segment_name(2)).write_bytes(encode_segment_header(1, D0, 1 << 20))
    before = open_fds()
    reader = PointReader(tmp_path)
    with pytest.raises(CorruptLogError, match="name disagrees"):
        reader.read(5)
    assert open_fds() == before
    reader.close()


def test_an_io_error_is_a_ledger_io_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seg = Segment(tmp_path, 1)
    seg.add(1)
    reader = PointReader(tmp_path)

    def failing(fd: int, n: int, offset: int) -> bytes:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(point_mod, "pread_all", failing)
    with pytest.raises(LedgerIOError) as err:
        reader.read(1)
    assert str(err.value) == f"cannot read {tmp_path}: {os.strerror(errno.EIO)}"
    reader.close()


def test_an_offsets_table_pointing_outside_its_payload_is_read_whole_and_named(
        tmp_path: Path) -> None:
    """A point read takes an event's bounds on trust only while they lie inside the
    payload: offsets that do not are no fast path, and the batch read in full (its
    digest checked) names the damage."""
    from eventstore import Ledger
    from eventstore.frame import GENESIS_DIGEST, walk_frames

    d = tmp_path / "log"
    with Ledger.open(d) as led:
        led.append([Event("p.p", None, data(i, 5)) for i in range(1, 4)])
        led.append([Event("p.p", None, data(4, 5))])  # whole frames after the damage
    path = d / segment_name(1)
    raw = bytearray(path.read_bytes())
    (off, _end, _first, count, _dg, p0, p1), _ = list(
        walk_frames(bytes(raw), SEGMENT_HEADER_SIZE, GENESIS_DIGEST, 1))
    layout = point_mod.payload_layout(bytes(raw[p0:p1]), count)
    assert layout is not None
    offs = p0 + layout[1]
    raw[offs + 4 : offs + 8] = (0xFFFFFF).to_bytes(4, "little")  # event 2 starts far past the end
    path.write_bytes(bytes(raw))
    with Ledger.open(d, readonly=True) as led:
        for seq in (1, 2):
            with pytest.raises(CorruptLogError) as err:
                led.read_raw(seq)
            assert (err.value.segment, err.value.offset) == (path, off)
