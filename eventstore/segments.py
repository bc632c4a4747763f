"""Segment files: the one place that opens, reads, creates and syncs them.

A segment is ``<base_seq:020d>.seg``; names sort in seq order. Everything
about the bytes inside is delegated to the pure codec in ``frame.py``.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path

import attrs

from . import _osio
from .errors import CorruptLogError, LedgerIOError, UnsupportedFormatError
from .frame import (
    FORMAT_VERSION,
    SEGMENT_HEADER_SIZE,
    FrameError,
    FrameInfo,
    SegmentHeader,
    SegmentHeaderError,
    check_digest,
    decode_segment_header,
    encode_segment_header,
    frame_before,
    has_valid_frame_after,
    iter_frames,
    last_frame_by_footer,
)

SEGMENT_RE = re.compile(r"(\d{20})\.seg")


def segment_name(base_seq: int) -> str:
    return f"{base_seq:020d}.seg"


def list_segments(log_dir: Path) -> list[tuple[int, Path]]:
    """``(base_seq, path)`` of every segment, in seq order."""
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise LedgerIOError(f"cannot list {log_dir}: {e.strerror}") from e
    out = []
    for name in names:
        m = SEGMENT_RE.fullmatch(name)
        if m:
            out.append((int(m.group(1)), log_dir / name))
    out.sort()
    return out


def read_bytes(path: Path, offset: int = 0) -> bytes:
    try:
        with open(path, "rb") as f:
            if offset:
                f.seek(offset)
            return f.read()
    except OSError as e:
        raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e


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
            raise UnsupportedFormatError(path, e.version, FORMAT_VERSION) from None
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
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _osio.write_all(fd, encode_segment_header(base_seq, prev_digest, roll_bytes), 0)
            if sync:
                _osio.fsync(fd)
        finally:
            os.close(fd)
        if os.path.exists(final):  # never replace a segment (and the batches in it)
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


@attrs.define
class Tail:
    """Where the valid prefix of a segment ends, and what lies beyond it."""

    end: int
    head: int  # last seq in the valid prefix (base_seq - 1 when empty)
    digest: bytes  # chain digest at ``head``
    last: FrameInfo | None  # the final valid frame of this segment
    torn: tuple[int, str] | None = None  # (offset, reason) of an ignorable torn tail


def scan_tail(
    path: Path, data: bytes, start: int, prev_digest: bytes, next_seq: int, *, fast: bool
) -> Tail:
    """Find the valid prefix of the *last* segment from ``start``.

    ``fast`` trusts a clean ending (last frame found through its footer and
    chained to the frame before it) without walking the segment; anything
    unclear falls back to a full, checked walk that tells a torn tail (ignored)
    from bad bytes followed by valid frames (``CorruptLogError``).
    """
    if len(data) == start:
        return Tail(start, next_seq - 1, prev_digest, None)
    if fast:
        last = last_frame_by_footer(data, start)
        if last is not None:
            if last.offset == start:
                prev, prev_ok = prev_digest, last.first_seq == next_seq
            else:
                before = frame_before(data, last, start)
                prev = before.digest if before else b""
                prev_ok = before is not None and before.last_seq + 1 == last.first_seq
            if prev_ok:
                try:
                    check_digest(data, last, prev)
                    return Tail(last.end, last.last_seq, last.digest, last)
                except FrameError:
                    pass
    tail = Tail(start, next_seq - 1, prev_digest, None)
    try:
        for info in iter_frames(data, start, prev_digest, next_seq):
            tail.end, tail.head, tail.digest, tail.last = info.end, info.last_seq, info.digest, info
    except FrameError as e:
        if has_valid_frame_after(data, e.offset, tail.head + 1):
            raise CorruptLogError(path, e.offset, e.reason) from None
        tail.torn = (e.offset, e.reason)
    return tail


def walk_sealed(path: Path, data: bytes, prev_digest: bytes, next_seq: int) -> Iterator[FrameInfo]:
    """Every frame of a segment that is not the last: any bad byte is corruption."""
    try:
        yield from iter_frames(data, SEGMENT_HEADER_SIZE, prev_digest, next_seq)
    except FrameError as e:
        raise CorruptLogError(path, e.offset, e.reason) from None
