"""The seam between the log and everything folded over it.

Projections depend only on this protocol and on the records it returns
(``records.py``), never on segments, frames or CBOR, so another log (an
in-memory one for tests, a replicated one such as NATS JetStream) can stand
in for the file ledger without touching them. A backend is done when it
passes ``LedgerContract`` in ``tests/test_ledger_contract.py``;
``docs/architecture.md`` ("The seam") says what each method promises.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol, runtime_checkable

from .event import Event, Receipt
from .records import Batch, RawBatch, StoredEvent
from .verify import VerifyReport


@runtime_checkable
class LogBackend(Protocol):
    """An append-only, hash-chained log of events in atomic batches.

    Seqs are gapless from 1 (the file ledger, after a compaction: from its
    ``base``, format.md §12); each batch has one ``at`` (unix seconds, never
    decreasing); the chain digest after a batch is the one ``frame.py``
    defines, so every backend holding the same batches agrees on it. Every
    method raises :class:`~.errors.LedgerClosedError` once the log is closed.
    """

    @property
    def head(self) -> int:
        """The last committed seq (0 when empty), including other writers' appends."""
        ...

    @property
    def head_digest(self) -> bytes:
        """The chain digest at :attr:`head` (32 zero bytes when empty)."""
        ...

    def append(
        self,
        events: Iterable[Event],
        *,
        expected_head: int | None = None,
        batch_id: str | None = None,
    ) -> Receipt:
        """Commit ``events`` as one atomic batch, all or nothing, and say where it went.

        Bad input raises :class:`~.errors.InvalidEventError` and writes nothing.
        With ``expected_head`` the append happens only if the head is still that
        (else :class:`~.errors.HeadMismatchError`). A ``batch_id`` the log
        already committed (within the backend's window) writes nothing and
        returns the original receipt with ``duplicate=True``, even when
        ``expected_head`` is stale: a retry is the same append.
        """
        ...

    def read(self, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Event]:
        """Events ``from_seq <= seq <= to_seq`` in seq order, each with ``seq`` and ``at``.

        Every batch read from is checked against the chain first; bad bytes raise
        :class:`~.errors.CorruptLogError` and nothing wrong is ever yielded.
        """
        ...

    def read_batches(self, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Batch]:
        """Whole batches overlapping ``[from_seq, to_seq]``, in order, chain-checked as
        :meth:`read` is (a batch is never cut to the range)."""
        ...

    def read_raw_batches(self, from_seq: int = 1, to_seq: int | None = None
                         ) -> Iterator[RawBatch]:
        """As :meth:`read_batches`, each event as its stored CBOR bytes (what export,
        compaction and mirrors copy, so every value keeps its exact encoding)."""
        ...

    def export_lines(
        self, from_seq: int = 1, to_seq: int | None = None, kind: str | None = None
    ) -> Iterator[str]:
        """The log as JSON Lines (``export.py``): the same bytes from every backend
        holding the same batches."""
        ...

    def read_raw(self, seq: int) -> StoredEvent | None:
        """A point read: the stored bytes of the one event at ``seq``.

        It costs about the size of that event whatever the size of its batch,
        so it cannot check the batch's chain digest: it checks structure only
        (the frame header and the event's bounds, :class:`~.errors.CorruptLogError`
        when they are wrong). The caller authenticates the content (a cache
        body by its content address) or uses :meth:`read`. None when ``seq`` is
        0, negative or past :attr:`head`.
        """
        ...

    def digest_at(self, seq: int) -> bytes | None:
        """The chain digest after the batch that ends exactly at ``seq``.

        32 zero bytes at 0; None for a seq inside a batch, negative or past
        :attr:`head`. A checkpoint's watermark ``(seq, digest)`` is trusted only
        when this returns its digest, so a view never serves another history.
        """
        ...

    def verify(self) -> VerifyReport:
        """Check every stored byte (chain, seqs, checksums, payload shape); change nothing."""
        ...

    def close(self) -> None:
        """Release the log; idempotent. Later calls raise ``LedgerClosedError``."""
        ...

    def __enter__(self) -> LogBackend: ...

    def __exit__(self, *exc: object) -> None: ...
