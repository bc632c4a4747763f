"""Tasks as a fold: the registry, each task's working record, and a fail-closed quarantine.

Every task event is ``task.<what>`` with the task id as the event key. The
state machine (docs/tasks.md) is one pure function, :func:`violation`: the
fold asks it before applying an event, and the writers in ``task_api.py`` ask
it before appending one, so what a writer refuses and what the fold
quarantines can never disagree.

An event that breaks the machine (one for an unknown task, anything after a
terminal state, a duplicate create, malformed data) is not applied: the task
is marked quarantined with the offending seq and reason, and its state is
frozen -- later events for it are *held* (kept in its history, not applied)
-- until a ``task.released`` event. Other tasks are unaffected.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from typing import Any

import attrs
import cbor2

from eventstore import Event

NAME = "tasks"
VERSION = 3  # 2: a note's "resolves" is checked; 3: the registry is read apart from details
_LEN = struct.Struct("<I")

PREFIX = "task."
CREATED = "task.created"
STARTED = "task.started"
NOTE = "task.note"
PROGRESS = "task.progress"
CANCEL_REQUESTED = "task.cancel_requested"
CANCELLED = "task.cancelled"
COMPLETED = "task.completed"
FAILED = "task.failed"
RELEASED = "task.released"
KINDS = (CREATED, STARTED, NOTE, PROGRESS, CANCEL_REQUESTED, CANCELLED, COMPLETED, FAILED,
         RELEASED)

NOTE_TYPES = ("decision", "question", "intention", "evidence", "file_read", "file_edit",
              "tool_call", "other")
FILE_NOTES = ("file_read", "file_edit")
KEPT_NOTES = ("decision", "question", "intention", "evidence")  # their data is in the record

#: ``unknown`` is a registry entry for an id that was never created: it exists only to
#: carry the quarantine of an event that named it.
STATES = ("unknown", "created", "running", "completed", "failed", "cancelled")
LIVE = frozenset({"created", "running"})
TERMINAL = frozenset({"completed", "failed", "cancelled"})

ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
MAX_TITLE = 1000
MAX_LABEL = 100
MAX_LABELS = 64
MAX_REASON = 4000

# history status of an event, per task
APPLIED, OFFENDING, HELD = 0, 1, 2
STATUS_NAMES = ("applied", "quarantined", "held")


def valid_id(task_id: object) -> bool:
    return type(task_id) is str and ID_RE.fullmatch(task_id) is not None


def _is_short_str(v: object, limit: int) -> bool:
    return type(v) is str and 0 < len(v) <= limit


def data_error(kind: str, data: Any) -> str | None:
    """Why ``data`` is not a well-formed payload for ``kind`` (None: it is)."""
    if not isinstance(data, Mapping):
        return "data is not a map"
    if kind == CREATED:
        if not _is_short_str(data.get("title"), MAX_TITLE):
            return f"title must be a non-empty string of at most {MAX_TITLE} characters"
        parent = data.get("parent")
        if parent is not None and not valid_id(parent):
            return "parent is not a task id"
        labels = data.get("labels", [])
        if (not isinstance(labels, list) or len(labels) > MAX_LABELS
                or not all(_is_short_str(x, MAX_LABEL) for x in labels)):
            return f"labels must be at most {MAX_LABELS} non-empty strings of at most " \
                   f"{MAX_LABEL} characters"
    elif kind == NOTE:
        t = data.get("type")
        if t not in NOTE_TYPES:
            return f"note type must be one of {', '.join(NOTE_TYPES)}"
        if t in FILE_NOTES and not note_paths(data.get("data")):
            return f"a {t} note needs data with \"path\" (a string) or \"paths\" (strings)"
        body = data.get("data")
        if isinstance(body, Mapping) and "resolves" in body \
                and resolved_seqs(body["resolves"]) is None:
            return "\"resolves\" must be a seq (a positive integer) or a list of seqs"
    elif kind == PROGRESS:
        msg, frac = data.get("message"), data.get("fraction")
        if msg is not None and not _is_short_str(msg, MAX_REASON):
            return "progress message must be a non-empty string"
        if frac is not None and not (type(frac) in (int, float) and 0 <= frac <= 1):
            return "progress fraction must be a number from 0 to 1"
    elif kind == FAILED:
        if not _is_short_str(data.get("reason"), MAX_REASON):
            return f"a failure needs a reason (a non-empty string of at most {MAX_REASON})"
    elif kind in (CANCEL_REQUESTED, CANCELLED, RELEASED):
        r = data.get("reason")
        if r is not None and not _is_short_str(r, MAX_REASON):
            return "reason must be a non-empty string"
    return None


def resolved_seqs(value: Any) -> set[int] | None:
    """The seqs a note's ``resolves`` names, or None when it is not a seq or a list of them."""
    items = value if isinstance(value, list) else [value]
    if not items or not all(type(v) is int and v > 0 for v in items):
        return None
    return set(items)


