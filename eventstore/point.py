"""Point reads: one event by seq, at about the cost of that event's own bytes.

A batch is one frame whose chain digest covers the whole payload, so a read
that proves the chain must hash the whole batch: a 200,000-event frame for
one event. A point read does not: it finds the frame through the segment's
frame index, checks the frame header (magic, crc, seq continuity, that the
frame fits), reads the event's two offsets and then only the event's bytes.
What it returns is *located* soundly but not *authenticated*: the caller
checks the content (a cache body against its content address) or reads with
:meth:`Ledger.read`, which verifies the chain (docs/format.md, "Point reads").
"""

from __future__ import annotations

import os
import struct
import threading
from bisect import bisect_right
from collections import OrderedDict
from pathlib import Path

from .errors import LedgerClosedError, LedgerIOError
from .frame import (
    FOOTER,
    FOOTER_MAGIC,
    FRAME_HEADER_SIZE,
    FRAME_OVERHEAD,
    parse_frame_head,
    payload_layout,
    row_bounds,
)
from .records import StoredEvent
from .segments import (
    FrameIndex,
    data_end,
    list_segments,
    pread_all,
    read_header,
)

#: The first read at a frame: its header and the payload's head (PAYLOAD_HEAD_MAX + 16
#: bytes: where the offsets start); a frame that fits is served from it alone (footer
#: checked too), a bigger one with two more small reads (two offsets, the event).
FIRST_READ = 4096
#: Segments a reader keeps open (least recently used closed first).
OPEN_SEGMENTS = 16
_OFFS = struct.Struct("<II")


class NoOffsets(ValueError):
    """A frame written before per-event offsets existed: it can only be read whole."""


class _Open:
    """A segment kept open for point reads: its fd and frame index."""

    __slots__ = ("fd", "index")

    def __init__(self, fd: int, index: FrameIndex) -> None:
        self.fd, self.index = fd, index


class PointReader:
    """Point reads over one log directory (thread-safe; never writes).

    Keeps a few segments open with their frame indexes. A segment that was
    replaced or cut since it was indexed is noticed (short read, different
    header) and re-indexed; what it then holds is checked like any other.
    """

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        # (None for the lists or for False: equivalent mutants, an empty list is listed
        # afresh before use, both lists together, and _closed is read as true or false)
        self._segs: list[tuple[int, Path]] = []
        self._bases: list[int] = []
        self._closed = False
        self._open: OrderedDict[Path, _Open] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, seq: int) -> StoredEvent | None:
        """The event ``seq``, or None when the log has no such seq (yet).

        Raises ``ValueError`` when the bytes where the index points do not hold
        the event (the caller falls back to a verified read, which reports
        corruption properly) and :class:`LedgerIOError` on I/O errors.
        """
        if seq < 1:
            return None
        with self._lock:
            if self._closed:
                raise LedgerClosedError("ledger is closed")
            try:
                # (range(3), an equivalent mutant: a third attempt repeats the second)
                for attempt in range(2):
                    seg = self._segment_for(seq, refresh=attempt > 0)
                    if seg is None:
                        continue
                    try:
                        found = self._read_in(seg, seq)
                    except NoOffsets:
                        raise  # an old frame: the index is fine, the caller reads it whole
                    except ValueError:
                        self._forget(seg)  # a stale index (a frame it saw was cut)?
                        if attempt:
                            raise
                        continue
                    if found is not None:
                        return found
                    # the index may have walked over a torn frame whose header looked whole
                    # and that a writer has since cut and written over: build it afresh
                    self._forget(seg)
                return None
            except OSError as e:
                raise LedgerIOError(f"cannot read {self.log_dir}: {e.strerror or e}") from e

    def reset(self) -> None:
        """Forget every segment (the log moved to a new generation)."""
        with self._lock:
            for seg in self._open.values():
                os.close(seg.fd)
            self._open.clear()
            self._segs, self._bases = [], []

    def close(self) -> None:
        """Close every segment held open; reads then raise ``LedgerClosedError``."""
        with self._lock:
            self._closed = True
            for seg in self._open.values():
                os.close(seg.fd)
            self._open.clear()

    def _forget(self, seg: _Open) -> None:
        for path, held in list(self._open.items()):
            if held is seg:
                del self._open[path]
                os.close(seg.fd)

    def _segment_for(self, seq: int, refresh: bool) -> _Open | None:
        if refresh or not self._segs:
            self._segs = list_segments(self.log_dir)
            self._bases = [b for b, _p in self._segs]
        segs = self._segs
        k = bisect_right(self._bases, seq) - 1
        if k < 0:
            return None
        path = segs[k][1]
        seg = self._open.get(path)
        if seg is not None:
            self._open.move_to_end(path)
            return seg
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None  # moved to quarantine/ or compacted meanwhile: list again
        # (equivalent mutants: any inode, as point reads never look at it; the header read
        # by name rather than from the fd, or 65 bytes of it; any step below a frame's
        # size, as each frame gets an entry either way)
        try:
            index = FrameIndex(
                os.fstat(fd).st_ino, read_header(path, pread_all(fd, 64, 0)), step=0
            )
        except BaseException:
            os.close(fd)
            raise
        seg = self._open[path] = _Open(fd, index)
        while len(self._open) > OPEN_SEGMENTS:
            _p, old = self._open.popitem(last=False)  # (last=None: as false, equivalent)
            os.close(old.fd)
        return seg

    def _read_in(self, seg: _Open, seq: int) -> StoredEvent | None:
        idx = seg.index
        if seq >= idx.next_seq:  # past what the index covers: walk the new frames
            idx.extend(seg.fd, data_end(seg.fd, os.fstat(seg.fd).st_size))
            if seq >= idx.next_seq:
                return None
        first, off, _digest = idx.locate(seq)  # the frame holding seq: an entry per frame
        # one read that holds the header and, for a small frame, all of it (for a big
        # one: the payload's head, which says where the offsets are)
        buf = pread_all(seg.fd, FIRST_READ, off)
        head = parse_frame_head(buf, 0)
        if head is None or head[2] != first or not first <= seq < first + head[1]:
            # (any message: equivalent mutants; read_raw catches the ValueError and reads
            # the batch whole, which names the problem itself)
            raise ValueError(f"no frame for seq {seq} at byte {off}")
        n, count, _f, _d = head
        return _event_in_frame(seg.fd, off, n, count, seq - first, seq, buf)


