"""What the view commands share: opening the ContextStore, times, progress bars."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click

from projections import ContextStore

from .options import Ctx


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
            ctx.root, readonly=not write, progress=progress, map_checkpoints=not write
        )
    )


def show_progress(ctx: Ctx) -> bool:
    """Progress bars go to stderr, only for a person at a terminal, never with --json."""
    return not ctx.json and sys.stderr.isatty()


@contextmanager
def progress_bar(ctx: Ctx, total: int, label: str) -> Iterator[Callable[[int], None] | None]:
    if not show_progress(ctx) or total <= 0:
        yield None
        return
    with click.progressbar(length=total, label=label, file=sys.stderr) as bar:
        yield bar.update


class TimeParam(click.ParamType):
    """A point in time: ISO-8601 (``2026-11-30T12:00:00Z``) or ``@UNIX`` seconds."""

    name = "TIME"

    def convert(
        self, value: object, param: click.Parameter | None, c: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        text = str(value).strip()
        if text.startswith("@"):
            try:
                return float(text[1:])
            except ValueError:
                self.fail(f"{value!r} is not @UNIX seconds", param, c)
        try:
            when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            self.fail(
                f"{value!r} is not a time (use ISO-8601 like 2026-11-30T12:00:00Z, "
                "or @UNIX seconds)",
                param,
                c,
            )
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        return when.timestamp()


class SeqOrTime(TimeParam):
    """A seq (plain digits) or a time (ISO-8601 or ``@UNIX``)."""

    name = "SEQ|TIME"

    def convert(
        self, value: object, param: click.Parameter | None, c: click.Context | None
    ) -> int | float:
        text = str(value).strip()
        if text.isdigit():
            return int(text)
        return super().convert(value, param, c)


TIME = TimeParam()
SEQ_OR_TIME = SeqOrTime()


def iso(ts: float | int | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
