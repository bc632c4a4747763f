"""An in-memory log backend: the file ledger's frames, kept as bytes in a list.

It encodes and checks with ``frame.py`` exactly as the file ledger does, so
data round-trips the same way (tuples come back as lists) and the chain
digests are the ones the file log computes for the same batches and ``at``
values. It is what tests and tools use where a log directory is in the way,
and the second backend that keeps the seam (``backend.py``) honest.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator

from .errors import CorruptLogError, HeadMismatchError, InvalidEventError, LedgerClosedError
from .event import Event, Receipt, encode_batch
from .frame import (
    GENESIS_DIGEST,
    FrameError,
    decode_payload,
    encode_frame_parts,
    payload_head_fast,
    payload_of,
    payload_prefix,
    read_frame_header,
    row_bounds,
    walk_frames,
)
from .records import Batch, StoredEvent
from .verify import Problem, VerifyReport, check_rows

#: The name errors and verify reports give where the file log names a segment.
SEGMENT_NAME = "memory"


class MemoryLog:
    """A log that lives as long as the object. Thread-safe; one handle, no files.

    Each method keeps the contract in :class:`~.backend.LogBackend`'s docstrings.
    Every committed ``batch_id`` stays recognised (there is no window).
    ``clock`` gives unix seconds; a batch's ``at`` never goes backwards.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._mutex = threading.Lock()
        self._closed = False
        # frame i holds seqs _firsts[i].. and chains to _digests[i - 1]; _offsets[i] is
        # where it would start in one file holding them all (for error messages)
        self._frames: list[bytes] = []
        self._firsts: list[int] = []
        self._digests: list[bytes] = []
        self._offsets: list[int] = []
        self._size = 0
        self._head = 0
        self._last_at = 0.0
        self._receipts: dict[str, Receipt] = {}

    # --- state ----------------------------------------------------------------------

    @property
    def head(self) -> int:
        with self._mutex:
            self._check_open()
            return self._head

    @property
    def head_digest(self) -> bytes:
        with self._mutex:
            self._check_open()
            return self._digests[-1] if self._digests else GENESIS_DIGEST

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosedError("log is closed")

    # --- appending ------------------------------------------------------------------

    def append(
        self,
        events: Iterable[Event],
        *,
        expected_head: int | None = None,
        batch_id: str | None = None,
    ) -> Receipt:
        rows, count = encode_batch(events, batch_id)
        with self._mutex:
            self._check_open()
            if batch_id is not None and batch_id in self._receipts:
                r = self._receipts[batch_id]
                return Receipt(r.first_seq, r.last_seq, r.at, batch_id, duplicate=True)
            if expected_head is not None and expected_head != self._head:
                raise HeadMismatchError(expected_head, self._head)
            at = max(float(self._clock()), self._last_at)
            first = self._head + 1
            prev = self._digests[-1] if self._digests else GENESIS_DIGEST
            try:
                frame, digest = encode_frame_parts(
                    prev, first, count, (payload_prefix(at, batch_id), rows)
                )
            except ValueError as e:
                raise InvalidEventError(str(e)) from None
            self._frames.append(frame)
            self._firsts.append(first)
            self._digests.append(digest)
            self._offsets.append(self._size)
            self._size += len(frame)
            self._head, self._last_at = first + count - 1, at
            receipt = Receipt(first, self._head, at, batch_id)
            if batch_id is not None:
                self._receipts[batch_id] = receipt
            return receipt

    # --- reading --------------------------------------------------------------------

    def read(self, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Event]:
        lo = max(1, from_seq)
        for batch in self.read_batches(lo, to_seq):
            for e in batch.events:
                if e.seq >= lo and (to_seq is None or e.seq <= to_seq):
                    yield e

    def read_batches(self, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Batch]:
        with self._mutex:
            self._check_open()
            # frames are never changed once appended: reading the first n needs no lock
            frames, digests, n = self._frames, self._digests, len(self._frames)
            lo = max(1, from_seq)
            i = self._frame_of(lo) if lo <= self._head else n
        if to_seq is not None and to_seq < lo:
            return
        for j in range(i, n):
            if to_seq is not None and self._firsts[j] > to_seq:
                return
            yield self._checked(frames[j], j, digests[j - 1] if j else GENESIS_DIGEST)

    def read_raw(self, seq: int) -> StoredEvent | None:
        with self._mutex:
            self._check_open()
            if not 0 < seq <= self._head:
                return None
            i = self._frame_of(seq)
            frame, first, where = self._frames[i], self._firsts[i], self._offsets[i]
        try:
            info = read_frame_header(frame, 0)
            if info.first_seq != first:
                raise FrameError(0, f"frame starts at seq {info.first_seq}, expected {first}")
        except FrameError as e:
            raise CorruptLogError(SEGMENT_NAME, where + e.offset, e.reason) from None
        payload = payload_of(frame, info)
        head = payload_head_fast(payload)
        span = row_bounds(payload, seq - info.first_seq)
        if head is None or span is None:
            raise CorruptLogError(SEGMENT_NAME, where, "event bounds do not check out")
        a, b = span
        return StoredEvent(seq, head[0], bytes(payload[a:b]))

    def digest_at(self, seq: int) -> bytes | None:
        with self._mutex:
            self._check_open()
            if seq == 0:
                return GENESIS_DIGEST
            if not 0 < seq <= self._head:
                return None
            i = self._frame_of(seq)
            last = self._firsts[i + 1] - 1 if i + 1 < len(self._firsts) else self._head
            return self._digests[i] if last == seq else None

    def _frame_of(self, seq: int) -> int:
        """Index of the frame holding ``seq`` (-1 before the first; call under the lock)."""
        return bisect_right(self._firsts, seq) - 1

    def _checked(self, frame: bytes, i: int, prev_digest: bytes) -> Batch:
        """Frame ``i`` decoded, after its structure and chain digest check out."""
        where = self._offsets[i]
        try:
            walked = list(walk_frames(frame, 0, prev_digest, self._firsts[i]))
            if len(walked) != 1 or walked[0][1] != len(frame):
                raise FrameError(0, "frame does not fill its slot")
        except FrameError as e:
            raise CorruptLogError(SEGMENT_NAME, where + e.offset, e.reason) from None
        _off, _end, first, count, _digest, p0, p1 = walked[0]
        try:
            at, batch_id, rows = decode_payload(memoryview(frame)[p0:p1])
            bad = check_rows(rows, count)
            if bad:
                raise ValueError(bad)
            return Batch.of_rows(first, float(at), batch_id, rows)
        except ValueError as e:
            raise CorruptLogError(SEGMENT_NAME, where, str(e)) from None

    # --- checking and lifecycle -------------------------------------------------------

    def verify(self) -> VerifyReport:
        with self._mutex:
            self._check_open()
            frames, digests, n, head = self._frames, self._digests, len(self._frames), self._head
        problems: list[Problem] = []
        for i in range(n):
            try:
                self._checked(frames[i], i, digests[i - 1] if i else GENESIS_DIGEST)
            except CorruptLogError as e:
                problems.append(Problem(SEGMENT_NAME, e.offset, e.reason))
        # a MemoryLog has no segments; ``events`` counts what was appended
        return VerifyReport(not problems, head, n, head, 0, tuple(problems))

    def close(self) -> None:
        with self._mutex:
            self._closed = True

    def __enter__(self) -> MemoryLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryLog(head={self._head})"
