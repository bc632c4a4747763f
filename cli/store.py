"""``ctxledger store``: the packet cache — put, get, list, prune, stats."""

from __future__ import annotations

from typing import Any

import click

from projections import parse_packet_json

from .options import COUNT, Ctx, read_stdin_bytes, store_options
from .views import SEQ_OR_TIME, TIME, iso, open_store


@click.group("store")
def store() -> None:
    """The packet cache: cached reducer packets with a TTL, addressed by cache_key."""


@store.command("put")
@store_options
@click.argument("source", default="-", metavar="[FILE|-]")
def store_put(ctx: Ctx, source: str) -> None:
    """Cache one packet (a JSON object with at least "target") from FILE or stdin.

    Prints the packet's cache_key (blake3 of its canonical encoding) and the seq
    of the event that stored it. Putting the same packet again refreshes it.
    """
    raw = read_stdin_bytes() if source == "-" else _read(source)
    packet = parse_packet_json(raw)
    r = open_store(ctx, write=True).put(packet)  # type: ignore[arg-type]
    ctx.emit(r.to_json(), human=f"{r.cache_key} (seq {r.seq})")


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as e:
        raise click.BadParameter(f"cannot read {path}: {e.strerror}", param_hint="FILE") from None


@store.command("get")
@store_options
@click.option("--key", required=True, help="cache_key (64 hex characters).")
def store_get(ctx: Ctx, key: str) -> None:
    """Print one live cache entry: the packet, when it was cached, its metadata."""
    entry = open_store(ctx).get(key.strip().lower())
    if entry is None:
        raise click.ClickException(f"no live entry with cache_key {key}")
    ctx.emit(entry.to_json())


@store.command("list")
@store_options
@click.option("--target", help="Only entries of this reducer target.")
@click.option("--since", type=TIME, help="Cached at or after TIME (ISO-8601 or @UNIX).")
@click.option("--until", type=TIME, help="Cached at or before TIME.")
@click.option("--offset", type=COUNT, default=0, show_default=True, help="Skip this many entries.")
@click.option("--limit", type=COUNT, default=100, show_default=True, help="At most this many.")
@click.option("--as-of", "as_of", type=SEQ_OR_TIME, help="The cache as it stood at SEQ or TIME.")
def store_list(
    ctx: Ctx,
    target: str | None,
    since: float | None,
    until: float | None,
    offset: int,
    limit: int,
    as_of: int | float | None,
) -> None:
    """List live entries, newest first (no bodies: `store get` prints one)."""
    entries = open_store(ctx).list(
        target=target, since=since, until=until, offset=offset, limit=limit, as_of=as_of
    )
    ctx.emit({"entries": [e.to_json() for e in entries]}, human=lambda d: _list_text(d["entries"]))


def _list_text(entries: list[dict[str, Any]]) -> str:
    if not entries:
        return "(no live entries)"
    lines = [f"{'CACHE_KEY':16}  {'CREATED':20}  {'SEQ':>8}  {'BYTES':>8}  TARGET"]
    for e in entries:
        lines.append(
            f"{e['cache_key'][:16]}  {iso(e['created_at_unix']):20}  {e['seq']:>8}  "
            f"{e['bytes']:>8}  {e['target']}"
        )
    return "\n".join(lines)


@store.command("prune")
@store_options
@click.option("--all", "prune_all", is_flag=True, help="Remove every live entry (manual prune).")
@click.option("--ttl", type=click.FloatRange(min=0), help="Expire entries older than S seconds.")
def store_prune(ctx: Ctx, prune_all: bool, ttl: float | None) -> None:
    """Remove expired entries (or all): one tombstone event per removed entry."""
    r = open_store(ctx, write=True).prune(all=prune_all, ttl=ttl)
    ctx.emit(r.to_json(), human=f"removed {r.removed}, {r.remaining} remaining {r.reasons or ''}")


@store.command("stats")
@store_options
def store_stats(ctx: Ctx) -> None:
    """Counts, ages, evictions by reason, and how each view was loaded.

    Store files that group or others can use are warned about (exit code unchanged).
    """
    stats = open_store(ctx).stats()
    ctx.emit(stats if ctx.json else {k: v for k, v in stats.items() if k != "warnings"})
    ctx.warn(stats["warnings"])
