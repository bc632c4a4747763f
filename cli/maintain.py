"""Commands over the views as a whole: replay, rebuild, checkpoint."""

from __future__ import annotations

import click

from projections import replay as replay_log
from projections.store import projections

from .inputs import SEQ_OR_TIME
from .options import Ctx, examples, store_options
from .views import naming, open_store, progress_bar


@examples("ctxledger replay --json", "ctxledger replay --until 7d")
@click.command("replay")
@store_options
@click.option(
    "--until",
    type=SEQ_OR_TIME,
    help="Stop at SEQ (a bare integer), or at the last event at or before TIME "
    "(@UNIX, ISO-8601, 7d).",
)
def replay(ctx: Ctx, until: int | float | None) -> None:
    """Fold the log into fresh in-memory views and report counts.

    Touches no checkpoint and no file: a dry run of a rebuild, or time travel.
    """
    head = ctx.ledger().head
    with progress_bar(ctx, head, "replaying") as bar, naming("--until"):
        report = replay_log(ctx.root, until, progress=bar, **ctx.store_options())
    ctx.emit(report)


@examples("ctxledger rebuild", "ctxledger rebuild --projection recall --json")
@click.command("rebuild")
@store_options
@click.option(
    "--projection",
    type=click.Choice([p.name for p in projections()]),
    help="Rebuild only this view (default: all).",
)
def rebuild(ctx: Ctx, projection: str | None) -> None:
    """Refold views from the log in memory; only if that succeeds, replace their checkpoints."""
    st = open_store(ctx, write=True)
    with progress_bar(ctx, st.ledger.head, "rebuilding") as bar:
        report = st.rebuild(projection, progress=bar)
    ctx.emit(report)


@examples("ctxledger checkpoint", "ctxledger checkpoint --json")
@click.command("checkpoint")
@store_options
def checkpoint(ctx: Ctx) -> None:
    """Write every view's checkpoint now (normally debounced and written on close)."""
    st = open_store(ctx, write=True)
    n = st.checkpoint()
    ctx.emit({"written": n, "head_seq": st.ledger.head}, human=f"wrote {n} checkpoint(s)")
