"""A handle following another writer into the next segment (``Tip._move_on`` and
``_switch_to``): a segment created but not yet written, a torn one replaced by a good
one, and damage in the segment it moves into, named by that segment's file. Mutation
testing found these reached only by whole-log tests that never stop at those points
(docs/reliability.md)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from eventstore import CorruptLogError, Event, Ledger, LedgerIOError
from eventstore import tip as tip_mod
from eventstore.event import encode_batch
from eventstore.frame import encode_frame_parts, encode_segment_header, payload_prefix
from eventstore.segments import segment_name

ROLL = 4096


def ev(i: int) -> Event:
    return Event("tip.test", None, {"i": i, "pad": "x" * 400})


def open_log(path: Path) -> Ledger:
    return Ledger.open(path, sync="none", segment_bytes=ROLL)


@contextmanager
def written_and_seen(tmp_path: Path) -> Iterator[tuple[Ledger, Ledger]]:
    """Two handles: ``a`` appended frames 1 to 3, ``b`` saw them; both closed after."""
    a = open_log(tmp_path)
    b = open_log(tmp_path)
    try:
        for i in range(1, 4):
            a.append([ev(i)])
        assert b.head == 3
        yield a, b
    finally:
        a.close()
        b.close()


def fill_first_segment(log: Ledger) -> int:
    """Append until the first segment is full (the next append rolls); its last seq."""
    first = log.log_dir / segment_name(1)
    while not first.exists() or first.stat().st_size < ROLL:
        log.append([ev(log.head + 1)])
    assert sorted(p.name for p in log.log_dir.glob("*.seg")) == [segment_name(1)]
    return log.head


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[Ledger, Ledger, int]]:
    """A writer that filled the first segment, a second handle at its end."""
    a = open_log(tmp_path)
    k = fill_first_segment(a)
    b = open_log(tmp_path)
    assert b.head == k
    try:
        yield a, b, k
    finally:
        a.close()
        b.close()


def frame(prev: bytes, first: int, payload: bytes | None = None) -> tuple[bytes, bytes]:
    if payload is None:
        rows, _ = encode_batch([ev(first)], None)
        payload = payload_prefix(1.0, None) + rows
    return encode_frame_parts(prev, first, 1, (payload,))


def test_a_segment_created_but_not_yet_written(two: tuple[Ledger, Ledger, int]) -> None:
    """The next segment has its header only: the follower moves into it and its head
    stays at the last seq of the full one, then follows the first frame written there."""
    a, b, k = two
    (a.log_dir / segment_name(k + 1)).write_bytes(
        encode_segment_header(k + 1, d0(a, k), ROLL))
    assert b.head == k
    assert a.append([ev(k + 1)]).first_seq == k + 1
    assert b.head == k + 1
    assert [e.seq for e in b.read(k)] == [k, k + 1]


def test_a_torn_next_segment_replaced_by_a_good_one_is_not_set_aside(tmp_path: Path) -> None:
    """A handle that saw the next segment torn (created, power cut before its header)
    and then saw another writer replace it with a good one must forget the torn one:
    its next append must not set the good segment aside."""
    a = open_log(tmp_path)
    k = fill_first_segment(a)
    a.close()
    (tmp_path / segment_name(k + 1)).write_bytes(b"")  # torn: not even a header
    b = open_log(tmp_path)
    assert b.head == k
    a = open_log(tmp_path)
    assert a.append([ev(k + 1)]).first_seq == k + 1  # sets the torn file aside, writes anew
    assert b.head == k + 1
    assert b.append([ev(k + 2)]).first_seq == k + 2
    a.close()
    b.close()
    with open_log(tmp_path) as c:
        assert [e.data["i"] for e in c.read()] == list(range(1, k + 3))
    assert len(list((tmp_path / "quarantine").iterdir())) == 1


def test_damage_in_the_segment_moved_into_names_that_segment(
        two: tuple[Ledger, Ledger, int]) -> None:
    """A frame whose bytes do not match its digest, a good one after it: corruption in
    the new segment, reported at that segment (not the one the handle left)."""
    a, b, k = two
    f1, d1 = frame(d0(a, k), k + 1)
    f2, _ = frame(d1, k + 2)
    bad = bytearray(f1)
    bad[-20] ^= 0xFF  # a payload byte
    seg = b.log_dir / segment_name(k + 1)
    seg.write_bytes(encode_segment_header(k + 1, d0(a, k), ROLL) + bytes(bad) + f2)
    with pytest.raises(CorruptLogError) as err:
        _ = b.head
    assert err.value.segment == seg


def d0(log: Ledger, k: int) -> bytes:
    digest = log.digest_at(k)
    assert digest is not None
    return digest


def test_a_batch_whose_head_does_not_decode_names_the_segment(tmp_path: Path) -> None:
    """A frame that chains but whose payload does not start as a batch does: the
    follower that keeps batch ids reports it at the segment it moved into."""
    b = open_log(tmp_path)
    b.append([ev(1)], batch_id="loads-the-window")  # b now keeps batch ids
    k = fill_first_segment(b)
    seg = tmp_path / segment_name(k + 1)
    assert not seg.exists()
    seg.write_bytes(encode_segment_header(k + 1, d0(b, k), ROLL)
                    + frame(d0(b, k), k + 1, b"\x01not a batch")[0])
    with pytest.raises(CorruptLogError) as err:
        _ = b.head
    assert err.value.segment == seg
    b.close()


def test_an_io_error_in_the_segment_moved_into(two: tuple[Ledger, Ledger, int],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, k = two
    assert a.append([ev(k + 1)]).first_seq == k + 1
    seg = a.log_dir / segment_name(k + 1)
    real = tip_mod.pread_all

    def failing(fd: int, n: int, offset: int) -> bytes:
        if os.readlink(f"/proc/self/fd/{fd}") == str(seg):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, n, offset)

    monkeypatch.setattr(tip_mod, "pread_all", failing)
    with pytest.raises(LedgerIOError) as err:
        _ = b.head
    assert str(err.value) == f"cannot read {seg}: {os.strerror(errno.EIO)}"


def spy_on_tip(monkeypatch: pytest.MonkeyPatch, method: str) -> list[int]:
    """Every call of ``Tip.<method>`` from now on (the head it was called at): a reload
    reads the whole generation again where following would do, a rescan walks the
    segment again, a generation check costs two stats."""
    calls: list[int] = []
    real = getattr(tip_mod.Tip, method)

    def spy(self: tip_mod.Tip) -> None:
        calls.append(self.head)
        real(self)

    monkeypatch.setattr(tip_mod.Tip, method, spy)
    return calls


def test_a_roll_inside_a_compacted_generation_is_followed_without_a_reload(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A handle moves into the next segment of its own generation as into any roll:
    the new generation is one whose first segment lies past the one it follows, never
    the one it is in (a reload would read the whole generation again)."""
    a = open_log(tmp_path)
    try:
        a.append([ev(1)])
        gen = a.start_generation(a.head, {}, [], at=1.0).base
        while len(list(tmp_path.glob("*.seg"))) < 1 or (
                tmp_path / segment_name(gen)).stat().st_size < ROLL:
            a.append([ev(a.head + 1)])
        b = open_log(tmp_path)
        try:
            reloads = spy_on_tip(monkeypatch, "reload")
            a.append([ev(a.head + 1)])  # rolls into a second segment of the generation
            assert len(list(tmp_path.glob("*.seg"))) == 2
            assert b.head == a.head and b.base == gen
            assert reloads == []
            assert [e.data["i"] for e in b.read(a.head, a.head)] == [a.head]
        finally:
            b.close()
    finally:
        a.close()


