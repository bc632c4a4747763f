"""Storage diagnostics: which store is in force for a root and why, and what is on disk.

Read-only: nothing here creates, repairs or rewrites a file (a missing store
or agent home is reported as missing). Logs are opened readonly, views are
loaded as a reader loads them (checkpoint, then the events after it) so that
``loaded_from`` says what a reader would actually get.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eventstore import Ledger, private
from eventstore.segments import list_segments

from .logs import LogChoice, log_choice, open_log
from .scope import Layout


def log_report(log_dir: Path) -> dict[str, Any]:
    """Segments, bytes, events and head of the file log in ``log_dir`` (``exists`` false
    when there is none)."""
    out: dict[str, Any] = {"path": str(log_dir), "exists": log_dir.is_dir()}
    if not out["exists"]:
        return out
    from .compaction import plan_compaction

    segs = [p for _b, p in list_segments(log_dir)]  # the current generation's
    out["segments"] = len(segs)
    out["bytes"] = sum(_size(p) for p in segs)
    with Ledger.open(log_dir, readonly=True) as led:
        base, head = led.base, led.head
        out["base_seq"] = base
        out["events"] = head - base + 1 if head else 0  # gapless from the generation start
        out["head_seq"] = head
        out["head_digest"] = led.head_digest.hex() if head else None
        # what `ctxledger compact` would keep (docs/operations.md, "Compaction")
        plan = plan_compaction(led.read_raw_batches(base, head)) if head else None
    out["live_events"] = plan.kept if plan is not None else 0
    out["event_bytes"] = plan.bytes_total if plan is not None else 0
    out["live_bytes"] = plan.bytes_kept if plan is not None else 0
    out["live_fraction"] = round(plan.live_fraction, 4) if plan is not None else 1.0
    return out


def stream_report(layout: Layout, choice: LogChoice) -> dict[str, Any]:
    """The JetStream log: servers, stream, replicas, its state as the servers report it,
    and its events (``exists`` false when the stream is not there)."""
    from eventstore import StoreNotFoundError

    out: dict[str, Any] = {**choice.to_json(), "exists": False}
    try:
        log = open_log(layout, choice, readonly=True)
    except StoreNotFoundError:
        return out
    with log:
        state = log.stream_state()  # type: ignore[attr-defined]
        head = log.head
        out.update({
            "exists": True, "events": head, "head_seq": head,
            "head_digest": log.head_digest.hex() if head else None,
            "stream_messages": state.messages, "stream_bytes": state.bytes,
            "stream_replicas": state.replicas, "leader": state.leader,
            "peers": [{"name": n, "current": c} for n, c in state.peers],
        })
    return out


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def views_report(store: Any) -> dict[str, Any]:
    """Per view of an open store: checkpoint files, watermark, where it was loaded from."""
    store.runner.load_all()
    ckdir = store.runner.ckdir.path
    out: dict[str, Any] = {}
    for name, v in store.runner.views.items():
        out[name] = {
            "checkpoint_bytes": _size(ckdir / f"{name}.ckpt") or None,
            "backup_bytes": _size(ckdir / f"{name}.ckpt.bak") or None,
            "watermark_seq": v.state.seq,
            "loaded_from": v.loaded_from,
            "checkpoint_fallbacks": list(v.refused),
        }
    return out


def layout_report(layout: Layout) -> dict[str, Any]:
    """The scope in force and why, and the paths that follow from it."""
    return {
        "storage_scope": layout.scope,
        "reason": layout.reason,
        "detail": layout.detail,
        "root": str(layout.root),
        "canonical_root": str(layout.canonical),
        "project_id": layout.project_id,
        "project_store": str(layout.project_dir) if layout.scope == "project" else None,
        "agent_home": str(layout.home),
        "checkpoints": str(layout.checkpoints_dir),
        "artifacts": str(layout.artifacts_dir),
        "config_files": [
            {"path": str(p), "exists": p.is_file()} for p in layout.config_paths
        ],
    }


def mode_report(layout: Layout) -> list[str]:
    """Paths wider than 0700/0600 in the project store (if any) and the agent home."""
    warnings: list[str] = []
    places = [layout.home]
    if layout.scope == "project":
        places.insert(0, layout.project_dir)
    for place in places:
        if os.path.lexists(place):
            warnings.extend(private.mode_warnings(place))
    return warnings


def storage_report(
    root: str | os.PathLike[str],
    *,
    home: Path | None = None,
    storage_scope: str | None = None,
    backend: str | None = None,
    servers: Sequence[str] = (),
) -> dict[str, Any]:
    """Everything ``ctxledger storage`` prints, for ``root``.

    ``logs`` has ``project`` (project scope only) and ``agent`` (always: token
    calibration lives there, and in agent scope the project's events too).
    ``views`` are the project's views, loaded as a reader would load them;
    empty when the store does not exist yet.
    """
    from .store import ContextStore
    from .storedir import open_layout, store_exists

    layout, cfg = open_layout(root, home=home, storage_scope=storage_scope)
    choice = log_choice(layout, cfg, backend=backend, servers=servers)
    logs: dict[str, Any] = {}
    if not choice.is_file:
        logs["project"] = stream_report(layout, choice)
    elif layout.scope == "project":
        logs["project"] = log_report(layout.log_dir)
    logs["agent"] = log_report(layout.agent_log_dir)
    doc: dict[str, Any] = {"scope": layout_report(layout), "logs": logs, "views": {}}
    if logs.get("project", {}).get("exists") if not choice.is_file else store_exists(layout):
        with ContextStore.open(root, readonly=True, home=home, storage_scope=storage_scope,
                               backend=backend, servers=servers) as store:
            doc["views"] = views_report(store)
            doc["artifacts"] = store.artifact_stats()
    doc["calibration"] = calibration_report(layout.home)
    doc["warnings"] = mode_report(layout) + unused_store_warning(layout)
    return doc


def calibration_report(home: Path) -> dict[str, Any]:
    """The agent's calibration view: profiles, samples kept, watermark, where it came from."""
    from .calibration import NAME, Calibration

    with Calibration(home, readonly=True) as cal:
        st = cal.state()
        runner = cal._open(create=False)
        view = runner.views.get(NAME) if runner is not None else None
        return {
            "profiles": len(st.samples),
            "samples": sum(len(v) for v in st.samples.values()),
            "watermark_seq": st.seq,
            "loaded_from": view.loaded_from if view is not None else "empty",
        }


def unused_store_warning(layout: Layout) -> list[str]:
    """A project store that exists at the root while agent scope is in force (say, after
    the agent config switched scope) is not read: say so, it surprises people."""
    if layout.scope == "agent" and not layout.fallback and (layout.project_dir / "log").is_dir():
        return [f"{layout.project_dir} holds a project store, but agent scope is in force "
                f"({layout.reason}): it is not read; use --storage-scope project to reach it"]
    return []
