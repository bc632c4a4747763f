"""Tasks and handoffs: the state machine against an independent model, quarantine, time travel.

The model below is written from docs/tasks.md's table, not from
``projections/tasks.py``: a transition allowed by one and refused by the
other fails the stateful test.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from eventstore import Event, Ledger, LogBackend, MemoryLog
from projections import ContextStore
from projections.config import StoreConfig
from projections.ids import new_id
from projections.task_api import (
    HandoffError,
    TaskError,
    TaskExistsError,
    TaskStateError,
    UnknownTaskError,
)
from projections.tasks import NOTE_TYPES

CONFIG = StoreConfig(sync="none", checkpoint_every_events=7, checkpoint_every_seconds=1e9)

# --- the model: docs/tasks.md's table, restated --------------------------------------------
#: kind -> the states it may be applied in ("unknown": the id was never created)
ALLOWED = {
    "task.created": {"unknown"},
    "task.started": {"created"},
    "task.note": {"created", "running"},
    "task.progress": {"created", "running"},
    "task.cancel_requested": {"created", "running"},
    "task.cancelled": {"created", "running"},
    "task.completed": {"running"},
    "task.failed": {"running"},
    "task.released": set(),  # only ever applies to a quarantined task
}
AFTER = {"task.created": "created", "task.started": "running", "task.cancelled": "cancelled",
         "task.completed": "completed", "task.failed": "failed"}


@attrs.define
class MTask:
    state: str = "unknown"
    quarantine_seq: int | None = None
    cancel_requested: bool = False
    history: list[tuple[int, str]] = attrs.Factory(list)
    notes: dict[str, int] = attrs.Factory(dict)


def model_apply(model: dict[str, MTask], seq: int, kind: str, key: str, data: dict[str, Any],
                well_formed: bool = True) -> None:
    t = model.setdefault(key, MTask())
    if t.quarantine_seq is not None:
        if kind == "task.released":
            t.quarantine_seq = None
            t.history.append((seq, "applied"))
        else:
            t.history.append((seq, "held"))
        return
    if not well_formed or t.state not in ALLOWED[kind]:
        t.quarantine_seq = seq
        t.history.append((seq, "quarantined"))
        return
    t.history.append((seq, "applied"))
    t.state = AFTER.get(kind, t.state)
    if kind == "task.cancel_requested":
        t.cancel_requested = True
    if kind == "task.note":
        t.notes[data["type"]] = t.notes.get(data["type"], 0) + 1


def model_view(model: dict[str, MTask]) -> dict[str, Any]:
    return {k: (t.state, t.quarantine_seq, t.cancel_requested, len(t.history),
                sum(1 for _s, st in t.history if st == "held"), dict(t.notes))
            for k, t in model.items()}


def store_view(store: ContextStore, as_of: int | None = None) -> dict[str, Any]:
    return {t.id: (t.state, t.quarantine["seq"] if t.quarantine else None, t.cancel_requested,
                   t.events, t.held, t.notes)
            for t in store.tasks.list(as_of=as_of)}


def payload(kind: str, n: int) -> dict[str, Any]:
    """A well-formed payload for ``kind``."""
    if kind == "task.created":
        return {"title": f"task {n}", "labels": ["l" + str(n % 3)]}
    if kind == "task.note":
        typ = NOTE_TYPES[n % len(NOTE_TYPES)]
        return {"type": typ, "data": {"path": f"src/{n}.py"} if typ.startswith("file_") else
                {"text": f"note {n}"}}
    if kind == "task.failed":
        return {"reason": f"broke {n}"}
    if kind == "task.progress":
        return {"message": f"step {n}", "fraction": (n % 10) / 10}
    return {}


ACTIONS = ("start", "note", "progress", "cancel", "cancel_force", "complete", "fail", "release")


class TaskMachine(RuleBasedStateMachine):
    """Writers through ``store.tasks`` and foreign appends straight to the log, against
    the model; reopen, rebuild and time travel must all agree with it."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="tasks-"))
        self.log = self.make_log()
        self.store = self.open()
        self.model: dict[str, MTask] = {}
        self.ids: list[str] = []
        self.views: dict[int, dict[str, Any]] = {0: {}}  # head seq -> model view then
        self.histories: dict[int, dict[str, list[tuple[int, str]]]] = {0: {}}
        self.n = 0

    def make_log(self) -> LogBackend | None:
        return None

    def open(self) -> ContextStore:
        return ContextStore.open(self.tmp, config=CONFIG, log=self.log)

    def teardown(self) -> None:
        self.store.close()
        if self.log is not None:
            self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def head(self) -> int:
        return self.store.ledger.head

    def record(self) -> None:
        self.views[self.head()] = copy.deepcopy(model_view(self.model))
        self.histories[self.head()] = {k: list(t.history) for k, t in self.model.items()}

    def pick(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from([*self.ids, "t-nope", "other.id"]))

    @rule(given_id=st.booleans(), data=st.data())
    def create(self, given_id: bool, data: st.DataObject) -> None:
        self.n += 1
        tid = (self.pick(data) if given_id and self.ids and data.draw(st.booleans())
               else f"x{self.n}" if given_id else None)
        parent = data.draw(st.sampled_from([None, *self.ids[-2:]]))
        before = self.head()
        if parent is not None and self.model[parent].state == "unknown":
            with pytest.raises(UnknownTaskError, match="parent"):  # never created
                self.store.tasks.create(f"task {self.n}", parent=parent, id=tid)
            assert self.head() == before
            return
        exists = tid is not None and tid in self.model and self.model[tid].state != "unknown"
        if exists or (tid is not None and tid in self.model
                      and self.model[tid].quarantine_seq is not None):
            with pytest.raises((TaskExistsError, TaskStateError)):
                self.store.tasks.create(f"task {self.n}", parent=parent, id=tid)
            assert self.head() == before
            return
        info = self.store.tasks.create(f"task {self.n}", parent=parent, labels=["a"], id=tid)
        assert info.state == "created" and info.last_seq == before + 1
        if tid is not None:
            assert info.id == tid
        model_apply(self.model, info.last_seq, "task.created", info.id, {})
        if info.id not in self.ids:
            self.ids.append(info.id)
        self.record()

    @precondition(lambda self: bool(self.ids))
    @rule(action=st.sampled_from(ACTIONS), data=st.data())
    def act(self, action: str, data: st.DataObject) -> None:
        tid = self.pick(data)
        self.n += 1
        t = self.model.get(tid)
        state = "unknown" if t is None else t.state
        if action == "release":
            kind = "task.released"
            ok = t is not None and t.quarantine_seq is not None
        else:
            kind = {"start": "task.started", "note": "task.note", "progress": "task.progress",
                    "complete": "task.completed", "fail": "task.failed"}.get(action, "")
            if action.startswith("cancel"):
                kind = ("task.cancelled" if action == "cancel_force" or state != "running"
                        or (t is not None and t.cancel_requested) else "task.cancel_requested")
            ok = t is not None and t.quarantine_seq is None and state in ALLOWED[kind]
        before = self.head()
        call = {
            "start": lambda: self.store.tasks.start(tid),
            "note": lambda: self.store.tasks.note(tid, payload(kind, self.n)["type"],
                                                  payload(kind, self.n)["data"]),
            "progress": lambda: self.store.tasks.progress(tid, f"step {self.n}", 0.5),
            "cancel": lambda: self.store.tasks.cancel(tid),
            "cancel_force": lambda: self.store.tasks.cancel(tid, force=True),
            "complete": lambda: self.store.tasks.complete(tid, {"n": self.n}),
            "fail": lambda: self.store.tasks.fail(tid, "it broke"),
            "release": lambda: self.store.tasks.release(tid),
        }[action]
        if not ok:
            expected = UnknownTaskError if state == "unknown" and (
                t is None or t.quarantine_seq is None) else TaskError
            with pytest.raises(expected):
                call()
            assert self.head() == before, "a refused write appended something"
            return
        info = call()
        assert info.last_seq == before + 1
        model_apply(self.model, before + 1, kind, tid,
                    payload(kind, self.n) if kind == "task.note" else {})
        self.record()

    @rule(kind=st.sampled_from(sorted(ALLOWED)), malformed=st.booleans(), data=st.data())
    def foreign_append(self, kind: str, malformed: bool, data: st.DataObject) -> None:
        """Another tool (or an older version) writes straight to the log."""
        self.n += 1
        tid = self.pick(data)
        body = {"title": 3} if malformed and kind == "task.created" else \
            {"type": "bogus"} if malformed and kind == "task.note" else payload(kind, self.n)
        bad = malformed and kind in ("task.created", "task.note")
        r = self.store.ledger.append([Event(kind, tid, body)])
        model_apply(self.model, r.first_seq, kind, tid, body, well_formed=not bad)
        if tid not in self.ids and tid in self.model:
            self.ids.append(tid)
        self.record()

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = self.open()

    @rule()
    def rebuild(self) -> None:
        self.store.rebuild("tasks")

    @rule(data=st.data())
    def time_travel(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(sorted(self.views)))
        assert store_view(self.store, as_of=seq) == self.views[seq]
        for tid, want in self.histories[seq].items():
            got = [(e.seq, e.status) for e in self.store.tasks.history(tid, as_of=seq)]
            assert got == want

    @precondition(lambda self: bool(self.ids))
    @rule(data=st.data())
    def history(self, data: st.DataObject) -> None:
        tid = data.draw(st.sampled_from(self.ids))
        got = [(e.seq, e.status) for e in self.store.tasks.history(tid)]
        assert got == self.model[tid].history

    @invariant()
    def registry_matches_model(self) -> None:
        assert store_view(self.store) == model_view(self.model)


