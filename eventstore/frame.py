"""The on-disk format, as pure functions: bytes in, bytes out.

No files, clocks or locks live here (see ``segments.py`` for those), so the
whole format can be property-tested on in-memory buffers. ``docs/format.md``
specifies the same layout byte by byte.

Segment header (64 bytes)::

    0  8  magic  b"CTXLSEG\\0"
    8  2  format version (u16 LE): 1, 2 (zeros may follow the last frame) or 3
          (a generation start: flags bit 0 set, the log begins at this segment)
   10  2  flags: 0, or GENERATION_START in a version 3 header
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
   56  n  payload: CBOR [at, batch_id, offsets, [[kind, key, data], ...]]
          (offsets: byte string of u32 LE, where each event's CBOR starts
          relative to the first event, so one event decodes without the rest)
 56+n  4  frame length = 64 + n (u32 LE)
 60+n  4  magic b"CTXE"

Zeros after the last frame of a segment are free space a writer preallocated,
never data (a frame always ends with the non-zero footer magic).
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from collections.abc import Iterator
from typing import Any

import attrs
import blake3
import cbor2

FORMAT_VERSION = 2
#: The version of a generation's first segment (format.md §6, §12): version 2 plus the
#: flag below. Older code refuses it ("newer format") instead of reading a log whose
#: first segment does not start at seq 1 as damaged, or a cut as a gap.
GENERATION_VERSION = 3
#: The newest format version this code reads.
MAX_READ_VERSION = 3
#: ``flags`` bit 0 (version 3 only): this segment starts a generation. The log is the
#: newest generation start and the segments after it; older segments are left-overs.
GENERATION_START = 1
#: From this version on, zeros past a segment's last frame are free space (format.md §7):
#: writers preallocate them, and only segments of this version or newer get them.
PREALLOC_VERSION = 2
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
_AT = struct.Struct(">d")


@attrs.frozen
class Encoded:
    """A value already encoded as CBOR, written into its event verbatim.

    The cache encodes a packet canonically anyway (its content address), so
    it hands the log those bytes instead of the value: each packet is encoded
    once, and the packet's bytes stand in the log exactly as they were hashed,
    which lets a point read authenticate them with one hash. ``depth`` is how
    many levels of maps and arrays the value nests (0 for a scalar); the
    writer checks it against ``event.MAX_DATA_DEPTH`` but trusts it, so build
    instances only from a walk of the value (``projections.packet`` does).
    """

    cbor: bytes
    depth: int



class FrameError(Exception):
    """A frame that does not check out (structure, seq or digest): torn or corrupt.

    The caller decides which (failure rules 2 and 3 in docs/architecture.md);
    ``next_seq`` is the seq the failing frame should have started at, when the
    raiser knows it.
    """

    # (a default of 1: an equivalent mutant; only walk_frames' errors are asked for
    # next_seq, and they always give it)
    def __init__(self, offset: int, reason: str, next_seq: int = 0) -> None:
        super().__init__(f"byte {offset}: {reason}")
        self.offset = offset
        self.reason = reason
        self.next_seq = next_seq


class PayloadError(Exception):
    """A frame whose checksums hold but whose payload does not decode: always corruption."""

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
    flags: int = 0

    @property
    def generation_start(self) -> bool:
        return bool(self.flags & GENERATION_START)


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


def encode_segment_header(
    base_seq: int, prev_digest: bytes, roll_bytes: int, generation_start: bool = False
) -> bytes:
    """The roll size lives in the header so every writer seals at the same point.

    ``generation_start``: the first segment of a new generation (compaction,
    salvage): version 3 with :data:`GENERATION_START` set.
    """
    roll_kib = header_roll_kib(roll_bytes)
    version, flags = (GENERATION_VERSION, GENERATION_START) if generation_start else (
        FORMAT_VERSION, 0)
    head = SEGMENT_HEADER.pack(SEGMENT_MAGIC, version, flags, roll_kib, base_seq, prev_digest)
    return head + blake3.blake3(head).digest()[:8]


def decode_segment_header(buf: bytes | memoryview) -> SegmentHeader:
    if len(buf) < SEGMENT_HEADER_SIZE:
        raise SegmentHeaderError(f"segment header is {len(buf)} bytes, expected 64")
    head = bytes(buf[:56])
    magic, version, flags, roll_kib, base_seq, prev = SEGMENT_HEADER.unpack(head)
    if magic != SEGMENT_MAGIC:
        raise SegmentHeaderError("not a ctxledger segment (bad magic)")
    if blake3.blake3(head).digest()[:8] != bytes(buf[56:64]):
        raise SegmentHeaderError("segment header checksum mismatch")
    if version > MAX_READ_VERSION:
        raise SegmentHeaderError(f"format version {version}", version=version)
    if version < 1:
        raise SegmentHeaderError(f"format version {version} does not exist (versions start at 1)")
    if base_seq < 1:
        raise SegmentHeaderError("segment base_seq is 0")
    if roll_kib < 1:
        raise SegmentHeaderError("segment roll size is 0")
    if version < GENERATION_VERSION:
        flags = 0  # not checked before version 3 (format.md §6)
    elif flags != GENERATION_START:
        raise SegmentHeaderError(f"version 3 segment with flags {flags:#x}")
    return SegmentHeader(version, base_seq, prev, roll_kib * 1024, flags)


# --- payload ------------------------------------------------------------------------


def encode_row(row: list[Any]) -> bytes:
    """One event's CBOR ``[kind, key, data]``, exactly as :func:`encode_rows` writes it."""
    return cbor2.dumps(row, default=_encode_other)


