"""``salvage.scan``, the pure part of salvage: segments' bytes in, an exact account out.

Each test builds the segments it needs with the frame codec and compares every field of
the :class:`Scan` (what is kept, what is lost, which segments are damaged, the head it
reached, the frames it read, a torn tail), so that no rule of the walk is left to a
whole-log test's luck. (Mutation testing found these rules unpinned: docs/reliability.md.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eventstore import Event
from eventstore.event import encode_batch
from eventstore.frame import (
    GENESIS_DIGEST,
    encode_frame_parts,
    encode_segment_header,
    payload_prefix,
)
from eventstore.salvage import Scan, scan

D0 = b"\x11" * 32  # the digest the scan starts from (a generation's anchor)


def frame(prev: bytes, first: int, count: int, rows_for: int | None = None) -> tuple[bytes, bytes]:
    """A frame of ``count`` events chained to ``prev`` (``rows_for``: how many rows its
    payload really holds, for a frame whose header and payload disagree)."""
    n = count if rows_for is None else rows_for
    rows, _ = encode_batch([Event("scan.test", None, {"i": first + j}) for j in range(n)], None)
    return encode_frame_parts(prev, first, count, (payload_prefix(1.0, None), rows))


class Log:
    """Frames chained one after the other; ``segment`` packs some of them in a file."""

    def __init__(self, start: int = 1, prev: bytes = D0) -> None:
        self.next, self.prev = start, prev
        self.frames: list[tuple[bytes, int, int, bytes]] = []  # bytes, first, last, digest

    def add(self, count: int) -> int:
        data, digest = frame(self.prev, self.next, count)
        self.frames.append((data, self.next, self.next + count - 1, digest))
        self.prev, self.next = digest, self.next + count
        return len(self.frames) - 1

    def digest(self, i: int) -> bytes:
        return self.frames[i][3]


def segment(base: int, prev: bytes, *parts: bytes) -> bytes:
    return encode_segment_header(base, prev, 4096) + b"".join(parts)


def name(base: int) -> str:
    return f"{base:020d}.seg"


def files(*segs: tuple[int, bytes]) -> list[tuple[Path, bytes]]:
    return [(Path("log") / name(base), data) for base, data in segs]


def account(s: Scan) -> dict[str, Any]:
    """Every field of a scan, the kept batches as (first seq, events, their data)."""
    import cbor2

    return {
        "batches": [(b.first_seq, [cbor2.loads(r)[2]["i"] for r in b.rows]) for b in s.batches],
        "lost": s.lost, "damaged": s.damaged, "head": s.head, "head_digest": s.head_digest,
        "frames": s.frames, "torn_tail": s.torn_tail, "lost_events": s.lost_events,
    }


def expect(batches: list[tuple[int, int]], lost: list[list[int]], damaged: list[str],
           head: int, head_digest: bytes, frames: list[tuple[int, bytes]],
           torn_tail: bool = False) -> dict[str, Any]:
    return {
        "batches": [(first, list(range(first, first + n))) for first, n in batches],
        "lost": lost, "damaged": damaged, "head": head, "head_digest": head_digest,
        "frames": frames, "torn_tail": torn_tail,
        "lost_events": sum(b - a + 1 for a, b in lost),
    }


def test_no_segment_leaves_the_head_where_the_scan_starts() -> None:
    assert account(scan([], 7, D0)) == expect([], [], [], 6, D0, [])
    assert account(scan([], 1, GENESIS_DIGEST)) == expect([], [], [], 0, GENESIS_DIGEST, [])


def test_a_whole_log_is_kept_frame_by_frame() -> None:
    log = Log(start=5)
    a, b, c = log.add(2), log.add(1), log.add(3)
    segs = files((5, segment(5, D0, log.frames[a][0], log.frames[b][0])),
                 (8, segment(8, log.digest(b), log.frames[c][0])))
    assert account(scan(segs, 5, D0)) == expect(
        [(5, 2), (7, 1), (8, 3)], [], [], 10, log.digest(c),
        [(6, log.digest(a)), (7, log.digest(b)), (10, log.digest(c))])


def test_an_empty_segment_after_the_last_frame_is_not_damage() -> None:
    log = Log()
    a = log.add(1)
    segs = files((1, segment(1, D0, log.frames[a][0])), (2, segment(2, log.digest(a))))
    assert account(scan(segs, 1, D0)) == expect([(1, 1)], [], [], 1, log.digest(a),
                                                [(1, log.digest(a))])


JUNK = b"\x07not a frame at all\x00\x01" * 3


def test_junk_after_the_last_frame_of_the_last_segment_is_a_torn_tail() -> None:
    """Bytes no frame follows, at the very end: a write that was never acknowledged."""
    log = Log()
    a, b = log.add(1), log.add(2)
    segs = files((1, segment(1, D0, log.frames[a][0])),
                 (2, segment(2, log.digest(a), log.frames[b][0], JUNK)))
    assert account(scan(segs, 1, D0)) == expect(
        [(1, 1), (2, 2)], [], [], 3, log.digest(b), [(1, log.digest(a)), (3, log.digest(b))],
        torn_tail=True)


def test_junk_inside_an_earlier_segment_is_damage() -> None:
    log = Log()
    a, b = log.add(1), log.add(2)
    segs = files((1, segment(1, D0, log.frames[a][0], JUNK)),
                 (2, segment(2, log.digest(a), log.frames[b][0])))
    assert account(scan(segs, 1, D0)) == expect(
        [(1, 1), (2, 2)], [], [name(1)], 3, log.digest(b),
        [(1, log.digest(a)), (3, log.digest(b))])


def test_junk_at_the_end_of_a_damaged_last_segment_is_not_called_torn() -> None:
    log = Log()
    a, b = log.add(1), log.add(2)
    segs = files((1, segment(1, D0, log.frames[a][0])),
                 (2, segment(9, log.digest(a), log.frames[b][0], JUNK)))  # base 9: wrong
    assert account(scan(segs, 1, D0)) == expect(
        [(1, 1), (2, 2)], [], [name(2)], 3, log.digest(b),
        [(1, log.digest(a)), (3, log.digest(b))])


@pytest.mark.parametrize("header", ["base", "prev", "both", "checksum"])
def test_a_wrong_segment_header_marks_it_damaged_and_keeps_its_frames(header: str) -> None:
    """The header is rewritten by salvage; the frames still chain, so none is lost."""
    log = Log()
    a, b, c = log.add(1), log.add(1), log.add(1)
    base, prev = {"base": (7, log.digest(a)), "prev": (2, D0), "both": (7, D0),
                  "checksum": (2, log.digest(a))}[header]
    second = bytearray(segment(base, prev, log.frames[b][0]))
    if header == "checksum":
        second[60] ^= 1
    segs = files((1, segment(1, D0, log.frames[a][0])), (2, bytes(second)),
                 (3, segment(3, log.digest(b), log.frames[c][0])))
    assert account(scan(segs, 1, D0)) == expect(
        [(1, 1), (2, 1), (3, 1)], [], [name(2)], 3, log.digest(c),
        [(1, log.digest(a)), (2, log.digest(b)), (3, log.digest(c))])


def test_a_damaged_frame_header_loses_it_and_the_frame_after() -> None:
    """The scan finds the next frame past the damage, but the digest that frame chains to
    is gone with the damaged header: it cannot be checked, so it is lost too. The one
    after it chains to a digest its header states, and is kept."""
    log = Log()
    a, b, c, d = log.add(1), log.add(2), log.add(1), log.add(1)
    broken = bytearray(log.frames[b][0])
    broken[6] ^= 0xFF  # inside the header's crc
    segs = files((1, segment(1, D0, log.frames[a][0], bytes(broken), log.frames[c][0],
                             log.frames[d][0])))
    assert account(scan(segs, 1, D0)) == expect(
        [(1, 1), (5, 1)], [[2, 4]], [name(1)], 5, log.digest(d),
        [(1, log.digest(a)), (4, log.digest(c)), (5, log.digest(d))])


def test_a_frame_for_seqs_already_passed_is_skipped_as_damage() -> None:
    log = Log()
    a, b, c = log.add(2), log.add(1), log.add(1)
    segs = files((1, segment(1, D0, log.frames[a][0], log.frames[b][0], log.frames[a][0],
                             log.frames[c][0])))
    assert account(scan(segs, 1, D0)) == expect(
        [(1, 2), (3, 1), (4, 1)], [], [name(1)], 4, log.digest(c),
        [(2, log.digest(a)), (3, log.digest(b)), (4, log.digest(c))])


def test_a_gap_in_the_seqs_loses_the_gap_and_the_frame_that_cannot_be_checked() -> None:
    log = Log()
    a, _b, c, d = log.add(1), log.add(2), log.add(1), log.add(1)  # seqs 2-3 missing
    segs = files((1, segment(1, D0, log.frames[a][0], log.frames[c][0], log.frames[d][0])))
    assert account(scan(segs, 1, D0)) == expect(
        [(1, 1), (5, 1)], [[2, 4]], [name(1)], 5, log.digest(d),
        [(1, log.digest(a)), (4, log.digest(c)), (5, log.digest(d))])


def test_a_frame_whose_chain_digest_is_wrong_is_lost_and_the_next_kept() -> None:
    log = Log()
    a, b, c = log.add(1), log.add(1), log.add(1)
    forged, _ = frame(b"\x22" * 32, 2, 1)  # seq 2, chained to the wrong digest
    segs = files((1, segment(1, D0, log.frames[a][0], forged, log.frames[c][0])))
    got = account(scan(segs, 1, D0))
    forged_digest = got["frames"][1][1]
    assert forged_digest != log.digest(b)
    # the next frame chains to the real seq-2 digest, not to the forged one: lost too
    assert got == expect([(1, 1)], [[2, 3]], [name(1)], 3, log.digest(c),
                         [(1, log.digest(a)), (2, forged_digest), (3, log.digest(c))])


@pytest.mark.parametrize("rows", [1, 3])
def test_a_frame_whose_payload_disagrees_with_its_header_is_lost(rows: int) -> None:
    """A chain digest that checks out over a payload holding another number of events
    than the header's count: the frame is lost, the chain goes on from its digest."""
    log = Log()
    a = log.add(1)
    bad, bad_digest = frame(log.digest(a), 2, 2, rows_for=rows)
    good, good_digest = frame(bad_digest, 4, 1)
    segs = files((1, segment(1, D0, log.frames[a][0], bad, good)))
    assert account(scan(segs, 1, D0)) == expect(
        [(1, 1), (4, 1)], [[2, 3]], [name(1)], 4, good_digest,
        [(1, log.digest(a)), (3, bad_digest), (4, good_digest)])


