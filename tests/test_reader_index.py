"""The reader's frame indexes: built once per segment, extended only when a read
needs what lies past them, dropped when their file is replaced, at most
INDEX_CACHE of them kept (the least recently used goes), and a bounded read
reads only up to the indexed frame boundary after its last seq.

Every frame read through an index is checked in full, so a wrong index costs
time, not answers: what these tests pin is the cost, which mutation testing
found no answer-checking test could see (docs/reliability.md).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from eventstore import CorruptLogError, Event, GenerationChangedError, Ledger, LedgerIOError
from eventstore import reader as reader_mod
from eventstore import segments as segments_mod
from eventstore.frame import (
    SEGMENT_HEADER_SIZE,
    decode_segment_header,
    encode_segment_header,
    walk_frames,
)
from eventstore.segments import INDEX_STEP, list_segments, segment_name


def ev(i: int, pad: int = 300) -> Event:
    return Event("a.a", None, {"i": i, "pad": "x" * pad})


def seqs(led: Ledger, a: int, b: int | None) -> list[int]:
    return [e.seq for e in led.read(a, b)]


def written(tmp_path: Path, n: int, segment_bytes: int, pad: int = 300) -> Path:
    d = tmp_path / "log"
    with Ledger.open(d, segment_bytes=segment_bytes) as led:
        for i in range(n):
            led.append([ev(i, pad)])
    return d


def test_an_index_is_built_once_and_serves_later_reads(tmp_path: Path) -> None:
    d = written(tmp_path, 12, 1 << 20)
    with Ledger.open(d, readonly=True) as led:
        assert seqs(led, 5, 6) == [5, 6]
        indexes = led._reader._indexes
        (path,) = indexes
        idx = indexes[path]
        assert idx.ino == os.stat(path).st_ino and (idx.base, idx.next_seq) == (1, 13)
        assert seqs(led, 3, 4) == [3, 4] and seqs(led, 7, None) == list(range(7, 13))
        assert indexes[path] is idx  # the same file, no shorter: the same index


def test_an_index_of_a_replaced_file_is_built_afresh(tmp_path: Path) -> None:
    d = written(tmp_path, 12, 1 << 20)
    with Ledger.open(d, readonly=True) as led:
        assert seqs(led, 5, 6) == [5, 6]
        (path,) = led._reader._indexes
        old = led._reader._indexes[path]
        copy = tmp_path / "copy"
        shutil.copyfile(path, copy)
        os.replace(copy, path)  # the same bytes under another inode
        assert seqs(led, 5, 6) == [5, 6]
        new = led._reader._indexes[path]
        assert new is not old and new.ino == os.stat(path).st_ino != old.ino


def test_an_index_is_extended_only_by_a_read_past_it(tmp_path: Path) -> None:
    d = written(tmp_path, 10, 1 << 20)
    with Ledger.open(d, readonly=True) as reader, Ledger.open(d) as writer:
        assert seqs(reader, 3, 4) == [3, 4]
        (path,) = reader._reader._indexes
        idx = reader._reader._indexes[path]
        end = idx.end
        assert idx.next_seq == 11
        for i in range(10, 15):
            writer.append([ev(i)])
        assert seqs(reader, 3, 4) == [3, 4]
        assert (idx.end, idx.next_seq) == (end, 11)  # nothing read past it: not walked
        assert seqs(reader, 11, 12) == [11, 12]  # the first seq past it
        assert idx.end > end and idx.next_seq == 16 and reader._reader._indexes[path] is idx


def test_at_most_index_cache_indexes_are_kept_the_least_recently_used_going(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_mod, "INDEX_CACHE", 3)
    d = written(tmp_path, 80, 4096)
    segs = list_segments(d)
    assert len(segs) >= 6
    with Ledger.open(d, readonly=True) as led:
        for base, _path in segs[:5]:
            assert seqs(led, base, base) == [base]
        assert list(led._reader._indexes) == [p for _b, p in segs[2:5]]
        base2 = segs[2][0]
        assert seqs(led, base2, base2) == [base2]  # used again: now the most recent
        assert list(led._reader._indexes) == [p for _b, p in (segs[3], segs[4], segs[2])]


def test_a_bounded_read_reads_to_the_indexed_boundary_after_its_last_seq(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = written(tmp_path, 600, 1 << 22, pad=1500)
    (_base, path), = list_segments(d)
    size = path.stat().st_size
    assert size > 20 * INDEX_STEP
    reads: list[tuple[int, int]] = []
    real = reader_mod.pread_all

    def spy(fd: int, n: int, offset: int) -> Any:
        reads.append((n, offset))
        return real(fd, n, offset)

    with Ledger.open(d, readonly=True) as led:
        assert seqs(led, 300, 301) == [300, 301]  # builds the index: reads it all once
        reads.clear()
        monkeypatch.setattr(reader_mod, "pread_all", spy)
        assert seqs(led, 300, 301) == [300, 301]
        ((n, offset),) = reads
        assert offset > 8 * INDEX_STEP and n <= 2 * INDEX_STEP + 4096

        idx = led._reader._indexes[path]
        s = idx.seqs[5]  # a read that starts at an entry: its digest is the chain's
        reads.clear()
        assert seqs(led, s, s) == [s]
        assert len(reads) == 1 and led._reader._indexes[path] is idx


def test_an_index_ends_at_the_last_whole_frame(tmp_path: Path) -> None:
    """A frame cut short at the end (being written, or torn) is not indexed: the index
    ends where the whole frames do, and says the next seq is the cut frame's."""
    d = written(tmp_path, 12, 1 << 20)
    (_base, path), = list_segments(d)
    with Ledger.open(d, readonly=True) as led:
        end11 = led._tip.end  # (before the cut: where frame 12 ends)
    size = path.stat().st_size
    assert size == end11
    os.truncate(path, size - 10)
    with Ledger.open(d, readonly=True) as led:
        assert seqs(led, 5, 6) == [5, 6]
        idx = led._reader._indexes[path]
        assert idx.next_seq == 12 and idx.end == led._tip.end < size - 10