class MemoryTaskMachine(TaskMachine):
    def make_log(self) -> LogBackend | None:
        return MemoryLog()


_SETTINGS = settings(max_examples=25, stateful_step_count=30, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])
TestTasksOnFileLog = TaskMachine.TestCase
TestTasksOnFileLog.settings = _SETTINGS
TestTasksOnMemoryLog = MemoryTaskMachine.TestCase
TestTasksOnMemoryLog.settings = _SETTINGS


# --- quarantine from a crafted log ---------------------------------------------------------


def test_a_crafted_log_quarantines_only_the_task_it_breaks(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / ".ctxledger" / "log") as led:
        led.append([Event("task.created", "a", {"title": "A"}),
                    Event("task.created", "b", {"title": "B"}),
                    Event("task.started", "a", {}),
                    Event("task.completed", "a", {}),
                    Event("task.note", "a", {"type": "decision", "data": {}}),  # 5: after end
                    Event("task.started", "b", {}),
                    Event("task.failed", "a", {"reason": "late"}),  # 7: held
                    Event("task.note", "ghost", {"type": "other"}),  # 8: unknown task
                    Event("task.created", "b", {"title": "again"}),  # 9: duplicate create
                    Event("task.note", "b", {"type": "other"})])  # 10: held
    with ContextStore.open(tmp_path) as store:
        a, b, ghost = (store.tasks.get(i) for i in ("a", "b", "ghost"))
        assert a is not None and b is not None and ghost is not None
        assert (a.state, a.quarantine, a.held) == ("completed", {
            "seq": 5, "kind": "task.note", "reason": "the task is already completed",
            "at": a.quarantine["at"] if a.quarantine else None}, 1)
        assert b.state == "running" and b.quarantine is not None
        assert b.quarantine["seq"] == 9 and b.quarantine["reason"] == "duplicate create"
        assert ghost.state == "unknown" and ghost.quarantine["reason"] == "unknown task"  # type: ignore[index]
        assert [e.status for e in store.tasks.history("a")] == [
            "applied", "applied", "applied", "quarantined", "held"]
        # frozen: writers refuse everything but release, and append nothing
        head = store.ledger.head
        with pytest.raises(TaskStateError, match="quarantined.*task release b"):
            store.tasks.complete("b")
        assert store.ledger.head == head
        store.tasks.release("b", reason="checked by hand")
        assert store.tasks.complete("b").state == "completed"
        assert store.tasks.get("b").releases == 1  # type: ignore[union-attr]
        assert [t.id for t in store.tasks.list(state="quarantined")] == ["a", "ghost"]