def encode_rows(rows: list[list[Any]]) -> bytes:
    """The payload after ``at`` and ``batch_id``: the offsets, then the events array.

    Each event is encoded on its own so its offset is known; the concatenation
    is exactly the CBOR array ``cbor2.dumps(rows)`` would give.
    """
    return encode_raw_rows([cbor2.dumps(r, default=_encode_other) for r in rows])


def encode_raw_rows(rows: list[bytes]) -> bytes:
    """:func:`encode_rows` of events already encoded (each ``[kind, key, data]`` CBOR,
    copied verbatim: compaction moves stored events to a new generation unchanged)."""
    # ("i", or [1]: equivalent mutants; offsets stay below MAX_PAYLOAD < 2**31, and
    # the loop sets each one)
    offs = array("I", [0]) * len(rows)
    pos = 0
    for i, e in enumerate(rows):
        offs[i] = pos
        pos += len(e)
    if pos > MAX_PAYLOAD:
        raise ValueError(f"batch of {pos} bytes exceeds the {MAX_PAYLOAD}-byte frame limit")
    if sys.byteorder != "little":
        offs.byteswap()
    return cbor2.dumps(offs.tobytes()) + _array_head(len(rows)) + b"".join(rows)


def _encode_other(encoder: Any, value: Any) -> None:
    """cbor2's hook for types it does not know: :class:`Encoded` goes in verbatim."""
    if type(value) is Encoded:
        encoder.write(value.cbor)
        return
    raise cbor2.CBOREncodeTypeError(f"cannot serialize type {type(value).__name__}")


def _array_head(n: int) -> bytes:
    if n < 24:
        return bytes([0x80 + n])
    if n < 0x100:
        return bytes([0x98, n])
    if n < 0x10000:
        return b"\x99" + n.to_bytes(2, "big")  # (no byteorder: "big" is the default)
    return b"\x9a" + n.to_bytes(4, "big")  # (the same)


def encode_payload(at: float, batch_id: str | None, events: list[list[Any]]) -> bytes:
    """CBOR of one batch; raises ``ValueError`` when data is not CBOR-encodable."""
    try:
        return payload_prefix(at, batch_id) + encode_rows(events)
    except (cbor2.CBOREncodeError, TypeError, ValueError, OverflowError, RecursionError) as e:
        raise ValueError(f"event data cannot be encoded as CBOR: {e}") from e


def decode_payload(payload: bytes | memoryview) -> tuple[float, str | None, list[list[Any]]]:
    """Inverse of :func:`encode_payload`; raises ``ValueError`` on a bad shape."""
    try:
        obj = cbor2.loads(payload)
    except Exception as e:  # cbor2 raises a variety of decode errors
        raise ValueError(f"payload is not valid CBOR: {e}") from e
    if isinstance(obj, list) and len(obj) == 3 and isinstance(obj[2], list):
        return obj[0], obj[1], obj[2]  # written before per-event offsets: still read
    if not (isinstance(obj, list) and len(obj) == 4 and isinstance(obj[3], list)
            and isinstance(obj[2], bytes) and len(obj[2]) == 4 * len(obj[3])):
        raise ValueError("payload is not [at, batch_id, offsets, events]")
    return obj[0], obj[1], obj[3]


