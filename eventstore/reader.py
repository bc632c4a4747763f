"""Reads: the one read loop over segments, the byte spans it needs, frame indexes.

Readers take no lock and never modify files. Every frame a read passes is
checked by :func:`frame.walk_frames`; what a torn tail or a stale index means
is decided here.
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cbor2

from .errors import CorruptLogError, GenerationChangedError, LedgerIOError
from .event import EVENT_BUILDERS, Event
from .frame import (
    PAST_ALL_SEQS,
    SEGMENT_HEADER_SIZE,
    FrameError,
    decode_payload,
    decode_rows_at,
    encode_row,
    has_valid_frame_after,
    payload_head_fast,
    row_bounds,
    segment_header_is_torn,
    walk_frames,
)
from .records import Batch, RawBatch
from .segments import (
    FrameIndex,
    data_end,
    header_is_torn,
    last_segment_is_torn,
    list_generation,
    pread_all,
    read_header,
)

#: How many segments' frame indexes one handle keeps (least recently used dropped).
INDEX_CACHE = 64
#: A later segment of a bounded read is read through its index only above this size.
INDEX_MIN_BYTES = 1024 * 1024

#: What :meth:`Reader.scan` yields: batches, events, digests, or raw batches.
BATCHES, EVENTS, DIGESTS, RAW = 0, 1, 2, 3

#: ``(data, start, data_offset, seq, digest, base_seq, prev_digest, indexed_end)``:
#: see :meth:`Reader.span`.
Span = tuple[bytes, int, int, int, bytes, int, bytes, int]



def raw_batch(path: Path, off: int, payload: memoryview, first: int, count: int) -> RawBatch:
    """A chain-checked frame's batch with each event's stored bytes (``RAW`` scans).

    A payload written before per-event offsets has no stored bounds: its rows are
    re-encoded (``encode_row``), the only case where the bytes may differ."""
    try:
        at, bid, rows = decode_payload(payload)
        if len(rows) != count:
            raise ValueError("event count does not match the header")
        raw: list[bytes] = []
        for i in range(count):
            span = row_bounds(payload, i)
            raw.append(bytes(payload[span[0]:span[1]]) if span is not None
                       else encode_row(rows[i]))
        return RawBatch(first, float(at), bid, tuple(raw))
    except (ValueError, TypeError) as e:
        raise CorruptLogError(path, off, f"payload does not decode: {e}") from None


class Reader:
    """The read side of one handle: its frame indexes and the loop that uses them."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        # per-segment frame indexes for reads by seq (see segments.FrameIndex)
        self._indexes: OrderedDict[Path, FrameIndex] = OrderedDict()
        self._index_lock = threading.Lock()

    def scan(
        self,
        from_seq: int,
        to_seq: int | None,
        mode: int,
        check: Callable[[], None],
        on_corrupt: Callable[[CorruptLogError], None],
    ) -> Iterator[Any]:
        """The one read loop: frames overlapping ``[from_seq, to_seq]``, fully checked.

        Yields one :class:`Batch` per batch (``BATCHES``), one ``Event``
        per seq (``EVENTS``) or ``(first_seq, last_seq, digest)`` per frame
        (``DIGESTS``). Every frame it passes is checked structurally; every
        frame it yields from also has its chain digest checked. The first
        segment is read through its frame index when the read starts inside it
        or is bounded. ``check`` runs before the first read (the handle is
        open); ``on_corrupt`` hears of corruption before it is raised.
        """
        check()
        if to_seq is not None and to_seq < from_seq:
            return
        try:
            loads = cbor2.loads
            # Events built without __init__ (event.EVENT_BUILDERS, build_event inlined)
            new, set_kind, set_key, set_data, set_seq, set_at = EVENT_BUILDERS
            bounded = to_seq is not None
            stop_seq = to_seq if to_seq is not None else PAST_ALL_SEQS
            need = from_seq  # the next seq the caller still wants
            segs, gen = list_generation(self.log_dir)
            if not segs:
                return
            i = max(bisect_right([b for b, _p in segs], from_seq) - 1, 0)
            if i == 0 and segs[0][0] != 1 and not gen:
                raise CorruptLogError(
                    segs[0][1], 0, f"segments before seq {segs[0][0]} are missing"
                )
            chain: tuple[int, bytes] | None = None  # (seq, digest) the next segment continues
            n_segs = len(segs)
            for j in range(i, n_segs):
                base, path = segs[j]
                if base > stop_seq:
                    return
                use_index = j == i or bounded
                while True:
                    span = self.span(path, base, j == n_segs - 1, need, to_seq, use_index, j > i)
                    if span is None:
                        return  # the last segment's header is torn: it holds nothing
                    data, start, data_off, seq, digest, hdr_base, hdr_prev, indexed_end = span
                    if chain is not None and (hdr_base != chain[0] or hdr_prev != chain[1]):
                        raise CorruptLogError(
                            path, 0, "segment does not continue the one before it"
                        )
                    mv = memoryview(data)
                    try:
                        ended: list[Any] = []  # (seq, digest) past the last frame walked
                        frames = walk_frames(
                            data, start, digest, seq, skip_to=need, stop_after=stop_seq, ended=ended
                        )
                        for off, _end, first, count, fdigest, p0, p1 in frames:
                            need = nxt = first + count
                            if mode == DIGESTS:
                                yield first, nxt - 1, fdigest
                                continue
                            if mode == RAW:
                                yield raw_batch(path, off + data_off, mv[p0:p1], first, count)
                                continue
                            rows = None
                            if mode == EVENTS and bounded and count > 8:
                                # (>=: an equivalent mutant, lo is 0 at from_seq == first)
                                lo = from_seq - first if from_seq > first else 0
                                hi = min(stop_seq, nxt - 1) - first + 1
                                if (hi - lo) * 4 <= count:  # a few events of a big batch
                                    rows = decode_rows_at(mv[p0:p1], lo, hi)
                                    head = payload_head_fast(mv[p0:p1]) if rows else None
                                    if rows is not None and head is not None:
                                        # (another nxt: an equivalent mutant, pre-sliced
                                        # rows are sliced no further either way)
                                        at, first, nxt = head[0], first + lo, first + hi
                                        rows_pre_sliced = True
                                    else:
                                        rows = None
                            try:
                                if rows is None:
                                    rows_pre_sliced = False  # (None: as false)
                                    # small payloads decode faster from bytes than a view
                                    # (either at any size: equivalent mutants, one decode)
                                    obj = loads(data[p0:p1] if p1 - p0 < 65536 else mv[p0:p1])
                                    at = obj[0]
                                    # (always float(at): an equivalent mutant, a fast path)
                                    if type(at) is not float:
                                        at = float(at)
                                    if len(obj) == 3:  # written before per-event offsets
                                        rows = obj[2]
                                        if type(rows) is not list:
                                            raise ValueError("payload is not [at, bid, events]")
                                    else:
                                        rows = obj[3]
                                        if (len(obj) != 4 or type(rows) is not list
                                                or len(obj[2]) != 4 * len(rows)):
                                            raise ValueError(
                                                "payload is not [at, batch_id, offsets, events]"
                                            )
                            except Exception as e:
                                raise CorruptLogError(
                                    path, off + data_off, f"payload does not decode: {e}"
                                ) from None
                            if not rows_pre_sliced and len(rows) != count:
                                raise CorruptLogError(
                                    path, off + data_off, "event count does not match the header"
                                )
                            if mode == BATCHES:
                                try:
                                    batch = Batch.of_rows(first, at, obj[1], rows)
                                except ValueError as e:
                                    raise CorruptLogError(
                                        path, off + data_off, str(e)
                                    ) from None
                                yield batch
                                continue
                            lo = from_seq - first if from_seq > first else 0  # (>=: the same)
                            # (<= or < nxt + 1: equivalent mutants, a slice up to the
                            # batch's last event or past it is the same rows)
                            if stop_seq < nxt - 1:
                                rows = rows[lo : stop_seq - first + 1]
                            elif lo:
                                rows = rows[lo:]
                            s = first + lo
                            try:
                                for kind, key, d in rows:
                                    ev = new(Event)
                                    set_kind(ev, kind)
                                    set_key(ev, key)
                                    set_data(ev, d)
                                    set_seq(ev, s)
                                    set_at(ev, at)
                                    yield ev
                                    s += 1
                            except (TypeError, ValueError):
                                raise CorruptLogError(
                                    path, off + data_off, "event is not [kind, key, data]"
                                ) from None
                    except FrameError as e:
                        at_off = e.offset + data_off
                        if at_off < indexed_end:
                            # the index said a valid frame is here: stale (a frame it saw was
                            # cut and rewritten) or real damage; the whole segment decides
                            self.drop_index(path)
                            use_index = False  # (None: an equivalent mutant, as false)
                            continue
                        if j < n_segs - 1 and not (
                            j == n_segs - 2 and last_segment_is_torn(segs[-1][1])
                        ):  # bad bytes in a segment that is not the last
                            raise CorruptLogError(path, at_off, e.reason) from None
                        if has_valid_frame_after(data, e.offset, e.next_seq):
                            raise CorruptLogError(path, at_off, e.reason) from None
                        return  # torn tail of the last segment: the valid prefix ends here
                    break
                chain = (ended[0], ended[1])
        except CorruptLogError as e:
            on_corrupt(e)
            raise

    def span(
        self,
        path: Path,
        base: int,
        last: bool,
        need: int,
        to_seq: int | None,
        use_index: bool,
        later: bool,
    ) -> Span | None:
        """The bytes of ``path`` a read needs, and where the walk starts in them.

        Returns ``(data, start, data_offset, seq, digest, base_seq, prev_digest,
        indexed_end)``: ``data`` holds the file from byte ``data_offset``; the
        walk starts at ``data[start]`` with the frame of ``seq`` chained to
        ``digest``; ``base_seq``/``prev_digest`` are the header's; frames before
        ``indexed_end`` were promised by the index. None: a torn last segment.
        """
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            if last:  # a torn segment another writer just moved to quarantine/
                return None
            segs, gen = list_generation(self.log_dir)
            # (>=: an equivalent mutant; a generation starting at ``base`` has this
            # segment's name, so the open would have found its file)
            if gen and segs[0][0] > base:
                raise GenerationChangedError(path) from None
            raise LedgerIOError(f"cannot open {path}: segment vanished") from None
        except OSError as e:
            raise LedgerIOError(f"cannot open {path}: {e.strerror}") from e
        try:
            st = os.fstat(fd)
            size = data_end(fd, st.st_size)
            # (size >= INDEX_MIN_BYTES: an equivalent mutant, an index or not for a
            # segment of exactly that size; every frame read through one is checked)
            if use_index and (need > base or to_seq is not None) and (
                not later or size > INDEX_MIN_BYTES
            ):
                return self._indexed_span(path, fd, st.st_ino, size, last, need, to_seq)
            data = pread_all(fd, size, 0)
        except OSError as e:
            raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
        finally:
            os.close(fd)
        if last and segment_header_is_torn(data):
            return None
        # (read_header(path) without ``data``: equivalent mutants, the same bytes; and
        # an indexed end of 1 for 0: no frame starts before byte 64)
        hdr = read_header(path, data)
        return (
            data, SEGMENT_HEADER_SIZE, 0, hdr.base_seq, hdr.prev_digest, hdr.base_seq,
            hdr.prev_digest, 0,
        )

    def _indexed_span(
        self, path: Path, fd: int, ino: int, size: int, last: bool, need: int, to_seq: int | None
    ) -> Span | None:
        """:meth:`span` through the segment's frame index (built or extended here).

        ``size`` is where the segment's content ends (:func:`data_end`). Returns
        None for a torn last segment. Raises ``OSError``.
        """
        with self._index_lock:
            idx = self._indexes.get(path)
            if idx is not None and (idx.ino != ino or size < idx.end):
                idx = None  # another file now, or it shrank: walk it afresh
            if idx is None:
                head = pread_all(fd, SEGMENT_HEADER_SIZE, 0)
                if last and header_is_torn(path, fd, size, head):
                    return None
                # (read_header(path) alone: an equivalent mutant, it reads the same bytes)
                idx = FrameIndex(ino, read_header(path, head))
                self._indexes[path] = idx
                while len(self._indexes) > INDEX_CACHE:  # (last=None: equivalent, falsy too)
                    self._indexes.popitem(last=False)
            else:
                self._indexes.move_to_end(path)
            # (size >= end: an equivalent mutant, a walk from end to end finds nothing)
            if size > idx.end and need >= idx.next_seq:
                idx.extend(fd, size)
            seq, off, digest = idx.locate(need)
            stop = idx.bound(to_seq) if to_seq is not None else None
            indexed_end, hdr_base, hdr_prev = idx.end, idx.base, idx.prev_digest
        if stop is None or stop > size:  # (`>=`: an equivalent mutant, stop is size then)
            stop = size
        data = pread_all(fd, stop - off, off)
        return data, 0, off, seq, digest, hdr_base, hdr_prev, indexed_end

    def drop_index(self, path: Path) -> None:
        """Forget ``path``'s frame index (its file was moved, cut or found stale)."""
        with self._index_lock:
            self._indexes.pop(path, None)

    def clear(self) -> None:
        with self._index_lock:
            self._indexes.clear()
