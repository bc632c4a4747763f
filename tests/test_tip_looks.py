"""What one look at the head (``Tip.refresh``) reads, and the words of its failures.

A look runs before every read and append, so its cost is part of the contract
(docs/format.md, section 7, "Catching up"): a handle that wrote the last frame
itself reads the 4 bytes past it; one that adopted another writer's frames reads that
frame's footer and digest in place; neither stats the file when preallocated zeros
follow, and neither asks for the next segment before its own is full. Mutation testing
found each of these rules held by no test (docs/reliability.md): a look that reads more
still answers right, so only counting what it reads tells them apart.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from eventstore import CorruptLogError, Event, Ledger, LedgerIOError
from eventstore import segments as segments_mod
from eventstore import tip as tip_mod
from eventstore.frame import FOOTER_SIZE, FRAME_HEADER_SIZE, SEGMENT_HEADER_SIZE
from eventstore.segments import segment_name

EIO = os.strerror(errno.EIO)


def ev(i: int, pad: int = 50) -> Event:
    return Event("look.test", None, {"i": i, "pad": "x" * pad})


def is_segment(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").endswith(".seg")
    except OSError:
        return False


@attrs.define
class Looks:
    """The preads and fstats of segment files, and the next-segment questions."""

    preads: list[tuple[int, int]] = attrs.field(factory=list)  # (bytes, offset)
    fstats: int = 0
    next_asked: int = 0
    data_ends: int = 0  # looks for where preallocated zeros begin

    def clear(self) -> None:
        self.preads.clear()
        self.fstats = self.next_asked = self.data_ends = 0


@pytest.fixture
def looks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Looks]:
    seen = Looks()
    real_pread, real_fstat = tip_mod.pread_all, os.fstat
    real_next = tip_mod.Tip._next_segment_exists
    real_data_end = tip_mod.data_end

    def pread(fd: int, n: int, offset: int) -> bytes:
        seen.preads.append((n, offset))
        return real_pread(fd, n, offset)

    def fstat(fd: int) -> os.stat_result:
        if is_segment(fd):
            seen.fstats += 1
        return real_fstat(fd)

    def next_exists(self: tip_mod.Tip) -> bool:
        seen.next_asked += 1
        return real_next(self)

    def data_end(fd: int, size: int) -> int:
        seen.data_ends += 1
        return real_data_end(fd, size)

    monkeypatch.setattr(tip_mod, "pread_all", pread)
    monkeypatch.setattr(tip_mod, "data_end", data_end)
    monkeypatch.setattr(os, "fstat", fstat)
    monkeypatch.setattr(tip_mod.Tip, "_next_segment_exists", next_exists)
    monkeypatch.setattr(tip_mod, "GEN_CHECK_INTERVAL", 1e9)  # no timed look here
    yield seen


def end_of(log: Ledger) -> int:
    return log._tip.end


def test_a_look_after_ones_own_append_reads_four_bytes(tmp_path: Path, looks: Looks) -> None:
    """Past a frame this handle wrote: 4 bytes at its end; zeros there (preallocated)
    end the look without a stat, and a segment not full asks for no next one."""
    with Ledger.open(tmp_path, sync="always") as log:
        for i in range(3):
            log.append([ev(i)])
        seg = log.log_dir / segment_name(1)
        assert seg.stat().st_size > end_of(log)  # zeros written ahead
        looks.clear()
        assert log.head == 3
        assert looks.preads == [(4, end_of(log))]
        assert (looks.fstats, looks.next_asked, looks.data_ends) == (0, 0, 0)


def test_a_look_at_the_files_end_stats_it_once(tmp_path: Path, looks: Looks) -> None:
    """No zeros past our own frame (no preallocation without sync): the 4 bytes are not
    there, one stat says nothing new, and the next look reads the same 4 bytes."""
    with Ledger.open(tmp_path, sync="none") as log:
        log.append([ev(1)])
        seg = log.log_dir / segment_name(1)
        assert seg.stat().st_size == end_of(log)
        for _ in range(2):
            looks.clear()
            assert log.head == 1
            assert looks.preads == [(4, end_of(log))]
            assert (looks.fstats, looks.next_asked, looks.data_ends) == (1, 0, 0)


def last_frame_reads(log: Ledger, frame_len: int) -> list[tuple[int, int]]:
    end = end_of(log)
    return [(FOOTER_SIZE + 4, end - FOOTER_SIZE), (32, end - frame_len + FRAME_HEADER_SIZE - 32)]


def test_a_follower_checks_the_last_frame_in_place(tmp_path: Path, looks: Looks) -> None:
    """Past frames another writer wrote: the footer and the 4 bytes after it in one
    read, then the 32-byte digest of the frame the footer points at."""
    with Ledger.open(tmp_path, sync="always") as w, \
            Ledger.open(tmp_path, readonly=True) as r:
        w.append([ev(1)])
        assert r.head == 1
        for i in range(2, 4):
            before = w._tip.end
            w.append([ev(i)])
            looks.clear()
            assert r.head == i  # adopts the new frame (reads it)
            assert looks.fstats == 1 and looks.next_asked == 0
            looks.clear()
            assert r.head == i  # nothing new: the footer and the digest, no stat
            assert looks.preads == last_frame_reads(r, w._tip.end - before)
            assert (looks.fstats, looks.next_asked, looks.data_ends) == (0, 0, 0)


def test_a_handle_opened_after_the_writes_checks_the_last_frame(
        tmp_path: Path, looks: Looks) -> None:
    """Opening found the end through the file: not a frame this handle wrote."""
    with Ledger.open(tmp_path, sync="always") as w:
        w.append([ev(1)])
        before = w._tip.end
        w.append([ev(2)])
        with Ledger.open(tmp_path, readonly=True) as r:
            looks.clear()
            assert r.head == 2
            assert looks.preads == last_frame_reads(r, w._tip.end - before)


def test_a_follower_of_an_empty_segment_reads_four_bytes(tmp_path: Path, looks: Looks) -> None:
    """A segment with a header only has no frame to check: 4 bytes past the header."""
    with Ledger.open(tmp_path, sync="none") as w:
        w.append([ev(1)])
    seg = tmp_path / segment_name(1)
    os.truncate(seg, SEGMENT_HEADER_SIZE)  # (as a roll leaves the next segment)
    with Ledger.open(tmp_path, readonly=True) as r:
        looks.clear()
        assert r.head == 0
        assert looks.preads == [(4, SEGMENT_HEADER_SIZE)]


def test_a_segment_cut_to_nothing_is_walked_again(tmp_path: Path) -> None:
    """A file that shrank to 0 bytes under the handle that wrote it is not 'nothing
    new' (its own frame needs no footer check, so only the size tells)."""
    with Ledger.open(tmp_path, sync="none") as w:
        w.append([ev(1)])
        assert w.head == 1
        os.truncate(tmp_path / segment_name(1), 0)
        with pytest.raises(CorruptLogError):
            _ = w.head


