"""``ctxledger task``: the task registry -- create, move through states, note, list, follow."""

from __future__ import annotations

from typing import Any

import click

from projections.task_api import TaskEvent, TaskInfo
from projections.tasks import NOTE_TYPES, STATES, STATUS_NAMES, TaskState, valid_id

from .inputs import INTERVAL, JSON_OBJECT, SEQ_OR_TIME, FiniteFloat
from .log import follow_log, own_events
from .options import Ctx, examples, group_options, store_options
from .output import dumps, iso_time, safe
from .views import naming, open_store, usage_errors

STATE_CHOICES = (*STATES, "quarantined")


@examples("ctxledger task create --title \"fix the auth gap\" --label auth",
          "ctxledger --json task list --state running")
@click.group("task")
@group_options
def task() -> None:
    """Tasks: a registry of agent work, each with its history and working record.

    A task is created, started, then completed, failed or cancelled (docs/tasks.md).
    A log event that breaks these rules quarantines its task until `task release`.
    """


def _written(ctx: Ctx, t: TaskInfo) -> None:
    extra = " (cancel requested)" if t.cancel_requested and t.state == "running" else ""
    ctx.emit({"id": t.id, "state": t.state, "seq": t.last_seq,
              "cancel_requested": t.cancel_requested},
             human=f"{safe(t.id)} {t.state}{extra} (seq {t.last_seq})")


@examples("ctxledger task create --title \"fix the auth gap\" --label auth",
          "ctxledger task create --title \"write the test\" --parent auth-1 --id auth-2 --json")
@task.command("create")
@store_options
@click.option("--title", required=True, help="What the task is.")
@click.option("--parent", metavar="ID", help="The task this one is part of.")
@click.option("--label", "labels", multiple=True, metavar="L", help="A label (repeatable).")
@click.option("--id", "task_id", metavar="ID", help="Use this id (default: a generated one).")
def task_create(ctx: Ctx, title: str, parent: str | None, labels: tuple[str, ...],
                task_id: str | None) -> None:
    """Create a task; prints its id and the seq of its event."""
    with usage_errors():
        t = open_store(ctx, write=True).tasks.create(title, parent=parent, labels=labels,
                                                     id=task_id)
    ctx.emit({"id": t.id, "seq": t.last_seq}, human=f"{safe(t.id)} (seq {t.last_seq})")


@examples("ctxledger task start auth-1", "ctxledger task start auth-1 --json")
@task.command("start")
@store_options
@click.argument("task_id", metavar="ID")
def task_start(ctx: Ctx, task_id: str) -> None:
    """Mark a created task running."""
    with usage_errors():
        _written(ctx, open_store(ctx, write=True).tasks.start(task_id))


@examples("ctxledger task note auth-1 --type decision --data '{\"text\": \"use blake3\"}'",
          "ctxledger task note auth-1 --type file_edit --data @note.json")
@task.command("note")
@store_options
@click.argument("task_id", metavar="ID")
@click.option("--type", "note_type", required=True, type=click.Choice(NOTE_TYPES),
              help="What kind of note.")
@click.option("--data", type=JSON_OBJECT, default="{}", show_default=True,
              help="The note: a JSON object, '-' for stdin, or @FILE. file_read/file_edit "
                   "notes need \"path\" or \"paths\"; \"resolves\": SEQ closes a question.")
def task_note(ctx: Ctx, task_id: str, note_type: str, data: dict[str, Any]) -> None:
    """Add a note to a live task's working record."""
    with usage_errors():
        _written(ctx, open_store(ctx, write=True).tasks.note(task_id, note_type, data))


@examples("ctxledger task progress auth-1 --message \"tests written\" --fraction 0.5")
@task.command("progress")
@store_options
@click.argument("task_id", metavar="ID")
@click.option("--message", help="What is happening.")
@click.option("--fraction", type=FiniteFloat(0, 1), help="How far along, 0 to 1.")
def task_progress(ctx: Ctx, task_id: str, message: str | None, fraction: float | None) -> None:
    """Report progress on a live task."""
    with usage_errors():
        _written(ctx, open_store(ctx, write=True).tasks.progress(task_id, message, fraction))


@examples("ctxledger task cancel auth-1 --reason \"not needed\"",
          "ctxledger task cancel auth-1 --force")
@task.command("cancel")
@store_options
@click.argument("task_id", metavar="ID")
@click.option("--reason", help="Why.")
@click.option("--force", is_flag=True, help="Cancel a running task now, without asking it.")
def task_cancel(ctx: Ctx, task_id: str, reason: str | None, force: bool) -> None:
    """Cancel a task: at once if not started; a running one is asked first.

    A running task gets cancel_requested; a second cancel (its worker
    confirming) or --force makes it cancelled.
    """
    with usage_errors():
        _written(ctx, open_store(ctx, write=True).tasks.cancel(task_id, reason, force=force))


