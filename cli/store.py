"""``ctxledger store``: the packet cache — put, get, list, prune, stats."""

from __future__ import annotations

from typing import Any

import click

from .inputs import CACHE_KEY, COUNT, JSON_FILE, SEQ_OR_TIME, TIME, TTL
from .options import Ctx, examples, group_options, json_modes, store_options
from .output import safe
from .views import iso, naming, open_store


@examples("ctxledger store list --limit 5", "ctxledger --json store get --key 5968a442")
@click.group("store")
@group_options
def store() -> None:
    """The packet cache: cached reducer packets with a TTL, addressed by cache_key."""


@examples(
    "echo '{\"target\": \"diffy.analyze\", \"summary\": \"coverage gap\"}' | ctxledger store put",
    "ctxledger store put packet.json --json",
)
@store.command("put")
@store_options
@click.argument("packet", default="-", metavar="[FILE|-]", type=JSON_FILE)
def store_put(ctx: Ctx, packet: Any) -> None:
    """Cache one packet (a JSON object with at least "target") from FILE or stdin.

    Prints the packet's cache_key (blake3 of its canonical encoding) and the seq
    of the event that stored it. Putting the same packet again refreshes it.
    """
    r = open_store(ctx, write=True).put(packet)
    ctx.emit(r.to_json(), human=f"{r.cache_key} (seq {r.seq})")


@examples(
    "ctxledger store get --key 5968a442",
    "ctxledger store get --key 5968a442c6539bcd --json",
    "ctxledger store get --key 5968a442 --json=handle",
)
@store.command("get")
@json_modes(
    "doc", "handle",
    help="Print one JSON document: the entry (--json, --json=doc), or with --json=handle "
    "write it as an artifact and print only {handle, path, sha256, bytes}.",
)
@click.option(
    "--key", required=True, type=CACHE_KEY, help="cache_key, or a unique prefix of 8+ hex digits."
)
def store_get(ctx: Ctx, key: str) -> None:
    """Print one live cache entry: the packet, when it was cached, its metadata.

    With --json=handle the entry goes to a file instead (an artifact, named by
    its sha256) and only where it is is printed: `artifact show HANDLE` prints it.
    """
    st = open_store(ctx)
    if ctx.json_mode == "handle":
        ctx.emit(st.write_artifact(key).to_json())
        return
    full = st.resolve_key(key)
    entry = st.get(full)
    if entry is None:  # expired since it was resolved
        raise click.ClickException(f"no live entry with cache_key {full}")
    ctx.emit(entry.to_json())


@examples("ctxledger store list --since 24h --limit 20", "ctxledger store list --as-of 7d --json",
          "ctxledger store list --include-superseded --json")
@store.command("list")
@store_options
@click.option("--target", help="Only entries of this reducer target.")
@click.option("--since", type=TIME, help="Cached at or after TIME (ISO-8601, @UNIX, or 24h ago).")
@click.option("--until", type=TIME, help="Cached at or before TIME.")
@click.option("--offset", type=COUNT, default=0, show_default=True, help="Skip this many entries.")
@click.option("--limit", type=COUNT, default=100, show_default=True, help="At most this many.")
@click.option(
    "--as-of",
    "as_of",
    type=SEQ_OR_TIME,
    help="The cache as it stood at SEQ (a bare integer) or TIME (@UNIX, ISO-8601, 7d).",
)
@click.option("--include-superseded", is_flag=True,
              help="Also entries a newer packet of their dedupe_key replaced (counted too).")
def store_list(
    ctx: Ctx,
    target: str | None,
    since: float | None,
    until: float | None,
    offset: int,
    limit: int,
    as_of: int | float | None,
    include_superseded: bool,
) -> None:
    """List live entries, newest first (no bodies: `store get` prints one).

    Superseded entries (docs/recall.md, "Memory and scoring") are left out, and
    not counted, unless --include-superseded.
    """
    with naming("--as-of"):
        page = open_store(ctx).list_page(
            target=target, since=since, until=until, offset=offset, limit=limit, as_of=as_of,
            include_superseded=include_superseded,
        )
    ctx.emit(page.to_json(), human=_list_text)


def _list_text(page: dict[str, Any]) -> str:
    entries = page["entries"]
    if not entries:
        total = page["total"]
        return f"(no live entries at this offset; {total} in all)" if total else "(no live entries)"
    lines = [f"{'CACHE_KEY':16}  {'CREATED':20}  {'SEQ':>8}  {'BYTES':>8}  TARGET"]
    for e in entries:
        lines.append(
            f"{e['cache_key'][:16]}  {iso(e['created_at_unix']):20}  {e['seq']:>8}  "
            f"{e['bytes']:>8}  {safe(e['target'])}"
            + (" (superseded)" if e["superseded"] else "")
        )
    nxt = page["next_offset"]
    if nxt is not None:
        lines.append(f"({len(entries)} of {page['total']}; --offset {nxt} for more)")
    return "\n".join(lines)


@examples("ctxledger store prune", "ctxledger store prune --ttl 7d --json")
@store.command("prune")
@store_options
@click.option("--all", "prune_all", is_flag=True, help="Remove every live entry (manual prune).")
@click.option(
    "--ttl", type=TTL, help="Expire entries older than this: seconds, or 30m, 24h, 7d, 2w."
)
def store_prune(ctx: Ctx, prune_all: bool, ttl: float | None) -> None:
    """Remove expired entries (or all): one tombstone event per removed entry."""
    r = open_store(ctx, write=True).prune(all=prune_all, ttl=ttl)
    reasons = ", ".join(f"{safe(k)} {n}" for k, n in sorted(r.reasons.items()))
    ctx.emit(r.to_json(), human=f"removed {r.removed}, {r.remaining} remaining"
             + (f" ({reasons})" if reasons else ""))


@examples("ctxledger store stats", "ctxledger store stats --json")
@store.command("stats")
@store_options
def store_stats(ctx: Ctx) -> None:
    """Counts, ages, evictions by reason, and how each view was loaded.

    Store files that group or others can use are warned about (exit code unchanged).
    """
    stats = open_store(ctx).stats()
    ctx.emit(stats if ctx.json else {k: v for k, v in stats.items() if k != "warnings"})
    ctx.warn(stats["warnings"])
