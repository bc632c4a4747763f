"""What the view commands share: opening the ContextStore, progress bars, as-of errors."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click

from projections import AsOfError, ContextStore

from .inputs import SEQ_OR_TIME as SEQ_OR_TIME  # (re-exported: commands written before cli.inputs)
from .inputs import TIME as TIME
from .options import Ctx
from .progress import progress_bar as progress_bar  # (re-exported: view commands use it here)
from .progress import show_progress as show_progress


def open_store(
    ctx: Ctx, *, write: bool = False, progress: Callable[[int], None] | None = None
) -> ContextStore:
    """The store at ``--root``, closed when the command ends (readonly unless ``write``).

    A read command maps the checkpoints instead of reading them (a cold
    ``recall`` at 200k entries skips copying a 70 MB file): it lives for one
    answer, and the store refuses to answer if a mapped file was rewritten in
    place meanwhile (``ContextStore.open(map_checkpoints=...)``).
    """
    ctx.require_store()
    return ctx.managed(
        ContextStore.open(
            ctx.root, readonly=not write, progress=progress, map_checkpoints=not write,
            **ctx.store_options(),
        )
    )


@contextmanager
def usage_errors() -> Iterator[None]:
    """The library's ``ValueError`` (bad input it refuses: an id, a title, a scope
    without a task) is a usage error: exit 2, nothing written."""
    try:
        yield
    except ValueError as e:
        raise click.UsageError(str(e)) from None


@contextmanager
def naming(option: str) -> Iterator[None]:
    """Report the library's :class:`AsOfError` (a seq past the head, say) as a usage
    error naming ``option``, the option that carried the value."""
    try:
        yield
    except AsOfError as e:
        raise click.BadParameter(str(e), param_hint=f"'{option}'") from None


def iso(ts: float | int | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