def test_after_a_walk_again_a_look_checks_the_last_frame(tmp_path: Path, looks: Looks) -> None:
    """A walk of the segment found frames the handle did not write: the next look checks
    the last one in place (footer and digest)."""
    with Ledger.open(tmp_path, sync="none") as w, \
            Ledger.open(tmp_path, readonly=True) as r:
        w.append([ev(1)])
        before = w._tip.end
        w.append([ev(2)])
        w.append([ev(3)])
        assert r.head == 3
        os.truncate(tmp_path / segment_name(1), w._tip.end - 1)  # frame 3 cut short
        assert r.head == 2  # walked again
        looks.clear()
        assert r.head == 2
        # (then the torn bytes past it, read again: the writer may cut them)
        assert looks.preads[:2] == last_frame_reads(r, r._tip.end - before)


def frame_2_past_the_follower(w: Ledger, r: Ledger) -> int:
    """``w`` appends frame 1, ``r`` adopts it, ``w`` appends frame 2: where frame 2
    starts (the end ``r`` knows)."""
    w.append([ev(1)])
    assert r.head == 1
    end = r._tip.end
    w.append([ev(2)])
    return end


def damage_frame_2(tmp_path: Path, w: Ledger, r: Ledger) -> tuple[Path, int, bytes]:
    """:func:`frame_2_past_the_follower`, then frame 3, and a payload byte of frame 2
    flipped: (the segment, where frame 2 starts, its bytes before the damage)."""
    end = frame_2_past_the_follower(w, r)
    w.append([ev(3)])
    seg = tmp_path / segment_name(1)
    good = seg.read_bytes()
    bad = bytearray(good)
    bad[end + FRAME_HEADER_SIZE + 5] ^= 0xFF
    seg.write_bytes(bytes(bad))
    return seg, end, good


