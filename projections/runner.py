"""Folding the log into views: checkpoint load, catch-up, debounced checkpoints.

A projection is a name, a version and a state type whose ``apply(event)`` is a
no-op at or below the state's own ``seq`` (its watermark). The runner never
trusts a checkpoint the log does not vouch for (failure rule 4,
docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import attrs

from eventstore import Event, GenerationChangedError, LedgerIOError, LogBackend
from eventstore.event import EVENT_BUILDERS
from eventstore.generation import MARKERS

from .checkpoints import CheckpointDir
from .config import CHECKPOINT_CLOSE_LAG, CHECKPOINT_EVERY_EVENTS, CHECKPOINT_EVERY_SECONDS
from .scope import is_project_event

Progress = Callable[[int], None]
FOLD_RETRIES = 2
"""Folds started afresh when the log moves to a new generation mid-fold (a compaction
or salvage under a reader): a third move in a row is an error, not a loop."""


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
    decode: Callable[[bytes | memoryview], State]


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
    """Serves a set of views over one ledger, each loaded the first time it is asked for.

    A command that only reads the cache never pays for loading the recall
    index, and the other way round.
    """

    def __init__(
        self,
        ledger: LogBackend,
        ckdir: CheckpointDir,
        projections: list[Projection],
        *,
        every_events: int = CHECKPOINT_EVERY_EVENTS,
        every_seconds: float = CHECKPOINT_EVERY_SECONDS,
        close_lag: int = CHECKPOINT_CLOSE_LAG,
        every_bytes: int = 64 * 1024 * 1024,
        project: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ledger = ledger
        self._clock = clock
        """What ``every_seconds`` and a checkpoint's duration are measured by (tests
        step it by hand)."""
        self.project = project
        """Agent scope: fold only events whose data names this project (:func:`fold`)."""
        self.ckdir = ckdir
        self.every_events = every_events
        self.every_seconds = every_seconds
        self.every_bytes = every_bytes
        self.close_lag = close_lag
        self._pending_bytes = 0  # packet bytes appended since the last checkpoint
        self._ckpt_seconds = 0.0  # how long the last checkpoint took
        self.projections = {p.name: p for p in projections}
        self.views: dict[str, View] = {}
        self._claimed: dict[str, int] = {}  # watermark an unloaded view's checkpoint claims
        self._last_ckpt = clock()
        self.checkpoint_error: str | None = None  # why the last debounced checkpoint failed

    def view(self, name: str, progress: Progress | None = None) -> View:
        """The view ``name``, loaded (checkpoint, then the events after it) on first use."""
        v = self.views.get(name)
        if v is None:
            v = self.views[name] = self._load(self.projections[name])
            if v.state.seq < self.ledger.head:  # (a read past the head would still seek)
                self._fold_views([v], v.state.seq + 1, None, progress)
        return v

    def _fold_views(
        self, views: list[View], from_seq: int, until: int | None, progress: Progress | None
    ) -> int:
        """:func:`fold` into ``views``; when the log moved to a new generation under
        them (a compaction or salvage: its first event, or a segment that vanished
        mid-read), their states are dropped and folded afresh from the new start."""
        retries = FOLD_RETRIES
        while True:
            try:
                return fold(self.ledger, [v.state for v in views], from_seq, until, progress,
                            self.project)
            except (NewGeneration, GenerationChangedError):
                if not retries:
                    raise
                retries -= 1
                for v in views:
                    # every checkpoint on disk predates the cut: none may be kept as backup
                    v.state, v.loaded_from = v.projection.new(), "rebuild"
                    v.checkpointed_seq, v.stale = 0, {"primary", "backup"}
                from_seq = 1

    def state(self, name: str) -> State:
        return self.view(name).state

    def prefetch(self, names: list[str]) -> None:
        """Start verifying the checkpoints of views not loaded yet, in the background
        (``CheckpointDir.prefetch``); loading them later takes the result."""
        self.ckdir.prefetch([n for n in names if n not in self.views])

    def load_all(self, progress: Progress | None = None) -> None:
        for name in self.projections:
            self.view(name, progress)

    def _load(self, p: Projection) -> View:
        refused: list[str] = []
        head = self.ledger.head
        chosen: View | None = None
        for ck in self.ckdir.load(p.name, refused):
            if ck.version != p.version:
                refused.append(f"{ck.source}: version {ck.version}, expected {p.version}")
                continue
            if ck.seq > head or self.ledger.digest_at(ck.seq) != ck.digest:
                refused.append(f"{ck.source}: watermark seq {ck.seq} is not in this log")
                continue
            try:
                with paused_gc():  # decoding builds many acyclic objects, as a fold does
                    state = p.decode(ck.body)
            except Exception as e:  # intact but undecodable (a bug, another build): a cache
                refused.append(f"{ck.source}: body does not decode ({type(e).__name__})")
                continue
            if state.seq != ck.seq:
                refused.append(f"{ck.source}: body folded to seq {state.seq}, header says {ck.seq}")
                continue
            chosen = View(p, state, ck.source, refused, ck.seq)
            break
        if chosen is None:
            chosen = View(p, p.new(), "rebuild" if refused else "empty", refused)
        # the file each reason is of (rpartition: an equivalent mutant, as no reason
        # holds a second colon)
        chosen.stale = {r.partition(":")[0] for r in refused}
        return chosen

    def catch_up(self, progress: Progress | None = None, until: int | None = None) -> int:
        """Fold every committed event past the lowest watermark of the loaded views."""
        states = [v.state for v in self.views.values()]
        if not states:
            return 0
        low = min(s.seq for s in states)
        if low >= (self.ledger.head if until is None else until):
            return 0  # the usual case for a read: nothing new (a read would list segments)
        return self._fold_views(list(self.views.values()), low + 1, until, progress)

    def before_append(self, count: int) -> None:
        """Load now the views that this append would leave ``close_lag`` events behind.

        A loaded view takes the batch from memory (:meth:`fold_own`); one left
        unloaded would have to read it back from the log later. A small append
        to a store whose views are not loaded stays cheap: they catch up on
        close, or when the lag has grown.
        """
        if len(self.views) == len(self.projections):
            return
        head = self.ledger.head
        for name in self.projections:
            if name not in self.views and head + count - self._claimed_seq(name) >= self.close_lag:
                self.view(name)

    def _claimed_seq(self, name: str) -> int:
        """The watermark an unloaded view's checkpoint claims (0: none), read once."""
        if name not in self._claimed:
            self._claimed[name] = self.ckdir.peek_seq(name) or 0
        return self._claimed[name]

    def fold_own(
        self, rows: list[tuple[str, str | None, Any]], first_seq: int, at: float, nbytes: int
    ) -> None:
        """Fold a batch this process just appended, from memory: nothing is read back.

        ``rows`` are ``(kind, key, data)`` as the log will give them back. A view
        that is behind (another writer appended in between) first catches up
        from the log, up to the batch.
        """
        states = [v.state for v in self.views.values()]
        if any(st.seq < first_seq - 1 for st in states):
            self.catch_up(until=first_seq - 1)
            if any(st.seq < first_seq - 1 for st in states):  # the log fell short: read it all
                self.catch_up()
                return
        self._pending_bytes += nbytes
        if not states:
            return
        new, set_kind, set_key, set_data, set_seq, set_at = EVENT_BUILDERS
        applies = [st.apply for st in states]
        seq = first_seq
        for kind, key, data in rows:
            ev = new(Event)  # build_event(kind, key, data, seq, at), inlined: a hot loop
            set_kind(ev, kind)
            set_key(ev, key)
            set_data(ev, data)
            set_seq(ev, seq)
            set_at(ev, at)
            for apply in applies:
                apply(ev)
            seq += 1

    def close_checkpoint(self) -> int:
        """At the end of a writing session: checkpoint what moved, and any view left behind.

        A view whose checkpoint lags the log by ``close_lag`` events or more is
        checkpointed (loaded first if this process never loaded it), so readers
        (who never write checkpoints) never fold a long tail; one that lags
        less is left for a later writer: a command that appended a few events
        to a large store does not rewrite megabytes of checkpoints for them.
        """
        head = self.ledger.head
        for name in self.projections:
            if name not in self.views:
                seq = self.ckdir.peek_seq(name)
                if head and (seq is None or head - seq >= self.close_lag):
                    self.view(name)
        self.catch_up()
        return self.checkpoint(min_lag=self.close_lag)

    def maybe_checkpoint(self, head: int) -> None:
        """Debounce: checkpoint once ``every_events`` events or ``every_seconds`` piled up.

        Views this process has not loaded count too (by the watermark their
        checkpoint claims), so a writer that never reads still keeps them fresh.
        """
        for name in self.projections:
            if name not in self.views and head - self._claimed_seq(name) >= self.every_events:
                self.view(name)
        if not self.views:
            return
        pending = max(v.state.seq - v.checkpointed_seq for v in self.views.values())
        since = self._clock() - self._last_ckpt
        due = pending >= self.every_events or self._pending_bytes >= self.every_bytes or (
            pending and since >= self.every_seconds
        )
        # checkpoints take at most ~10% of a writer's time: a checkpoint that took
        # t seconds is followed by at least 9t seconds of appends before the next
        if due and since >= 9 * self._ckpt_seconds:
            try:
                self.checkpoint()
            except LedgerIOError as e:
                # the append this follows has committed: a checkpoint is only a cache,
                # so its failure must not make the caller believe the append failed
                self.checkpoint_error = str(e)
                self._last_ckpt = self._clock()

    def checkpoint(self, force: bool = False, min_lag: int = 0) -> int:
        """Write every view whose watermark moved (``force``: every view); returns how many.

        ``min_lag``: skip a view whose usable checkpoint is fewer events behind than this
        (0 and 1 skip the same views, those that did not move: a default of 1 is an
        equivalent mutant).
        """
        started = self._clock()
        with paused_gc():
            written = self._write_checkpoints(force, min_lag)
        self._last_ckpt = self._clock()
        self._ckpt_seconds = self._last_ckpt - started
        self._pending_bytes = 0
        self.checkpoint_error = None
        return written

    def _write_checkpoints(self, force: bool, min_lag: int) -> int:
        written = 0
        for v in self.views.values():
            seq = v.state.seq
            if (not force and seq - v.checkpointed_seq < max(min_lag, 1)
                    and v.loaded_from in ("primary", "backup") and not v.stale):
                continue
            if not force and seq == 0 and v.loaded_from == "empty":
                continue  # nothing folded yet: an empty log needs no checkpoint
            digest = self.ledger.digest_at(seq)
            if digest is None:  # mid-batch watermark (time travel): not checkpointable
                continue
            self.ckdir.write(v.projection.name, v.projection.version, seq, digest,
                             v.state.to_bytes(), rotate="primary" not in v.stale)
            if {"primary", "backup"} <= v.stale:  # after the write: a failed one changes nothing
                self.ckdir.discard(v.projection.name, "backup")
            v.checkpointed_seq = seq
            v.loaded_from = "primary"
            v.stale = set()
            written += 1
        return written

    def refold(
        self, names: list[str], progress: Progress | None = None, log: LogBackend | None = None
    ) -> tuple[dict[str, State], int]:
        """Fresh states of ``names`` folded from the whole log (``log``: another handle
        on it), in memory only.

        Nothing is touched until every fold has succeeded: a log that fails
        closed half-way (``CorruptLogError``) leaves the views and every
        checkpoint file as they were. Views that index in bulk do it here.
        """
        fresh = {n: self.projections[n].new() for n in names}
        n = fold(self.ledger if log is None else log, list(fresh.values()), 1, None, progress,
                 self.project)
        for st in fresh.values():
            settle = getattr(st, "settle", None)
            if settle is not None:
                settle()
        return fresh, n

    def install(self, states: dict[str, State]) -> int:
        """Swap refolded states in and checkpoint them: each file replaced by rename.

        Each new checkpoint replaces its primary atomically (temp file, fsync,
        rename) and only then is the old backup removed, so at every moment each
        file is either the old checkpoint or the new one. Returns how many
        checkpoints were written (other loaded views that moved included).
        """
        for name, st in states.items():
            # both old files count as refused: the new one must not rotate them into the backup
            self.views[name] = View(self.projections[name], st, "rebuild", [], 0,
                                    {"primary", "backup"})
        return self.checkpoint()


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector (and restore it as it was).

    Folds and bulk puts allocate millions of short-lived acyclic objects, and
    the collections they trigger cost much and free nothing.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def fold(
    ledger: LogBackend,
    states: list[State],
    from_seq: int,
    until: int | None = None,
    progress: Progress | None = None,
    project: str | None = None,
) -> int:
    """Apply events ``from_seq..until`` to every state (each skips what it has);
    returns how many were applied.

    ``project`` (agent scope, where one log holds every project's events): only
    events whose data names this project are applied; any other event moves
    the states' watermarks past it and changes nothing else, so a view of one
    project never sees another's entries, and never reads them twice.

    The cyclic garbage collector is paused meanwhile: a fold allocates
    millions of short-lived acyclic objects, and collections triggered by them
    cost about a third of the time, for nothing.
    """
    with paused_gc():
        return _fold(ledger, states, from_seq, until, progress, project)