def decode_rows_at(payload: bytes | memoryview, lo: int, hi: int) -> list[Any] | None:
    """Events ``lo..hi-1`` of a payload, decoding only those; None if the shape is off.

    A None answer sends the caller to a full :func:`decode_payload`, which
    then names the problem. The chain digest covers the whole payload, so the
    caller has already proved these bytes authentic.
    """
    mv = memoryview(payload)
    table = _rows_table(mv)
    if table is None or not 0 <= lo < hi <= table[2]:
        return None
    out = []
    for i in range(lo, hi):
        span = _row_span(table, i, len(mv))
        if span is None:
            return None
        try:
            out.append(cbor2.loads(mv[span[0] : span[1]]))
        except Exception:
            return None
    return out


def row_bounds(payload: bytes | memoryview, i: int) -> tuple[int, int] | None:
    """Where event ``i``'s own CBOR ``[kind, key, data]`` lies in a payload, or None.

    Reads only the payload's head and two offsets, so a point read costs the
    size of one event whatever the batch holds. It checks structure (the
    heads, and that the event's bytes lie inside the payload), not content:
    the chain digest covers the whole payload, which this does not read.
    """
    mv = memoryview(payload)
    table = _rows_table(mv)
    if table is None or not 0 <= i < table[2]:
        return None
    return _row_span(table, i, len(mv))


def _rows_table(mv: memoryview) -> tuple[memoryview, int, int] | None:
    """``(offsets, start of the events, count)`` of a payload with per-event offsets."""
    size = len(mv)
    pos = _after_head(mv)
    if pos is None:
        return None
    got = _uint_head(mv, pos, 0x40)  # offsets: a byte string
    if got is None:
        return None
    olen, pos = got
    if pos + olen > size or olen % 4 or sys.byteorder != "little":
        return None
    # (equivalent mutants: "i", whose negative offsets fail the bounds check as the huge
    # unsigned ones do; >= size above, as offsets that end the payload leave no events)
    offs = mv[pos : pos + olen].cast("I")
    got = _uint_head(mv, pos + olen, 0x80)  # the events array
    if got is None:
        return None
    count, start = got
    return (offs, start, count) if count * 4 == olen else None


def _row_span(table: tuple[memoryview, int, int], i: int, size: int) -> tuple[int, int] | None:
    offs, start, count = table
    a = start + offs[i]
    b = start + offs[i + 1] if i + 1 < count else size
    return (a, b) if start <= a < b <= size else None


def _after_head(mv: memoryview) -> int | None:
    """Where the offsets start: after ``0x84``, float64 ``at`` and the batch id."""
    # (<= 11 or < 12: equivalent mutants; 11 bytes end at the batch id, and the offsets'
    # head that must follow is then refused)
    if len(mv) < 11 or mv[0] != 0x84 or mv[1] != 0xFB:
        return None
    b = mv[10]
    if b == 0xF6:
        return 11
    got = _uint_head(mv, 10, 0x60)
    return None if got is None else got[0] + got[1]


def _uint_head(mv: memoryview, pos: int, major: int) -> tuple[int, int] | None:
    """``(argument, position after the head)`` of a CBOR head of ``major`` type at ``pos``."""
    if pos >= len(mv):
        return None
    b = mv[pos]
    if not major <= b < major + 0x20:
        return None
    info = b - major
    if info < 24:
        return info, pos + 1
    width = {24: 1, 25: 2, 26: 4, 27: 8}.get(info)
    if width is None or pos + 1 + width > len(mv):
        return None
    # ("big" left out: an equivalent mutant, the default since Python 3.11)
    return int.from_bytes(mv[pos + 1 : pos + 1 + width], "big"), pos + 1 + width


# --- frames -------------------------------------------------------------------------


def encode_frame(
    prev_digest: bytes, first_seq: int, count: int, payload: bytes
) -> tuple[bytes, bytes]:
    """Return ``(frame_bytes, digest)`` for one batch chained to ``prev_digest``."""
    return encode_frame_parts(prev_digest, first_seq, count, (payload,))