def test_registry_and_history_survive_rebuild_and_reopen(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path, config=CONFIG) as store:
        ids = [store.tasks.create(f"t{i}", labels=[f"l{i % 2}"]).id for i in range(6)]
        for i, tid in enumerate(ids):
            store.tasks.start(tid)
            store.tasks.note(tid, "file_edit", {"paths": ["a.py", f"b{i}.py"]})
            if i % 3 == 0:
                store.tasks.complete(tid)
        store.ledger.append([Event("task.completed", ids[1], {})])  # foreign, valid
        store.ledger.append([Event("task.started", ids[0], {})])  # foreign, breaks
        before = [t.to_json() for t in store.tasks.list()]
        hist = [e.to_json() for e in store.tasks.history(ids[0])]
        rec = store.tasks.record(ids[0]).to_json()  # type: ignore[union-attr]
        store.rebuild()
        assert [t.to_json() for t in store.tasks.list()] == before
        assert [e.to_json() for e in store.tasks.history(ids[0])] == hist
    with ContextStore.open(tmp_path, config=CONFIG) as store:
        assert store.runner.view("tasks").loaded_from == "primary"
        assert [t.to_json() for t in store.tasks.list()] == before
        assert store.tasks.record(ids[0]).to_json() == rec  # type: ignore[union-attr]
        assert [t.id for t in store.tasks.list(label="l1")] == ids[1::2]


