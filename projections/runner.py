"""Folding the log into views: checkpoint load, catch-up, debounced checkpoints.

A projection is a name, a version and a state type whose ``apply(event)`` is a
no-op at or below the state's own ``seq`` (its watermark). The runner never
trusts a checkpoint the log does not vouch for (DESIGN.md rule 4).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from eventstore import Event, Ledger, LedgerError

from .checkpoints import CheckpointDir

Progress = Callable[[int], None]


class State(Protocol):
    seq: int

    def apply(self, event: Event) -> None: ...

    def to_bytes(self) -> bytes: ...

    def snapshot(self) -> dict[str, Any]: ...


@attrs.frozen
class Projection:
    name: str
    version: int
    new: Callable[[], State]
    decode: Callable[[bytes], State]


@attrs.define
class View:
    projection: Projection
    state: State
    loaded_from: str = "empty"  # primary | backup | rebuild | empty
    refused: list[str] = attrs.field(factory=list)
    checkpointed_seq: int = 0
    # checkpoint files ("primary", "backup") refused at load: the next write must
    # not rotate a refused primary into the backup slot, nor keep a refused backup
    stale: set[str] = attrs.field(factory=set)


class Runner:
    """Serves a set of views over one ledger."""

    def __init__(
        self,
        ledger: Ledger,
        ckdir: CheckpointDir,
        projections: list[Projection],
        *,
        every_events: int = 5_000,
        every_seconds: float = 30.0,
    ) -> None:
        self.ledger = ledger
        self.ckdir = ckdir
        self.every_events = every_events
        self.every_seconds = every_seconds
        self.views = {p.name: self._load(p) for p in projections}
        self._last_ckpt = time.monotonic()

    def _load(self, p: Projection) -> View:
        found, refused = self.ckdir.load(p.name)
        head = self.ledger.head
        chosen: View | None = None
        for ck in found:
            if ck.version != p.version:
                refused.append(f"{ck.source}: version {ck.version}, expected {p.version}")
                continue
            if ck.seq > head or self.ledger.digest_at(ck.seq) != ck.digest:
                refused.append(f"{ck.source}: watermark seq {ck.seq} is not in this log")
                continue
            try:
                state = p.decode(ck.body)
                if state.seq != ck.seq:
                    raise ValueError("body watermark disagrees with header")
            except Exception as e:  # a garbled body that passed the MAC: still only a cache
                refused.append(f"{ck.source}: body does not decode ({type(e).__name__})")
                continue
            chosen = View(p, state, ck.source, refused, ck.seq)
            break
        if chosen is None:
            chosen = View(p, p.new(), "rebuild" if refused else "empty", refused)
        chosen.stale = {r.split(":", 1)[0] for r in refused}
        return chosen

    def catch_up(self, progress: Progress | None = None, until: int | None = None) -> int:
        """Fold every committed event past the lowest watermark; returns events folded."""
        states = [v.state for v in self.views.values()]
        return fold(self.ledger, states, min(s.seq for s in states) + 1, until, progress)

    def maybe_checkpoint(self) -> None:
        pending = max(v.state.seq - v.checkpointed_seq for v in self.views.values())
        if pending >= self.every_events or (
            pending and time.monotonic() - self._last_ckpt >= self.every_seconds
        ):
            self.checkpoint()

    def checkpoint(self, force: bool = False) -> int:
        """Write every view whose watermark moved (``force``: every view); returns how many."""
        written = 0
        for v in self.views.values():
            seq = v.state.seq
            if (not force and seq == v.checkpointed_seq
                    and v.loaded_from in ("primary", "backup") and not v.stale):
                continue
            if not force and seq == 0 and v.loaded_from == "empty":
                continue  # nothing folded yet: an empty log needs no checkpoint
            digest = self.ledger.digest_at(seq)
            if digest is None:  # mid-batch watermark (time travel): not checkpointable
                continue
            if {"primary", "backup"} <= v.stale:
                self.ckdir.discard(v.projection.name, "backup")
            self.ckdir.write(v.projection.name, v.projection.version, seq, digest,
                             v.state.to_bytes(), rotate="primary" not in v.stale)
            v.checkpointed_seq = seq
            v.loaded_from = "primary"
            v.stale = set()
            written += 1
        self._last_ckpt = time.monotonic()
        return written

    def reset(self, name: str) -> None:
        """Forget a view's checkpoints and state; the next catch-up refolds it."""
        v = self.views[name]
        self.ckdir.remove(name)
        v.state, v.loaded_from, v.refused, v.checkpointed_seq = v.projection.new(), "rebuild", [], 0
        v.stale = set()


def fold(
    ledger: Ledger,
    states: list[State],
    from_seq: int,
    until: int | None = None,
    progress: Progress | None = None,
) -> int:
    """Apply events ``from_seq..until`` to every state (each skips what it has)."""
    n = 0
    try:
        for at, first, rows in ledger.read_batches(from_seq, until):
            for i, row in enumerate(rows):
                seq = first + i
                if seq < from_seq or (until is not None and seq > until):
                    continue
                ev = Event(row[0], row[1], row[2], seq=seq, at=at)
                for s in states:
                    s.apply(ev)
                n += 1
            if progress is not None:
                progress(len(rows))
    except LedgerError:
        raise
    return n
