"""``ctxledger storage``: which store is in force here and why, and what it holds on disk."""

from __future__ import annotations

from typing import Any

import click

from .options import Ctx, examples, store_options
from .output import safe


@examples("ctxledger storage", "ctxledger storage --root ~/src/project --json",
          "ctxledger storage --storage-scope agent")
@click.command("storage")
@store_options
def storage(ctx: Ctx) -> None:
    """Show the storage scope in force and why, the stores' paths, logs, views and modes.

    Read-only: nothing is created or repaired. A store that does not exist yet
    is reported as missing (exit 0).
    """
    from projections.storage import storage_report

    ctx.log_choice  # noqa: B018 - a bad --backend/--servers is a usage error, said here
    doc = storage_report(ctx.root, **ctx.store_options())
    ctx.warn(doc["warnings"])
    ctx.emit(doc, human=_human)


def _stream_lines(name: str, log: dict[str, Any]) -> list[str]:
    where = f"{log['backend']} stream {log['stream']} on {', '.join(log['servers'])}"
    if not log["exists"]:
        return [f"{name} log: {safe(where)} (not created yet)"]
    peers = ", ".join(f"{p['name']}{'' if p['current'] else ' (behind)'}" for p in log["peers"])
    return [
        f"{name} log: {safe(where)}: {log['events']} events, head seq {log['head_seq']}"
        + (f" digest {log['head_digest']}" if log["head_digest"] else ""),
        f"{name} stream: {log['stream_messages']} messages, {log['stream_bytes']} bytes, "
        f"{log['stream_replicas']} replica(s), leader {safe(str(log['leader'] or '-'))}"
        + (f", followers {safe(peers)}" if peers else ""),
    ]


def _human(doc: dict[str, Any]) -> str:
    sc = doc["scope"]
    lines = [
        f"scope: {sc['storage_scope']} ({sc['reason']}: {safe(sc['detail'])})",
        f"project: {safe(sc['canonical_root'])} (id {sc['project_id']})",
        f"project store: {safe(sc['project_store'] or '- (agent scope)')}",
        f"agent home: {safe(sc['agent_home'])}",
    ]
    for name, log in doc["logs"].items():
        if log.get("backend"):
            lines.extend(_stream_lines(name, log))
            continue
        if not log["exists"]:
            lines.append(f"{name} log: {safe(log['path'])} (not created yet)")
            continue
        lines.append(
            f"{name} log: {safe(log['path'])}: {log['segments']} segment(s), {log['bytes']} "
            f"bytes, {log['events']} events, head seq {log['head_seq']}"
            + (f" digest {log['head_digest']}" if log["head_digest"] else "")
            + (f" (generation from seq {log['base_seq']})" if log["base_seq"] > 1 else "")
        )
        lines.append(
            f"{name} log live: {log['live_events']} events, {log['live_bytes']} of "
            f"{log['event_bytes']} event bytes ({log['live_fraction']:.1%}; "
            "`ctxledger compact` keeps these)"
        )
    for name, v in doc["views"].items():
        size = v["checkpoint_bytes"]
        lines.append(
            f"view {safe(name)}: watermark seq {v['watermark_seq']}, loaded from "
            f"{v['loaded_from']}, checkpoint {size if size is not None else '-'} bytes"
        )
    for key in ("artifacts", "calibration"):
        if key in doc:
            part = doc[key]
            lines.append(f"{key}: " + ", ".join(f"{k} {safe(str(v))}" for k, v in part.items()))
    if doc["warnings"]:
        lines.append(f"{len(doc['warnings'])} mode warning(s) (on stderr)")
    return "\n".join(lines)