def test_a_payload_that_is_not_cbor_is_lost() -> None:
    log = Log()
    a = log.add(1)
    bad, bad_digest = encode_frame_parts(log.digest(a), 2, 1, (b"\xff\xff\xff",))
    segs = files((1, segment(1, D0, log.frames[a][0], bad)))
    assert account(scan(segs, 1, D0)) == expect(
        [(1, 1)], [[2, 2]], [name(1)], 2, bad_digest,
        [(1, log.digest(a)), (2, bad_digest)])


def test_a_batch_that_cannot_be_copied_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Taking the events' stored bytes is the last check: a failure there loses the frame
    (checked and decoded though it was), the scan goes on."""
    import eventstore.salvage as salvage_mod

    log = Log()
    a, b = log.add(1), log.add(1)
    real = salvage_mod.raw_batch  # type: ignore[attr-defined]

    def raw_batch(path: Path, pos: int, payload: memoryview, first: int, count: int) -> Any:
        if first == 1:
            raise ValueError("cannot copy")
        return real(path, pos, payload, first, count)

    monkeypatch.setattr(salvage_mod, "raw_batch", raw_batch)
    segs = files((1, segment(1, D0, log.frames[a][0], log.frames[b][0])))
    assert account(scan(segs, 1, D0)) == expect(
        [(2, 1)], [[1, 1]], [name(1)], 2, log.digest(b),
        [(1, log.digest(a)), (2, log.digest(b))])


def test_losses_next_to_each_other_are_one_range() -> None:
    s = Scan()
    s.lose(3, 4)
    s.lose(5, 5)  # adjacent: joins
    s.lose(5, 6)  # overlapping: extends
    s.lose(2, 1)  # empty: nothing
    s.lose(8, 9)  # a gap: a new range
    s.lose(9, 8)
    assert s.lost == [[3, 6], [8, 9]] and s.lost_events == 6
    t = Scan()
    t.lose(1, 5)
    t.lose(2, 3)  # inside the last range: it stays as it was
    assert t.lost == [[1, 5]]
