"""Store-level commands: ``init`` creates a store, ``verify`` proves its log intact."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from eventstore import (
    Anchor,
    Ledger,
    LedgerError,
    LogBackend,
    VerifyReport,
    check_anchor,
    private,
)

from .options import Ctx, examples, store_options
from .output import safe


@examples("ctxledger init", "ctxledger init --root ~/src/project --json")
@click.command("init")
@store_options
def init(ctx: Ctx) -> None:
    """Create the store for ROOT; idempotent.

    In project scope (the default) the store is ROOT/.ctxledger/, with a
    .gitignore so it is never committed. In agent scope (--storage-scope agent,
    [storage] scope = "agent" in config, or a broad root such as your home
    directory) the project's context goes to the agent home's shared log
    ($CTXLEDGER_HOME, default ~/.ctxledger/), and nothing is created at ROOT.
    An existing store is left as is. Only init creates a store, so a mistyped
    --root elsewhere fails instead of silently starting an empty one.
    """
    from projections.storedir import init_layout  # here: verify never needs it

    lay = ctx.layout
    choice = ctx.log_choice
    created = init_layout(lay, with_log=choice.is_file)
    doc = {"root": str(ctx.root), "store": str(ctx.store_dir), "created": created,
           "storage_scope": lay.scope, "scope_reason": lay.reason, "project_id": lay.project_id}
    where = str(ctx.store_dir)
    if not choice.is_file:  # the log is a stream: make it now, where the config says
        from projections.logs import open_log

        with open_log(lay, choice, readonly=False) as log:
            created = bool(getattr(log, "created", False))
        doc.update(created=created, log=choice.to_json())
        where = f"{where}, log in {ctx.log_name()} on {', '.join(choice.servers)}"
    said = "created store" if created else "store already exists:"
    scope = f" ({lay.scope} scope: {lay.detail})" if lay.scope == "agent" else ""
    ctx.emit(doc, human=f"{said} {safe(where)}{safe(scope)}")


class AnchorParam(click.ParamType):
    """``SEQ:DIGEST`` as ``ctxledger log head`` prints it; anything else is a usage error."""

    name = "SEQ:DIGEST"

    def convert(
        self, value: object, param: click.Parameter | None, c: click.Context | None
    ) -> Anchor:
        if isinstance(value, Anchor):
            return value
        try:
            return Anchor.parse(str(value))
        except ValueError as e:
            self.fail(str(e), param, c)


@examples("ctxledger verify", "ctxledger verify --root ~/src/project --json")
@click.command("verify")
@store_options
@click.option(
    "--anchor",
    type=AnchorParam(),
    default=None,
    help="Also require the chain digest at SEQ to be DIGEST (from an earlier `log head`).",
)
def verify(ctx: Ctx, anchor: Anchor | None) -> None:
    """Check every byte of the log; exit 0 only when it is intact.

    Headers, checksums, the hash chain and seq continuity are all checked.
    Read-only: a torn tail or corruption is reported, never repaired. Without
    --anchor this proves the log consistent with itself; with it, also that
    the log up to SEQ is the one whose head was recorded. Store files that
    group or others can use are warned about (exit code unchanged).
    """
    from eventstore.segments import list_segments

    from .progress import progress_bar

    led = ctx.ledger()
    segments = len(list_segments(ctx.log_dir)) if ctx.log_choice.is_file else 0
    with progress_bar(ctx, segments, "verifying") as bar:
        report, doc, why = verify_document(led, ctx.store_dir, anchor, bar)
    ctx.emit(doc, human=lambda _: _report_text(report, ctx, anchor, why))
    ctx.warn(doc["warnings"])
    if not report.ok:
        also = f"; anchor not confirmed: {why}" if why else ""
        raise click.ClickException(
            f"{ctx.log_name()}: {len(report.problems)} problem(s) found{also}"
        )
    if why:
        raise click.ClickException(f"{ctx.log_name()}: anchor not confirmed: {why}")


def verify_document(
    led: LogBackend, store_dir: Path, anchor: Anchor | None,
    progress: Callable[[int], None] | None = None,
) -> tuple[VerifyReport, dict[str, Any], str | None]:
    """Verify ``led`` (and ``anchor``): the report, its JSON document, why the anchor failed.

    The document is what ``verify --json`` prints and the MCP ``verify`` tool
    returns: the report, ``warnings`` (store paths others can use) and, with an
    anchor, ``anchor`` -- ``ok`` is then true only when both hold.
    """
    report = led.verify(progress) if progress is not None and isinstance(led, Ledger) \
        else led.verify()
    doc: dict[str, Any] = report.to_json()
    why = None
    if anchor is not None:
        try:
            why = check_anchor(led, anchor)
        except LedgerError as e:  # the log cannot be read to that seq
            why = str(e)
        doc["ok"] = report.ok and why is None
        doc["anchor"] = {**anchor.to_json(), "ok": why is None, "error": why}
    doc["warnings"] = private.mode_warnings(store_dir)
    return report, doc, why


def _report_text(r: VerifyReport, ctx: Ctx, anchor: Anchor | None, why: str | None) -> str:
    counts: dict[str, Any] = {"event": r.events, "frame": r.frames, "segment": r.segments}
    summary = ", ".join(f"{v} {k}{'' if v == 1 else 's'}" for k, v in counts.items())
    summary += f", head seq {r.head_seq}"
    if r.base_seq > 1:
        summary += f" (generation from seq {r.base_seq})"
    where = safe(ctx.log_name())
    if r.ok:
        lines = [f"ok: {where}: {summary}"]
    else:
        lines = [f"FAILED: {where}: {len(r.problems)} problem(s); {summary}"]
        lines += [f"  {safe(p.segment)} at byte {p.offset}: {safe(p.error)}" for p in r.problems]
    if anchor is not None:
        lines.append(f"anchor seq {anchor.seq}: " + (f"NOT CONFIRMED: {safe(why)}" if why else
                                                      f"digest {anchor.digest.hex()} matches"))
    return "\n".join(lines)