def test_a_compaction_at_the_head_is_followed_without_a_reload(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A generation that starts at the handle's head + 1 and chains to its digest (what
    compaction writes) is followed like a roll; only one that does not is read afresh."""
    with written_and_seen(tmp_path) as (a, b):
        reloads = spy_on_tip(monkeypatch, "reload")
        gen = a.start_generation(3, {}, [], at=1.0).base
        # b meets the seal compaction left after its last frame, and looks
        assert (b.head, b.base) == (a.head, gen) and reloads == []
        a.append([ev(5)])
        assert b.head == 5 and [e.seq for e in b.read(4)] == [4, 5]


def test_a_failed_read_of_the_active_segment_names_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-reading the active segment (after a frame it had seen was cut) fails as a
    LedgerIOError naming the segment and the system's reason."""
    d = tmp_path / "log"
    with Ledger.open(d) as led:
        led.append([Event("a.a", None, {"i": 1})])
        path = led._tip.path

        def failing(fd: int, n: int, offset: int) -> bytes:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        monkeypatch.setattr(tip_mod, "pread_all", failing)
        with pytest.raises(LedgerIOError) as err:
            led._tip.read_active()
        assert str(err.value) == f"cannot read {path}: {os.strerror(errno.EIO)}"


def test_a_look_at_an_unchanged_head_walks_nothing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handle that adopted another writer's frames checks, at each look, that its last
    frame still ends where it did (footer and digest, read in place); only a frame that
    is gone makes it walk its segment again (``Tip._rescan``)."""
    d = tmp_path / "log"
    rescans = spy_on_tip(monkeypatch, "_rescan")
    with Ledger.open(d) as writer, Ledger.open(d, readonly=True) as reader:
        for i in range(4):
            writer.append([Event("a.a", None, {"i": i, "pad": "x" * (100 * i)})])
            for _ in range(3):
                assert reader.head == i + 1
        assert rescans == []
        writer.close()  # (its preallocated zeros trimmed)
        seg = next(d.glob("*.seg"))
        os.truncate(seg, seg.stat().st_size - 1)  # the last frame cut short
        assert reader.head == 3 and rescans == [4]


def test_a_writer_looks_for_a_new_generation_once_until_the_lock_file_says_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each append reads the lock file's generation field; a writer checks for a new
    generation (two stats) when the field moved since it last looked, not at every
    append (the timed check is turned off here)."""
    monkeypatch.setattr(tip_mod, "GEN_CHECK_INTERVAL", 1e9)
    looks = spy_on_tip(monkeypatch, "check_generation")
    with Ledger.open(tmp_path / "log") as led:
        for i in range(6):
            led.append([Event("a.a", None, {"i": i})])
        assert led.head == 6 and len(looks) <= 1  # the first sight of the field only