def encode_frame_parts(
    prev_digest: bytes, first_seq: int, count: int, parts: tuple[bytes, ...]
) -> tuple[bytes, bytes]:
    """:func:`encode_frame` of ``b"".join(parts)``, copying the payload bytes only once."""
    n = sum(map(len, parts))
    if n > MAX_PAYLOAD:
        raise ValueError(f"batch payload of {n} bytes exceeds the {MAX_PAYLOAD}-byte frame limit")
    counts = _COUNTS.pack(n, count, first_seq)
    h = blake3.blake3(prev_digest)
    h.update(counts[:16])  # (all of it: [:17], an equivalent mutant)
    for part in parts:
        h.update(part)
    digest = h.digest()
    body = counts + digest
    head = FRAME_MAGIC + zlib.crc32(body).to_bytes(4, "little") + body
    return b"".join((head, *parts, FOOTER.pack(n + FRAME_OVERHEAD, FOOTER_MAGIC))), digest


def payload_prefix(at: float, batch_id: str | None) -> bytes:
    """The payload's bytes before the offsets: ``0x84``, ``at`` as float64, batch_id.

    ``at`` is always written as a CBOR float64 (``0xfb`` + 8 bytes big-endian),
    which is what :func:`payload_head` reads back without decoding the events.
    """
    # (dumps(None) always: an equivalent mutant, it is b"\xf6")
    bid = b"\xf6" if batch_id is None else cbor2.dumps(batch_id)
    return b"\x84\xfb" + _AT.pack(at) + bid


def payload_head_fast(payload: bytes | memoryview) -> tuple[float, str | None] | None:
    """``(at, batch_id)`` read straight from the bytes writers produce, or None.

    The payload of every frame this code writes starts with
    :func:`payload_prefix`; None means "not that shape (or cut short here)".
    """
    if len(payload) < 11 or payload[0] not in (0x83, 0x84) or payload[1] != 0xFB:
        return None
    at: float = _AT.unpack_from(payload, 2)[0]
    b = payload[10]
    if b == 0xF6:
        return at, None
    if 0x60 <= b <= 0x77:
        start, ln = 11, b - 0x60
    elif b == 0x78 and len(payload) >= 12:
        start, ln = 12, payload[11]
    elif b == 0x79 and len(payload) >= 13:
        start, ln = 13, int.from_bytes(payload[11:13], "big")  # (no byteorder: "big")
    else:
        return None
    if start + ln > len(payload):
        return None
    try:
        return at, str(payload[start : start + ln], "utf-8")  # ("UTF-8": the same codec)
    except UnicodeDecodeError:
        return None


def payload_head(payload: bytes | memoryview) -> tuple[float, str | None]:
    """``(at, batch_id)`` of a whole payload, decoding its events only when it must.

    Raises ``ValueError`` (like :func:`decode_payload`) when it does not decode.
    """
    # (None: an equivalent mutant, the full decode below gives the same answer)
    head = payload_head_fast(payload)
    if head is not None:
        return head
    at, bid, _rows = decode_payload(payload)
    return at, bid


#: Enough leading payload bytes for :func:`payload_head` (batch_id <= 200 characters).
PAYLOAD_HEAD_MAX = 1 + 9 + 3 + 4 * 200


def parse_frame_head(buf: bytes | memoryview, off: int) -> tuple[int, int, int, bytes] | None:
    """``(n, count, first_seq, digest)`` of a frame header alone (magic, crc, count >= 1).

    For walks that read only headers (the frame index, the batch-id window);
    None when the header is not usable. It does not see the footer or payload.
    """
    if len(buf) - off < FRAME_HEADER_SIZE:
        return None
    magic, hcrc, n, count, first_seq, digest = FRAME_HEADER.unpack_from(buf, off)
    if magic != FRAME_MAGIC or count < 1 or zlib.crc32(buf[off + 8 : off + 56]) != hcrc:
        return None
    return n, count, first_seq, digest


#: What :func:`walk_frames` yields per frame: ``(offset, end, first_seq, count,
#: digest, payload_start, payload_end)``, plain ints and bytes (no object per frame).
FrameTuple = tuple[int, int, int, int, bytes, int, int]
#: A seq past every real one (seqs are u64): as ``stop_after``, the walk never stops early.
PAST_ALL_SEQS = 1 << 65


