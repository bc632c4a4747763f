"""``ctxledger recall``: what did I learn before about this?"""

from __future__ import annotations

from typing import Any

import click

from projections.recall import RecallQuery
from projections.recall.constants import SCOPES

from .inputs import COUNT, MAX_INT, SEQ_OR_TIME, TIME
from .options import Ctx, examples, store_options
from .output import safe
from .views import naming, open_store, usage_errors

MODES = ("auto", "conceptual", "telemetry")
"""``projections.memory_rank.MODES`` (a test keeps them equal)."""
MEMORY_KINDS = ("brief", "handoff", "recommended_action", "evidence", "tool_trace",
                "focus_inference", "state_write", "other")
"""``projections.memory.MEMORY_KINDS`` (a test keeps them equal)."""


@examples(
    'ctxledger recall -q "parse http header" --limit 3 --kind brief --include-superseded',
    "ctxledger recall --task task-123 --scope task-first -q login --since 7d --mode telemetry",
    "ctxledger recall -q login --budget-tokens 4000 --fresh-only --provider anthropic "
    "--model claude-sonnet-4 --json",
)
@click.command("recall")
@store_options
@click.option("--query", "-q", default="", help="Free text, paths, symbols, test names.")
@click.option("--limit", type=COUNT, default=8, show_default=True, help="At most this many hits.")
@click.option("--since", type=TIME, help="Cached at or after TIME (ISO-8601, @UNIX, or 24h ago).")
@click.option("--until", type=TIME, help="Cached at or before TIME.")
@click.option("--target", help="Only entries of this reducer target.")
@click.option("--task", "task_id", help="Task id for task-first / task-only scopes.")
@click.option(
    "--scope",
    type=click.Choice(SCOPES),
    default="global",
    show_default=True,
    help="global; task-first (the task's entries first); task-only.",
)
@click.option(
    "--path", "paths", multiple=True, help="Only entries touching this path (repeatable)."
)
@click.option(
    "--symbol", "symbols", multiple=True, help="Only entries naming this symbol (repeatable)."
)
@click.option(
    "--packet-type", "packet_types", multiple=True, help="Only these packet types (repeatable)."
)
@click.option(
    "--as-of",
    "as_of",
    type=SEQ_OR_TIME,
    help="Recall as the store stood at SEQ (a bare integer) or TIME (@UNIX, ISO-8601, 7d).",
)
@click.option("--provider", help="With --model: scale budget estimates by this calibration "
                                 "profile (default: [recall] provider).")
@click.option("--model", help="With --provider: the model billed (default: [recall] model).")
@click.option("--budget-tokens", type=click.IntRange(min=1, max=MAX_INT),
              help="Only the ranked hits whose est_tokens fit in N, greedy in rank order; "
                   "the rest are listed under budget.omitted.")
@click.option("--fresh-only", is_flag=True,
              help="Drop stale hits (a file changed or is gone); fresh and unknown stay.")
@click.option("--include-superseded", is_flag=True,
              help="Also entries a newer packet of their dedupe_key replaced, or that marked "
                   "themselves superseded.")
@click.option("--mode", type=click.Choice(MODES), default="auto", show_default=True,
              help="Which source tier scores higher: conceptual curated, telemetry telemetry; "
                   "auto telemetry only when every --kind is a telemetry kind.")
@click.option("--kind", "kinds", type=click.Choice(MEMORY_KINDS), multiple=True,
              help="Only entries of this memory_kind (repeatable).")
def recall(
    ctx: Ctx,
    query: str,
    limit: int,
    since: float | None,
    until: float | None,
    target: str | None,
    task_id: str | None,
    scope: str,
    paths: tuple[str, ...],
    symbols: tuple[str, ...],
    packet_types: tuple[str, ...],
    as_of: int | float | None,
    provider: str | None,
    model: str | None,
    budget_tokens: int | None,
    fresh_only: bool,
    include_superseded: bool,
    mode: str,
    kinds: tuple[str, ...],
) -> None:
    """Rank live cache entries by BM25 over their text plus path, symbol, test and task matches."""
    store = open_store(ctx)
    with usage_errors(), naming("--as-of"):  # (the engine's rules: a scope without --task...)
        q = RecallQuery(
            query, limit, since, until, target, task_id, scope, packet_types, paths, symbols,
            mode=mode, kinds=kinds, include_superseded=include_superseded,
            fresh_only=fresh_only, provider=provider, model=model, as_of=as_of)
        answer = store.recall_answer(q, budget_tokens=budget_tokens)
    ctx.emit(answer.to_json(), human=_text)


def _text(doc: dict[str, Any]) -> str:
    text = _table(doc["hits"])
    b = doc.get("budget")
    if b is not None:
        text += f"\nbudget: {b['used']} of {b['limit']} tokens used"
        if b["omitted"]:
            keys = ", ".join(safe(o["cache_key"][:12]) for o in b["omitted"])
            text += f"; {len(b['omitted'])} omitted (did not fit): {keys}"
    return text


def _table(hits: list[dict[str, Any]]) -> str:
    if not hits:
        return "(no hits)"
    lines = [f"{'SCORE':>8}  {'CACHE_KEY':12}  {'TARGET':28}  {'WHY':28}  SNIPPET"]
    for h in hits:
        why = ",".join(
            r.replace("_match", "").replace("bm25_text", "text") for r in h["match_reasons"]
        )
        snippet = safe(" ".join(h["snippet"].split())[:70])
        fresh = h.get("freshness")
        if fresh is not None and fresh["state"] == "stale":
            snippet = "[stale] " + snippet
        lines.append(
            f"{h['score']:8.3f}  {safe(h['cache_key'][:12])}  {safe(h['target'][:28]):28}  "
            f"{why[:28]:28}  {snippet}"
        )
    return "\n".join(lines)