def test_a_bounded_read_across_two_indexed_segments(tmp_path: Path) -> None:
    """Each segment past the first is read through its own index (both over
    INDEX_MIN_BYTES), and must continue the one before it."""
    d = tmp_path / "log"
    with Ledger.open(d, sync="none", segment_bytes=3 * reader_mod.INDEX_MIN_BYTES // 2) as led:
        for b in range(50):
            led.append([ev(40 * b + i, 1500) for i in range(40)])
        head = led.head
    segs = list_segments(d)
    assert len(segs) == 2 and all(p.stat().st_size > reader_mod.INDEX_MIN_BYTES
                                  for _b, p in segs)
    with Ledger.open(d, readonly=True) as led:
        lo, hi = segs[1][0] - 2, head - 5
        assert seqs(led, lo, hi) == list(range(lo, hi + 1))
        assert set(led._reader._indexes) == {p for _b, p in segs}


def test_a_read_in_a_torn_new_segment_of_zeros_finds_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last segment's header is zeros (a power cut while it was created): a bounded
    read that starts there looks at the whole file for frame headers, finds none and
    yields nothing; a failure to read it names the segment."""
    d = written(tmp_path, 5, 1 << 20)
    torn = d / segment_name(6)
    torn.write_bytes(bytes(4096))
    with Ledger.open(d, readonly=True) as led:
        assert led.head == 5
        assert seqs(led, 6, 6) == [] and seqs(led, 4, 7) == [4, 5]
        real = segments_mod.pread_all

        def failing(fd: int, n: int, offset: int) -> bytes:
            if n == SEGMENT_HEADER_SIZE:  # (data_end stops at the header: all zeros)
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return real(fd, n, offset)

        monkeypatch.setattr(segments_mod, "pread_all", failing)
        led._reader.clear()
        with pytest.raises(LedgerIOError) as err:
            seqs(led, 6, 6)
    assert str(err.value) == f"cannot read {torn}: {os.strerror(errno.EIO)}"


def three_segments(tmp_path: Path) -> tuple[Path, list[Path]]:
    d = written(tmp_path, 30, 4096)
    segs = [p for _b, p in list_segments(d)]
    assert len(segs) >= 3
    return d, segs


def test_a_segment_that_vanishes_mid_read_is_named(tmp_path: Path) -> None:
    d, segs = three_segments(tmp_path)
    with Ledger.open(d, readonly=True) as led:
        events = led.read()
        assert next(events).seq == 1
        segs[1].unlink()
        with pytest.raises(LedgerIOError) as err:
            list(events)
    assert str(err.value) == f"cannot open {segs[1]}: segment vanished"


def test_segments_that_vanish_mid_read_with_no_new_generation_are_named(
        tmp_path: Path) -> None:
    """The segment being read next and the one before it both gone, and no new
    generation: the next one is named as vanished, not as a generation change."""
    d, segs = three_segments(tmp_path)
    with Ledger.open(d, readonly=True) as led:
        events = led.read()
        assert next(events).seq == 1
        segs[0].unlink()
        segs[1].unlink()
        with pytest.raises(LedgerIOError) as err:
            list(events)
    assert str(err.value) == f"cannot open {segs[1]}: segment vanished"


def test_a_failed_read_of_a_whole_segment_names_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d, segs = three_segments(tmp_path)
    size = segs[1].stat().st_size
    real = reader_mod.pread_all

    def failing(fd: int, n: int, offset: int) -> bytes:
        if n == size and offset == 0 and os.fstat(fd).st_ino == segs[1].stat().st_ino:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, n, offset)

    monkeypatch.setattr(reader_mod, "pread_all", failing)
    with Ledger.open(d, readonly=True) as led, pytest.raises(LedgerIOError) as err:
        seqs(led, 1, None)
    assert str(err.value) == f"cannot read {segs[1]}: {os.strerror(errno.EIO)}"


def test_a_segment_a_new_generation_removed_mid_read_says_read_again(tmp_path: Path) -> None:
    d, segs = three_segments(tmp_path)
    with Ledger.open(d) as led:
        events = led.read()
        assert next(events).seq == 1
        led.start_generation(led.head, {}, [], at=1.0)
        assert not segs[1].exists()  # the new generation's writer removed the old ones
        with pytest.raises(GenerationChangedError) as err:
            list(events)
    assert err.value.segment == segs[1]


def test_a_segment_that_cannot_be_opened_mid_read_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d, segs = three_segments(tmp_path)
    real = os.open

    def denied(path: Any, flags: int, *a: Any) -> int:
        if Path(path) == segs[1]:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real(path, flags, *a)

    with Ledger.open(d, readonly=True) as led:
        events = led.read()
        assert next(events).seq == 1
        monkeypatch.setattr(os, "open", denied)
        with pytest.raises(LedgerIOError) as err:
            list(events)
    assert str(err.value) == f"cannot open {segs[1]}: {os.strerror(errno.EACCES)}"


def test_a_read_from_the_first_seq_on_needs_no_index(tmp_path: Path) -> None:
    """Every segment is read whole from its start: nothing to locate."""
    d, segs = three_segments(tmp_path)
    with Ledger.open(d, readonly=True) as led:
        assert seqs(led, 1, None) == list(range(1, 31))
        assert led._reader._indexes == {}


def test_a_few_events_of_a_big_batch_are_decoded_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bounded read of 2 events of a 100-event batch decodes those rows only."""
    d = tmp_path / "log"
    with Ledger.open(d, sync="none") as led:
        led.append([ev(i, 20) for i in range(100)])
    calls: list[tuple[int, int]] = []
    real = reader_mod.decode_rows_at

    def spy(payload: Any, lo: int, hi: int) -> Any:
        calls.append((lo, hi))
        return real(payload, lo, hi)

    monkeypatch.setattr(reader_mod, "decode_rows_at", spy)
    with Ledger.open(d, readonly=True) as led:
        assert [e.data["i"] for e in led.read(41, 42)] == [40, 41]
    assert calls == [(40, 42)]


def test_a_first_segment_removed_under_an_open_handle_fails_its_reads(tmp_path: Path) -> None:
    """The handle checked the log's start when it opened; a read that starts there
    finds segment 1 gone (no new generation) and says which seqs are missing."""
    d, segs = three_segments(tmp_path)
    second = list_segments(d)[1][0]
    with Ledger.open(d, readonly=True) as led:
        assert led.head == 30
        segs[0].unlink()
        with pytest.raises(CorruptLogError) as err:
            seqs(led, 1, None)
        assert (err.value.segment, err.value.offset, err.value.reason) == (
            segs[1], 0, f"segments before seq {second} are missing")
        with pytest.raises(CorruptLogError):  # and the handle stays failed closed
            seqs(led, 30, 30)


def test_an_unbounded_read_from_inside_a_segment_goes_through_its_index(
        tmp_path: Path) -> None:
    """From the middle of a big segment to the end: located through the index, which
    the read builds; a read from the first seq builds none (above)."""
    d = written(tmp_path, 200, 1 << 22, pad=1500)
    (_base, path), = list_segments(d)
    with Ledger.open(d, readonly=True) as led:
        assert seqs(led, 150, None) == list(range(150, 201))
        assert list(led._reader._indexes) == [path]


def test_a_bounded_read_indexes_only_the_first_of_small_segments(tmp_path: Path) -> None:
    """Later segments under INDEX_MIN_BYTES are read whole: an index would cost more."""
    d, segs = three_segments(tmp_path)
    with Ledger.open(d, readonly=True) as led:
        assert seqs(led, 2, 28) == list(range(2, 29))
        assert list(led._reader._indexes) == [segs[0]]


def test_a_segment_whose_header_does_not_continue_the_one_before_is_named(
        tmp_path: Path) -> None:
    """The second segment's header says another digest before it (its header checksum
    intact): the read stops there, at byte 0 of that segment."""
    d, segs = three_segments(tmp_path)
    data = bytearray(segs[1].read_bytes())
    base = list_segments(d)[1][0]
    hdr = encode_segment_header(base, bytes(range(32)), 4096)
    data[: len(hdr)] = hdr
    segs[1].write_bytes(bytes(data))
    with Ledger.open(d, readonly=True) as led, pytest.raises(CorruptLogError) as err:
        seqs(led, 1, None)
    assert (err.value.segment, err.value.offset, err.value.reason) == (
        segs[1], 0, "segment does not continue the one before it")


def frame_offsets(seg: Path) -> list[tuple[int, int]]:
    """``(first seq, offset)`` of every frame of ``seg``."""
    data = seg.read_bytes()
    hdr = decode_segment_header(data)
    return [(first, off) for off, _e, first, _c, _d, _p0, _p1 in
            walk_frames(data, SEGMENT_HEADER_SIZE, hdr.prev_digest, hdr.base_seq)]


@pytest.mark.parametrize("which", [0, -1], ids=["sealed", "last"])
def test_a_bad_frame_past_the_index_is_named_at_its_byte(tmp_path: Path, which: int) -> None:
    """A frame header that does not check out ends the index there; a read through
    the index (starting well inside the segment) meets it at that byte of the file,
    as a read of the whole log does, with the same words: in a sealed segment, and
    in the last one with whole frames after it (damage, not a torn tail)."""
    d = written(tmp_path, 300, 64 * 1024)
    segs = [p for _b, p in list_segments(d)]
    assert len(segs) == 2
    frames = frame_offsets(segs[which])
    start_seq, start_off = frames[-20]
    bad_seq, bad_off = frames[-5]
    assert start_off > INDEX_STEP + SEGMENT_HEADER_SIZE  # an entry past byte 64 serves it
    with open(segs[which], "r+b") as f:
        f.seek(bad_off + 5)
        b = f.read(1)
        f.seek(bad_off + 5)
        f.write(bytes([b[0] ^ 0xFF]))  # inside the frame's header: its crc fails
    errs = []
    for a in (1, start_seq):  # the whole log; through an index (a handle that met
        with Ledger.open(d, readonly=True) as led:  # damage refuses every later read)
            with pytest.raises(CorruptLogError) as err:
                seqs(led, a, None)
            errs.append((err.value.segment, err.value.offset, err.value.reason))
            if a > 1:  # damage past its end does not make the index stale: it is kept
                assert led._reader._indexes[segs[which]].end == bad_off
    assert errs[0][:2] == (segs[which], bad_off) and errs[0][2]
    assert errs[1] == errs[0]


def test_a_stale_index_is_dropped_and_the_segment_walked_afresh(tmp_path: Path) -> None:
    """The segment was rewritten in place (the same file, no shorter) with frames at
    other offsets: the index's promise fails, so the read walks the whole segment,
    reads the new frames, and the next read builds a new index."""
    d = written(tmp_path / "a", 300, 1 << 20)
    other = written(tmp_path / "b", 300, 1 << 20, pad=301)
    (seg,) = [p for _b, p in list_segments(d)]
    (seg_b,) = [p for _b, p in list_segments(other)]
    with Ledger.open(d, readonly=True) as led:
        assert seqs(led, 150, 151) == [150, 151]
        old = led._reader._indexes[seg]
        with open(seg, "r+b") as f:
            f.write(seg_b.read_bytes())
        got = list(led.read(200, None))
        assert [(e.seq, e.data["pad"]) for e in got] == [
            (i + 1, "x" * 301) for i in range(199, 300)]
        assert seg not in led._reader._indexes
        assert seqs(led, 250, 251) == [250, 251]
        assert led._reader._indexes[seg] is not old