@examples("ctxledger task complete auth-1", "ctxledger task complete auth-1 --result '{\"pr\": 7}'")
@task.command("complete")
@store_options
@click.argument("task_id", metavar="ID")
@click.option("--result", type=JSON_OBJECT, help="What came of it: a JSON object.")
def task_complete(ctx: Ctx, task_id: str, result: dict[str, Any] | None) -> None:
    """Mark a running task completed."""
    with usage_errors():
        _written(ctx, open_store(ctx, write=True).tasks.complete(task_id, result))


@examples("ctxledger task fail auth-1 --reason \"tests still red\"")
@task.command("fail")
@store_options
@click.argument("task_id", metavar="ID")
@click.option("--reason", required=True, help="Why it failed.")
def task_fail(ctx: Ctx, task_id: str, reason: str) -> None:
    """Mark a running task failed."""
    with usage_errors():
        _written(ctx, open_store(ctx, write=True).tasks.fail(task_id, reason))


@examples("ctxledger task release auth-1 --reason \"checked the log by hand\"")
@task.command("release")
@store_options
@click.argument("task_id", metavar="ID")
@click.option("--reason", help="Why the quarantine may be lifted.")
def task_release(ctx: Ctx, task_id: str, reason: str | None) -> None:
    """Lift a task's quarantine; events after this one apply again."""
    with usage_errors():
        _written(ctx, open_store(ctx, write=True).tasks.release(task_id, reason))


@examples("ctxledger task list --state running",
          "ctxledger task list --label auth --as-of 24h --json")
@task.command("list")
@store_options
@click.option("--state", type=click.Choice(STATE_CHOICES), help="Only tasks in this state.")
@click.option("--label", help="Only tasks with this label.")
@click.option("--parent", metavar="ID", help="Only subtasks of this task.")
@click.option("--as-of", "as_of", type=SEQ_OR_TIME, help="The registry as it stood at SEQ or TIME.")
def task_list(ctx: Ctx, state: str | None, label: str | None, parent: str | None,
              as_of: int | float | None) -> None:
    """List tasks, oldest first."""
    with usage_errors(), naming("--as-of"):
        tasks = open_store(ctx).tasks.list(state=state, label=label, parent=parent, as_of=as_of)
    ctx.emit({"tasks": [t.to_json() for t in tasks]}, human=lambda _: _list_text(tasks))


def _list_text(tasks: list[TaskInfo]) -> str:
    if not tasks:
        return "(no tasks)"
    lines = [f"{'ID':30}  {'STATE':22}  {'UPDATED':24}  {'EVENTS':>6}  TITLE"]
    for t in tasks:
        state = t.state + (" (quarantined)" if t.quarantined else "")
        lines.append(f"{safe(t.id):30}  {state:22}  {_when(t.updated_at):24}  {t.events:>6}  "
                     f"{safe(t.title)}")
    return "\n".join(lines)


def _when(at: float | None) -> str:
    return "-" if at is None else iso_time(at)


@examples("ctxledger task show auth-1", "ctxledger task show auth-1 --as-of 1h --json")
@task.command("show")
@store_options
@click.argument("task_id", metavar="ID")
@click.option("--as-of", "as_of", type=SEQ_OR_TIME, help="The task as it stood at SEQ or TIME.")
def task_show(ctx: Ctx, task_id: str, as_of: int | float | None) -> None:
    """A task's state and working record (open questions, decisions, files touched)."""
    st = open_store(ctx)
    with usage_errors(), naming("--as-of"):
        shown = st.tasks.show(task_id, as_of=as_of)
    if shown is None:
        raise click.ClickException(f"no task with id {safe(task_id)}")
    info, record = shown
    ctx.emit({"task": info.to_json(), "record": record.to_json()},
             human=lambda d: _show_text(d))


