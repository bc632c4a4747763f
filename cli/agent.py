"""``ctxledger agent``: bootstraps and handoffs between agent runs."""

from __future__ import annotations

from typing import Any

import click

from projections.task_api import Handoff

from .inputs import JSON_FILE, SEQ_OR_TIME
from .options import Ctx, examples, group_options, store_options
from .output import dumps, iso_time, safe
from .views import naming, open_store, usage_errors


@examples("echo '{\"next\": \"review the PR\"}' | ctxledger agent handoff --task auth-1",
          "ctxledger --json agent show --task auth-1")
@click.group("agent")
@group_options
def agent() -> None:
    """Bootstraps (the context a run started from) and handoffs (what the next run needs).

    A new handoff for a task -- or, without --task, for the store -- supersedes
    the previous one; `agent consume` marks the current one taken up (a resume).
    """


def _written(ctx: Ctx, h: Handoff) -> None:
    ctx.emit({"id": h.id, "kind": h.kind, "task_id": h.task_id, "seq": h.seq},
             human=f"{h.kind} {safe(h.id)} (seq {h.seq})")


@examples("echo '{\"goal\": \"fix auth\"}' | ctxledger agent bootstrap --task auth-1",
          "ctxledger agent bootstrap context.json --json")
@agent.command("bootstrap")
@store_options
@click.argument("payload", default="-", metavar="[FILE|-]", type=JSON_FILE)
@click.option("--task", "task_id", metavar="ID", help="The task this run works on.")
def agent_bootstrap(ctx: Ctx, payload: Any, task_id: str | None) -> None:
    """Record the context a run starts from: a JSON object from FILE or stdin."""
    with usage_errors():
        _written(ctx, open_store(ctx, write=True).agent.bootstrap(payload, task_id=task_id))


@examples("ctxledger agent handoff notes.json --task auth-1",
          "echo '{\"next\": \"review\"}' | ctxledger agent handoff --json")
@agent.command("handoff")
@store_options
@click.argument("payload", default="-", metavar="[FILE|-]", type=JSON_FILE)
@click.option("--task", "task_id", metavar="ID", help="The task this handoff continues.")
def agent_handoff(ctx: Ctx, payload: Any, task_id: str | None) -> None:
    """Record what the next run needs: a JSON object from FILE or stdin."""
    with usage_errors():
        _written(ctx, open_store(ctx, write=True).agent.handoff(payload, task_id=task_id))


@examples("ctxledger agent consume h-01jf... --by run-2")
@agent.command("consume")
@store_options
@click.argument("handoff_id", metavar="ID")
@click.option("--by", help="Who resumed from it (a run or agent name).")
def agent_consume(ctx: Ctx, handoff_id: str, by: str | None) -> None:
    """Mark the current handoff taken up by a new run (counts one resume)."""
    with usage_errors():
        h = open_store(ctx, write=True).agent.consume_handoff(handoff_id, by=by)
    ctx.emit(h.to_json(), human=f"handoff {safe(h.id)}: resumed {h.resume_count} time(s)")


@examples("ctxledger agent show --task auth-1", "ctxledger agent show --history --json")
@agent.command("show")
@store_options
@click.option("--task", "task_id", metavar="ID", help="Those of this task (default: overall).")
@click.option("--history", is_flag=True, help="Every bootstrap and handoff, oldest first.")
@click.option("--as-of", "as_of", type=SEQ_OR_TIME, help="As they stood at SEQ or TIME.")
def agent_show(ctx: Ctx, task_id: str | None, history: bool, as_of: int | float | None) -> None:
    """The latest bootstrap and handoff (of a task, or overall), or their history."""
    a = open_store(ctx).agent
    with usage_errors(), naming("--as-of"):
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
    task = f" task {safe(h.task_id)}" if h.task_id else ""
    sup = f" superseded by {safe(h.superseded_by)}" if h.superseded_by else ""
    return (f"{h.kind} {safe(h.id)}{task} seq {h.seq} {iso_time(h.at)} resumed {h.resume_count}"
            f"{sup}  {safe(dumps(h.payload, compact=True, ascii_only=False))}")
