"""Commands over the views as a whole: replay, rebuild, checkpoint."""

from __future__ import annotations

import click

from projections import replay as replay_log

from .options import Ctx, store_options
from .views import SEQ_OR_TIME, open_store, progress_bar


@click.command("replay")
@store_options
@click.option(
    "--until", type=SEQ_OR_TIME, help="Stop at SEQ, or at the last event at or before TIME."
)
def replay(ctx: Ctx, until: int | float | None) -> None:
    """Fold the log into fresh in-memory views and report counts.

    Touches no checkpoint and no file: a dry run of a rebuild, or time travel.
    """
    head = ctx.ledger().head
    with progress_bar(ctx, head, "replaying") as bar:
        report = replay_log(ctx.root, until, progress=bar)
    ctx.emit(report)


@click.command("rebuild")
@store_options
@click.option("--projection", help="Rebuild only this view (default: all).")
def rebuild(ctx: Ctx, projection: str | None) -> None:
    """Drop checkpoints, refold views from the log, and checkpoint them again."""
    st = open_store(ctx, write=True)
    with progress_bar(ctx, st.ledger.head, "rebuilding") as bar:
        try:
            report = st.rebuild(projection, progress=bar)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--projection") from None
    ctx.emit(report)


@click.command("checkpoint")
@store_options
def checkpoint(ctx: Ctx) -> None:
    """Write every view's checkpoint now (normally debounced and written on close)."""
    st = open_store(ctx, write=True)
    n = st.checkpoint()
    ctx.emit({"written": n, "head_seq": st.ledger.head}, human=f"wrote {n} checkpoint(s)")
