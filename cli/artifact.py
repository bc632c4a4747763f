"""``ctxledger artifact``: full entry documents on disk, named by their sha256 (handles).

``store get --json=handle`` writes one; these commands read one back (re-verified
against its handle) and collect the ones no live entry needs.
"""

from __future__ import annotations

import json
from typing import Any

import click

from .options import Ctx, examples, group_options, store_options
from .output import human, safe
from .views import open_store

_H = "3f2a9c01d4e5f6071829304a5b6c7d8e9f00112233445566778899aabbccddee"  # (an example)


class Handle(click.ParamType):
    """Exactly 64 hex digits (either case): anything else is refused before a file is touched."""

    name = "HANDLE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from projections.artifacts import check_handle

        try:
            return check_handle(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


@examples("ctxledger artifact gc --dry-run", f"ctxledger artifact show {_H} --json")
@click.group("artifact")
@group_options
def artifact() -> None:
    """Artifacts: whole entries written to files by `store get --json=handle`."""


@examples(f"ctxledger artifact show {_H}", f"ctxledger artifact show {_H} --json")
@artifact.command("show")
@store_options
@click.argument("handle", type=Handle())
def artifact_show(ctx: Ctx, handle: str) -> None:
    """Print an artifact after checking its bytes still hash to HANDLE.

    With --json the stored document is printed byte for byte; without, each
    field on a line, escaped. A damaged or tampered file is refused (exit 1).
    """
    data = open_store(ctx).artifacts.read(handle)
    if ctx.json:
        click.echo(data, nl=False)  # bytes: written as they are
        return
    ctx.emit(None, human=_human(data))


def _human(data: bytes) -> str:
    """The entry's fields, one a line; a document that is not a JSON object, escaped whole."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict):
        return human(doc)
    return safe(data.decode("utf-8", "backslashreplace"), multiline=True)


@examples("ctxledger artifact gc", "ctxledger artifact gc --dry-run --json")
@artifact.command("gc")
@store_options
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
def artifact_gc(ctx: Ctx, dry_run: bool) -> None:
    """Remove artifacts whose entry is no longer live (pruned or expired), and damaged ones.

    Only files named by a handle inside the store's artifact directory are
    removed; anything else there is listed and left alone.
    """
    r = open_store(ctx).artifact_gc(dry_run=dry_run)
    ctx.emit(r.to_json(), human=_gc_text)


def _gc_text(r: dict[str, Any]) -> str:
    verb = "would remove" if r["dry_run"] else "removed"
    lines = [
        f"{verb} {r['removed'] + r['damaged']} artifact(s) ({r['damaged']} damaged), "
        f"{r['bytes_freed']} bytes; kept {r['kept']}"
    ]
    if r["stale_temp"]:
        lines.append(f"{verb} {r['stale_temp']} temp file(s) of writers that died")
    if r["foreign"]:
        lines.append(f"left alone {r['foreign']} name(s) that are not artifacts:")
        lines += [f"  {safe(n)}" for n in r["foreign_names"]]
        if r["foreign"] > len(r["foreign_names"]):
            lines.append(f"  ... and {r['foreign'] - len(r['foreign_names'])} more")
    return "\n".join(lines)

