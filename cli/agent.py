"""``ctxledger agent``: bootstraps and handoffs between agent runs."""

from __future__ import annotations

from typing import Any

import click

from projections.task_api import Handoff

from .options import JSON_OBJECT, Ctx, store_options
from .output import dumps, iso_time
from .task import usage_errors
from .views import SEQ_OR_TIME, open_store


@click.group("agent")
def agent() -> None:
    """Bootstraps (the context a run started from) and handoffs (what the next run needs).

    A new handoff for a task -- or, without --task, for the store -- supersedes
    the previous one; `agent consume` marks the current one taken up (a resume).
    """


def _payload(source: str) -> dict[str, Any]:
    """The payload argument: ``-`` reads stdin, anything else names a file."""
    value = source if source == "-" else "@" + source
    return JSON_OBJECT.convert(value, None, click.get_current_context())


def _written(ctx: Ctx, h: Handoff) -> None:
    ctx.emit({"id": h.id, "kind": h.kind, "task_id": h.task_id, "seq": h.seq},
             human=f"{h.kind} {h.id} (seq {h.seq})")


@agent.command("bootstrap")
@store_options
@click.argument("source", default="-", metavar="[FILE|-]")
@click.option("--task", "task_id", metavar="ID", help="The task this run works on.")
def agent_bootstrap(ctx: Ctx, source: str, task_id: str | None) -> None:
    """Record the context a run starts from: a JSON object from FILE or stdin.

    \b
    Example:
      echo '{"goal": "fix auth"}' | ctxledger agent bootstrap --task t-01...
    """
    payload = _payload(source)
    with usage_errors():
        _written(ctx, open_store(ctx, write=True).agent.bootstrap(payload, task_id=task_id))


@agent.command("handoff")
@store_options
@click.argument("source", default="-", metavar="[FILE|-]")
@click.option("--task", "task_id", metavar="ID", help="The task this handoff continues.")
def agent_handoff(ctx: Ctx, source: str, task_id: str | None) -> None:
    """Record what the next run needs: a JSON object from FILE or stdin.

    \b
    Example:
      ctxledger agent handoff notes.json --task t-01...
    """
    payload = _payload(source)
    with usage_errors():
        _written(ctx, open_store(ctx, write=True).agent.handoff(payload, task_id=task_id))


@agent.command("consume")
@store_options
@click.argument("handoff_id", metavar="ID")
@click.option("--by", help="Who resumed from it (a run or agent name).")
def agent_consume(ctx: Ctx, handoff_id: str, by: str | None) -> None:
    """Mark the current handoff taken up by a new run (counts one resume)."""
    with usage_errors():
        h = open_store(ctx, write=True).agent.consume_handoff(handoff_id, by=by)
    ctx.emit(h.to_json(), human=f"handoff {h.id}: resumed {h.resume_count} time(s)")


@agent.command("show")
@store_options
@click.option("--task", "task_id", metavar="ID", help="Those of this task (default: overall).")
@click.option("--history", is_flag=True, help="Every bootstrap and handoff, oldest first.")
@click.option("--as-of", "as_of", type=SEQ_OR_TIME, help="As they stood at SEQ or TIME.")
def agent_show(ctx: Ctx, task_id: str | None, history: bool, as_of: int | float | None) -> None:
    """The latest bootstrap and handoff (of a task, or overall), or their history.

    \b
    Example:
      ctxledger agent show --task t-01... --json
    """
    a = open_store(ctx).agent
    with usage_errors():
        if history:
            items = a.history(task_id=task_id, as_of=as_of)
            ctx.emit({"history": [h.to_json() for h in items]},
                     human=lambda _: "\n".join(_line(h) for h in items) or "(none)")
            return
        boot = a.latest_bootstrap(task_id, as_of=as_of)
        hand = a.latest_handoff(task_id, as_of=as_of)
    ctx.emit({"bootstrap": boot.to_json() if boot else None,
              "handoff": hand.to_json() if hand else None},
             human=lambda _: "\n".join(
                 [f"bootstrap: {_line(boot) if boot else '-'}",
                  f"handoff:   {_line(hand) if hand else '-'}"]))


def _line(h: Handoff) -> str:
    task = f" task {h.task_id}" if h.task_id else ""
    sup = f" superseded by {h.superseded_by}" if h.superseded_by else ""
    return (f"{h.kind} {h.id}{task} seq {h.seq} {iso_time(h.at)} resumed {h.resume_count}"
            f"{sup}  {dumps(h.payload, compact=True, ascii_only=False)}")