def note_paths(data: Any) -> list[str]:
    """The file paths a file_read / file_edit note names (``path`` or ``paths``)."""
    if not isinstance(data, Mapping):
        return []
    p = data.get("path")
    if isinstance(p, str) and _is_short_str(p, 4096):
        return [p]
    ps = data.get("paths")
    if isinstance(ps, list) and ps and all(_is_short_str(x, 4096) for x in ps):
        return list(ps)
    return []


def violation(task: TaskRecord | None, kind: str, data: Any) -> str | None:
    """Why applying ``kind`` to ``task`` (None: never seen) breaks the state machine.

    None when the event applies. The one statement of the rules (docs/tasks.md).
    """
    if kind not in KINDS:
        return f"unknown task event {kind}"
    bad = data_error(kind, data)
    if task is not None and task.quarantine is not None:
        if kind == RELEASED and bad is None:
            return None
        return "the task is quarantined"
    state = "unknown" if task is None else task.state
    if kind != CREATED and state == "unknown":
        return "unknown task"
    if kind == RELEASED:
        return "the task is not quarantined"
    if bad is not None:
        return f"malformed {kind}: {bad}"
    if kind == CREATED:
        return None if state == "unknown" else "duplicate create"
    if state in TERMINAL:
        return f"the task is already {state}"
    if kind == STARTED:
        return None if state == "created" else "the task is already running"
    if kind in (COMPLETED, FAILED):
        return None if state == "running" else "the task was never started"
    return None  # note, progress, cancel_requested, cancelled: any live state


@attrs.define(slots=True)
class TaskRecord:
    """One task's registry row as the fold keeps it (mutable inside the fold only)."""

    id: str
    state: str = "unknown"
    title: str = ""
    parent: str | None = None
    labels: list[str] = attrs.Factory(list)
    created_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    updated_at: float | None = None
    last_seq: int = 0
    notes: dict[str, int] = attrs.Factory(dict)
    progress: dict[str, Any] | None = None
    cancel_requested: bool = False
    reason: str | None = None
    result: Any = None
    quarantine: dict[str, Any] | None = None
    releases: int = 0
    n_events: int = 0  # every event naming the task, offending and held ones too
    n_held: int = 0

    def to_plain(self) -> list[Any]:
        return [getattr(self, name) for name in _FIELDS]


@attrs.define(slots=True)
class TaskDetail:
    """What only ``task show`` and ``task history`` need, kept apart from the registry.

    ``events`` holds ``[seq, status]`` of every event naming the task (the
    history reads their bodies from the log); ``kept`` the decision, question,
    intention and evidence notes as ``{"seq", "at", "data"}`` (questions gain
    ``resolved_by``); ``files`` the paths of file notes with counts.
    """

    events: list[list[int]] = attrs.Factory(list)
    kept: dict[str, list[dict[str, Any]]] = attrs.Factory(dict)
    files: dict[str, dict[str, int]] = attrs.Factory(dict)