class NewGeneration(Exception):
    """A fold met the first event of a newer generation with states folded before it."""


def generation_events(events: Iterable[Event], states: list[State]) -> Iterator[Event]:
    """``events`` without the generation markers (``ledger.compacted``/``salvaged``), which only
    advance the watermarks. A marker reached by a state folded from the generation
    before it raises :class:`NewGeneration`: that state holds events the new
    generation replaced (format.md §12), and must be folded afresh."""
    for ev in events:
        if ev.kind not in MARKERS:
            yield ev
            continue
        seq = ev.seq
        for st in states:
            if 0 < st.seq < seq:
                raise NewGeneration(seq)
        for st in states:
            if st.seq < seq:  # `<=` is an equivalent mutant: it assigns the value it has
                st.seq = seq


def project_events(events: Iterable[Event], states: list[State], project: str) -> Iterator[Event]:
    """The events of ``project`` among ``events``; the others only advance watermarks."""
    for ev in events:
        if is_project_event(ev, project):
            yield ev
            continue
        seq = ev.seq
        for st in states:
            if st.seq < seq:  # `<=` is an equivalent mutant: it assigns the same value
                st.seq = seq


def _fold(
    ledger: LogBackend,
    states: list[State],
    from_seq: int,
    until: int | None,
    progress: Progress | None,
    project: str | None,
) -> int:
    n = 0
    applies = [st.apply for st in states]
    step = 1024  # progress granularity
    events: Iterable[Event] = generation_events(ledger.read(from_seq, until), states)
    if project is not None:
        events = project_events(events, states, project)
    if len(applies) == 1:
        (apply,) = applies
        for ev in events:
            apply(ev)
            n += 1
            if progress is not None and not n % step:
                progress(step)
    else:
        for ev in events:
            for apply in applies:
                apply(ev)
            n += 1
            if progress is not None and not n % step:
                progress(step)
    if progress is not None and n % step:
        progress(n % step)
    return n
