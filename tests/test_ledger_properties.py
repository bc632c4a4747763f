"""Property tests: the log round-trips, survives truncation, and detects bit flips.

The pure codec (``eventstore.frame``) is hit with many inputs; the file ledger
with fewer, since each example writes a small log to disk.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cbor2
import pytest
import strategies as S
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from eventstore import CorruptLogError, Event, Ledger
from eventstore.frame import (
    FORMAT_VERSION,
    FRAME_OVERHEAD,
    GENESIS_DIGEST,
    PAST_ALL_SEQS,
    SEGMENT_HEADER_SIZE,
    FrameError,
    SegmentHeaderError,
    decode_payload,
    decode_rows_at,
    decode_segment_header,
    encode_frame,
    encode_payload,
    encode_segment_header,
    footer_frame_len,
    has_valid_frame_after,
    iter_frames,
    payload_of,
    read_frame_header,
    row_bounds,
    walk_frames,
)
from eventstore.segments import Tail, fast_tail, scan_tail

IO = settings(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
PAD = "p" * 300  # most examples fill more than one 4 KiB segment

Batch = tuple[int, list[tuple[str, Any, Any]]]  # (first_seq, rows)


@contextmanager
def log_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ctxl-prop-") as d:
        yield Path(d) / "log"


def padded(batches: list[list[Event]]) -> list[list[Event]]:
    return [[Event(e.kind, e.key, {**e.data, "_pad": PAD}) for e in b] for b in batches]


def write_log(path: Path, batches: list[list[Event]], segment_bytes: int = 4096) -> list[Batch]:
    out: list[Batch] = []
    with Ledger.open(path, segment_bytes=segment_bytes, sync="none") as led:
        for b in batches:
            r = led.append(b)
            out.append((r.first_seq, [(e.kind, e.key, dict(e.data)) for e in b]))
    return out


def read_all(path: Path) -> list[Batch]:
    with Ledger.open(path, readonly=True) as led:
        return [as_written(b) for b in led.read_batches()]


def as_written(batch: Any) -> Batch:
    """A batch read back, in the shape :func:`write_log` records."""
    return (batch.first_seq, [(e.kind, e.key, e.data) for e in batch.events])


def segments(path: Path) -> list[Path]:
    return sorted(path.glob("*.seg"))


def files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


# --- the ledger ------------------------------------------------------------------------


@settings(IO, max_examples=30)
@given(batches=S.batch_lists)
def test_any_batches_round_trip_across_segments(batches: list[list[Event]]) -> None:
    with log_dir() as path:
        wrote = write_log(path, padded(batches))
        assert read_all(path) == wrote
        events = list(Ledger.open(path, readonly=True).read())
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert [(e.kind, e.key, e.data) for e in events] == [r for _f, rows in wrote for r in rows]
        with Ledger.open(path) as led:
            rep = led.verify()
            assert rep.ok and rep.events == len(events) and rep.frames == len(batches)


@settings(IO, max_examples=60)
@given(batches=S.batch_lists, data=st.data())
def test_truncating_the_last_segment_anywhere_leaves_whole_batches(
    batches: list[list[Event]], data: st.DataObject
) -> None:
    with log_dir() as path:
        wrote = write_log(path, padded(batches))
        last = segments(path)[-1]
        raw = last.read_bytes()
        base = int(last.name[:20])
        hdr = decode_segment_header(raw)
        ends = {SEGMENT_HEADER_SIZE} | {
            f.end for f in iter_frames(raw, SEGMENT_HEADER_SIZE, hdr.prev_digest, base)
        }
        cut = data.draw(st.integers(SEGMENT_HEADER_SIZE, len(raw)), label="cut")
        last.write_bytes(raw[:cut])
        damaged = files(path)

        got = read_all(path)
        assert got == wrote[: len(got)]  # a prefix of whole batches
        assert len(got) >= sum(1 for first, _ in wrote if first < base)  # earlier segments intact
        head = got[-1][0] + len(got[-1][1]) - 1 if got else 0
        with Ledger.open(path, readonly=True) as ro:
            assert ro.head == head
            assert ro.verify().ok == (cut in ends)
        assert files(path) == damaged  # readers never modify files

        with Ledger.open(path, segment_bytes=4096) as led:
            r = led.append([Event("after.cut", None, {"n": 1})])
            assert r.first_seq == head + 1
            assert led.verify().ok
        assert read_all(path) == got + [(head + 1, [("after.cut", None, {"n": 1})])]


@settings(IO, max_examples=150)
@given(batches=S.batch_lists, data=st.data())
def test_any_single_bit_flip_is_detected_and_never_read(
    batches: list[list[Event]], data: st.DataObject
) -> None:
    with log_dir() as path:
        wrote = write_log(path, padded(batches))
        segs = segments(path)
        seg = data.draw(st.sampled_from(segs), label="segment")
        raw = bytearray(seg.read_bytes())
        bit = data.draw(st.integers(0, len(raw) * 8 - 1), label="bit")
        raw[bit // 8] ^= 1 << (bit % 8)
        seg.write_bytes(bytes(raw))

        with Ledger.open(path, readonly=True) as ro:
            rep = ro.verify()
            assert not rep.ok and rep.problems
            assert rep.problems[0].segment == seg.name
            # reads either fail closed or return an exact prefix of whole batches
            try:
                got = read_all(path)
            except CorruptLogError as e:
                assert e.segment.name == seg.name
            else:
                assert got == wrote[: len(got)] and len(got) < len(wrote)
            try:
                events = [(e.seq, e.kind, e.key, e.data) for e in ro.read()]
            except CorruptLogError:
                pass
            else:
                flat = [(first + i, *row) for first, rows in wrote for i, row in enumerate(rows)]
                assert events == flat[: len(events)]
        with Ledger.open(path) as led:  # a writer's reads obey the same rule
            try:
                got = [as_written(b) for b in led.read_batches()]
            except CorruptLogError:
                pass
            else:
                assert got == wrote[: len(got)]


@settings(IO, max_examples=40)
@given(batches=S.batch_lists, data=st.data())
def test_reads_by_seq_agree_with_a_full_read(
    batches: list[list[Event]], data: st.DataObject
) -> None:
    """``read(s, t)`` (through the frame index) is exactly that slice of a full read."""
    with log_dir() as path:
        write_log(path, padded(batches))
        with Ledger.open(path, readonly=True) as ro:
            full = [(e.seq, e.kind, e.key, e.data, e.at) for e in ro.read()]
            for _ in range(3):  # a warm handle: its index is built already
                s = data.draw(st.integers(1, len(full)), label="from")
                t = data.draw(st.integers(s, len(full) + 2), label="to")
                got = [(e.seq, e.kind, e.key, e.data, e.at) for e in ro.read(s, t)]
                assert got == full[s - 1 : t]
                with Ledger.open(path, readonly=True) as cold:
                    assert [(e.seq, e.data) for e in cold.read(s, t)] == [
                        (f[0], f[3]) for f in full[s - 1 : t]
                    ]


@settings(IO, max_examples=100)
@given(batches=S.batch_lists, data=st.data())
def test_a_bit_flip_never_reaches_a_read_by_seq(
    batches: list[list[Event]], data: st.DataObject
) -> None:
    """Reads that start inside a segment (through its index) return exact data or fail
    closed, whatever single bit was flipped, and before or after the index was built."""
    with log_dir() as path:
        write_log(path, padded(batches))
        with Ledger.open(path, readonly=True) as ro:
            full = [(e.seq, e.kind, e.key, e.data) for e in ro.read()]
        seg = data.draw(st.sampled_from(segments(path)), label="segment")
        raw = bytearray(seg.read_bytes())
        bit = data.draw(st.integers(0, len(raw) * 8 - 1), label="bit")
        warm = Ledger.open(path, readonly=True)
        s = data.draw(st.integers(1, len(full)), label="seq")
        list(warm.read(s, s))  # builds the index of the segment holding s
        raw[bit // 8] ^= 1 << (bit % 8)
        seg.write_bytes(bytes(raw))
        for led in (warm, Ledger.open(path, readonly=True)):
            for seq in sorted({s, max(1, s - 1), min(len(full), s + 1)}):
                try:
                    got = [(e.seq, e.kind, e.key, e.data) for e in led.read(seq, seq)]
                except CorruptLogError as e:
                    assert e.segment.name == seg.name
                    break  # this handle is closed for business now (it saw corruption)
                assert got in ([], full[seq - 1 : seq])
            led.close()


# --- the pure frame codec ----------------------------------------------------------------

digests = st.binary(min_size=32, max_size=32)
payloads = st.binary(max_size=300)


@settings(max_examples=300)
@given(prev=digests, first=st.integers(1, 2**63), count=st.integers(1, 2**31), payload=payloads)
def test_frame_round_trip(prev: bytes, first: int, count: int, payload: bytes) -> None:
    frame, digest = encode_frame(prev, first, count, payload)
    assert len(frame) == len(payload) + FRAME_OVERHEAD
    buf = b"junk" + frame
    info = read_frame_header(buf, 4)
    assert (info.offset, info.end, info.first_seq, info.count, info.digest) == (
        4,
        len(buf),
        first,
        count,
        digest,
    )
    assert bytes(payload_of(buf, info)) == payload
    assert footer_frame_len(buf, len(buf), len(buf) - 4) == len(frame)
    ((off, end, got_first, got_count, got_digest, p0, p1),) = walk_frames(buf, 4, prev, first)
    assert (off, end, got_first, got_count, got_digest) == (4, len(buf), first, count, digest)
    assert buf[p0:p1] == payload
    wrong = bytes([prev[0] ^ 1]) + prev[1:]
    with pytest.raises(FrameError, match="checksum mismatch"):
        list(walk_frames(buf, 4, wrong, first))


@settings(max_examples=200)
@given(at=st.floats(allow_nan=False), bid=st.none() | st.text(max_size=20), batch=S.batches)
def test_payload_round_trip(at: float, bid: str | None, batch: list[Event]) -> None:
    rows = [[e.kind, e.key, dict(e.data)] for e in batch]
    got_at, got_bid, got_rows = decode_payload(encode_payload(at, bid, rows))
    assert (got_at, got_bid, got_rows) == (at, bid, rows)


@settings(max_examples=200)
@given(at=st.floats(allow_nan=False), bid=st.none() | st.text(max_size=20), batch=S.batches,
       data=st.data())
def test_one_event_decodes_without_the_rest(
    at: float, bid: str | None, batch: list[Event], data: st.DataObject
) -> None:
    rows = [[e.kind, e.key, dict(e.data)] for e in batch]
    payload = encode_payload(at, bid, rows)
    assert encode_payload(at, bid, rows) == payload  # deterministic
    lo = data.draw(st.integers(0, len(rows) - 1))
    hi = data.draw(st.integers(lo + 1, len(rows)))
    assert decode_rows_at(payload, lo, hi) == rows[lo:hi]
    assert decode_rows_at(payload, lo, len(rows) + 1) is None  # out of range: caller decodes all
    # a point read's bytes: the event's own CBOR, exactly as encoded on its own
    for i, row in enumerate(rows):
        span = row_bounds(payload, i)
        assert span is not None and payload[span[0] : span[1]] == cbor2.dumps(row)
    assert row_bounds(payload, len(rows)) is None and row_bounds(payload, -1) is None


def test_payloads_written_before_offsets_still_decode() -> None:
    rows = [["task.note", "t1", {"n": 1}], ["task.note", None, {}]]
    assert decode_payload(cbor2.dumps([1.0, None, rows])) == (1.0, None, rows)
    assert decode_rows_at(cbor2.dumps([1.0, None, rows]), 0, 1) is None  # caller decodes all
    assert row_bounds(cbor2.dumps([1.0, None, rows]), 0) is None  # no offsets: no point read


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=S.batches, data=st.data())
def test_point_reads_equal_full_reads(batch: list[Event], data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as d, Ledger.open(Path(d), sync="none") as led:
        big = batch * (1 + 40 // len(batch))  # more than 8 events: the point path applies
        led.append(big)
        everything = list(led.read())
        s = data.draw(st.integers(1, len(big)))
        assert list(led.read(s, s)) == [everything[s - 1]]
        with Ledger.open(Path(d), readonly=True) as cold:
            assert list(cold.read(s, s)) == [everything[s - 1]]


@settings(max_examples=200)
@given(base=st.integers(1, 2**64 - 1), prev=digests, roll=st.integers(1024, 2**40))
def test_segment_header_round_trip(base: int, prev: bytes, roll: int) -> None:
    raw = encode_segment_header(base, prev, roll)
    assert len(raw) == SEGMENT_HEADER_SIZE
    hdr = decode_segment_header(raw)
    assert (hdr.base_seq, hdr.prev_digest, hdr.version) == (base, prev, FORMAT_VERSION)
    assert hdr.roll_bytes == roll // 1024 * 1024


def chain(payload_list: list[bytes]) -> tuple[bytes, list[bytes]]:
    buf, prev, seq, digests_ = b"", GENESIS_DIGEST, 1, []
    for p in payload_list:
        frame, prev = encode_frame(prev, seq, 2, p)
        buf += frame
        digests_.append(prev)
        seq += 2
    return buf, digests_


@settings(max_examples=300)
@given(ps=st.lists(payloads, min_size=1, max_size=5))
def test_walk_frames_walks_a_chain(ps: list[bytes]) -> None:
    buf, digests_ = chain(ps)
    infos = list(iter_frames(buf, 0, GENESIS_DIGEST, 1))
    assert [i.digest for i in infos] == digests_
    assert [i.first_seq for i in infos] == list(range(1, 2 * len(ps), 2))
    walked = list(walk_frames(buf, 0, GENESIS_DIGEST, 1))
    assert [t[:5] for t in walked] == [
        (i.offset, i.end, i.first_seq, i.count, i.digest) for i in infos
    ]
    assert [buf[t[5] : t[6]] for t in walked] == ps
    # the footers lead back through the same frames (fast_tail, recent_heads)
    pos, starts = len(buf), []
    while (flen := footer_frame_len(buf, pos, pos)) is not None:
        pos -= flen
        starts.append(pos)
    assert starts == [i.offset for i in reversed(infos)]
    # frames before skip_to pass their digest on unchecked and unseen; stop_after ends
    # the walk; ``ended`` says where the walk ended
    wrong = b"\x01" * 32
    ended: list[Any] = []
    got = [t[4] for t in walk_frames(buf, 0, wrong, 1, skip_to=3, ended=ended)]
    assert got == digests_[1:] and ended == [1 + 2 * len(ps), digests_[-1]]
    with pytest.raises(FrameError):
        list(walk_frames(buf, 0, wrong, 1))
    assert [t[4] for t in walk_frames(buf, 0, wrong, 1, verify=False)] == digests_
    ended = []
    assert [t[2] for t in walk_frames(buf, 0, GENESIS_DIGEST, 1, stop_after=2, ended=ended)] == [1]
    assert ended == [3, digests_[0]]


def _never_crash(buf: bytes, start: int) -> list[bytes]:
    """Run every scanning function; only FrameError may escape walk_frames."""
    seen = []
    try:
        for t in walk_frames(buf, start, GENESIS_DIGEST, 1):
            seen.append(t[4])
    except FrameError as e:
        assert e.next_seq == 1 + 2 * len(seen)  # chain() frames hold 2 events each
    for skip_to, stop_after, verify in ((0, PAST_ALL_SEQS, False), (3, 4, True)):
        try:
            list(walk_frames(buf, start, GENESIS_DIGEST, 1, skip_to=skip_to,
                             stop_after=stop_after, verify=verify))
        except FrameError:
            pass
    has_valid_frame_after(buf, start, 1)
    footer_frame_len(buf, len(buf), len(buf) - start)
    try:
        scan_tail(Path("seg"), buf, start, GENESIS_DIGEST, 1)
    except CorruptLogError:
        pass  # bad bytes before a valid frame, or a payload that does not decode
    return seen


@settings(max_examples=500)
@given(buf=st.binary(max_size=400), start=st.integers(0, 40))
def test_scanning_random_bytes_raises_only_frame_error(buf: bytes, start: int) -> None:
    assume(start <= len(buf))
    assert _never_crash(buf, start) == []
    try:
        decode_segment_header(buf)
    except SegmentHeaderError:
        pass
    try:
        decode_payload(buf)
    except ValueError:
        pass


@settings(max_examples=500)
@given(
    ps=st.lists(payloads, min_size=1, max_size=4),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["flip", "cut", "insert", "delete"]),
            st.integers(0, 2**16),
            st.binary(min_size=1, max_size=8),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_scanning_damaged_chains_yields_only_original_frames(
    ps: list[bytes], edits: list[tuple[str, int, bytes]]
) -> None:
    buf, digests_ = chain(ps)
    b = bytearray(buf)
    for op, pos, junk in edits:
        pos %= len(b) + 1
        if op == "flip" and pos < len(b):
            b[pos] ^= junk[0] or 1
        elif op == "cut":
            del b[pos:]
        elif op == "insert":
            b[pos:pos] = junk
        elif op == "delete":
            del b[pos : pos + len(junk)]
        if not b:
            break
    seen = _never_crash(bytes(b), 0)
    assert seen == digests_[: len(seen)]  # a damaged chain never yields a frame it did not hold


def _fast_tail_of(raw: bytes) -> Tail | None:
    with tempfile.TemporaryFile() as f:
        f.write(raw)
        f.flush()
        return fast_tail(Path("seg"), f.fileno(), len(raw), GENESIS_DIGEST, 1)


@settings(max_examples=300, deadline=None)
@given(
    blobs=st.lists(st.binary(max_size=200), max_size=4),
    cut=st.integers(0, 2**16),
    flip=st.none() | st.integers(0, 2**14),
)
def test_fast_tail_agrees_with_the_full_walk_or_abstains(
    blobs: list[bytes], cut: int, flip: int | None
) -> None:
    """Opening a log trusts :func:`fast_tail`; whatever it answers, the full walk says too."""
    ps = [encode_payload(1.0 + i, None, [["k", None, {"b": b}]] * 2) for i, b in enumerate(blobs)]
    buf, _digests = chain(ps) if ps else (b"", [])
    b = bytearray(encode_segment_header(1, GENESIS_DIGEST, 4096) + buf)
    if flip is not None and SEGMENT_HEADER_SIZE * 8 <= flip < len(b) * 8:
        b[flip // 8] ^= 1 << (flip % 8)
    if cut % 3:  # cut the end off two times in three
        del b[max(SEGMENT_HEADER_SIZE, len(b) - cut % (len(buf) + 1)) :]
    raw = bytes(b)
    fast = _fast_tail_of(raw)
    event(f"fast_tail {'abstained' if fast is None else 'answered'}")
    if fast is None:
        return
    try:
        full = scan_tail(Path("seg"), raw, SEGMENT_HEADER_SIZE, GENESIS_DIGEST, 1)
    except CorruptLogError:
        event("fast_tail answered over bad bytes mid-segment")
        return  # a writer's full walk finds them before it writes
    got = (fast.end, fast.head, fast.digest, fast.at)
    assert got == (full.end, full.head, full.digest, full.at)
    assert fast.end == len(raw) and full.torn is None