def test_a_new_generation_at_the_head_that_does_not_chain_is_read_afresh(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A generation that starts at head + 1 but from another digest (a salvage's, not a
    compaction's) is not followed like a roll: the handle opens it afresh, taking the
    digest its header says."""
    monkeypatch.setattr(tip_mod, "GEN_CHECK_INTERVAL", 0.0)  # look at every refresh
    with written_and_seen(tmp_path) as (a, b):
        other = bytes(range(32))
        (tmp_path / segment_name(4)).write_bytes(
            encode_segment_header(4, other, ROLL, generation_start=True))
        reloads = spy_on_tip(monkeypatch, "reload")
        assert (b.head, b.base, b.head_digest) == (3, 4, other)
        assert reloads == [3]


def first_segments(tmp_path: Path, which: str) -> dict[str, bytes]:
    """A log whose first segment starts no generation but not soundly either."""
    if which == "not genesis":  # starts at seq 1, chained from another digest
        other = bytes(range(32))
        f1, d1 = frame(other, 1)
        f2, _ = frame(d1, 2)
        return {segment_name(1): encode_segment_header(1, other, ROLL) + f1 + f2}
    a = open_log(tmp_path / "src")
    while len(list((tmp_path / "src").glob("*.seg"))) < 3:
        a.append([ev(a.head + 1)])
    a.close()
    segs = sorted((tmp_path / "src").glob("*.seg"))[1:]  # segment 1 gone
    if which == "missing":
        segs = segs[:1]
    return {p.name: p.read_bytes() for p in segs}


@pytest.mark.parametrize("which", ["missing", "missing, two left", "not genesis"])
def test_an_unsound_first_segment_is_refused_by_opening_and_by_following(
        tmp_path: Path, which: str) -> None:
    """A log that starts past seq 1, or at seq 1 from a digest other than the genesis
    one, and starts no generation: refused by a handle that opens it and by one that
    saw the directory empty and then the segments appear, in the same words."""
    files = first_segments(tmp_path, which)
    first = min(files)
    words = ("the first segment does not start from the genesis digest"
             if which == "not genesis" else f"segments before seq {int(first[:-4])} are missing")
    d = tmp_path / "log"
    d.mkdir()
    follower = open_log(d)
    try:
        assert follower.head == 0
        for name, data in files.items():
            (d / name).write_bytes(data)
        with pytest.raises(CorruptLogError) as err:
            _ = follower.head
        assert (err.value.segment, err.value.offset, err.value.reason) == (d / first, 0, words)
    finally:
        follower.close()
    with pytest.raises(CorruptLogError) as err:
        with open_log(d) as opened:
            _ = opened.head
    assert (err.value.segment, err.value.offset, err.value.reason) == (d / first, 0, words)


def test_a_handle_opened_on_an_empty_log_follows_a_generation_at_seq_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It saw no segment when it opened (so no generation either: its generation starts
    at seq 1); a compaction after the first event starts one at seq 2, which it must
    take for a newer one and follow."""
    b = open_log(tmp_path)
    a = open_log(tmp_path)
    try:
        assert b.head == 0
        a.append([ev(1)])
        assert b.head == 1
        reloads = spy_on_tip(monkeypatch, "reload")
        gen = a.start_generation(1, {}, [], at=1.0).base
        assert gen == 2
        a.append([ev(2)])
        assert (b.head, b.base) == (a.head, gen) and reloads == []
        assert [e.data["i"] for e in b.read(a.head)] == [2]
    finally:
        a.close()
        b.close()
