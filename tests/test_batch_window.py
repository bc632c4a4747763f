"""A batch id another writer committed is a duplicate for every writer of the log.

Each writer keeps a window of the newest frames' batch ids. Built once from the log,
it then learns of the frames other writers append from what the tip reads when it
catches up: frames added to the segment it is on, or in the segments a roll made.
A retry through another handle must find the first commit there, with its seqs and
time. (Mutation testing found the catch-up unpinned: docs/reliability.md.)
"""

from __future__ import annotations

from pathlib import Path

import cbor2
import pytest

from eventstore import CorruptLogError, Event, Ledger, window
from eventstore.event import encode_batch
from eventstore.frame import encode_frame_parts, encode_segment_header, payload_prefix
from eventstore.segments import list_segments, segment_content, segment_name


def evs(i: int, n: int) -> list[Event]:
    return [Event("a.a", None, {"i": i, "j": j, "pad": "x" * 150}) for j in range(n)]


def clock(start: float) -> object:
    t = [start]

    def now() -> float:
        t[0] += 1.25  # every batch another time, none a whole number
        return t[0]

    return now


@pytest.mark.parametrize("roll", [False, True], ids=["same-segment", "after-rolls"])
def test_another_writers_batch_id_is_a_duplicate_here(tmp_path: Path, roll: bool) -> None:
    d = tmp_path / "log"
    size = 4096 if roll else 1 << 20
    with Ledger.open(d, segment_bytes=size, clock=clock(1000.0)) as a, \
            Ledger.open(d, segment_bytes=size, clock=clock(5000.0)) as b:
        a.append(evs(0, 2), batch_id="a-0")  # a's window is built now
        theirs = {}
        for i in range(1, 30 if roll else 6):
            bid = f"b-{i}" if i % 3 else None  # frames without an id between
            r = b.append(evs(i, 1 + i % 4), batch_id=bid)
            if bid is not None:
                theirs[bid] = r
        if roll:
            assert len(list_segments(d)) > 2
        head = b.head
        for bid, first in theirs.items():
            again = a.append(evs(99, 3), batch_id=bid)
            assert again.duplicate, bid
            assert (again.first_seq, again.last_seq, again.at, again.batch_id) == (
                first.first_seq, first.last_seq, first.at, bid)
        assert a.head == head  # no retry wrote anything
        new = a.append(evs(100, 1), batch_id="a-1")
        assert not new.duplicate and new.first_seq == head + 1


def test_the_window_forgets_only_what_left_it(tmp_path: Path) -> None:
    """Frames another writer adds push the oldest ids out of a small window, as this
    writer's own frames do; an id the window still holds is a duplicate."""
    d = tmp_path / "log"
    with Ledger.open(d, batch_window=4) as a, Ledger.open(d, batch_window=4) as b:
        old = a.append(evs(0, 1), batch_id="old")
        for i in range(1, 4):
            b.append(evs(i, 1), batch_id=f"b-{i}")
        # 4 frames: "old" is still in a's window of 4
        assert a.append(evs(9, 1), batch_id="old").first_seq == old.first_seq
        b.append(evs(4, 1), batch_id="b-4")
        # 5 frames: b-1 to b-4 are the newest 4, "old" left the window (an id is
        # idempotent within the last batch_window frames, no further back)
        assert a.append(evs(9, 1), batch_id="b-1").duplicate
        assert not a.append(evs(9, 1), batch_id="old").duplicate


def add_undecodable_frame(d: Path, head: int, digest: bytes) -> tuple[Path, int]:
    """A whole frame (its checksums and chain check out) after the log's last one whose
    payload is no batch, then a good one (the tip reads the last frame's time itself);
    returns the segment and the offset of the bad one."""
    path = list_segments(d)[-1][1]
    end = len(segment_content(path))
    bad, digest = encode_frame_parts(digest, head + 1, 1, (cbor2.dumps("no batch"),))
    rows = encode_batch([Event("a.a", None, {"i": 0})], None)[0]
    good, _ = encode_frame_parts(digest, head + 2, 1, (payload_prefix(1.5, None) + rows,))
    with open(path, "r+b") as f:
        f.seek(end)
        f.write(bad + good)
    return path, end