_FIELDS = tuple(f.name for f in attrs.fields(TaskRecord))


class TaskState:
    """Fold state of the tasks view; ``apply`` is idempotent below ``seq``.

    A checkpoint decodes every registry row but leaves each task's detail as
    its own CBOR bytes until it is asked for (or an event touches it): a cold
    ``task list`` never pays for ten thousand histories, and a checkpoint
    re-encodes only the details events changed since the last one.
    """

    def __init__(self) -> None:
        self.seq = 0
        self.tasks: dict[str, TaskRecord] = {}
        self._details: dict[str, TaskDetail] = {}  # decoded (to read, or changed)
        self._raw: dict[str, bytes] = {}  # details' bytes encoded by this process
        # details' bytes as a checkpoint holds them: one blob, and (offset, length) per task
        self._blob = b""
        self._spans: dict[str, tuple[int, int]] = {}
        self._dirty: set[str] = set()  # details changed since their bytes were made
        self.skipped_bad = 0  # task events whose key is not a task id

    def detail(self, tid: str) -> TaskDetail:
        d = self._details.get(tid)
        if d is None:
            raw = self._raw_of(tid)
            d = TaskDetail() if raw is None else TaskDetail(*cbor2.loads(raw))
            self._details[tid] = d
        return d

    def apply(self, event: Event) -> None:
        if event.seq <= self.seq:
            return
        self.seq = event.seq
        kind = event.kind
        if not kind.startswith(PREFIX):
            return
        tid = event.key
        if not valid_id(tid):
            self.skipped_bad += 1
            return
        assert isinstance(tid, str)
        task = self.tasks.get(tid)
        data = event.data
        why = violation(task, kind, data)
        if task is None:
            task = self.tasks[tid] = TaskRecord(tid)
        detail = self.detail(tid)
        self._dirty.add(tid)
        task.n_events += 1
        if why is not None:
            if task.quarantine is not None:
                detail.events.append([event.seq, HELD])
                task.n_held += 1
            else:
                task.quarantine = {"seq": event.seq, "kind": kind, "reason": why,
                                   "at": event.at}
                detail.events.append([event.seq, OFFENDING])
            return
        detail.events.append([event.seq, APPLIED])
        task.last_seq = event.seq
        task.updated_at = event.at
        _APPLY[kind](task, detail, data, event)

    def _raw_of(self, tid: str) -> bytes | None:
        raw = self._raw.get(tid)
        if raw is None:
            span = self._spans.get(tid)
            if span is not None:
                raw = self._blob[span[0] : span[0] + span[1]]
        return raw

    def to_bytes(self) -> bytes:
        """u32 length, CBOR of the registry (rows, and each detail's length), then every
        task's detail bytes back to back: loading decodes the registry only."""
        for tid in self._dirty:  # (the bytes of the others are still exact)
            d = self._details[tid]
            self._raw[tid] = cbor2.dumps([d.events, d.kept, d.files])
        self._dirty.clear()
        parts = []
        for tid in self.tasks:
            raw = self._raw_of(tid)
            assert raw is not None  # every task folded has a detail, encoded above or loaded
            parts.append(raw)
        head = cbor2.dumps({
            "seq": self.seq,
            "skipped_bad": self.skipped_bad,
            "fields": list(_FIELDS),
            "tasks": [t.to_plain() for t in self.tasks.values()],
            "detail_bytes": [len(p) for p in parts],
        })
        return b"".join([_LEN.pack(len(head)), head, *parts])

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> TaskState:
        view = memoryview(data)
        (n,) = _LEN.unpack_from(view, 0)
        obj = cbor2.loads(view[4 : 4 + n])
        if obj.get("fields") != list(_FIELDS):
            raise ValueError("task checkpoint has another record layout")
        st = cls()
        st.seq = int(obj["seq"])
        st.skipped_bad = int(obj["skipped_bad"])
        new = TaskRecord
        st.tasks = {row[0]: new(*row) for row in obj["tasks"]}
        lengths = obj["detail_bytes"]
        st._blob = bytes(view[4 + n :])  # a copy: a mapped checkpoint may not outlive us
        if len(lengths) != len(st.tasks) or sum(lengths) != len(st._blob):
            raise ValueError("task checkpoint details do not match its tasks")
        off = 0
        spans = st._spans
        for tid, size in zip(st.tasks, lengths, strict=True):
            spans[tid] = (off, size)
            off += size
        return st

    def snapshot(self) -> dict[str, Any]:
        """A plain, comparable picture (tests, replay reports)."""
        by_state: dict[str, int] = {}
        for t in self.tasks.values():
            by_state[t.state] = by_state.get(t.state, 0) + 1
        return {
            "seq": self.seq,
            "tasks": len(self.tasks),
            "by_state": dict(sorted(by_state.items())),
            "quarantined": sum(1 for t in self.tasks.values() if t.quarantine is not None),
            "skipped_bad": self.skipped_bad,
        }