def _show_text(d: dict[str, Any]) -> str:
    t, r = d["task"], d["record"]
    lines = [f"{safe(t['id'])}  {t['state']}{'  QUARANTINED' if t['quarantined'] else ''}",
             f"  title:    {safe(t['title'])}"]
    if t["parent"]:
        lines.append(f"  parent:   {safe(t['parent'])}")
    if t["labels"]:
        lines.append(f"  labels:   {safe(', '.join(t['labels']))}")
    for k in ("created_at", "started_at", "ended_at", "updated_at"):
        if t[k] is not None:
            lines.append(f"  {k[:-3] + ':':9} {iso_time(t[k])}")
    if t["quarantine"]:
        q = t["quarantine"]
        lines.append(f"  quarantine: seq {q['seq']} ({safe(q['kind'])}): {safe(q['reason'])}; "
                     f"{t['held']} event(s) held")
    if t["cancel_requested"] and t["state"] == "running":
        lines.append("  cancel requested")
    if t["reason"]:
        lines.append(f"  reason:   {safe(t['reason'])}")
    if t["progress"]:
        p = t["progress"]
        frac = "" if p.get("fraction") is None else f"{p['fraction']:.0%}"
        lines.append(f"  progress: {safe(p.get('message') or '')} {frac}".rstrip())
    if t["notes"]:
        lines.append("  notes:    " + ", ".join(f"{k} {v}" for k, v in sorted(t["notes"].items())))
    for title, key in (("open questions", "open_questions"), ("decisions", "decisions"),
                       ("intentions", "intentions"), ("evidence", "evidence")):
        if r[key]:
            lines.append(f"  {title}:")
            lines += [f"    seq {n['seq']}: {_compact(n['data'])}" for n in r[key]]
    if r["files"]:
        lines.append("  files:")
        lines += [f"    {safe(p)}  read {f['read']}, edit {f['edit']}"
                  for p, f in r["files"].items()]
    return "\n".join(lines)


@examples("ctxledger task history auth-1", "ctxledger task history auth-1 --json")
@task.command("history")
@store_options
@click.argument("task_id", metavar="ID")
def task_history(ctx: Ctx, task_id: str) -> None:
    """Every event of a task, in order, each marked applied, quarantined or held."""
    with usage_errors():
        events = open_store(ctx).tasks.history(task_id)
    ctx.emit({"id": task_id, "events": [e.to_json() for e in events]},
             human=lambda _: "\n".join(_event_text(e) for e in events))


def _event_text(e: TaskEvent) -> str:
    mark = "" if e.status == "applied" else f"  [{e.status}]"
    return f"{e.seq:>6}  {iso_time(e.at)}  {safe(e.kind)}{mark}  {_compact(e.data)}"


def _compact(data: Any) -> str:
    """A value on one line for people: compact JSON, escaped."""
    return safe(dumps(data, compact=True, ascii_only=False))


@examples("ctxledger task export auth-1 > auth-1.jsonl",
          "ctxledger task export auth-1 | jq -c 'select(.kind == \"task.note\")'")
@task.command("export")
@store_options
@click.argument("task_id", metavar="ID")
def task_export(ctx: Ctx, task_id: str) -> None:
    """A task's history as JSON lines, one event a line (for jq and friends)."""
    with usage_errors():
        events = open_store(ctx).tasks.history(task_id)
    for e in events:
        ctx.emit_jsonl({"id": task_id, **e.to_json()})


@examples("ctxledger task watch", "ctxledger task watch auth-1 --json")
@task.command("watch")
@store_options
@click.argument("task_id", metavar="[ID]", required=False)
@click.option("--interval", type=INTERVAL, default=0.2, show_default=True,
              metavar="SECONDS", help="How often to poll the log.")
def task_watch(ctx: Ctx, task_id: str | None, interval: float) -> None:
    """Print task events as they are committed (of one task, or all), until Ctrl-C.

    Each line says the event and the task's state after it. With --json the
    output is JSON lines, one object per event.
    """
    if task_id is not None and not valid_id(task_id):
        raise click.BadParameter(f"{task_id!r} is not a task id", param_hint="'ID'")
    st = open_store(ctx)
    state = st.runner.state("tasks")
    assert isinstance(state, TaskState)
    # from where the view stands; in agent scope, only this project's events of the shared log
    for ev in own_events(ctx, follow_log(st.ledger, state.seq, interval)):
        state.apply(ev)
        if not ev.kind.startswith("task.") or (task_id is not None and ev.key != task_id):
            continue
        t = state.tasks.get(ev.key or "")
        events = state.detail(t.id).events if t is not None else []
        status = STATUS_NAMES[events[-1][1]] if events else "skipped"
        row = {"seq": ev.seq, "at": ev.at, "id": ev.key, "kind": ev.kind, "data": ev.data,
               "status": status, "state": t.state if t is not None else None}
        if ctx.json:
            ctx.emit_jsonl(row)
        else:
            mark = "" if status == "applied" else f" [{status}]"
            ctx.emit_lines([f"{ev.seq:>6}  {iso_time(ev.at)}  {safe(ev.key or '-')}  "
                            f"{safe(ev.kind)}{mark}  -> {row['state']}"])

