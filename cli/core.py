"""Store-level commands: ``init`` creates a store, ``verify`` proves its log intact."""

from __future__ import annotations

from typing import Any

import click

from eventstore import VerifyReport, private

from .options import Ctx, store_options


@click.command("init")
@store_options
def init(ctx: Ctx) -> None:
    """Create the store at ROOT/.ctxledger/; idempotent.

    An existing store is left as is. Only init creates a store, so a mistyped
    --root elsewhere fails instead of silently starting an empty one.
    """
    from projections import init_store  # here: verify, in this module too, never needs it

    created = init_store(ctx.root)
    ctx.emit(
        {"root": str(ctx.root), "store": str(ctx.store_dir), "created": created},
        human=f"{'created store' if created else 'store already exists:'} {ctx.store_dir}",
    )


@click.command("verify")
@store_options
def verify(ctx: Ctx) -> None:
    """Check every byte of the log; exit 0 only when it is intact.

    Headers, checksums, the hash chain and seq continuity are all checked.
    Read-only: a torn tail or corruption is reported, never repaired. Store
    files that group or others can use are warned about (exit code unchanged).
    """
    report = ctx.ledger().verify()
    warnings = private.mode_warnings(ctx.store_dir)
    ctx.emit({**report.to_json(), "warnings": warnings},
             human=lambda _: _report_text(report, ctx))
    ctx.warn(warnings)
    if not report.ok:
        raise click.ClickException(f"{ctx.log_dir}: {len(report.problems)} problem(s) found")


def _report_text(r: VerifyReport, ctx: Ctx) -> str:
    counts: dict[str, Any] = {"event": r.events, "frame": r.frames, "segment": r.segments}
    summary = ", ".join(f"{v} {k}{'' if v == 1 else 's'}" for k, v in counts.items())
    summary += f", head seq {r.head_seq}"
    if r.ok:
        return f"ok: {ctx.log_dir}: {summary}"
    lines = [f"FAILED: {ctx.log_dir}: {len(r.problems)} problem(s); {summary}"]
    lines += [f"  {p.segment} at byte {p.offset}: {p.error}" for p in r.problems]
    return "\n".join(lines)