def test_working_record(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path, config=CONFIG) as store:
        tid = store.tasks.create("auth gap", id="auth-1").id
        store.tasks.start(tid)
        q1 = store.tasks.note(tid, "question", {"text": "which token?"}).last_seq
        q2 = store.tasks.note(tid, "question", {"text": "retry?"}).last_seq
        store.tasks.note(tid, "decision", {"text": "blake3", "resolves": q1})
        store.tasks.note(tid, "intention", {"text": "write the test"})
        store.tasks.note(tid, "evidence", {"text": "trace", "resolves": [q2, 999]})
        store.tasks.note(tid, "file_read", {"path": "src/auth.rs"})
        store.tasks.note(tid, "file_edit", {"paths": ["src/auth.rs", "tests/auth.rs"]})
        store.tasks.note(tid, "tool_call", {"tool": "grep", "resolves": q1})  # already closed
        rec = store.tasks.record(tid)
        assert rec is not None
        assert rec.open_questions == ()
        assert [q["resolved_by"] for q in rec.questions] == [q1 + 2, q1 + 4]
        assert [d["data"]["text"] for d in rec.decisions] == ["blake3"]
        assert rec.files == {"src/auth.rs": {"read": 1, "edit": 1, "last_seq": q1 + 6},
                             "tests/auth.rs": {"read": 0, "edit": 1, "last_seq": q1 + 6}}
        info = store.tasks.get(tid)
        assert info is not None and info.notes == {
            "question": 2, "decision": 1, "intention": 1, "evidence": 1, "file_read": 1,
            "file_edit": 1, "tool_call": 1}


def test_caller_changing_its_dict_afterwards_changes_nothing(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path, config=CONFIG) as store:
        tid = store.tasks.create("t").id
        d: dict[str, Any] = {"text": "x", "list": [1]}
        store.tasks.note(tid, "decision", d)
        d["text"] = "changed"
        d["list"].append(2)
        assert store.tasks.record(tid).decisions[0]["data"] == {  # type: ignore[union-attr]
            "text": "x", "list": [1]}


def test_cancel_asks_a_running_task_and_confirms(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path, config=CONFIG) as store:
        a = store.tasks.create("not started").id
        assert store.tasks.cancel(a).state == "cancelled"  # nothing running: at once
        b = store.tasks.create("running").id
        store.tasks.start(b)
        asked = store.tasks.cancel(b, reason="user stop")
        assert (asked.state, asked.cancel_requested, asked.reason) == ("running", True, "user stop")
        assert store.tasks.cancel(b).state == "cancelled"  # the worker confirms
        c = store.tasks.create("finishes anyway").id
        store.tasks.start(c)
        store.tasks.cancel(c)
        assert store.tasks.complete(c).state == "completed"
        d = store.tasks.create("forced").id
        store.tasks.start(d)
        assert store.tasks.cancel(d, force=True).state == "cancelled"


