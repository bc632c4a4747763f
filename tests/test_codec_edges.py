"""Edges of the frame codec and of the fast tail read that whole-log tests pass over:
CBOR array heads at each width, the roll size clamp, a plain header's flags, an
oversized batch, what the fast tail answers and where it abstains, short writes,
and a created file's descriptor on failure. Mutation testing found each held by no
test (docs/reliability.md)."""

from __future__ import annotations

import errno
import os
import tempfile
import zlib
from pathlib import Path

import cbor2
import pytest

from eventstore import CorruptLogError, LedgerIOError, _osio, private
from eventstore import segments as segments_mod
from eventstore.frame import (
    FOOTER_SIZE,
    FRAME_HEADER_SIZE,
    FRAME_OVERHEAD,
    GENERATION_START,
    GENESIS_DIGEST,
    MAX_PAYLOAD,
    SEGMENT_HEADER,
    SEGMENT_HEADER_SIZE,
    FrameError,
    _array_head,
    encode_frame,
    encode_payload,
    encode_raw_rows,
    encode_segment_header,
    header_roll_kib,
    parse_frame_head,
    segment_header_is_torn,
    walk_frames,
)
from eventstore.segments import (
    Tail,
    fast_tail,
    pread_all,
    read_header,
    scan_tail,
    starts_generation,
)


@pytest.mark.parametrize("n", [0, 23, 24, 255, 256, 65535, 65536, 70000])
def test_an_array_head_is_cbors_at_each_width(n: int) -> None:
    assert cbor2.loads(_array_head(n) + b"\xf6" * n) == [None] * n
    assert _array_head(n) == cbor2.dumps([None] * n)[: len(_array_head(n))]


def test_the_roll_size_is_clamped_to_the_header_field() -> None:
    assert header_roll_kib(0) == 1
    assert header_roll_kib(2047) == 1
    assert header_roll_kib(2**50) == 0xFFFFFFFF
    SEGMENT_HEADER.pack(b"x" * 8, 2, 0, header_roll_kib(2**50), 1, bytes(32))  # fits


def test_a_plain_segment_header_has_no_flags() -> None:
    plain = SEGMENT_HEADER.unpack(encode_segment_header(1, GENESIS_DIGEST, 4096)[:56])
    gen = SEGMENT_HEADER.unpack(encode_segment_header(1, GENESIS_DIGEST, 4096, True)[:56])
    assert (plain[2], gen[2]) == (0, GENERATION_START)