def walk_frames(
    buf: bytes | memoryview,
    off: int,
    digest: bytes,
    seq: int,
    *,
    skip_to: int = 0,
    stop_after: int = PAST_ALL_SEQS,
    verify: bool = True,
    ended: list[Any] | None = None,
) -> Iterator[FrameTuple]:
    """The frame parser: walk frames from ``off`` (chained to ``digest``, starting at ``seq``).

    Every frame is checked for magic, header crc, that it fits in ``buf``, its
    footer, ``count >= 1`` and that it starts where the one before ended; every
    frame it yields also has its chain digest checked, unless ``verify`` is
    false. Frames ending before seq ``skip_to`` are passed over (structure and
    seqs only: their header digest is taken on trust, and they are not
    yielded: a read by seq needs nothing from them). The walk ends silently at
    the end of ``buf`` or at a frame starting after seq ``stop_after`` (its
    structure checked, not its digest); then ``ended``, if given, receives
    ``[next_seq, digest]`` past the last frame walked. Raises
    :class:`FrameError` (with ``next_seq``) at the first frame that does not
    check out: torn or corrupt is the caller's call. Every read of the log
    goes through here, so it stays one flat loop.
    """
    unpack, funpack = FRAME_HEADER.unpack_from, FOOTER.unpack_from
    crc, b3 = zlib.crc32, blake3.blake3
    mv = memoryview(buf)
    size = len(mv)
    while off < size:
        if size - off < FRAME_HEADER_SIZE:
            raise FrameError(off, f"incomplete frame header ({size - off} bytes)", seq)
        magic, hcrc, n, count, first, fdigest = unpack(buf, off)
        if magic != FRAME_MAGIC or crc(mv[off + 8 : off + 56]) != hcrc:
            raise FrameError(off, "bad frame header", seq)
        end = off + n + FRAME_OVERHEAD
        if end > size:
            raise FrameError(
                off, f"frame extends {end - size} bytes past the end of the segment", seq
            )
        flen, fmagic = funpack(buf, end - FOOTER_SIZE)
        if fmagic != FOOTER_MAGIC or flen != n + FRAME_OVERHEAD:
            raise FrameError(off, "bad frame footer", seq)
        if count < 1:
            raise FrameError(off, "frame holds no events", seq)
        if first != seq:
            raise FrameError(off, f"frame starts at seq {first}, expected {seq}", seq)
        nxt = first + count
        if nxt <= skip_to:
            digest, seq, off = fdigest, nxt, end
            continue
        if first > stop_after:
            break
        p0, p1 = off + FRAME_HEADER_SIZE, end - FOOTER_SIZE
        if verify:
            # one call on a small copy beats three on views (another bound: equivalent
            # mutants, the same digest)
            if n < 4096:
                h = b3(digest + buf[off + 8 : off + 24] + buf[p0:p1])
            else:
                h = b3(digest)
                h.update(mv[off + 8 : off + 24])
                h.update(mv[p0:p1])
            if h.digest() != fdigest:
                raise FrameError(off, "checksum mismatch (payload or chain)", seq)
        yield off, end, first, count, fdigest, p0, p1
        digest, seq, off = fdigest, nxt, end
    if ended is not None:
        ended[:] = (seq, digest)


def read_frame_header(buf: bytes | memoryview, off: int) -> FrameInfo:
    """The frame at ``off`` (:func:`walk_frames` of it alone, without its digest).

    Raises :class:`FrameError` if unusable; it does not check the chain digest.
    For scans that look for frames anywhere (:func:`has_valid_frame_after`).
    """
    size = len(buf)
    # (equivalent mutants: any seq when no whole frame is left, which the walk refuses
    # before it looks at the seq; any digest or a false verify: nothing is verified)
    seq = _COUNTS.unpack_from(buf, off + 8)[2] if size - off >= FRAME_HEADER_SIZE else 0
    for t in walk_frames(buf, off, b"", seq, verify=False):
        return FrameInfo(*t[:5])
    raise FrameError(off, f"incomplete frame header ({size - off} bytes)")


