"""What a log backend hands back: whole batches, and single stored events.

These are the seam's vocabulary (see ``backend.py``): projections consume
:class:`Batch` and :class:`StoredEvent`, never a backend's bytes or rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import cbor2

from .event import Event


@attrs.frozen
class Batch:
    """One atomic append as the log holds it: seqs ``first_seq..last_seq``, one ``at``.

    Every event carries its ``seq`` and the batch's ``at``.
    """

    first_seq: int
    at: float
    batch_id: str | None
    events: tuple[Event, ...]

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.events) - 1

    @classmethod
    def of_rows(
        cls, first_seq: int, at: float, batch_id: str | None, rows: Sequence[Any]
    ) -> Batch:
        """Build from decoded ``[kind, key, data]`` rows; ``ValueError`` on another shape."""
        events = tuple(event_of_row(row, first_seq + i, at) for i, row in enumerate(rows))
        return cls(first_seq, at, batch_id, events)


@attrs.frozen
class StoredEvent:
    """One event's own CBOR bytes, as written inside its batch: what a point read returns.

    ``row`` is ``[kind, key, data]`` exactly as stored. A point read checks
    structure only, not the batch's chain digest, so whoever uses ``row``
    authenticates it (a cache body by its content address, say).
    """

    seq: int
    at: float
    row: bytes

    def event(self) -> Event:
        """Decode ``row``; ``ValueError`` when it is not CBOR ``[kind, key, data]``."""
        try:
            obj = cbor2.loads(self.row)
        except Exception as e:  # cbor2 raises a variety of decode errors
            raise ValueError(f"event bytes are not valid CBOR: {e}") from None
        return event_of_row(obj, self.seq, self.at)


def event_of_row(row: Any, seq: int, at: float) -> Event:
    """The :class:`Event` a decoded row stands for; ``ValueError`` on another shape."""
    if not (type(row) is list and len(row) == 3):
        raise ValueError("event is not [kind, key, data]")
    kind, key, data = row
    return Event(kind, key, data, seq=seq, at=at)


@attrs.frozen
class RawBatch:
    """A batch as stored: its events' own CBOR ``[kind, key, data]`` bytes, chain-checked.

    What compaction copies into a new generation, so each event keeps its exact
    bytes (a cache packet stays verbatim, floats and tags stay as written).
    """

    first_seq: int
    at: float
    batch_id: str | None
    rows: tuple[bytes, ...]