@pytest.mark.parametrize("call", [
    lambda s: s.tasks.create(""),
    lambda s: s.tasks.create("x" * 1001),
    lambda s: s.tasks.create("t", labels=[""]),
    lambda s: s.tasks.create("t", id="bad id"),
    lambda s: s.tasks.create("t", id="-lead"),
    lambda s: s.tasks.note("known", "bogus", {}),
    lambda s: s.tasks.note("known", "file_read", {"path": ""}),
    lambda s: s.tasks.progress("known", fraction=1.5),
    lambda s: s.tasks.fail("known", ""),
    lambda s: s.tasks.note("known", "other", {"x": {1, 2}}),  # a set is not storable
    lambda s: s.tasks.list(state="bogus"),
    lambda s: s.agent.handoff([1, 2]),  # not an object
])
def test_bad_input_is_a_value_error_and_writes_nothing(tmp_path: Path, call: Any) -> None:
    with ContextStore.open(tmp_path, config=CONFIG) as store:
        store.tasks.create("known", id="known")
        head = store.ledger.head
        with pytest.raises(ValueError):
            call(store)
        assert store.ledger.head == head


def test_unknown_parent_and_generated_ids(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path, config=CONFIG) as store:
        with pytest.raises(UnknownTaskError, match="parent"):
            store.tasks.create("child", parent="nope")
        ids = [store.tasks.create(f"t{i}").id for i in range(50)]
        assert ids == sorted(ids) and len(set(ids)) == 50
        assert all(i.startswith("t-") and len(i) == 28 for i in ids)
        kid = store.tasks.create("child", parent=ids[0])
        assert [t.id for t in store.tasks.list(parent=ids[0])] == [kid.id]


