"""An in-memory log backend: the file ledger's frames, kept as bytes in a list.

It encodes and checks with ``frame.py`` exactly as the file ledger does, so
data round-trips the same way (tuples come back as lists) and the chain
digests are the ones the file log computes for the same batches and ``at``
values. It is what tests and tools use where a log directory is in the way,
and the second backend that keeps the seam (``backend.py``) honest. The
frames themselves live in a :class:`~.framechain.FrameChain`, which the
JetStream backend shares.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator

from .errors import HeadMismatchError, InvalidEventError, LedgerClosedError
from .event import Event, Receipt, encode_batch
from .export import export_log
from .frame import encode_frame_parts, payload_prefix
from .framechain import FrameChain
from .records import Batch, RawBatch, StoredEvent
from .verify import VerifyReport

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
        self._chain = FrameChain(SEGMENT_NAME)

    # --- state ----------------------------------------------------------------------

    @property
    def head(self) -> int:
        with self._mutex:
            self._check_open()
            return self._chain.head

    @property
    def head_digest(self) -> bytes:
        with self._mutex:
            self._check_open()
            return self._chain.head_digest

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
            chain = self._chain
            if batch_id is not None and batch_id in chain.receipts:
                r = chain.receipts[batch_id]
                return Receipt(r.first_seq, r.last_seq, r.at, batch_id, duplicate=True)
            if expected_head is not None and expected_head != chain.head:
                raise HeadMismatchError(expected_head, chain.head)
            at = max(float(self._clock()), chain.last_at)
            first = chain.head + 1
            try:
                frame, digest = encode_frame_parts(
                    chain.head_digest, first, count, (payload_prefix(at, batch_id), rows)
                )
            except ValueError as e:
                raise InvalidEventError(str(e)) from None
            return chain.add(frame, first, count, digest, at, batch_id)

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
            span = self._chain.span(from_seq, to_seq)
        if span is not None:
            yield from self._chain.batches(*span, to_seq)

    def read_raw_batches(self, from_seq: int = 1, to_seq: int | None = None
                         ) -> Iterator[RawBatch]:
        """Whole batches as :meth:`read_batches` gives them, each event as its stored bytes."""
        with self._mutex:
            self._check_open()
            span = self._chain.span(from_seq, to_seq)
        if span is not None:
            yield from self._chain.raw_batches(*span, to_seq)

    def export_lines(
        self, from_seq: int = 1, to_seq: int | None = None, kind: str | None = None
    ) -> Iterator[str]:
        """The log as JSON Lines (``export.py``), as the file log exports the same batches."""
        # (export_log stops past to_seq itself: reading without the bound reads more, an
        # equivalent mutant; here and in Ledger.export_lines)
        return export_log(self.read_raw_batches(from_seq, to_seq), self._prev_digest,
                          from_seq=from_seq, to_seq=to_seq, kind=kind)

    def _prev_digest(self, first_seq: int) -> bytes | None:
        with self._mutex:
            return self._chain.digest_at(first_seq - 1)

    def read_raw(self, seq: int) -> StoredEvent | None:
        with self._mutex:
            self._check_open()
            return self._chain.raw(seq)

    def digest_at(self, seq: int) -> bytes | None:
        with self._mutex:
            self._check_open()
            return self._chain.digest_at(seq)

    # --- checking and lifecycle -------------------------------------------------------

    def verify(self) -> VerifyReport:
        with self._mutex:
            self._check_open()
            n, head = len(self._chain.frames), self._chain.head
        problems = self._chain.problems(n)
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
        return f"MemoryLog(head={self._chain.head})"
