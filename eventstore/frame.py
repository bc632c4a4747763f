"""The on-disk format, as pure functions: bytes in, bytes out.

No files, clocks or locks live here (see ``segments.py`` for those), so the
whole format can be property-tested on in-memory buffers. ``docs/format.md``
specifies the same layout byte by byte.

Segment header (64 bytes)::

    0  8  magic  b"CTXLSEG\\0"
    8  2  format version (u16 LE)
   10  2  flags (0)
   12  4  roll_kib: writers seal this segment once it holds this many KiB
   16  8  base_seq: seq of the first event in this segment
   24 32  prev_digest: chain digest of the frame before this segment
   56  8  blake3(bytes 0..56)[:8]

Frame (one atomic batch)::

    0  4  magic b"CTXF"
    4  4  hcrc: crc32 of bytes 8..56
    8  4  payload length (u32 LE)
   12  4  event count (u32 LE, >= 1)
   16  8  first_seq (u64 LE)
   24 32  digest = blake3(prev_digest || bytes 8..24 || payload)
   56  n  payload: CBOR [at, batch_id, [[kind, key, data], ...]]
 56+n  4  frame length = 64 + n (u32 LE)
 60+n  4  magic b"CTXE"
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import Any

import attrs
import blake3
import cbor2

FORMAT_VERSION = 1
SEGMENT_MAGIC = b"CTXLSEG\x00"
SEGMENT_HEADER = struct.Struct("<8sHHIQ32s")
SEGMENT_HEADER_SIZE = 64
FRAME_MAGIC = b"CTXF"
FOOTER_MAGIC = b"CTXE"
FRAME_HEADER = struct.Struct("<4sIIIQ32s")
FRAME_HEADER_SIZE = 56
FOOTER = struct.Struct("<I4s")
FOOTER_SIZE = 8
FRAME_OVERHEAD = FRAME_HEADER_SIZE + FOOTER_SIZE
MAX_PAYLOAD = 256 * 1024 * 1024
GENESIS_DIGEST = bytes(32)
_COUNTS = struct.Struct("<IIQ")


class FrameError(Exception):
    """A frame that does not decode; ``torn`` says whether it can be a torn write."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"byte {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class SegmentHeaderError(Exception):
    def __init__(self, reason: str, version: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.version = version


@attrs.frozen
class SegmentHeader:
    version: int
    base_seq: int
    prev_digest: bytes
    roll_bytes: int


@attrs.frozen
class FrameInfo:
    """Where a frame sits and what its header says (payload not decoded)."""

    offset: int
    end: int
    first_seq: int
    count: int
    digest: bytes

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.count - 1


# --- segment header -----------------------------------------------------------------


def header_roll_kib(roll_bytes: int) -> int:
    """The roll size as the header stores it (whole KiB, at least 1)."""
    return max(1, min(roll_bytes // 1024, 0xFFFFFFFF))


def header_roll_bytes(roll_bytes: int) -> int:
    """The roll size every reader of the header will see: use it, not ``roll_bytes``."""
    return header_roll_kib(roll_bytes) * 1024


def encode_segment_header(base_seq: int, prev_digest: bytes, roll_bytes: int) -> bytes:
    """The roll size lives in the header so every writer seals at the same point."""
    roll_kib = header_roll_kib(roll_bytes)
    head = SEGMENT_HEADER.pack(SEGMENT_MAGIC, FORMAT_VERSION, 0, roll_kib, base_seq, prev_digest)
    return head + blake3.blake3(head).digest()[:8]


def decode_segment_header(buf: bytes | memoryview) -> SegmentHeader:
    if len(buf) < SEGMENT_HEADER_SIZE:
        raise SegmentHeaderError(f"segment header is {len(buf)} bytes, expected 64")
    head = bytes(buf[:56])
    magic, version, _flags, roll_kib, base_seq, prev = SEGMENT_HEADER.unpack(head)
    if magic != SEGMENT_MAGIC:
        raise SegmentHeaderError("not a ctxledger segment (bad magic)")
    if blake3.blake3(head).digest()[:8] != bytes(buf[56:64]):
        raise SegmentHeaderError("segment header checksum mismatch")
    if version > FORMAT_VERSION:
        raise SegmentHeaderError(f"format version {version}", version=version)
    if base_seq < 1:
        raise SegmentHeaderError("segment base_seq is 0")
    if roll_kib < 1:
        raise SegmentHeaderError("segment roll size is 0")
    return SegmentHeader(version, base_seq, prev, roll_kib * 1024)


# --- payload ------------------------------------------------------------------------


def encode_payload(at: float, batch_id: str | None, events: list[list[Any]]) -> bytes:
    """CBOR of one batch; raises ``ValueError`` when data is not CBOR-encodable."""
    try:
        return cbor2.dumps([at, batch_id, events])
    except (cbor2.CBOREncodeError, TypeError, ValueError, OverflowError, RecursionError) as e:
        raise ValueError(f"event data cannot be encoded as CBOR: {e}") from e


def decode_payload(payload: bytes | memoryview) -> tuple[float, str | None, list[list[Any]]]:
    """Inverse of :func:`encode_payload`; raises ``ValueError`` on a bad shape."""
    try:
        obj = cbor2.loads(payload)
    except Exception as e:  # cbor2 raises a variety of decode errors
        raise ValueError(f"payload is not valid CBOR: {e}") from e
    if not (isinstance(obj, list) and len(obj) == 3 and isinstance(obj[2], list)):
        raise ValueError("payload is not [at, batch_id, events]")
    return obj[0], obj[1], obj[2]


# --- frames -------------------------------------------------------------------------


def encode_frame(prev_digest: bytes, first_seq: int, count: int, payload: bytes) -> tuple[bytes, bytes]:
    """Return ``(frame_bytes, digest)`` for one batch chained to ``prev_digest``."""
    n = len(payload)
    if n > MAX_PAYLOAD:
        raise ValueError(f"batch payload of {n} bytes exceeds the {MAX_PAYLOAD}-byte frame limit")
    counts = _COUNTS.pack(n, count, first_seq)
    h = blake3.blake3(prev_digest)
    h.update(counts[:16])
    h.update(payload)
    digest = h.digest()
    body = counts + digest
    hcrc = zlib.crc32(body)
    return (
        FRAME_MAGIC + hcrc.to_bytes(4, "little") + body + payload
        + FOOTER.pack(n + FRAME_OVERHEAD, FOOTER_MAGIC),
        digest,
    )


def read_frame_header(buf: bytes | memoryview, off: int) -> FrameInfo:
    """Decode and check the header at ``off``; raise :class:`FrameError` if unusable.

    Checks magic, header crc, that the frame fits in ``buf`` and its footer. It
    does not check the chain digest (see :func:`check_digest`).
    """
    size = len(buf)
    if size - off < FRAME_HEADER_SIZE:
        raise FrameError(off, f"incomplete frame header ({size - off} bytes)")
    magic, hcrc, n, count, first_seq, digest = FRAME_HEADER.unpack_from(buf, off)
    if magic != FRAME_MAGIC or zlib.crc32(buf[off + 8 : off + 56]) != hcrc:
        raise FrameError(off, "bad frame header")
    end = off + n + FRAME_OVERHEAD
    if end > size:
        raise FrameError(off, f"frame extends {end - size} bytes past the end of the segment")
    flen, fmagic = FOOTER.unpack_from(buf, end - FOOTER_SIZE)
    if fmagic != FOOTER_MAGIC or flen != n + FRAME_OVERHEAD:
        raise FrameError(off, "bad frame footer")
    if count < 1:
        raise FrameError(off, "frame holds no events")
    return FrameInfo(off, end, first_seq, count, digest)


def check_digest(buf: bytes | memoryview, info: FrameInfo, prev_digest: bytes) -> None:
    """Raise :class:`FrameError` unless the frame chains to ``prev_digest``."""
    off = info.offset
    h = blake3.blake3(prev_digest)
    h.update(buf[off + 8 : off + 24])
    h.update(buf[off + FRAME_HEADER_SIZE : info.end - FOOTER_SIZE])
    if h.digest() != info.digest:
        raise FrameError(off, "checksum mismatch (payload or chain)")


def payload_of(buf: bytes | memoryview, info: FrameInfo) -> memoryview:
    return memoryview(buf)[info.offset + FRAME_HEADER_SIZE : info.end - FOOTER_SIZE]


def has_valid_frame_after(buf: bytes | memoryview, off: int, min_seq: int) -> bool:
    """Is there a well-formed frame header anywhere after ``off``?

    This is what separates a torn tail (nothing valid follows) from media
    corruption (valid frames follow bad bytes): DESIGN.md failure rules 2 and 3.
    """
    data = bytes(buf) if isinstance(buf, memoryview) else buf
    pos = off + 1
    while True:
        pos = data.find(FRAME_MAGIC, pos)
        if pos < 0:
            return False
        try:
            info = read_frame_header(data, pos)
        except FrameError:
            pos += 1
            continue
        if info.first_seq >= min_seq:
            return True
        pos += 1


def last_frame_by_footer(buf: bytes | memoryview, start: int) -> FrameInfo | None:
    """The final frame, found from the footer at the end of ``buf``; None if unclear."""
    size = len(buf)
    if size - start < FRAME_OVERHEAD:
        return None
    flen, fmagic = FOOTER.unpack_from(buf, size - FOOTER_SIZE)
    if fmagic != FOOTER_MAGIC or flen < FRAME_OVERHEAD or size - flen < start:
        return None
    try:
        info = read_frame_header(buf, size - flen)
    except FrameError:
        return None
    return info if info.end == size else None


def frame_before(buf: bytes | memoryview, info: FrameInfo, start: int) -> FrameInfo | None:
    """The frame that ends where ``info`` begins, found through its footer."""
    if info.offset - start < FRAME_OVERHEAD:
        return None
    flen, fmagic = FOOTER.unpack_from(buf, info.offset - FOOTER_SIZE)
    if fmagic != FOOTER_MAGIC or info.offset - flen < start:
        return None
    try:
        prev = read_frame_header(buf, info.offset - flen)
    except FrameError:
        return None
    return prev if prev.end == info.offset else None


def iter_frames(
    buf: bytes | memoryview, start: int, prev_digest: bytes, next_seq: int, *, check: bool = True
) -> Iterator[FrameInfo]:
    """Walk frames from ``start``, checking headers, seq continuity and (optionally) digests.

    Stops silently at the end of ``buf``; raises :class:`FrameError` at the
    first frame that does not check out (the caller decides: torn or corrupt).
    """
    size = len(buf)
    off = start
    while off < size:
        info = read_frame_header(buf, off)
        if info.first_seq != next_seq:
            raise FrameError(off, f"frame starts at seq {info.first_seq}, expected {next_seq}")
        if check:
            check_digest(buf, info, prev_digest)
        yield info
        prev_digest = info.digest
        next_seq = info.first_seq + info.count
        off = info.end
