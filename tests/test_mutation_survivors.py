"""Mutants that survived the suite under mutmut (``.ci/mutate``; docs/reliability.md,
"Mutation testing"), each killed here by a deterministic test: exact boundaries with a
fixed clock and pinned examples, not a random test's luck.
"""

from __future__ import annotations

import pytest

from eventstore import CorruptLogError, Event, MemoryLog
from eventstore.event import encode_batch
from eventstore.frame import FRAME_HEADER_SIZE, encode_frame_parts, payload_prefix
from eventstore.framechain import FrameChain

# --- FrameChain.add_checked: frames that come from elsewhere (the JetStream log) ----


def _source(ats: list[float], batch_ids: list[str | None]) -> MemoryLog:
    times = iter(ats)
    log = MemoryLog(clock=lambda: next(times))
    for i, bid in enumerate(batch_ids):
        log.append([Event("x.y", f"k{i}", {"i": i}), Event("x.z", "k", {"n": i})], batch_id=bid)
    return log


def _frame(prev: bytes, first: int, at: float, batch_id: str | None = None) -> bytes:
    rows, count = encode_batch([Event("x.y", "k", {"n": 1})], batch_id)
    return encode_frame_parts(prev, first, count, (payload_prefix(at, batch_id), rows))[0]


def test_add_checked_takes_the_next_frames_exactly_as_their_writer_recorded_them() -> None:
    src = _source([10.0, 10.0, 12.5], ["b0", None, "b2"])  # equal times: not backwards
    chain = src._chain
    copy = FrameChain("copy")
    receipts = [copy.add_checked(f) for f in chain.frames]
    assert [(r.first_seq, r.last_seq, r.at, r.batch_id) for r in receipts] == [
        (1, 2, 10.0, "b0"), (3, 4, 10.0, None), (5, 6, 12.5, "b2")]
    assert copy.head == 6 and copy.last_at == 12.5 and copy.head_digest == chain.head_digest
    assert copy.firsts == [1, 3, 5] and copy.digests == chain.digests
    assert copy.offsets == chain.offsets and copy.size == sum(map(len, chain.frames))
    assert sorted(copy.receipts) == ["b0", "b2"]
    assert [e.key for e in src.read()] == [
        e.key for b in copy.batches(0, 3, None) for e in b.events]


@pytest.mark.parametrize("case", ["skips one", "repeats one", "trailing byte", "two frames",
                                  "cut short", "flipped payload bit", "not chained"])
def test_add_checked_refuses_a_frame_that_is_not_the_next_one_and_records_nothing(
    case: str,
) -> None:
    f = _source([1.0, 2.0, 3.0], [None, None, None])._chain.frames
    copy = FrameChain("copy")
    copy.add_checked(f[0])
    bad = {
        "skips one": f[2],
        "repeats one": f[0],
        "trailing byte": f[1] + b"\0",
        "two frames": f[1] + f[2],
        "cut short": f[1][:-1],
        "flipped payload bit": f[1][:FRAME_HEADER_SIZE] + bytes([f[1][FRAME_HEADER_SIZE] ^ 1])
        + f[1][FRAME_HEADER_SIZE + 1:],
        "not chained": _frame(bytes(32), 3, 5.0),
    }[case]
    with pytest.raises(CorruptLogError) as e:
        copy.add_checked(bad)
    # where it would have started; a trailing byte: where that byte would be
    assert e.value.offset == len(f[0]) + (len(f[1]) if case == "trailing byte" else 0)
    assert (copy.head, copy.size, len(copy.frames), copy.last_at) == (2, len(f[0]), 1, 1.0)
    copy.add_checked(f[1])  # the real next frame is still taken
    assert copy.head == 4


def test_add_checked_refuses_a_batch_time_before_the_last_but_takes_an_equal_one() -> None:
    copy = FrameChain("copy")
    copy.add_checked(_frame(bytes(32), 1, 7.0))
    with pytest.raises(CorruptLogError, match="backwards") as e:
        copy.add_checked(_frame(copy.head_digest, 2, 6.999))
    assert e.value.offset == copy.size and copy.head == 1
    r = copy.add_checked(_frame(copy.head_digest, 2, 7.0, "same-time"))
    assert (r.first_seq, r.last_seq, r.at, r.batch_id) == (2, 2, 7.0, "same-time")
    assert copy.receipts == {"same-time": r}


def test_add_checked_refuses_a_payload_writers_do_not_write() -> None:
    rows, count = encode_batch([Event("x.y", "k", {"n": 1})], None)
    odd = b"\x84\xfa" + bytes(4) + b"\xf6"  # ``at`` as a float32: a decoder could, writers don't
    frame = encode_frame_parts(bytes(32), 1, count, (odd, rows))[0]
    copy = FrameChain("copy")
    with pytest.raises(CorruptLogError, match="shape") as e:
        copy.add_checked(frame)
    assert e.value.offset == 0 and copy.head == 0 and copy.frames == []