def _event_in_frame(
    fd: int, off: int, n: int, count: int, i: int, seq: int, buf: bytes
) -> StoredEvent:
    """Event ``i`` (seq ``seq``) of the frame at ``off`` (payload ``n`` bytes), ``buf``
    holding the frame's first bytes; raises ValueError/OSError."""
    p0 = off + FRAME_HEADER_SIZE
    # (> for >=: an equivalent mutant, a frame that exactly fills ``buf`` is read again
    # the slow way; row_bounds called without a layout: None, as the test below wants)
    if len(buf) >= n + FRAME_OVERHEAD:
        frame = buf
        flen, fmagic = FOOTER.unpack_from(frame, n + FRAME_HEADER_SIZE)
        if fmagic != FOOTER_MAGIC or flen != n + FRAME_OVERHEAD:
            raise ValueError(f"bad frame footer at byte {off}")
        payload = memoryview(frame)[FRAME_HEADER_SIZE : FRAME_HEADER_SIZE + n]
        layout = payload_layout(payload, count)
        span = row_bounds(payload, i) if layout is not None else None
        if layout is None or span is None:
            raise NoOffsets(f"frame at byte {off} has no per-event offsets")
        at, (a, b) = layout[0], span
        return StoredEvent(seq, at, bytes(payload[a:b]))
    layout = payload_layout(memoryview(buf)[FRAME_HEADER_SIZE:], count)
    if layout is None:
        raise NoOffsets(f"frame at byte {off} has no per-event offsets")
    at, offs_start, rows_start = layout
    pair = pread_all(fd, 8 if i + 1 < count else 4, p0 + offs_start + 4 * i)
    if i + 1 < count:
        if len(pair) != 8:
            raise ValueError(f"frame at byte {off} is cut short")
        a, b = _OFFS.unpack(pair)
        a, b = rows_start + a, rows_start + b
    else:
        if len(pair) != 4:
            raise ValueError(f"frame at byte {off} is cut short")
        a, b = rows_start + int.from_bytes(pair, "little"), n
    if not rows_start <= a < b <= n:
        raise ValueError(f"event {seq} has bad bounds in the frame at byte {off}")
    row = pread_all(fd, b - a, p0 + a)
    if len(row) != b - a:
        raise ValueError(f"frame at byte {off} is cut short")
    return StoredEvent(seq, at, row)