def test_an_oversized_batch_of_stored_events_is_refused_in_words() -> None:
    big = bytes(MAX_PAYLOAD // 2 + 1)  # (the same object twice: no copy)
    with pytest.raises(ValueError) as err:
        encode_raw_rows([big, big])
    assert str(err.value) == (
        f"batch of {2 * len(big)} bytes exceeds the {MAX_PAYLOAD}-byte frame limit")


# --- the fast tail --------------------------------------------------------------------

def segment(*payloads: bytes) -> tuple[bytes, list[int]]:
    """A segment of one-event frames; the offset of each frame."""
    out, prev, offs = bytearray(encode_segment_header(1, GENESIS_DIGEST, 1 << 20)), \
        GENESIS_DIGEST, []
    for i, p in enumerate(payloads):
        offs.append(len(out))
        frame, prev = encode_frame(prev, i + 1, 1, p)
        out += frame
    return bytes(out), offs


def fast(raw: bytes) -> Tail | None:
    with tempfile.TemporaryFile() as f:
        f.write(raw)
        f.flush()
        return fast_tail(Path("seg"), f.fileno(), len(raw), GENESIS_DIGEST, 1)


def payload(i: int) -> bytes:
    return encode_payload(1.0 + i, None, [["k", None, {"i": i}]])


@pytest.mark.parametrize("frames", [1, 2, 3])
def test_the_fast_tail_answers_what_the_full_walk_does(frames: int) -> None:
    raw, _ = segment(*(payload(i) for i in range(frames)))
    got, full = fast(raw), scan_tail(Path("seg"), raw, SEGMENT_HEADER_SIZE, GENESIS_DIGEST, 1)
    assert got is not None
    assert (got.end, got.head, got.digest, got.last, got.at, got.torn) == (
        full.end, full.head, full.digest, full.last, full.at, None)


def test_the_fast_tail_reads_past_a_frame_with_an_empty_payload() -> None:
    """The shortest frame there is (its overhead only) before the last one."""
    raw, offs = segment(b"", payload(2))
    assert offs[1] - offs[0] == FRAME_OVERHEAD
    got = fast(raw)
    assert got is not None and (got.head, got.end) == (2, len(raw))


def test_the_fast_tail_abstains_when_a_footer_claims_more_than_the_segment() -> None:
    """The frame before the last says it is longer than all bytes before it."""
    raw, offs = segment(payload(1), payload(2))
    b = bytearray(raw)
    foot = offs[1] - FOOTER_SIZE
    b[foot : foot + 4] = (offs[1] + 8).to_bytes(4, "little")
    assert fast(bytes(b)) is None


def test_the_fast_tail_abstains_when_the_last_footer_claims_more_than_the_file() -> None:
    """The last footer says its frame is longer than the whole file."""
    raw, _ = segment(payload(1), payload(2))
    b = bytearray(raw)
    b[-FOOTER_SIZE : -FOOTER_SIZE + 4] = (len(raw) + 8).to_bytes(4, "little")
    assert fast(bytes(b)) is None


def test_a_failed_read_in_the_fast_tail_names_the_segment(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)  # a directory: every read fails
    try:
        with pytest.raises(LedgerIOError) as err:
            fast_tail(Path("seg"), fd, 1000, GENESIS_DIGEST, 1)
    finally:
        os.close(fd)
    assert str(err.value) == f"cannot read seg: {os.strerror(errno.EISDIR)}"


def test_a_last_frame_whose_payload_does_not_decode_is_placed_and_named() -> None:
    raw, offs = segment(payload(1), b"\x01not a batch")
    with pytest.raises(CorruptLogError) as err:
        scan_tail(Path("seg"), raw, SEGMENT_HEADER_SIZE, GENESIS_DIGEST, 1)
    assert (err.value.offset, err.value.reason) == (
        offs[1], "payload is not [at, batch_id, offsets, events]")


# --- the small I/O helpers ------------------------------------------------------------

def test_write_all_finishes_a_short_write(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    real = _osio.pwrite
    monkeypatch.setattr(_osio, "pwrite", lambda fd, data, off: real(fd, data[:3], off))
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        _osio.write_all(fd, b"0123456789", 5)
    finally:
        os.close(fd)
    assert path.read_bytes() == bytes(5) + b"0123456789"


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_created_file_whose_mode_cannot_be_set_leaves_no_descriptor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(fd: int, mode: int) -> None:
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    before = open_fds()
    monkeypatch.setattr(private.os, "fchmod", fail)
    with pytest.raises(OSError) as err:
        private.create_file(tmp_path / "f", os.O_RDWR)
    assert err.value.errno == errno.EPERM and open_fds() == before


def test_a_zero_header_followed_by_any_well_formed_frame_is_not_torn() -> None:
    """Whatever seq the frame says (here 0): damage, not a power cut's leftover."""
    frame, _ = encode_frame(GENESIS_DIGEST, 0, 1, payload(1))
    assert not segment_header_is_torn(bytes(SEGMENT_HEADER_SIZE) + frame)
    assert segment_header_is_torn(bytes(SEGMENT_HEADER_SIZE) + bytes(len(frame)))


def test_a_frame_head_is_usable_only_with_its_magic_a_count_and_its_crc() -> None:
    """What the header-only walks (the frame index, the batch-id window) accept."""
    frame, digest = encode_frame(GENESIS_DIGEST, 7, 2, payload(1))
    head = frame[:FRAME_HEADER_SIZE]
    assert parse_frame_head(head, 0) == (len(frame) - FRAME_OVERHEAD, 2, 7, digest)
    other_magic = b"\0" * 4 + head[4:]  # (the crc covers bytes 8 to 56, not the magic)
    assert parse_frame_head(other_magic, 0) is None
    fields = bytearray(head)
    fields[12:16] = (0).to_bytes(4, "little")  # count 0, with a crc that matches it
    fields[4:8] = zlib.crc32(bytes(fields[8:56])).to_bytes(4, "little")
    assert parse_frame_head(bytes(fields), 0) is None
    fields[12:16] = (2).to_bytes(4, "little")
    assert parse_frame_head(bytes(fields), 0) is None  # the crc is count 0's now


@pytest.mark.parametrize("what", ["read_header", "starts_generation"])
def test_a_header_read_from_its_file_reads_64_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str) -> None:
    """Opening a log reads the header of every segment before the last from its file,
    and looks for the newest generation's first one: 64 bytes each, not the segment (a
    log of many full segments opens in time)."""
    path = tmp_path / "00000000000000000001.seg"
    path.write_bytes(encode_segment_header(1, GENESIS_DIGEST, 1 << 20, True) + bytes(1 << 16))
    reads: list[object] = []
    real_open = open

    class Spy:
        def __init__(self, *a: object) -> None:
            self.f = real_open(*a)  # type: ignore[call-overload]

        def __enter__(self) -> Spy:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

        def read(self, n: object = -1) -> bytes:
            reads.append(n)
            return self.f.read(n)  # type: ignore[no-any-return]

    monkeypatch.setattr(segments_mod, "open", Spy, raising=False)
    if what == "read_header":
        assert read_header(path).base_seq == 1
    else:
        assert starts_generation(path, path.stat().st_ino)
    assert reads == [SEGMENT_HEADER_SIZE]


def test_a_generation_flag_is_remembered_by_path_and_inode(tmp_path: Path) -> None:
    """Another file under the inode number a removed one had is read afresh: the number
    alone does not name a header."""
    gen, plain = tmp_path / "a.seg", tmp_path / "b.seg"
    gen.write_bytes(encode_segment_header(5, GENESIS_DIGEST, 4096, True))
    plain.write_bytes(encode_segment_header(5, GENESIS_DIGEST, 4096))
    ino = gen.stat().st_ino
    assert starts_generation(gen, ino)
    assert not starts_generation(plain, ino)  # the same number, another path
    assert starts_generation(gen, ino)


def frame_error(buf: bytes, digest: bytes = GENESIS_DIGEST) -> tuple[int, str, int]:
    with pytest.raises(FrameError) as err:
        for _ in walk_frames(buf, 0, digest, 1):
            pass
    return err.value.offset, err.value.reason, err.value.next_seq


@pytest.mark.parametrize("case", ["header only", "cut", "no events", "wrong seq",
                                  "other chain", "other chain, big"])
def test_each_way_a_frame_fails_names_its_offset_reason_and_seq(case: str) -> None:
    """After two good frames (seqs 1 to 3) the third fails: the walk names its offset,
    why in words, and the seq it should have started at (4), which the reader's search
    for a valid frame after it starts from."""
    f1, d1 = encode_frame(GENESIS_DIGEST, 1, 2, b"\xa1" * 40)
    f2, d2 = encode_frame(d1, 3, 1, b"\xa2" * 40)
    good, off = f1 + f2, len(f1) + len(f2)
    payload = b"\xa3" * (5000 if case.endswith("big") else 40)
    frame = encode_frame(d2, 4, 1, payload)[0]
    other = encode_frame(b"\x07" * 32, 4, 1, payload)[0]
    bad, why = {
        "header only": (frame[:FRAME_HEADER_SIZE],
                        f"frame extends {len(frame) - FRAME_HEADER_SIZE} bytes past the end "
                        "of the segment"),
        "cut": (frame[:-3], "frame extends 3 bytes past the end of the segment"),
        "no events": (encode_frame(d2, 4, 0, payload)[0], "frame holds no events"),
        "wrong seq": (encode_frame(d2, 5, 1, payload)[0], "frame starts at seq 5, expected 4"),
        "other chain": (other, "checksum mismatch (payload or chain)"),
        "other chain, big": (other, "checksum mismatch (payload or chain)"),
    }[case]
    assert frame_error(good + bad) == (off, why, 4)


def test_pread_all_finishes_short_reads_and_stops_at_the_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f"
    data = bytes(range(256)) * 40  # 10,240 bytes
    path.write_bytes(data)
    real = os.pread
    calls: list[tuple[int, int]] = []

    def short(fd: int, n: int, offset: int) -> bytes:  # at most 1,000 bytes a call
        calls.append((n, offset))
        assert len(calls) < 10, "pread_all does not stop"
        return real(fd, min(n, 1000), offset)

    monkeypatch.setattr(os, "pread", short)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert pread_all(fd, 2500, 100) == data[100:2600]
        assert calls == [(2500, 100), (1500, 1100), (500, 2100)]
        calls.clear()
        assert pread_all(fd, 5000, 9000) == data[9000:]  # the file ends first
        assert calls == [(5000, 9000), (4000, 10000), (3760, 10240)]
        calls.clear()
        assert pread_all(fd, 100, 20000) == b"" and calls == [(100, 20000)]
    finally:
        os.close(fd)
