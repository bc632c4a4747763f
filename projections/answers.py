"""What the store's methods return, and the errors of its key and ``as_of`` lookups.

Plain frozen values with ``to_json``: the CLI prints them, the MCP server
returns them, tests compare them.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from eventstore import LedgerError, LogBackend

from .freshness import Freshness


class AsOfError(ValueError):
    """An ``as_of``/``until`` that names no state of this log (negative, NaN, past the head)."""


class UnknownKeyError(LedgerError):
    """No live entry has this cache_key (or a key starting with this prefix)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        what = "cache_key" if len(prefix) == 64 else "cache_key starting with"
        super().__init__(f"no live entry with {what} {prefix}")


class AmbiguousKeyError(LedgerError):
    """More than one live entry's cache_key starts with this prefix."""

    SHOWN = 10

    def __init__(self, prefix: str, candidates: list[str]) -> None:
        self.prefix = prefix
        self.candidates = candidates
        more = len(candidates) - self.SHOWN
        listed = ", ".join(candidates[: self.SHOWN]) + (f" and {more} more" if more > 0 else "")
        super().__init__(
            f"cache_key prefix {prefix} is ambiguous: {len(candidates)} live entries start "
            f"with it ({listed}); give more digits"
        )


def seq_at(log: LogBackend, as_of: int | float) -> int:
    """The seq a view "as of" ``as_of`` is folded to: a seq (int, 0 to the head) as is;
    a unix time (float) gives the last seq appended at or before it."""
    if isinstance(as_of, bool) or not isinstance(as_of, int | float):
        raise AsOfError(f"as_of must be a seq (int) or a unix time (float), not {as_of!r}")
    if isinstance(as_of, int):
        head = log.head
        if as_of < 0:
            raise AsOfError(f"seq {as_of} is negative (seqs start at 1; 0 is the empty log)")
        if as_of > head:
            raise AsOfError(f"seq {as_of} is past the head (seq {head})")
        return as_of
    if not math.isfinite(as_of) or as_of < 0:
        raise AsOfError(f"time {as_of} is not a unix time (finite, at or after 1970)")
    last = 0
    for batch in log.read_batches(1):
        if batch.at > as_of:
            break
        last = batch.last_seq
    return last


@attrs.frozen
class PutResult:
    cache_key: str
    seq: int
    created_at_unix: int

    def to_json(self) -> dict[str, Any]:
        return {
            "cache_key": self.cache_key,
            "seq": self.seq,
            "created_at_unix": self.created_at_unix,
        }


@attrs.frozen
class CacheEntry:
    """Packet28's ``PacketCacheEntry``: the packet, when it was cached, and how."""

    cache_key: str
    target: str
    created_at_unix: int
    body: dict[str, Any]
    metadata: dict[str, Any]
    freshness: Freshness | None = attrs.field(default=None, eq=False)
    """Whether its files are as they were at put time: an observation of the disk
    now, not part of the entry (so not compared); None without a project root."""

    def to_json(self) -> dict[str, Any]:
        doc = attrs.asdict(self, filter=lambda a, _v: a.name != "freshness")
        if self.freshness is not None:
            doc["freshness"] = self.freshness.to_json()
        return doc


@attrs.frozen
class EntrySummary:
    cache_key: str
    target: str
    created_at_unix: int
    expires_at_unix: int
    seq: int
    bytes: int
    memory_kind: str | None = None
    source_tier: str | None = None
    superseded: bool = False
    """Listed only with ``include_superseded`` (docs/recall.md, "Memory and scoring")."""
    superseded_by: str | None = None
    """The newer cache_key of its dedupe group (None: current, or self-marked)."""

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class EntryPage:
    """One page of ``list``: its entries, how many matched in all, where the next page starts."""

    entries: list[EntrySummary]
    total: int
    next_offset: int | None  # None: nothing after this page

    def to_json(self) -> dict[str, Any]:
        return {
            "entries": [e.to_json() for e in self.entries],
            "total": self.total,
            "next_offset": self.next_offset,
        }


@attrs.frozen
class PruneResult:
    removed: int
    remaining: int
    reasons: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)
