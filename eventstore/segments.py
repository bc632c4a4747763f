"""Segment files: the one place that opens, reads, creates and syncs them.

A segment is ``<base_seq:020d>.seg``; names sort in seq order. Everything
about the bytes inside is delegated to the pure codec in ``frame.py``.
"""

from __future__ import annotations

import errno
import os
import re
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path

import attrs

from . import _osio, private
from .errors import CorruptLogError, LedgerIOError, UnsupportedFormatError
from .frame import (
    FOOTER_SIZE,
    FRAME_HEADER_SIZE,
    FRAME_OVERHEAD,
    MAX_READ_VERSION,
    PAYLOAD_HEAD_MAX,
    SEGMENT_HEADER_SIZE,
    FrameError,
    FrameInfo,
    FrameTuple,
    SegmentHeader,
    SegmentHeaderError,
    content_end,
    decode_payload,
    decode_segment_header,
    encode_segment_header,
    footer_frame_len,
    has_valid_frame_after,
    parse_frame_head,
    payload_head,
    payload_head_fast,
    payload_of,
    segment_header_is_torn,
    walk_frames,
)

SEGMENT_RE = re.compile(r"(\d{20})\.seg")
TMP_RE = re.compile(r"\d{20}\.seg\.tmp")
QUARANTINE = "quarantine"


def segment_name(base_seq: int) -> str:
    return f"{base_seq:020d}.seg"


def list_all_segments(log_dir: Path) -> list[tuple[int, Path, int]]:
    """``(base_seq, path, inode)`` of every segment file, older generations included."""
    try:
        with os.scandir(log_dir) as it:
            out = []
            for entry in it:
                m = SEGMENT_RE.fullmatch(entry.name)
                if m:
                    out.append((int(m.group(1)), log_dir / entry.name, entry.inode()))
    except FileNotFoundError:
        return []
    except OSError as e:
        raise LedgerIOError(f"cannot list {log_dir}: {e.strerror}") from e
    out.sort()
    return out


#: ``(path, inode) -> generation start?`` for headers already read. A header never
#: changes once its segment is renamed into place; a new file at a path has a new inode.
_GEN_FLAGS: dict[tuple[str, int], bool] = {}


def starts_generation(path: Path, ino: int) -> bool:
    """Does this segment's header carry the generation-start flag? A header that cannot
    be read or decoded says no (the caller's own read of it reports the problem)."""
    key = (str(path), ino)
    hit = _GEN_FLAGS.get(key)
    if hit is not None:
        return hit
    try:
        with open(path, "rb") as f:
            hdr = decode_segment_header(f.read(SEGMENT_HEADER_SIZE))
    except (OSError, SegmentHeaderError):
        return False
    if len(_GEN_FLAGS) > 1 << 16:  # (another bound: equivalent mutants, a cache's size)
        _GEN_FLAGS.clear()
    _GEN_FLAGS[key] = hdr.generation_start
    return hdr.generation_start


def list_generation(log_dir: Path) -> tuple[list[tuple[int, Path]], bool]:
    """The current generation's segments, in seq order, and whether it starts with a
    generation-start segment (else it starts at seq 1).

    The current generation begins at the newest segment whose header has the
    generation-start flag (format.md §12); segments before it are left-overs of an
    older generation that a writer has not removed yet, and nothing reads them.
    """
    segs = list_all_segments(log_dir)
    for k in range(len(segs) - 1, -1, -1):
        base, path, ino = segs[k]
        if starts_generation(path, ino):
            return [(b, p) for b, p, _i in segs[k:]], True
    return [(b, p) for b, p, _i in segs], False


def list_segments(log_dir: Path) -> list[tuple[int, Path]]:
    """``(base_seq, path)`` of every segment of the current generation, in seq order."""
    return list_generation(log_dir)[0]


def read_bytes(path: Path, offset: int = 0) -> bytes:
    try:
        with open(path, "rb") as f:
            if offset:
                f.seek(offset)
            return f.read()
    except OSError as e:
        raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e