def footer_frame_len(buf: bytes | memoryview, at: int, room: int) -> int | None:
    """The length of the frame whose footer ends at ``buf[at]``, if it can be one.

    ``room`` is how many bytes of the segment lie before ``at`` past its header.
    For walks backwards from a segment's end; the length is only a hint: the
    caller checks the frame it points at.
    """
    if not FOOTER_SIZE <= at <= len(buf):  # cut short (the file shrank meanwhile)
        return None
    flen, fmagic = FOOTER.unpack_from(buf, at - FOOTER_SIZE)
    if fmagic != FOOTER_MAGIC or not FRAME_OVERHEAD <= flen <= room:
        return None
    return int(flen)


def payload_of(buf: bytes | memoryview, info: FrameInfo) -> memoryview:
    return memoryview(buf)[info.offset + FRAME_HEADER_SIZE : info.end - FOOTER_SIZE]


_ZERO_BLOCK = bytes(4096)


def content_end(buf: bytes, start: int) -> int:
    """Where ``buf``'s content ends: after its last non-zero byte at or past ``start``.

    Writers preallocate zeros past the last frame (format.md §7), so the zeros
    at the end of a segment are free space, not data. A frame always ends with
    the non-zero footer magic, so this never cuts a whole frame. Returns
    ``min(len(buf), start)`` when nothing past ``start`` is non-zero.
    """
    hi = len(buf)
    while hi > start:
        lo = max(start, hi - 4096)
        # a memcmp per block, not a byte loop (a longer zero block, `hi + lo`: an
        # equivalent mutant, the rstrip below finds the same end of an all-zero block)
        if buf[lo:hi] != _ZERO_BLOCK[: hi - lo]:
            return lo + len(buf[lo:hi].rstrip(b"\0"))
        hi = lo
    return min(len(buf), start)


def has_valid_frame_after(buf: bytes | memoryview, off: int, min_seq: int) -> bool:
    """Is there a well-formed frame header anywhere after ``off``?

    This is what separates a torn tail (nothing valid follows) from media
    corruption (valid frames follow bad bytes): failure rules 2 and 3 in
    docs/architecture.md.
    """
    # (equivalent mutants: bytes() of bytes too, a copy; a step of 2 past a bad header, as
    # FRAME_MAGIC cannot start again one byte into itself)
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


def segment_header_is_torn(buf: bytes | memoryview) -> bool:
    """Is this (the last segment's whole content) what a power cut can leave of a new segment?

    True when the file is shorter than its 64-byte header, or when the header
    is all zeros and no well-formed frame header follows anywhere: no batch can
    be in such a file. A header that looks valid but is wrong is not torn.
    """
    if len(buf) < SEGMENT_HEADER_SIZE:
        return True
    # (from offset 2, an equivalent mutant: a frame's magic cannot start in the zeros)
    return not any(buf[:SEGMENT_HEADER_SIZE]) and not has_valid_frame_after(buf, -1, 0)


def iter_frames(
    buf: bytes | memoryview, start: int, prev_digest: bytes, next_seq: int, *, check: bool = True
) -> Iterator[FrameInfo]:
    """:func:`walk_frames` as :class:`FrameInfo` objects, for callers off the hot path."""
    for t in walk_frames(buf, start, prev_digest, next_seq, verify=check):
        yield FrameInfo(*t[:5])


def payload_layout(head: bytes | memoryview, count: int) -> tuple[float, int, int] | None:
    """``(at, offsets_start, rows_start)`` of a batch payload, from its first bytes alone.

    For point reads: with these, event ``i`` of the batch is found by reading
    two offsets and then only its own bytes. ``head`` must reach past the
    offsets' byte-string head (``PAYLOAD_HEAD_MAX + 16`` bytes, or the whole
    payload). None when the payload is not ``[at, batch_id, offsets, events]``
    with ``count`` offsets (a payload written before offsets existed, or bad
    bytes): the caller then reads the batch whole, which names the problem.
    """
    mv = memoryview(head)
    pos = _after_head(mv)
    if pos is None:
        return None
    got = _uint_head(mv, pos, 0x40)
    if got is None or got[0] != 4 * count:
        return None
    olen, offs_start = got
    at: float = _AT.unpack_from(mv, 2)[0]
    return at, offs_start, offs_start + olen + len(_array_head(count))
