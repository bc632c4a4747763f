"""Agent bootstraps and handoffs as a fold: the latest of each, per task and overall.

An agent run starts from a *bootstrap* (the context it was given) and ends by
writing a *handoff* (what the next run needs). Both are events with a JSON
payload and an optional task id, keyed by their own generated id. A new
handoff (or bootstrap) for the same task -- or, without a task, for the
store as a whole -- supersedes the previous one (``superseded_by``); each
``agent.handoff_consumed`` is one resume (``resume_count``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import cbor2

from eventstore import Event

from .tasks import valid_id

NAME = "handoffs"
VERSION = 2  # 2: a consume naming a bootstrap is skipped

BOOTSTRAP = "agent.bootstrap"
HANDOFF = "agent.handoff"
CONSUMED = "agent.handoff_consumed"
KINDS = (BOOTSTRAP, HANDOFF, CONSUMED)
KIND_NAMES = {BOOTSTRAP: "bootstrap", HANDOFF: "handoff"}


@attrs.define(slots=True)
class HandoffRecord:
    """One bootstrap or handoff as the fold keeps it."""

    id: str
    kind: str  # "bootstrap" | "handoff"
    task_id: str | None
    seq: int
    at: float
    payload: Any
    superseded_by: str | None = None
    consumed: list[list[Any]] = attrs.Factory(list)  # [seq, at, by] per resume

    def to_plain(self) -> list[Any]:
        return [getattr(self, f.name) for f in attrs.fields(HandoffRecord)]


_FIELDS = tuple(f.name for f in attrs.fields(HandoffRecord))


def payload_error(kind: str, data: Any) -> str | None:
    """Why ``data`` is not a well-formed payload for ``kind`` (None: it is)."""
    if not isinstance(data, Mapping):
        return "data is not a map"
    if kind in (BOOTSTRAP, HANDOFF):
        if not isinstance(data.get("payload"), Mapping):
            return "payload must be a JSON object"
        t = data.get("task_id")
        if t is not None and not valid_id(t):
            return "task_id is not a task id"
    elif kind == CONSUMED:
        by = data.get("by")
        if by is not None and not (type(by) is str and 0 < len(by) <= 200):
            return "by must be a non-empty string"
    return None


class HandoffState:
    """Fold state of the handoffs view; ``apply`` is idempotent below ``seq``."""

    def __init__(self) -> None:
        self.seq = 0
        self.records: dict[str, HandoffRecord] = {}
        # (kind name, task id or None) -> id of the current (latest) record
        self.latest: dict[tuple[str, str | None], str] = {}
        self.skipped_bad = 0

    def apply(self, event: Event) -> None:
        if event.seq <= self.seq:
            return
        self.seq = event.seq
        kind = event.kind
        if kind not in KINDS:
            return
        hid, data = event.key, event.data
        if not valid_id(hid) or payload_error(kind, data) is not None:
            self.skipped_bad += 1
            return
        assert isinstance(hid, str)
        if kind == CONSUMED:
            rec = self.records.get(hid)
            if rec is None or rec.kind != "handoff":  # only handoffs are taken up
                self.skipped_bad += 1
                return
            rec.consumed.append([event.seq, event.at, data.get("by")])
            return
        if hid in self.records:  # ids are unique: a second record under one id is bad
            self.skipped_bad += 1
            return
        name = KIND_NAMES[kind]
        task_id = data.get("task_id")
        rec = HandoffRecord(hid, name, task_id, event.seq, event.at, data["payload"])
        self.records[hid] = rec
        prev = self.latest.get((name, task_id))
        if prev is not None:
            self.records[prev].superseded_by = hid
        self.latest[(name, task_id)] = hid
        self.latest[(name, "*")] = hid  # the latest overall ("*" is never a task id)

    def current(self, kind: str, task_id: str | None = None) -> HandoffRecord | None:
        """The latest record of ``kind`` for ``task_id``; ``None`` task: the latest overall."""
        hid = self.latest.get((kind, "*" if task_id is None else task_id))
        return None if hid is None else self.records[hid]

    def to_bytes(self) -> bytes:
        return cbor2.dumps({
            "seq": self.seq,
            "skipped_bad": self.skipped_bad,
            "fields": list(_FIELDS),
            "records": [r.to_plain() for r in self.records.values()],
            "latest": [[k, t, v] for (k, t), v in self.latest.items()],
        })

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> HandoffState:
        obj = cbor2.loads(bytes(data))
        if obj.get("fields") != list(_FIELDS):
            raise ValueError("handoff checkpoint has another record layout")
        st = cls()
        st.seq = int(obj["seq"])
        st.skipped_bad = int(obj["skipped_bad"])
        for row in obj["records"]:
            r = HandoffRecord(*row)
            st.records[r.id] = r
        st.latest = {(k, t): v for k, t, v in obj["latest"]}
        return st

    def snapshot(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "records": len(self.records),
            "consumed": sum(len(r.consumed) for r in self.records.values()),
            "skipped_bad": self.skipped_bad,
        }
