"""The batch-id window: what makes a retried append with a ``batch_id`` idempotent.

A handle remembers the ids of the last ``size`` frames at the head of the
log; an append whose id is among them writes nothing and returns the original
receipt. The window is built lazily from the newest frames on disk, then kept
up to date from this handle's appends and the frames it sees others write.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from .errors import CorruptLogError, LedgerIOError
from .event import Receipt
from .frame import SEGMENT_HEADER_SIZE, payload_head, walk_frames
from .segments import Tail, data_end, list_segments, open_segment, recent_heads


class BatchWindow:
    """Ids of the last ``size`` frames: id -> (frame number, receipt)."""

    def __init__(self, log_dir: Path, size: int) -> None:
        self.log_dir = log_dir
        self.size = size
        self._batches: dict[str, tuple[int, Receipt]] | None = None  # None: not built yet
        # the two below are read only once the first lookup has built all three (other
        # values here: equivalent mutants)
        self._frames: deque[tuple[int, str]] = deque()  # (frame number, id), oldest first
        self._nframes = 0

    def reset(self) -> None:
        """Forget everything (a frame it may hold vanished): rebuilt on the next lookup."""
        self._batches = None

    def lookup(
        self, batch_id: str, active_base: int, active_path: Path | None, active_end: int
    ) -> Receipt | None:
        """The receipt of a frame in the window with this id, if any.

        ``active_*`` say where the log ends as the caller (holding the writer
        lock) sees it: the window is built from the frames before that point.
        """
        if self._batches is None:
            found = list(
                recent_frames(self.log_dir, active_base, active_path, active_end, self.size)
            )
            self._batches, self._frames = {}, deque()
            # (+len: an equivalent mutant; frame numbers are only compared with each
            # other and with the newest, so where they start does not matter)
            self._nframes = -len(found)
            for first, count, at, bid in reversed(found):
                self.note_frame(first, first + count - 1, at, bid)
        seen = self._batches.get(batch_id)
        return None if seen is None else seen[1]

    def note_frame(self, first: int, last: int, at: float, batch_id: str | None) -> None:
        """One more frame at the head of the log: it enters the window, the oldest leaves."""
        batches = self._batches
        if batches is None:
            return
        self._nframes += 1
        if batch_id is not None:
            # (its batch_id None or left out: equivalent mutants, the caller answers a
            # retry with the id it was asked for)
            batches[batch_id] = (self._nframes, Receipt(first, last, at, batch_id))
            self._frames.append((self._nframes, batch_id))
        oldest = self._nframes - self.size
        frames = self._frames
        while frames and frames[0][0] <= oldest:
            n, bid = frames.popleft()
            # not re-committed since (the default None alone: an equivalent mutant, an
            # id leaves ``batches`` only with its newest frame, after its older ones)
            if batches.get(bid, (None,))[0] == n:
                del batches[bid]

    def note_batches(
        self, path: Path, data: bytes, tail: Tail, start: int, next_seq: int
    ) -> None:
        """Frames another writer added (found from ``start`` in ``data``): note their ids."""
        if self._batches is None or tail.last is None:
            return
        # (any digest, or a false verify other than False: equivalent mutants; the frames
        # are only parsed here, scan_tail checked their chain)
        walk = walk_frames(data[: tail.end], start, b"", next_seq, verify=False)
        for off, _end, first, count, _digest, p0, p1 in walk:
            try:
                at, bid = payload_head(memoryview(data)[p0:p1])
            except ValueError as e:
                raise CorruptLogError(path, off, str(e)) from None
            self.note_frame(first, first + count - 1, float(at), bid)


def recent_frames(
    log_dir: Path, active_base: int, active_path: Path | None, active_end: int, limit: int
) -> Iterator[tuple[int, int, float, str | None]]:
    """``(first_seq, count, at, batch_id)`` of the newest frames, newest first."""
    n = 0
    segs = [s for s in list_segments(log_dir) if s[0] <= active_base]
    for _base, path in reversed(segs):
        if n >= limit:
            return
        fd = open_segment(path)
        try:
            end = active_end if path == active_path else data_end(fd, os.fstat(fd).st_size)
            for head in recent_heads(path, fd, SEGMENT_HEADER_SIZE, end):
                yield head
                n += 1
                if n >= limit:
                    return
        except OSError as e:
            raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
        finally:
            os.close(fd)
