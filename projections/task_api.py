"""``store.tasks`` and ``store.agent``: writers that refuse what the fold would quarantine.

A write decides on the task as the view holds it at the log's head, then
appends with ``expected_head`` set to that head: the log checks it under its
writer lock, so if another process appended meanwhile the write is decided
again on the new state. Two processes racing to complete and cancel one task
therefore cannot both succeed -- the loser sees the winner's terminal state
and is refused, with nothing appended.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import cbor2

from eventstore import Event, HeadMismatchError, LedgerError, LogBackend
from eventstore.event import MAX_DATA_DEPTH

from . import handoffs as H
from . import tasks as T
from .ids import new_id

if TYPE_CHECKING:
    from .store import ContextStore

MAX_ATTEMPTS = 100


class TaskError(LedgerError):
    """A task write was refused; nothing was appended."""


class UnknownTaskError(TaskError):
    def __init__(self, task_id: str, what: str = "task") -> None:
        self.task_id = task_id
        super().__init__(f"no {what} with id {task_id}")


class TaskExistsError(TaskError):
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"task {task_id} already exists")


class TaskStateError(TaskError):
    """The transition is not allowed from the task's state (docs/tasks.md)."""

    def __init__(self, task_id: str, action: str, why: str) -> None:
        self.task_id, self.action, self.why = task_id, action, why
        hint = f" (release it first: ctxledger task release {task_id})" \
            if why == "the task is quarantined" else ""
        super().__init__(f"cannot {action} task {task_id}: {why}{hint}")


class HandoffError(LedgerError):
    """A handoff write was refused; nothing was appended."""


# --- what readers get ----------------------------------------------------------------


@attrs.frozen
class TaskInfo:
    """A task in the registry: its state, times, counts and quarantine."""

    id: str
    title: str
    state: str
    parent: str | None
    labels: tuple[str, ...]
    quarantined: bool
    quarantine: dict[str, Any] | None
    cancel_requested: bool
    created_at: float | None
    started_at: float | None
    ended_at: float | None
    updated_at: float | None
    last_seq: int
    events: int
    held: int
    notes: dict[str, int]
    progress: dict[str, Any] | None
    reason: str | None
    result: Any
    releases: int

    @classmethod
    def of(cls, t: T.TaskRecord) -> TaskInfo:
        return cls(
            t.id, t.title, t.state, t.parent, tuple(t.labels), t.quarantine is not None,
            dict(t.quarantine) if t.quarantine is not None else None, t.cancel_requested,
            t.created_at, t.started_at, t.ended_at, t.updated_at, t.last_seq, t.n_events,
            t.n_held, dict(t.notes),
            dict(t.progress) if t.progress is not None else None, t.reason, _copy(t.result),
            t.releases,
        )

    def to_json(self) -> dict[str, Any]:
        d = {name: getattr(self, name) for name in _INFO_FIELDS}  # shallow: values are plain
        d["labels"] = list(self.labels)
        return d


_INFO_FIELDS = tuple(f.name for f in attrs.fields(TaskInfo))


@attrs.frozen
class WorkingRecord:
    """What a task's notes add up to: open questions, decisions, intentions, evidence,
    and the files it read and edited (with counts)."""

    id: str
    open_questions: tuple[dict[str, Any], ...]
    questions: tuple[dict[str, Any], ...]
    decisions: tuple[dict[str, Any], ...]
    intentions: tuple[dict[str, Any], ...]
    evidence: tuple[dict[str, Any], ...]
    files: dict[str, dict[str, int]]

    @classmethod
    def of(cls, task_id: str, d: T.TaskDetail) -> WorkingRecord:
        def kept(typ: str) -> tuple[dict[str, Any], ...]:
            return tuple({**n, "data": _copy(n["data"])} for n in d.kept.get(typ, ()))

        qs = kept("question")
        return cls(task_id, tuple(q for q in qs if "resolved_by" not in q), qs,
                   kept("decision"), kept("intention"), kept("evidence"),
                   {p: dict(f) for p, f in sorted(d.files.items())})

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in attrs.asdict(self).items()}


