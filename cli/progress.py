"""Progress bars: on stderr, only for a person at a terminal, never with ``--json``.

A module of its own so that commands that never load the views (``verify``,
``log export``) show a bar without importing them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click

from .options import Ctx


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