def _created(t: TaskRecord, _x: TaskDetail, d: Mapping[str, Any], e: Event) -> None:
    t.state = "created"
    t.title = d["title"]
    t.parent = d.get("parent")
    t.labels = list(d.get("labels", []))
    t.created_at = e.at


def _started(t: TaskRecord, _x: TaskDetail, d: Mapping[str, Any], e: Event) -> None:
    t.state = "running"
    t.started_at = e.at


def _note(t: TaskRecord, x: TaskDetail, d: Mapping[str, Any], e: Event) -> None:
    typ = d["type"]
    t.notes[typ] = t.notes.get(typ, 0) + 1
    body = d.get("data")
    if typ in KEPT_NOTES:
        x.kept.setdefault(typ, []).append({"seq": e.seq, "at": e.at, "data": body})
    elif typ in FILE_NOTES:
        col = "read" if typ == "file_read" else "edit"
        for p in note_paths(body):
            f = x.files.setdefault(p, {"read": 0, "edit": 0, "last_seq": 0})
            f[col] += 1
            f["last_seq"] = e.seq
    wanted = resolved_seqs(body["resolves"]) if isinstance(body, Mapping) and \
        "resolves" in body else None
    if wanted:  # a note may close earlier questions (by their seqs)
        for q in x.kept.get("question", ()):
            if q["seq"] in wanted and "resolved_by" not in q:
                q["resolved_by"] = e.seq


def _progress(t: TaskRecord, _x: TaskDetail, d: Mapping[str, Any], e: Event) -> None:
    t.progress = {"message": d.get("message"), "fraction": d.get("fraction"), "at": e.at}


def _cancel_requested(t: TaskRecord, _x: TaskDetail, d: Mapping[str, Any], e: Event) -> None:
    t.cancel_requested = True
    if d.get("reason") is not None:
        t.reason = d["reason"]


def _ended(state: str) -> Any:
    def apply(t: TaskRecord, _x: TaskDetail, d: Mapping[str, Any], e: Event) -> None:
        t.state = state
        t.ended_at = e.at
        if d.get("reason") is not None:
            t.reason = d["reason"]
        if state == "completed":
            t.result = d.get("result")
    return apply


def _released(t: TaskRecord, _x: TaskDetail, d: Mapping[str, Any], e: Event) -> None:
    t.quarantine = None
    t.releases += 1


_APPLY = {
    CREATED: _created,
    STARTED: _started,
    NOTE: _note,
    PROGRESS: _progress,
    CANCEL_REQUESTED: _cancel_requested,
    CANCELLED: _ended("cancelled"),
    COMPLETED: _ended("completed"),
    FAILED: _ended("failed"),
    RELEASED: _released,
}