@attrs.frozen
class TaskEvent:
    """One event of a task's history; ``status``: applied, quarantined (it broke the
    state machine) or held (it came while the task was quarantined)."""

    seq: int
    at: float
    kind: str
    data: Any
    status: str

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class Handoff:
    """A bootstrap or handoff record."""

    id: str
    kind: str
    task_id: str | None
    seq: int
    at: float
    payload: Any
    superseded_by: str | None
    resume_count: int
    consumed: tuple[dict[str, Any], ...]

    @classmethod
    def of(cls, r: H.HandoffRecord) -> Handoff:
        return cls(r.id, r.kind, r.task_id, r.seq, r.at, _copy(r.payload), r.superseded_by,
                   len(r.consumed),
                   tuple({"seq": s, "at": a, "by": b} for s, a, b in r.consumed))

    def to_json(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d["consumed"] = list(self.consumed)
        return d


# --- shared ---------------------------------------------------------------------------


def _copy(value: Any) -> Any:
    """A private copy of a JSON value the view holds: what a reader changes stays theirs."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    return cbor2.loads(cbor2.dumps(value))


def plain(value: Any) -> Any:
    """``value`` exactly as the log will give it back (lists, not tuples; a private copy).

    Only JSON values are taken (maps with string keys, lists, strings, finite
    numbers, booleans, null): what a note, result or payload holds must print
    as JSON and mean the same to every reader. The fold keeps what it is
    handed, so a writer folds this copy: the caller changing its own dict
    afterwards changes nothing, and the view folded from memory equals the one
    refolded from the log.
    """
    stack = [(value, 2)]  # a payload sits at level 2 of its event's data
    while stack:
        v, depth = stack.pop()
        if v is None or type(v) in (str, bool, int):
            continue
        if type(v) is float:
            if not math.isfinite(v):
                raise ValueError("NaN and infinities are not JSON")
            continue
        if depth > MAX_DATA_DEPTH:
            raise ValueError(f"the value nests deeper than {MAX_DATA_DEPTH} levels")
        if isinstance(v, Mapping):
            if not all(type(k) is str for k in v):
                raise ValueError("JSON object keys must be strings")
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend((x, depth + 1) for x in v)
        else:
            raise ValueError(f"{type(v).__name__} is not a JSON value")
    return cbor2.loads(cbor2.dumps(value))


#: Seqs at most this far apart are read by one range read: consecutive seqs (a task's
#: events written one after another) come in one read, and nothing between two of a
#: task's events is ever read (that could be other writers' megabytes of packets).
READ_GAP = 1


def read_seqs(log: LogBackend, seqs: Iterable[int]) -> dict[int, Event]:
    """The events at ``seqs``, read through chain-checked batches (each batch once)."""
    want = sorted(set(seqs))
    got: dict[int, Event] = {}
    i = 0
    while i < len(want):
        j = i
        while j + 1 < len(want) and want[j + 1] - want[j] <= READ_GAP:
            j += 1
        lo, hi = want[i], want[j]
        wanted = set(want[i : j + 1])
        for batch in log.read_batches(lo, hi):
            for ev in batch.events:
                if ev.seq in wanted:
                    got[ev.seq] = ev
        i = j + 1
    return got


class _Writer:
    def __init__(self, store: ContextStore, name: str) -> None:
        self._store = store
        self._name = name

    def _state_now(self) -> Any:
        self._store._sync()
        return self._store.runner.state(self._name)

    def _state(self, as_of: int | float | None) -> Any:
        return self._store._state_as_of(as_of, [self._name])[0]

    def _commit(self, decide: Callable[[Any], list[Event]]) -> Any:
        """Decide on the state at the head, append only if the head has not moved; retry."""
        store = self._store
        store._check_writable()
        for _attempt in range(MAX_ATTEMPTS):
            st = self._state_now()
            events = decide(st)
            try:
                store._append(events, expected_head=st.seq)
            except HeadMismatchError:
                continue  # another writer got in first: decide again on what it wrote
            return st
        raise LedgerError(f"gave up after {MAX_ATTEMPTS} attempts: the log kept moving")


class Tasks(_Writer):
    """The task registry of one store (``store.tasks``)."""

    def __init__(self, store: ContextStore) -> None:
        super().__init__(store, T.NAME)

    # --- writing ------------------------------------------------------------------------

    def create(
        self,
        title: str,
        parent: str | None = None,
        labels: Iterable[str] = (),
        id: str | None = None,
    ) -> TaskInfo:
        """A new task in state ``created``; its id is generated unless given."""
        if isinstance(labels, str):
            raise ValueError("labels must be a list of strings, not one string")
        data: dict[str, Any] = {"title": title, "labels": list(labels)}
        if parent is not None:
            data["parent"] = parent
        _check_data(T.CREATED, data)
        if id is not None:
            _check_id(id)
        chosen = [id]

        def decide(st: T.TaskState) -> list[Event]:
            if parent is not None and _unknown(st, parent):
                raise UnknownTaskError(parent, "parent task")
            if chosen[0] is None or (id is None and chosen[0] in st.tasks):
                chosen[0] = new_id("t-", self._store.clock)
                while chosen[0] in st.tasks:
                    chosen[0] = new_id("t-", self._store.clock)
            task_id = chosen[0]
            assert task_id is not None
            why = T.violation(st.tasks.get(task_id), T.CREATED, data)
            if why == "duplicate create":
                raise TaskExistsError(task_id)
            if why is not None:
                raise TaskStateError(task_id, "create", why)
            return [Event(T.CREATED, task_id, data)]

        st = self._commit(decide)
        assert chosen[0] is not None
        return TaskInfo.of(st.tasks[chosen[0]])

    def start(self, task_id: str) -> TaskInfo:
        return self._transition(task_id, "start", T.STARTED, {})

    def note(self, task_id: str, type: str, data: Any = None) -> TaskInfo:
        """Add to the working record: ``type`` is one of ``tasks.NOTE_TYPES``."""
        return self._transition(task_id, "note", T.NOTE, {"type": type, "data": plain(data)})

    def progress(
        self, task_id: str, message: str | None = None, fraction: float | None = None
    ) -> TaskInfo:
        payload: dict[str, Any] = {}
        if message is not None:
            payload["message"] = message
        if fraction is not None:
            payload["fraction"] = fraction
        return self._transition(task_id, "report progress on", T.PROGRESS, payload)

    def cancel(self, task_id: str, reason: str | None = None, force: bool = False) -> TaskInfo:
        """Cancel: a task not started is cancelled at once; a running one is asked to
        stop (``cancel_requested``) and is cancelled when cancel is called again (its
        worker confirming) -- or at once with ``force``."""
        payload = {} if reason is None else {"reason": reason}

        def kind_for(t: T.TaskRecord | None) -> str:
            if force or t is None or t.state != "running" or t.cancel_requested:
                return T.CANCELLED
            return T.CANCEL_REQUESTED

        return self._transition(task_id, "cancel", kind_for, payload)

    def complete(self, task_id: str, result: Any = None) -> TaskInfo:
        payload = {} if result is None else {"result": plain(result)}
        return self._transition(task_id, "complete", T.COMPLETED, payload)

    def fail(self, task_id: str, reason: str) -> TaskInfo:
        return self._transition(task_id, "fail", T.FAILED, {"reason": reason})

    def release(self, task_id: str, reason: str | None = None) -> TaskInfo:
        """Lift a quarantine: the task applies events again from the next one on."""
        payload = {} if reason is None else {"reason": reason}
        return self._transition(task_id, "release", T.RELEASED, payload)

    def _transition(
        self,
        task_id: str,
        action: str,
        kind: str | Callable[[T.TaskRecord | None], str],
        data: dict[str, Any],
    ) -> TaskInfo:
        _check_id(task_id)

        def decide(st: T.TaskState) -> list[Event]:
            t = st.tasks.get(task_id)
            k = kind(t) if callable(kind) else kind
            _check_data(k, data)
            why = T.violation(t, k, data)
            if why is None:
                return [Event(k, task_id, data)]
            if t is None or (t.state == "unknown" and t.quarantine is None):
                raise UnknownTaskError(task_id)
            raise TaskStateError(task_id, action, why)

        st = self._commit(decide)
        return TaskInfo.of(st.tasks[task_id])

    # --- reading ------------------------------------------------------------------------

    def get(self, task_id: str, as_of: int | float | None = None) -> TaskInfo | None:
        _check_id(task_id)
        t = self._state(as_of).tasks.get(task_id)
        return None if t is None else TaskInfo.of(t)

    def record(self, task_id: str, as_of: int | float | None = None) -> WorkingRecord | None:
        """The task's working record (open questions, decisions, files touched, ...)."""
        _check_id(task_id)
        st = self._state(as_of)
        return None if task_id not in st.tasks else WorkingRecord.of(task_id, st.detail(task_id))

    def show(
        self, task_id: str, as_of: int | float | None = None
    ) -> tuple[TaskInfo, WorkingRecord] | None:
        """:meth:`get` and :meth:`record` from one state of the view (one head)."""
        _check_id(task_id)
        st = self._state(as_of)
        t = st.tasks.get(task_id)
        if t is None:
            return None
        return TaskInfo.of(t), WorkingRecord.of(task_id, st.detail(task_id))

    def list(
        self,
        state: str | None = None,
        label: str | None = None,
        parent: str | None = None,
        as_of: int | float | None = None,
    ) -> builtins.list[TaskInfo]:
        """Tasks in creation order; ``state`` may also be ``quarantined``."""
        if parent is not None:
            _check_id(parent)
        if state is not None and state not in (*T.STATES, "quarantined"):
            raise ValueError(f"unknown state {state!r} (one of {', '.join(T.STATES)}, "
                             "quarantined)")
        out = []
        for t in self._state(as_of).tasks.values():
            if state == "quarantined":
                if t.quarantine is None:
                    continue
            elif state is not None and t.state != state:
                continue
            if label is not None and label not in t.labels:
                continue
            if parent is not None and t.parent != parent:
                continue
            out.append(TaskInfo.of(t))
        return out

    def history(self, task_id: str, as_of: int | float | None = None) -> builtins.list[TaskEvent]:
        """Every event naming the task, in order, read (chain-checked) from the log."""
        _check_id(task_id)
        st = self._state(as_of)
        if task_id not in st.tasks:
            raise UnknownTaskError(task_id)
        events = st.detail(task_id).events
        got = read_seqs(self._store.ledger, (s for s, _st in events))
        out = []
        for s, status in events:
            ev = got.get(s)
            if ev is None:
                raise LedgerError(f"task {task_id}: seq {s} is not in the log")
            out.append(TaskEvent(s, ev.at, ev.kind, ev.data, T.STATUS_NAMES[status]))
        return out

    def counts(self) -> dict[str, int]:
        """How many tasks are in each state, and how many are quarantined."""
        st = self._state(None)
        c = {s: 0 for s in T.STATES}
        q = 0
        for t in st.tasks.values():
            c[t.state] += 1
            q += t.quarantine is not None
        c["quarantined"] = q
        return c


class Agent(_Writer):
    """Bootstraps and handoffs between agent runs (``store.agent``)."""

    def __init__(self, store: ContextStore) -> None:
        super().__init__(store, H.NAME)

    def bootstrap(self, payload: Mapping[str, Any], task_id: str | None = None) -> Handoff:
        """Record the context an agent run started from."""
        return self._record(H.BOOTSTRAP, payload, task_id)

    def handoff(self, payload: Mapping[str, Any], task_id: str | None = None) -> Handoff:
        """Record what the next run needs; supersedes the task's (or store's) last one."""
        return self._record(H.HANDOFF, payload, task_id)

    def _record(self, kind: str, payload: Mapping[str, Any], task_id: str | None) -> Handoff:
        data: dict[str, Any] = {"payload": plain(payload)}
        if task_id is not None:
            _check_id(task_id)
            data["task_id"] = task_id
        bad = H.payload_error(kind, data)
        if bad is not None:
            raise ValueError(bad)
        hid = [""]

        def decide(st: H.HandoffState) -> list[Event]:
            if task_id is not None:  # the task must exist (the registry, at this head)
                tasks = self._store.runner.state(T.NAME)
                assert isinstance(tasks, T.TaskState)
                if _unknown(tasks, task_id):
                    raise UnknownTaskError(task_id)
            hid[0] = new_id("h-", self._store.clock)
            while hid[0] in st.records:
                hid[0] = new_id("h-", self._store.clock)
            return [Event(kind, hid[0], data)]

        st = self._commit(decide)
        return Handoff.of(st.records[hid[0]])

    def consume_handoff(self, handoff_id: str, by: str | None = None) -> Handoff:
        """Mark a handoff taken up by a new run (one resume). Only the current one can be:
        a superseded handoff is refused, naming the one that replaced it."""
        _check_id(handoff_id)
        data = {} if by is None else {"by": by}
        bad = H.payload_error(H.CONSUMED, data)
        if bad is not None:
            raise ValueError(bad)

        def decide(st: H.HandoffState) -> list[Event]:
            r = st.records.get(handoff_id)
            if r is None or r.kind != "handoff":
                raise HandoffError(f"no handoff with id {handoff_id}")
            if r.superseded_by is not None:
                raise HandoffError(f"handoff {handoff_id} was superseded by {r.superseded_by}; "
                                   "consume that one")
            return [Event(H.CONSUMED, handoff_id, data)]

        st = self._commit(decide)
        return Handoff.of(st.records[handoff_id])

    def latest_bootstrap(
        self, task_id: str | None = None, as_of: int | float | None = None
    ) -> Handoff | None:
        _check_optional_id(task_id)
        r = self._state(as_of).current("bootstrap", task_id)
        return None if r is None else Handoff.of(r)

    def latest_handoff(
        self, task_id: str | None = None, as_of: int | float | None = None
    ) -> Handoff | None:
        _check_optional_id(task_id)
        r = self._state(as_of).current("handoff", task_id)
        return None if r is None else Handoff.of(r)

    def history(
        self, task_id: str | None = None, kind: str | None = None,
        as_of: int | float | None = None,
    ) -> builtins.list[Handoff]:
        """Every bootstrap and handoff (of ``task_id``, of ``kind``), oldest first."""
        _check_optional_id(task_id)
        if kind is not None and kind not in ("bootstrap", "handoff"):
            raise ValueError("kind must be bootstrap or handoff")
        return [Handoff.of(r) for r in self._state(as_of).records.values()
                if (task_id is None or r.task_id == task_id) and (kind is None or r.kind == kind)]

    def get(self, handoff_id: str, as_of: int | float | None = None) -> Handoff | None:
        _check_id(handoff_id)
        r = self._state(as_of).records.get(handoff_id)
        return None if r is None else Handoff.of(r)


def _check_id(task_id: object) -> None:
    if not T.valid_id(task_id):
        shown = repr(task_id) if len(repr(task_id)) <= 60 else repr(task_id)[:57] + "..."
        raise ValueError(f"{shown} is not an id (1-128 of A-Z a-z 0-9 . _ : -, "
                         "starting with a letter or digit)")


def _unknown(st: T.TaskState, task_id: str) -> bool:
    """Never created (an id only a stray event named has a registry entry, ``unknown``)."""
    t = st.tasks.get(task_id)
    return t is None or t.state == "unknown"


def _check_optional_id(task_id: object) -> None:
    if task_id is not None:
        _check_id(task_id)


def _check_data(kind: str, data: Mapping[str, Any]) -> None:
    bad = T.data_error(kind, data)
    if bad is not None:
        raise ValueError(bad)
