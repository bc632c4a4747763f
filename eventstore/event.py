"""Value types of the log: an event, and the receipt of an append."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from .errors import InvalidEventError

KIND_RE = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
MAX_KIND_LEN = 200
MAX_KEY_LEN = 1024


def _empty() -> dict[str, Any]:
    return {}


@attrs.frozen(eq=True, hash=False, repr=True)
class Event:
    """One fact in the log.

    Callers build ``Event(kind, key, data)``; the log assigns ``seq`` (gapless,
    from 1) and ``at`` (unix seconds) when the batch is appended.
    """

    kind: str
    key: str | None = None
    data: Mapping[str, Any] = attrs.field(factory=_empty)
    seq: int = attrs.field(default=0, kw_only=True)
    at: float = attrs.field(default=0.0, kw_only=True)


@attrs.frozen
class Receipt:
    """What an append committed: the batch's seqs, its time and its id."""

    first_seq: int
    last_seq: int
    at: float
    batch_id: str | None = None
    duplicate: bool = False  # True when a retried batch_id was already committed


def check_event(event: object) -> Event:
    """Reject anything that is not a writable event, before a byte is written."""
    if not isinstance(event, Event):
        raise InvalidEventError(f"expected an Event, got {type(event).__name__}")
    kind = event.kind
    if not isinstance(kind, str) or not kind:
        raise InvalidEventError("event kind must be a non-empty string")
    if len(kind) > MAX_KIND_LEN or not KIND_RE.fullmatch(kind):
        raise InvalidEventError(
            f"invalid event kind {kind!r}: use dotted words of letters, digits, '_' or '-'"
        )
    key = event.key
    if key is not None and (not isinstance(key, str) or len(key) > MAX_KEY_LEN):
        raise InvalidEventError("event key must be a string of at most 1024 characters, or null")
    if not isinstance(event.data, Mapping):
        raise InvalidEventError(
            f"event data must be a mapping (a JSON object), got {type(event.data).__name__}"
        )
    return event
