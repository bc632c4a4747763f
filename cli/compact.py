"""Maintenance of the log itself: ``compact`` (a new generation of what the views need)."""

from __future__ import annotations

from typing import Any

import click

from .options import Ctx, examples, store_options
from .progress import progress_bar


@examples("ctxledger compact --dry-run", "ctxledger compact --json")
@click.command("compact")
@store_options
@click.option("--dry-run", is_flag=True, help="Only report what would be dropped; write nothing.")
def compact(ctx: Ctx, dry_run: bool) -> None:
    """Rewrite the log as a new generation holding only what the views need.

    Drops superseded and evicted cache entries (and their evictions) and
    calibration samples past a profile's newest 200; keeps every live entry,
    task and handoff event and recent sample in order with its time. The new
    generation starts past the old head; its first event (ledger.compacted)
    records the old head and chain digest, and the old generation is removed
    only once the new one is durable. Writers wait on the writer lock
    meanwhile (bounded by their lock timeout). Seqs of kept events change;
    anchors taken before still verify (docs/operations.md). The views'
    checkpoints are then written afresh from the new generation.
    """
    from projections.compaction import compact as compact_log

    led = ctx.file_ledger("compact", write=not dry_run)
    with progress_bar(ctx, led.head - led.base + 1, "compacting") as bar:
        report = compact_log(led, dry_run=dry_run, progress=bar)
    if report.compacted:  # the checkpoints predate the cut: write this store's afresh now
        from .views import open_store

        with progress_bar(ctx, report.new_head or 0, "checkpointing") as bar:
            open_store(ctx, write=True, progress=bar).checkpoint()
    ctx.emit(report.to_json(), human=_human)


def _human(doc: dict[str, Any]) -> str:
    frac = f"{doc['live_fraction']:.1%}"
    dropped = ", ".join(f"{n} {k}" for k, n in doc["dropped_by_kind"].items()) or "nothing"
    head = (f"seqs {doc['base_seq']}..{doc['head_seq']}: {doc['events']} events, "
            f"{doc['event_bytes']} bytes; live {doc['kept_events']} events, {doc['kept_bytes']} "
            f"bytes ({frac})")
    if doc["dry_run"]:
        return f"dry run: {head}\nwould drop: {dropped}"
    left = (f"\nremoved {doc['removed_files']} file(s) an interrupted compaction left"
            if doc["removed_files"] else "")
    if not doc["compacted"]:
        return f"nothing to compact: {head}{left}"
    return (f"compacted: {head}\ndropped: {dropped}\nnew generation: seqs "
            f"{doc['new_base_seq']}..{doc['new_head_seq']}, {doc['new_segment_bytes']} bytes")


@examples("ctxledger salvage", "ctxledger salvage --json")
@click.command("salvage")
@store_options
def salvage(ctx: Ctx) -> None:
    """Repair a log with mid-log corruption: keep every batch that checks out.

    Every frame whose structure, payload and chain digest check out is copied,
    in order and with its time and batch id, into a new log generation whose
    first event (ledger.salvaged) lists the seqs lost. Damaged segments are
    copied to log/quarantine/ first; nothing is deleted before it is there.
    A log that verifies is left alone. Take a copy of the store first.
    """
    from eventstore.segments import list_segments
    from projections.compaction import renumber_row

    led = ctx.file_ledger("salvage", write=True)
    with progress_bar(ctx, len(list_segments(ctx.log_dir)), "salvaging") as bar:
        report = led.salvage(progress=bar, rewrite=renumber_row)
    ctx.emit(report.to_json(), human=_salvage_human)


def _salvage_human(doc: dict[str, Any]) -> str:
    if not doc["salvaged"]:
        return "nothing to salvage: every batch checks out (a torn tail, if any, is cut by " \
               "the next append)"
    lost = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in doc["lost"]) or "none"
    return (f"salvaged: kept {doc['kept_events']} events, lost {doc['lost_events']} "
            f"(seqs {lost})\n"
            f"damaged segments copied to quarantine/: {', '.join(doc['quarantined']) or '-'}\n"
            f"new generation: seqs {doc['new_base_seq']}..{doc['new_head_seq']}")