def test_a_handle_that_met_damage_stays_closed(tmp_path: Path) -> None:
    """Corruption a look met is remembered: the handle fails closed, even once the bytes
    read well again (fixed by hand, or a flaky disk)."""
    with Ledger.open(tmp_path, sync="none") as w, \
            Ledger.open(tmp_path, readonly=True) as r:
        seg, _end, good = damage_frame_2(tmp_path, w, r)
        with pytest.raises(CorruptLogError):
            _ = r.head
        seg.write_bytes(good)
        with pytest.raises(CorruptLogError):
            _ = r.head
        assert r._tip.fault is not None


@attrs.define
class Clock:
    now: float = 10.0

    def monotonic(self) -> float:
        return self.now


def test_the_timed_generation_check_runs_once_per_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A handle that saw no seal still looks for a new generation, at most once per
    GEN_CHECK_INTERVAL (exactly at the interval: due)."""
    clock = Clock()
    monkeypatch.setattr(tip_mod, "time", clock)
    monkeypatch.setattr(tip_mod, "GEN_CHECK_INTERVAL", 2.0)
    checks: list[float] = []
    real = tip_mod.Tip.check_generation

    def counted(self: tip_mod.Tip) -> None:
        checks.append(clock.now)
        real(self)

    monkeypatch.setattr(tip_mod.Tip, "check_generation", counted)
    with Ledger.open(tmp_path, sync="none") as w, \
            Ledger.open(tmp_path, readonly=True) as r:
        w.append([ev(1)])
        assert r.head == 1 and checks == []  # opened at 10.0
        clock.now = 11.9
        assert r.head == 1 and checks == []
        clock.now = 12.0
        assert r.head == 1 and checks == [12.0]
        assert r.head == 1 and checks == [12.0]  # counted afresh from 12.0
        clock.now = 13.9
        assert r.head == 1 and checks == [12.0]
        clock.now = 14.0
        assert r.head == 1 and checks == [12.0, 14.0]


def test_a_reader_opens_segments_read_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A handle opens its active segment for writing only when it writes."""
    modes: list[int] = []
    real = os.open

    def spy(path: str | os.PathLike[str], flags: int, *a: int, **k: int) -> int:
        if str(path).endswith(".seg"):
            modes.append(flags & os.O_ACCMODE)
        return real(path, flags, *a, **k)

    with Ledger.open(tmp_path, sync="none") as w:
        w.append([ev(1)])
        monkeypatch.setattr(os, "open", spy)
        with Ledger.open(tmp_path, readonly=True) as r:
            w.append([ev(2)])
            assert r.head == 2 and [e.seq for e in r.read()] == [1, 2]
        assert modes and set(modes) == {os.O_RDONLY}


def failing_when(monkeypatch: pytest.MonkeyPatch, module: object, name: str,
                 when: object) -> None:
    real = getattr(module, name)

    def fail(*args: int) -> object:
        if when(*args):  # type: ignore[operator]
            raise OSError(errno.EIO, EIO)
        return real(*args)

    monkeypatch.setattr(module, name, fail)


@pytest.mark.parametrize("what", ["the stat", "the read of new frames"])
def test_a_failed_stat_or_read_in_a_look_names_the_segment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str) -> None:
    with Ledger.open(tmp_path, sync="none") as w, \
            Ledger.open(tmp_path, readonly=True) as r:
        end = frame_2_past_the_follower(w, r)
        if what == "the stat":
            failing_when(monkeypatch, os, "fstat", is_segment)
        else:
            failing_when(monkeypatch, tip_mod, "pread_all",
                         lambda fd, n, off: off == end and n > 4)
        with pytest.raises(LedgerIOError) as err:
            _ = r.head
    assert str(err.value) == f"cannot read {tmp_path / segment_name(1)}: {EIO}"


def test_damage_in_new_frames_is_reported_at_its_place_in_the_segment(tmp_path: Path) -> None:
    """Bad bytes in a frame past the follower's end, a good frame after them."""
    with Ledger.open(tmp_path, sync="none") as w, \
            Ledger.open(tmp_path, readonly=True) as r:
        seg, end, _good = damage_frame_2(tmp_path, w, r)
        with pytest.raises(CorruptLogError) as err:
            _ = r.head
    assert (err.value.segment, err.value.offset) == (seg, end)


