"""The seam between the log and everything folded over it.

Projections depend only on this protocol, so a replicated log (NATS
JetStream, say) can stand in for the file ledger without touching them. A
backend is done when it passes ``tests/test_ledger_contract.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

from .event import Event, Receipt
from .verify import VerifyReport


@runtime_checkable
class LogBackend(Protocol):
    @property
    def head(self) -> int: ...

    @property
    def head_digest(self) -> bytes: ...

    def append(
        self,
        events: Iterable[Event],
        *,
        expected_head: int | None = None,
        batch_id: str | None = None,
    ) -> Receipt: ...

    def read(self, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Event]: ...

    def read_batches(
        self, from_seq: int = 1, to_seq: int | None = None
    ) -> Iterator[tuple[float, int, list[list[Any]]]]: ...

    def digest_at(self, seq: int) -> bytes | None: ...

    def verify(self) -> VerifyReport: ...

    def close(self) -> None: ...