def test_ids_are_strictly_increasing_within_a_millisecond_and_differ_after_fork() -> None:
    frozen = iter([1.0] * 1000).__next__
    ids = [new_id("t-", frozen) for _ in range(1000)]
    assert ids == sorted(ids) and len(set(ids)) == 1000
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id must not be the parent's next one
        os.write(w, new_id("t-", lambda: 1.0).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child_id = os.read(r, 100).decode()
    assert child_id != new_id("t-", lambda: 1.0)


# --- handoffs --------------------------------------------------------------------------------


def test_handoffs_supersede_per_task_and_count_resumes(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path, config=CONFIG) as store:
        t1 = store.tasks.create("one").id
        t2 = store.tasks.create("two").id
        b = store.agent.bootstrap({"goal": "g"}, task_id=t1)
        h1 = store.agent.handoff({"next": 1}, task_id=t1)
        g = store.agent.handoff({"next": "global"})
        h2 = store.agent.handoff({"next": 2}, task_id=t1)
        other = store.agent.handoff({"next": "t2"}, task_id=t2)
        assert store.agent.get(h1.id).superseded_by == h2.id  # type: ignore[union-attr]
        assert store.agent.get(g.id).superseded_by is None  # type: ignore[union-attr]
        assert store.agent.latest_handoff(t1).id == h2.id  # type: ignore[union-attr]
        assert store.agent.latest_handoff().id == other.id  # type: ignore[union-attr]
        assert store.agent.latest_bootstrap(t1).id == b.id  # type: ignore[union-attr]
        assert store.agent.latest_bootstrap(t2) is None
        with pytest.raises(HandoffError, match=f"superseded by {h2.id}"):
            store.agent.consume_handoff(h1.id)
        with pytest.raises(HandoffError, match="no handoff"):
            store.agent.consume_handoff(b.id)  # a bootstrap is not consumed
        store.agent.consume_handoff(h2.id, by="run-2")
        assert store.agent.consume_handoff(h2.id).resume_count == 2
        with pytest.raises(UnknownTaskError):
            store.agent.handoff({"x": 1}, task_id="nope")
        hist = [h.id for h in store.agent.history(task_id=t1)]
        assert hist == [b.id, h1.id, h2.id]
        seq = h1.seq
        assert store.agent.latest_handoff(t1, as_of=seq).id == h1.id  # type: ignore[union-attr]
        snap = [h.to_json() for h in store.agent.history()]
        store.rebuild()
        assert [h.to_json() for h in store.agent.history()] == snap


# --- review findings: each a bug once -------------------------------------------------------


@pytest.mark.parametrize("resolves", [[[1]], {"a": 1}, True, 5.0, 0, -3, [], "1"])
def test_a_bad_resolves_is_refused_by_writers_and_quarantined_by_the_fold(
    tmp_path: Path, resolves: Any
) -> None:
    with ContextStore.open(tmp_path, config=CONFIG) as store:
        tid = store.tasks.create("t", id="t1").id
        head = store.ledger.head
        with pytest.raises(ValueError, match="resolves"):
            store.tasks.note(tid, "decision", {"resolves": resolves})
        assert store.ledger.head == head
        store.ledger.append([Event("task.note", tid, {"type": "decision",
                                                      "data": {"resolves": resolves}})])
        t = store.tasks.get(tid)  # another tool wrote it: quarantined, never a crash
        assert t is not None and t.quarantine is not None
        assert "resolves" in t.quarantine["reason"]
    with ContextStore.open(tmp_path, config=CONFIG) as store:
        store.rebuild()
        assert store.tasks.get("t1").quarantined  # type: ignore[union-attr]


def test_what_readers_get_is_their_own_copy(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path, config=CONFIG) as store:
        tid = store.tasks.create("t").id
        store.tasks.start(tid)
        store.tasks.note(tid, "decision", {"text": "blake3"})
        store.tasks.complete(tid, {"pr": 7})
        store.agent.handoff({"next": "review"}, task_id=tid)
        store.tasks.get(tid).result["pr"] = 999  # type: ignore[union-attr]
        store.tasks.record(tid).decisions[0]["data"]["text"] = "x"  # type: ignore[union-attr]
        store.agent.latest_handoff().payload["next"] = "x"  # type: ignore[union-attr]
        assert store.tasks.get(tid).result == {"pr": 7}  # type: ignore[union-attr]
        assert store.tasks.record(tid).decisions[0]["data"] == {  # type: ignore[union-attr]
            "text": "blake3"}
        assert store.agent.latest_handoff().payload == {"next": "review"}  # type: ignore[union-attr]


def test_an_id_only_a_stray_event_named_is_not_a_task(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path, config=CONFIG) as store:
        store.ledger.append([Event("task.note", "ghost", {"type": "other"})])
        assert store.tasks.get("ghost").quarantine["reason"] == "unknown task"  # type: ignore[union-attr,index]
        store.ledger.append([Event("task.released", "nobody", {})])
        assert store.tasks.get("nobody").quarantine["reason"] == "unknown task"  # type: ignore[union-attr,index]
        with pytest.raises(UnknownTaskError, match="parent"):
            store.tasks.create("child", parent="ghost")
        with pytest.raises(UnknownTaskError):
            store.agent.handoff({"x": 1}, task_id="ghost")
        with pytest.raises(ValueError, match="labels"):
            store.tasks.create("t", labels="auth")  # type: ignore[arg-type]


def test_a_malformed_release_is_held_and_a_consumed_bootstrap_is_skipped(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path, config=CONFIG) as store:
        store.ledger.append([Event("task.note", "q", {"type": "other"}),
                             Event("task.released", "q", {"reason": 5})])
        q = store.tasks.get("q")
        assert q is not None and q.quarantined and q.held == 1
        b = store.agent.bootstrap({"goal": "g"})
        store.ledger.append([Event("agent.handoff_consumed", b.id, {})])
        assert store.agent.get(b.id).resume_count == 0  # type: ignore[union-attr]
        assert store.runner.state("handoffs").snapshot()["skipped_bad"] == 1


def test_reading_details_does_not_make_a_checkpoint_re_encode_them(tmp_path: Path) -> None:
    from projections.tasks import TaskState

    with ContextStore.open(tmp_path, config=CONFIG) as store:
        ids = [store.tasks.create(f"t{i}").id for i in range(5)]
        store.checkpoint()
    with ContextStore.open(tmp_path, config=CONFIG) as store:
        for tid in ids:
            store.tasks.history(tid)
            store.tasks.record(tid)
        state = store.runner.state("tasks")
        assert isinstance(state, TaskState) and state._dirty == set()
        store.tasks.start(ids[0])
        assert state._dirty == {ids[0]}
        before = state.to_bytes()
        assert state._dirty == set()
        assert TaskState.from_bytes(before).snapshot() == state.snapshot()