def pread_all(fd: int, n: int, offset: int) -> bytes:
    """``n`` bytes at ``offset`` (fewer only at the end of the file); raises ``OSError``."""
    data = os.pread(fd, n, offset)
    if len(data) == n or not data:
        return data
    parts, got = [data], len(data)
    while got < n:
        more = os.pread(fd, n - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


#: A writer with ``sync="always"`` keeps up to this many zero bytes allocated past its
#: last frame, so each durable append overwrites blocks the file already has: the
#: fdatasync then has no file size to commit (format.md §7).
PREALLOC_BYTES = 256 * 1024


def data_end(fd: int, size: int) -> int:
    """Where a segment's content ends: ``size`` without the trailing zeros writers
    preallocate (never below the 64-byte header). Reads backwards, in growing
    chunks, only as far as the zeros go. Raises ``OSError``.

    (Other chunk sizes, and a read past ``hi``, which finds zeros already seen or the
    end of the file: equivalent mutants, the same answer.)"""
    hi, want = size, 4096
    while hi > SEGMENT_HEADER_SIZE:
        lo = max(SEGMENT_HEADER_SIZE, hi - want)
        chunk = pread_all(fd, hi - lo, lo)
        end = content_end(chunk, 0)
        if end:
            return lo + end
        hi, want = lo, min(want * 4, 1 << 20)
    return min(size, SEGMENT_HEADER_SIZE)


def segment_content(path: Path) -> bytes:
    """A segment's bytes without the zeros preallocated past its last frame."""
    data = read_bytes(path)
    return data[: content_end(data, SEGMENT_HEADER_SIZE)]  # (bytes: no copy when whole)


def open_segment(path: Path) -> int:
    """A read-only fd on a segment (the caller closes it); LedgerIOError on failure."""
    try:
        return os.open(path, os.O_RDONLY)
    except OSError as e:
        raise LedgerIOError(f"cannot open {path}: {e.strerror}") from e


def header_is_torn(path: Path, fd: int, size: int, head: bytes) -> bool:
    """Is the last segment (``head`` = its first <= 64 bytes) a torn new segment?

    See :func:`frame.segment_header_is_torn`; a zero header makes us look at
    the whole file for frame headers.
    """
    if len(head) < SEGMENT_HEADER_SIZE:
        return True
    if any(head):
        return False
    try:
        data = pread_all(fd, size, 0)
    except OSError as e:
        raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
    return segment_header_is_torn(data)


def read_header(path: Path, data: bytes | None = None) -> SegmentHeader:
    """Decode a segment's header, turning problems into the errors users see."""
    if data is None:
        try:
            with open(path, "rb") as f:
                data = f.read(SEGMENT_HEADER_SIZE)
        except OSError as e:
            raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
    try:
        hdr = decode_segment_header(data)
    except SegmentHeaderError as e:
        if e.version is not None:
            raise UnsupportedFormatError(path, e.version, MAX_READ_VERSION) from None
        raise CorruptLogError(path, 0, e.reason) from None
    m = SEGMENT_RE.fullmatch(path.name)
    if m and int(m.group(1)) != hdr.base_seq:
        raise CorruptLogError(path, 0, f"header says base seq {hdr.base_seq}, name disagrees")
    return hdr


def create_segment(
    log_dir: Path, base_seq: int, prev_digest: bytes, roll_bytes: int, sync: bool
) -> Path:
    """Create a segment atomically: temp file, header, fsync, rename, dir fsync."""
    final = log_dir / segment_name(base_seq)
    tmp = log_dir / (segment_name(base_seq) + ".tmp")
    try:
        fd = private.create_temp(tmp, os.O_RDWR)
        try:
            _osio.write_all(fd, encode_segment_header(base_seq, prev_digest, roll_bytes), 0)
            if sync:
                _osio.fsync(fd)
        finally:
            os.close(fd)
        if os.path.exists(final):  # never replace a segment (and the batches in it)
            # (no errno, or the words alone: equivalent mutants, the message reads the same)
            raise FileExistsError(errno.EEXIST, "segment already exists")
        _osio.replace(tmp, final)
        if sync:
            _osio.fsync_dir(log_dir)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise LedgerIOError(f"cannot create segment {final}: {e.strerror or e}") from e
    return final


def sweep_tmp(log_dir: Path) -> list[str]:
    """Remove stray ``<base>.seg.tmp`` files; call only while holding the writer lock.

    A segment becomes visible only when its temp file is renamed, so a temp
    file left by a writer killed during :func:`create_segment` never holds
    data. Failures to remove one are ignored (it stays harmless).
    """
    removed: list[str] = []
    try:
        names = os.listdir(log_dir)
    except OSError:
        return removed
    for name in names:
        if TMP_RE.fullmatch(name):
            try:
                os.unlink(log_dir / name)
                removed.append(name)
            except OSError:
                pass
    return removed


def _quarantine_dir(log_dir: Path) -> tuple[Path, bool]:
    qdir = log_dir / QUARANTINE
    return qdir, private.make_dirs(qdir)


def _candidates(qdir: Path, stem: str, suffix: str) -> Iterator[Path]:
    yield qdir / f"{stem}.{suffix}"
    n = 1
    while True:
        yield qdir / f"{stem}.{n}.{suffix}"
        n += 1


def quarantine_bytes(log_dir: Path, stem: str, data: bytes, suffix: str = "torn") -> Path:
    """Write ``data`` to a new file ``quarantine/<stem>.<suffix>`` (or
    ``<stem>.<n>.<suffix>`` if taken), fsync it and the directory; raises ``OSError``
    (nothing left behind)."""
    qdir, created = _quarantine_dir(log_dir)
    for path in _candidates(qdir, stem, suffix):
        try:
            fd = private.create_file(path, os.O_WRONLY | os.O_EXCL)
            break
        except FileExistsError:
            continue
    try:
        try:
            _osio.write_all(fd, data, 0)
            _osio.fsync(fd)
        finally:
            os.close(fd)
        _osio.fsync_dir(qdir)
        if created:
            _osio.fsync_dir(log_dir)
    except OSError:
        try:
            os.unlink(path)
        except OSError:
            pass
        raise
    return path


def quarantine_file(log_dir: Path, src: Path, stem: str) -> Path:
    """Move ``src`` to ``quarantine/<stem>.torn`` (or ``<stem>.<n>.torn``; never over an
    existing file) and sync both directories; call only while holding the writer lock.
    Raises ``OSError``."""
    qdir, _created = _quarantine_dir(log_dir)
    for path in _candidates(qdir, stem, "torn"):
        if not os.path.lexists(path):
            break
    _osio.replace(src, path)
    _osio.fsync_dir(qdir)
    _osio.fsync_dir(log_dir)
    return path


@attrs.define
class Tail:
    """Where the valid prefix of a segment ends, and what lies beyond it."""

    end: int
    head: int  # last seq in the valid prefix (base_seq - 1 when empty)
    digest: bytes  # chain digest at ``head``
    last: FrameInfo | None  # the final valid frame of this segment
    torn: tuple[int, str] | None = None  # (offset, reason) of an ignorable torn tail
    at: float | None = None  # ``at`` of ``last`` (see :func:`last_at`)


def last_at(path: Path, data: bytes | memoryview, info: FrameInfo, data_offset: int = 0) -> float:
    """``at`` of a checked frame found in ``data``; a payload that does not decode is corrupt."""
    try:
        at, _bid = payload_head(payload_of(data, info))
        return float(at)
    except (ValueError, TypeError) as e:
        raise CorruptLogError(path, info.offset + data_offset, str(e)) from None


def scan_tail(path: Path, data: bytes, start: int, prev_digest: bytes, next_seq: int) -> Tail:
    """Find the valid prefix of the *last* segment from ``start``: a full, checked walk.

    It tells a torn tail (ignored, reported in ``torn``) from bad bytes followed
    by valid frames (``CorruptLogError``).
    """
    tail = Tail(start, next_seq - 1, prev_digest, None)
    last: FrameTuple | None = None
    try:
        for t in walk_frames(data, start, prev_digest, next_seq):
            last = t
    except FrameError as e:
        if has_valid_frame_after(data, e.offset, e.next_seq):
            raise CorruptLogError(path, e.offset, e.reason) from None
        tail.torn = (e.offset, e.reason)
    if last is not None:
        info = FrameInfo(*last[:5])
        tail.end, tail.head, tail.digest, tail.last = info.end, info.last_seq, info.digest, info
        tail.at = last_at(path, data, info)
    return tail


def fast_tail(path: Path, fd: int, size: int, prev_digest: bytes, next_seq: int) -> Tail | None:
    """The last segment's tail from ``pread`` of its last frames only; None if unclear.

    Trusts a clean ending: the last frame found through the footer in the
    file's last 8 bytes, checked in full, chained to the frame before it
    (found through its footer; only its 56-byte header is read). The caller
    falls back to :func:`scan_tail` of the whole segment, and a writer walks it
    in full before its first write.
    """
    start = SEGMENT_HEADER_SIZE
    if size == start:
        return Tail(start, next_seq - 1, prev_digest, None)
    try:
        foot = pread_all(fd, FOOTER_SIZE, size - FOOTER_SIZE)
        flen = footer_frame_len(foot, FOOTER_SIZE, size - start)
        if flen is None:
            return None
        lo = size - flen
        # (extra bytes before the segment's only frame: equivalent mutants, the walk
        # starts past them with the caller's digest)
        extra = FOOTER_SIZE if lo - start >= FRAME_OVERHEAD else 0
        buf = pread_all(fd, flen + extra, lo - extra)
        if len(buf) != flen + extra:
            return None
        if lo == start:
            prev, seq = prev_digest, next_seq
        elif extra:
            plen = footer_frame_len(buf, extra, lo - start)
            if plen is None:
                return None
            head = parse_frame_head(pread_all(fd, FRAME_HEADER_SIZE, lo - plen), 0)
            if head is None or head[0] + FRAME_OVERHEAD != plen:
                return None
            _n, count, first, prev = head
            seq = first + count
        else:
            return None
    except OSError as e:
        raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
    try:
        found = list(walk_frames(buf, extra, prev, seq))
    except FrameError:
        return None
    if len(found) != 1:
        return None
    info = FrameInfo(*found[0][:5])
    at = last_at(path, buf, info, lo - extra)
    last = FrameInfo(lo, size, info.first_seq, info.count, info.digest)
    return Tail(size, info.last_seq, info.digest, last, at=at)


def last_segment_is_torn(path: Path) -> bool:
    """Is ``path`` (the last segment) a torn new segment that readers ignore?"""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return True  # moved to quarantine/ meanwhile
    except OSError as e:
        raise LedgerIOError(f"cannot open {path}: {e.strerror}") from e
    try:
        size = os.fstat(fd).st_size
        return header_is_torn(path, fd, size, pread_all(fd, SEGMENT_HEADER_SIZE, 0))
    except OSError as e:
        raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
    finally:
        os.close(fd)


# --- the frame index ---------------------------------------------------------------

#: A frame index keeps one entry per this many bytes of segment (plus the first frame).
INDEX_STEP = 16 * 1024
#: Bytes read per pread while walking headers of small frames.
INDEX_CHUNK = 64 * 1024


class FrameIndex:
    """A sparse ``first_seq -> offset`` index of one segment, built by a header walk.

    Entry ``k`` says: a frame starts at ``offs[k]`` with seq ``seqs[k]``, and the
    chain digest before it is ``digests[k]``. Entry 0 is the segment's first
    frame (its header's ``base_seq`` and ``prev_digest``); after that there is
    one entry per :data:`INDEX_STEP` bytes. ``end``/``next_seq``/``digest`` say
    how far the walk got. The walk checks headers only (magic, crc, seq
    continuity, the frame fits in the file): an index is a hint for where to
    read, and every frame read through it is checked in full (a mismatch makes
    the reader drop the index and read the segment whole).
    """

    __slots__ = (
        "ino", "base", "prev_digest", "seqs", "offs", "digests", "end", "next_seq", "digest",
        "step",
    )

    def __init__(self, ino: int, hdr: SegmentHeader, step: int = INDEX_STEP) -> None:
        """``step``: bytes between entries (0: an entry per frame, for point reads)."""
        self.ino = ino
        self.step = step
        self.base = hdr.base_seq
        self.prev_digest = hdr.prev_digest
        self.seqs = array("Q", [hdr.base_seq])  # ("q" here and below: equivalent, >= 0)
        self.offs = array("Q", [SEGMENT_HEADER_SIZE])
        self.digests = [hdr.prev_digest]
        self.end = SEGMENT_HEADER_SIZE
        self.next_seq = hdr.base_seq
        # (None: an equivalent mutant; an entry takes a digest only a step past the first
        # frame, by which time the walk has replaced this one with a frame's)
        self.digest = hdr.prev_digest

    def extend(self, fd: int, size: int) -> None:
        """Walk frame headers from ``end`` up to ``size``; stop at the first unusable one.

        Raises ``OSError``.
        """
        # An index is a hint (every frame read through it is checked in full), so the
        # equivalent mutants here change only what the walk reads ahead or where entries
        # fall, never an answer: a first buffer that is too short to hold a header
        # either way, the loop or the read running past ``size`` (nothing there parses
        # as a frame of ours, and ``end > size`` stops it), a read-ahead at exactly a
        # header's length, the read-ahead size, and an entry a frame later or at
        # every frame.
        off, seq, digest = self.end, self.next_seq, self.digest
        last_entry = self.offs[-1]
        buf, buf_off, want = b"", off, INDEX_CHUNK
        while size - off >= FRAME_OVERHEAD:
            rel = off - buf_off
            if len(buf) - rel < FRAME_HEADER_SIZE:
                buf, buf_off, rel = pread_all(fd, min(want, size - off), off), off, 0
            head = parse_frame_head(buf, rel)
            if head is None:
                break
            n, count, first, fdigest = head
            end = off + n + FRAME_OVERHEAD
            if first != seq or end > size:
                break
            if off - last_entry >= self.step:
                self.seqs.append(first)
                self.offs.append(off)
                if self.step:  # a dense index serves point reads: no chain to resume
                    self.digests.append(digest)
                last_entry = off
            seq, digest, off = first + count, fdigest, end
            want = FRAME_HEADER_SIZE if n >= INDEX_CHUNK else INDEX_CHUNK
        self.end, self.next_seq, self.digest = off, seq, digest

    def locate(self, seq: int) -> tuple[int, int, bytes]:
        """``(first_seq, offset, digest before it)`` of the last entry at or before ``seq``."""
        k = max(bisect_right(self.seqs, seq) - 1, 0)
        # (another bytes value for b"": an equivalent mutant, a dense index serves point
        # reads, which do not chain)
        return self.seqs[k], self.offs[k], self.digests[k] if self.step or not k else b""

    def bound(self, seq: int) -> int | None:
        """An offset at a frame boundary past the frame holding ``seq`` (None: not indexed)."""
        k = bisect_right(self.seqs, seq)
        if k < len(self.seqs):
            return self.offs[k]
        # (always None, an equivalent mutant: the caller then reads to the end of the
        # content, which ``end`` nearly always is)
        return self.end if seq < self.next_seq else None


def recent_heads(
    path: Path, fd: int, start: int, end: int
) -> Iterator[tuple[int, int, float, str | None]]:
    """``(first_seq, count, at, batch_id)`` of the frames ending at ``end``, newest first.

    Walks footers backwards with one ``pread`` per frame (its header, the head
    of its payload and the footer of the frame before it); stops where the
    chain of footers is unclear. Raises ``OSError``; a payload that does not
    decode is ``CorruptLogError``.

    The head read from the prefetched bytes is a shortcut (without it the payload is
    decoded), and each bound is checked again by the step after it (a frame is never
    exactly 64 bytes; the frame before the first is the segment's header), so mutants
    that drop the shortcut, read more or fewer bytes for it, or shift those bounds are
    equivalent (.ci/mutants-equivalent).
    """
    pos = end
    if pos - start < FRAME_OVERHEAD:
        return
    foot = pread_all(fd, FOOTER_SIZE, pos - FOOTER_SIZE)
    while pos - start >= FRAME_OVERHEAD and len(foot) == FOOTER_SIZE:
        flen = footer_frame_len(foot, FOOTER_SIZE, pos - start)
        if flen is None:
            return
        lo = pos - flen
        extra = FOOTER_SIZE if lo - start >= FRAME_OVERHEAD else 0
        want = min(flen - FOOTER_SIZE, FRAME_HEADER_SIZE + PAYLOAD_HEAD_MAX)
        buf = pread_all(fd, want + extra, lo - extra)
        head = parse_frame_head(buf, extra)
        if head is None or head[0] + FRAME_OVERHEAD != flen:
            return
        n, count, first, _digest = head
        p0 = extra + FRAME_HEADER_SIZE
        found = payload_head_fast(buf[p0 : p0 + n])
        if found is None:
            payload = pread_all(fd, n, lo + FRAME_HEADER_SIZE)
            try:
                at, bid, _rows = decode_payload(payload)
            except ValueError as e:
                raise CorruptLogError(path, lo, str(e)) from None
            found = (at, bid)
        yield first, count, float(found[0]), found[1]
        foot, pos = buf[:extra], lo
