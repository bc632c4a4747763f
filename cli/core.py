"""Store-level commands: ``init`` creates a store, ``verify`` proves its log intact."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from eventstore import VerifyReport

from .options import Ctx, examples, store_options
from .output import safe


@examples("ctxledger init", "ctxledger init --root ~/src/project --json")
@click.command("init")
@store_options
def init(ctx: Ctx) -> None:
    """Create the store at ROOT/.ctxledger/; idempotent.

    An existing store is left as is. Only init creates a store, so a mistyped
    --root elsewhere fails instead of silently starting an empty one.
    """
    created = not ctx.log_dir.is_dir()
    for d in (ctx.log_dir, ctx.checkpoints_dir, ctx.artifacts_dir):
        d.mkdir(parents=True, exist_ok=True)
    if created:
        _sync_dirs(ctx.store_dir, ctx.root)
    said = "created store" if created else "store already exists:"
    ctx.emit(
        {"root": str(ctx.root), "store": str(ctx.store_dir), "created": created},
        human=f"{said} {safe(str(ctx.store_dir))}",
    )


def _sync_dirs(*dirs: Path) -> None:
    """Make the new directory entries durable (best effort: not every filesystem allows it)."""
    for d in dirs:
        try:
            fd = os.open(d, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)


@examples("ctxledger verify", "ctxledger verify --root ~/src/project --json")
@click.command("verify")
@store_options
def verify(ctx: Ctx) -> None:
    """Check every byte of the log; exit 0 only when it is intact.

    Headers, checksums, the hash chain and seq continuity are all checked.
    Read-only: a torn tail or corruption is reported, never repaired.
    """
    report = ctx.ledger().verify()
    ctx.emit(report.to_json(), human=lambda _: _report_text(report, ctx))
    if not report.ok:
        raise click.ClickException(f"{ctx.log_dir}: {len(report.problems)} problem(s) found")


def _report_text(r: VerifyReport, ctx: Ctx) -> str:
    counts: dict[str, Any] = {"event": r.events, "frame": r.frames, "segment": r.segments}
    summary = ", ".join(f"{v} {k}{'' if v == 1 else 's'}" for k, v in counts.items())
    summary += f", head seq {r.head_seq}"
    where = safe(str(ctx.log_dir))
    if r.ok:
        return f"ok: {where}: {summary}"
    lines = [f"FAILED: {where}: {len(r.problems)} problem(s); {summary}"]
    lines += [f"  {safe(p.segment)} at byte {p.offset}: {safe(p.error)}" for p in r.problems]
    return "\n".join(lines)