@pytest.mark.parametrize("roll", [False, True], ids=["same-segment", "after-a-roll"])
def test_a_frame_another_writer_added_that_does_not_decode_is_named(
        tmp_path: Path, roll: bool) -> None:
    """Catching up, the window reads each new frame's time and id: a payload that does
    not decode is corruption, named by its segment and its offset in the file."""
    d = tmp_path / "log"
    with Ledger.open(d, segment_bytes=4096) as a, Ledger.open(d, segment_bytes=4096) as b:
        a.append(evs(0, 1), batch_id="a-0")
        b.append(evs(1, 1), batch_id="b-1")  # one a has seen or not: it catches up below
        if roll:
            while len(list_segments(d)) < 2:
                b.append(evs(2, 2))
        path, off = add_undecodable_frame(d, b.head, b.digest_at(b.head) or b"")
        with pytest.raises(CorruptLogError) as err:
            a.append(evs(3, 1), batch_id="a-3")
        assert (err.value.segment, err.value.offset) == (path, off)
        assert err.value.reason == "payload is not [at, batch_id, offsets, events]"


def test_a_writer_that_never_used_a_batch_id_reads_no_ones_payloads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window is built on the first append with an id: until then catching up with
    other writers' frames decodes none of their payloads."""
    calls: list[int] = []
    real = window.payload_head

    def spy(payload: memoryview) -> tuple[float, str | None]:
        calls.append(len(payload))
        return real(payload)

    monkeypatch.setattr(window, "payload_head", spy)
    d = tmp_path / "log"
    with Ledger.open(d, segment_bytes=4096) as a, Ledger.open(d, segment_bytes=4096) as b:
        a.append(evs(0, 1))
        for i in range(1, 20):  # in a's segment, then past rolls
            b.append(evs(i, 2), batch_id=f"b-{i}")
        assert len(list_segments(d)) > 1
        a.append(evs(20, 1))
        assert calls == []
        assert a.append(evs(21, 1), batch_id="b-19").duplicate  # built now, from the log


def test_a_rolled_segment_that_holds_no_frame_yet_is_followed(tmp_path: Path) -> None:
    """A roll whose writer died before its first frame leaves a segment of a header
    alone. A writer behind it moves on to it with its head at the seq before the
    segment's base, and appends there: no seq skipped, none taken twice."""
    d = tmp_path / "log"
    with Ledger.open(d, segment_bytes=4096) as a, Ledger.open(d, segment_bytes=4096) as b:
        a.append(evs(0, 1), batch_id="a-0")
        while len(segment_content(list_segments(d)[-1][1])) < 4096:  # b fills the segment
            b.append(evs(1, 2), batch_id=f"b-{b.head}")
        head = b.head
        digest = b.digest_at(head)
        assert digest is not None
        (d / segment_name(head + 1)).write_bytes(encode_segment_header(head + 1, digest, 4096))
        r = a.append(evs(2, 3))
        assert (r.first_seq, r.last_seq) == (head + 1, head + 3)
        assert [e.seq for e in a.read()] == list(range(1, head + 4))
        assert a.verify().ok


def test_a_segment_that_ends_exactly_at_its_roll_size_is_followed_past(tmp_path: Path) -> None:
    """A segment is full at its roll size, not only past it: a writer whose segment ends
    exactly there follows the roll another writer made, and appends after its frames."""
    def batch(pad: int) -> list[Event]:
        return [Event("a.a", None, {"pad": "x" * pad})]

    def end_after(d: Path, pad: int) -> int:
        with Ledger.open(d, segment_bytes=1 << 20) as p:
            p.append(batch(pad))
        return len(segment_content(list_segments(d)[0][1]))

    # a pad whose CBOR length has a 2-byte head adds a byte per character
    pad = 4000 + (-end_after(tmp_path / "probe", 4000)) % 1024
    size = end_after(tmp_path / "exact", pad)
    assert size % 1024 == 0  # the roll size is kept in KiB
    d = tmp_path / "log"
    with Ledger.open(d, segment_bytes=size) as a, Ledger.open(d, segment_bytes=size) as b:
        a.append(batch(pad))
        assert len(segment_content(list_segments(d)[0][1])) == size
        b.append(evs(1, 1), batch_id="b-1")  # b rolls: seq 2 starts the second segment
        assert [base for base, _ in list_segments(d)] == [1, 2]
        r = a.append(evs(2, 1), batch_id="b-1")
        assert r.duplicate and r.first_seq == 2
        assert a.append(evs(3, 1)).first_seq == 3
        assert [e.seq for e in b.read()] == [1, 2, 3]