def test_a_failed_open_for_writing_names_the_segment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Ledger.open(tmp_path, sync="none") as w:
        w.append([ev(1)])
    real = os.open

    def fail(path: str | os.PathLike[str], flags: int, *a: int) -> int:
        if str(path).endswith(".seg") and flags & os.O_ACCMODE == os.O_RDWR:
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        return real(path, flags, *a)

    with Ledger.open(tmp_path, sync="none") as w:
        monkeypatch.setattr(os, "open", fail)
        with pytest.raises(LedgerIOError) as err:
            w.append([ev(2)])
    assert str(err.value) == (
        f"cannot open {tmp_path / segment_name(1)}: {os.strerror(errno.EACCES)}")


def test_failed_reads_while_opening_name_the_segment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The header read, and the whole-segment read when the end is not clean."""
    with Ledger.open(tmp_path, sync="none") as w:
        for i in range(3):
            w.append([ev(i)])
    seg = tmp_path / segment_name(1)
    os.truncate(seg, seg.stat().st_size - 3)  # a torn tail: no clean footer at the end
    size = seg.stat().st_size
    for when in (lambda fd, n, off: off == 0 and n == SEGMENT_HEADER_SIZE,
                 lambda fd, n, off: off == 0 and n == size):
        with monkeypatch.context() as m:
            failing_when(m, tip_mod, "pread_all", when)
            with pytest.raises(LedgerIOError) as err:
                Ledger.open(tmp_path, readonly=True)
        assert str(err.value) == f"cannot read {seg}: {EIO}"


def test_a_zero_header_that_cannot_be_read_names_the_segment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A last segment whose header is zeros is looked at whole (torn, or damage)."""
    with Ledger.open(tmp_path, sync="none") as w:
        w.append([ev(1)])
    seg = tmp_path / segment_name(1)
    data = bytearray(seg.read_bytes())
    data[:SEGMENT_HEADER_SIZE] = bytes(SEGMENT_HEADER_SIZE)
    seg.write_bytes(bytes(data))
    failing_when(monkeypatch, segments_mod, "pread_all", lambda fd, n, off: n == len(data))
    with pytest.raises(LedgerIOError) as err:
        Ledger.open(tmp_path, readonly=True)
    assert str(err.value) == f"cannot read {seg}: {EIO}"


def test_a_torn_tail_found_by_a_follower_is_placed_in_the_segment(tmp_path: Path) -> None:
    """Where the torn bytes start, counted from the segment's start, not from where the
    follower's read began."""
    with Ledger.open(tmp_path, sync="none") as w, \
            Ledger.open(tmp_path, readonly=True) as r:
        end = frame_2_past_the_follower(w, r)
        os.truncate(tmp_path / segment_name(1), end + 20)  # frame 2 cut short
        assert r.head == 1
        assert r._tip.torn is not None and r._tip.torn[0] == end


def test_a_failed_read_of_the_last_frames_digest_names_the_segment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Ledger.open(tmp_path, sync="none") as w, \
            Ledger.open(tmp_path, readonly=True) as r:
        w.append([ev(1)])
        assert r.head == 1
        failing_when(monkeypatch, tip_mod, "pread_all", lambda fd, n, off: n == 32)
        with pytest.raises(LedgerIOError) as err:
            _ = r.head
    assert str(err.value) == f"cannot read {tmp_path / segment_name(1)}: {EIO}"


def test_a_segment_that_cannot_be_opened_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Ledger.open(tmp_path, sync="none") as w:
        w.append([ev(1)])
    failing_when(monkeypatch, os, "open", lambda path, *a: str(path).endswith(".seg"))
    with pytest.raises(LedgerIOError) as err:
        Ledger.open(tmp_path, readonly=True)
    assert str(err.value) == f"cannot open {tmp_path / segment_name(1)}: {EIO}"


def test_a_writer_that_found_damage_before_its_first_write_stays_closed(
        tmp_path: Path) -> None:
    """Opening trusts a clean ending; the full walk before the first write finds the
    damage in the middle, and the handle stays failed closed once the bytes are fixed."""
    with Ledger.open(tmp_path, sync="none") as w:
        for i in range(3):
            w.append([ev(i)])
    seg = tmp_path / segment_name(1)
    good = seg.read_bytes()
    bad = bytearray(good)
    bad[SEGMENT_HEADER_SIZE + FRAME_HEADER_SIZE + 5] ^= 0xFF  # frame 1's payload
    seg.write_bytes(bytes(bad))
    with Ledger.open(tmp_path, sync="none") as w:
        with pytest.raises(CorruptLogError):
            w.append([ev(4)])
        seg.write_bytes(good)
        with pytest.raises(CorruptLogError):
            w.append([ev(4)])
