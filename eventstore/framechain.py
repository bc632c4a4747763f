"""Committed frames held as bytes in memory: the part every non-file backend shares.

The in-memory log keeps its whole history here; the JetStream log keeps here
what it has read from its stream. Frames are the file log's frames
(``frame.py``), so the chain digests, point reads and checks are the same.
Not thread-safe: the owner holds its own lock around every call, and the lists
only ever grow, so a reader may walk the first ``n`` frames without it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path

from .errors import CorruptLogError
from .event import Receipt
from .frame import (
    GENESIS_DIGEST,
    FrameError,
    decode_payload,
    payload_head_fast,
    payload_of,
    read_frame_header,
    row_bounds,
    walk_frames,
)
from .reader import raw_batch
from .records import Batch, RawBatch, StoredEvent
from .verify import Problem, check_rows


class FrameChain:
    """Frames in seq order, each chained to the one before, with their receipts.

    ``name`` is what errors and verify reports give where the file log names a
    segment; offsets are where a frame would start in one file holding them all.
    Every committed ``batch_id`` stays recognised (there is no window).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        # frame i holds seqs firsts[i].. and chains to digests[i - 1]
        self.frames: list[bytes] = []
        self.firsts: list[int] = []
        self.digests: list[bytes] = []
        self.offsets: list[int] = []
        self.size = 0
        self.head = 0
        self.last_at = 0.0
        self.receipts: dict[str, Receipt] = {}

    @property
    def head_digest(self) -> bytes:
        return self.digests[-1] if self.digests else GENESIS_DIGEST

    def add(
        self, frame: bytes, first: int, count: int, digest: bytes, at: float, batch_id: str | None
    ) -> Receipt:
        """Record a frame this process just encoded (it chains to :attr:`head_digest`)."""
        self.frames.append(frame)
        self.firsts.append(first)
        self.digests.append(digest)
        self.offsets.append(self.size)
        self.size += len(frame)
        self.head, self.last_at = first + count - 1, at
        receipt = Receipt(first, self.head, at, batch_id)
        if batch_id is not None:
            self.receipts[batch_id] = receipt
        return receipt

    def add_checked(self, frame: bytes) -> Receipt:
        """Record a frame that came from elsewhere, after it proves to be the next one:
        whole, starting at ``head + 1`` and chained to :attr:`head_digest` (else
        :class:`CorruptLogError` and nothing is recorded)."""
        try:
            walked = list(walk_frames(frame, 0, self.head_digest, self.head + 1))
            if len(walked) != 1:  # (the walk covers every byte of the frame or raises)
                raise FrameError(0, "frame does not fill its message")
        except FrameError as e:
            raise CorruptLogError(self.name, self.size + e.offset, e.reason) from None
        _off, _end, first, count, digest, p0, p1 = walked[0]
        head = payload_head_fast(memoryview(frame)[p0:p1])
        if head is None:
            raise CorruptLogError(self.name, self.size, "payload is not the shape writers write")
        at, batch_id = head
        if at < self.last_at:
            raise CorruptLogError(self.name, self.size, "batch time goes backwards")
        return self.add(frame, first, count, digest, at, batch_id)

    def frame_of(self, seq: int) -> int:
        """Index of the frame holding ``seq`` (-1 before the first)."""
        return bisect_right(self.firsts, seq) - 1

    def start(self, from_seq: int) -> int:
        """Index of the first frame a read from ``from_seq`` needs (``len`` past the head)."""
        lo = max(1, from_seq)
        return self.frame_of(lo) if lo <= self.head else len(self.frames)

    def span(self, from_seq: int, to_seq: int | None) -> tuple[int, int] | None:
        """The frames a read of ``[from_seq, to_seq]`` walks: ``(first index, count
        now)`` taken under the owner's lock, or None for an empty range."""
        if to_seq is not None and to_seq < max(1, from_seq):
            return None
        return self.start(from_seq), len(self.frames)

    def batches(self, i: int, n: int, to_seq: int | None) -> Iterator[Batch]:
        """Frames ``i`` to ``n - 1`` checked and decoded, stopping past ``to_seq``."""
        for j in range(i, n):
            if to_seq is not None and self.firsts[j] > to_seq:
                return
            yield self.checked(j)

    def _walk(self, i: int) -> tuple[int, int, memoryview]:
        """Frame ``i``'s first seq, count and payload, once its structure and chain check out."""
        frame, where = self.frames[i], self.offsets[i]
        prev = self.digests[i - 1] if i else GENESIS_DIGEST
        try:
            walked = list(walk_frames(frame, 0, prev, self.firsts[i]))
            if len(walked) != 1:  # (the walk covers every byte of the frame or raises)
                raise FrameError(0, "frame does not fill its slot")
        except FrameError as e:
            raise CorruptLogError(self.name, where + e.offset, e.reason) from None
        _off, _end, first, count, _digest, p0, p1 = walked[0]
        return first, count, memoryview(frame)[p0:p1]

    def checked(self, i: int) -> Batch:
        """Frame ``i`` decoded, after its structure and chain digest check out."""
        first, count, payload = self._walk(i)
        try:
            at, batch_id, rows = decode_payload(payload)
            bad = check_rows(rows, count)
            if bad:
                raise ValueError(bad)
            return Batch.of_rows(first, float(at), batch_id, rows)
        except ValueError as e:
            raise CorruptLogError(self.name, self.offsets[i], str(e)) from None

    def raw_batches(self, i: int, n: int, to_seq: int | None) -> Iterator[RawBatch]:
        """As :meth:`batches`, each event as its stored bytes (what export copies)."""
        for j in range(i, n):
            if to_seq is not None and self.firsts[j] > to_seq:
                return
            first, count, payload = self._walk(j)
            yield raw_batch(Path(self.name), self.offsets[j], payload, first, count)

    def raw(self, seq: int) -> StoredEvent | None:
        """The stored bytes of the event at ``seq`` (structure checked only), or None."""
        if not 0 < seq <= self.head:
            return None
        i = self.frame_of(seq)
        frame, first, where = self.frames[i], self.firsts[i], self.offsets[i]
        try:
            info = read_frame_header(frame, 0)
        except FrameError as e:  # about the frame at 0: its offset is the frame's own
            raise CorruptLogError(self.name, where, e.reason) from None
        if info.first_seq != first:
            raise CorruptLogError(self.name, where,
                                  f"frame starts at seq {info.first_seq}, expected {first}")
        payload = payload_of(frame, info)
        head = payload_head_fast(payload)
        span = row_bounds(payload, seq - info.first_seq)
        if head is None or span is None:
            raise CorruptLogError(self.name, where, "event bounds do not check out")
        a, b = span
        return StoredEvent(seq, head[0], bytes(payload[a:b]))

    def digest_at(self, seq: int) -> bytes | None:
        if seq == 0:
            return GENESIS_DIGEST
        if not 0 < seq <= self.head:  # (0 <= seq: an equivalent mutant, 0 returned above)
            return None
        i = self.frame_of(seq)
        last = self.firsts[i + 1] - 1 if i + 1 < len(self.firsts) else self.head
        return self.digests[i] if last == seq else None

    def problems(self, n: int) -> list[Problem]:
        """What is wrong with the first ``n`` frames (each checked as a read checks it)."""
        problems: list[Problem] = []
        for i in range(n):
            try:
                self.checked(i)
            except CorruptLogError as e:
                problems.append(Problem(self.name, e.offset, e.reason))
        return problems
