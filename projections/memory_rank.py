"""Memory-aware recall: the engine's ranking, re-ranked exactly with bounded adjustments.

The recall engine (``RecallIndex.rank``) stays as it is: BM25 plus structured
boosts, its exact top-k. On top of it each candidate's score gets

    score = (base + tier) + w / (1 + age_days)

where ``tier`` is ``+tier_bonus`` for the preferred source tier, ``-tier_penalty``
for the other one and 0 without a tier, and ``age_days`` is the time since the
entry's latest put (never negative). Superseded entries and entries of other
memory kinds are filtered out. Every adjustment is bounded above by
``A = tier_max + w``, so asking the engine for its top N and re-ranking is exact
as soon as the k-th adjusted score beats ``s_N + A`` (``s_N`` the N-th base
score): nothing the engine left out can reach it. Otherwise N doubles, until
the engine runs out of matches. docs/recall.md, "Memory and scoring", says it
in full.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

import attrs

from .memory import MEMORY_KINDS, NO_INFO, TELEMETRY_KINDS, MemoryInfo, MemoryState, Supersession

if TYPE_CHECKING:
    from .cache import CacheState
    from .recall import RecallHit, RecallIndex, RecallQuery

MODES = ("auto", "conceptual", "telemetry")
DAY = 86_400.0


@attrs.frozen
class Scoring:
    """The adjustments' weights (config.toml ``[recall]``; all >= 0)."""

    tier_bonus: float = 0.5
    tier_penalty: float = 0.25
    recency_weight: float = 0.0


def preferred_tier(mode: str, kinds: Sequence[str] = ()) -> str:
    """The source tier ``mode`` prefers: conceptual curated, telemetry telemetry; auto
    telemetry when every kind asked for is a telemetry kind, else curated."""
    if mode == "conceptual":
        return "curated"
    if mode == "telemetry":
        return "telemetry"
    if mode == "auto":
        return "telemetry" if kinds and all(k in TELEMETRY_KINDS for k in kinds) else "curated"
    raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")


def check_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    """The kinds, validated (ValueError names a bad one), without repeats."""
    for k in kinds:
        if k not in MEMORY_KINDS:
            raise ValueError(f"unknown memory kind {k!r}: expected one of "
                             f"{', '.join(MEMORY_KINDS)}")
    return tuple(dict.fromkeys(kinds))


@attrs.frozen
class Adjuster:
    """The adjustments for one query: who is preferred, and when it is."""

    scoring: Scoring
    prefer: str  # the preferred source tier
    now: float

    def tier(self, tier: str | None) -> float:
        if tier is None:
            return 0.0
        return self.scoring.tier_bonus if tier == self.prefer else -self.scoring.tier_penalty

    def recency(self, created: float) -> float:
        w = self.scoring.recency_weight
        return w / (1.0 + max(0.0, self.now - created) / DAY) if w else 0.0

    def score(self, base: float, tier: str | None, created: float) -> float:
        """``(base + tier) + recency``: evaluated in this order, as :meth:`bound` is."""
        return (base + self.tier(tier)) + self.recency(created)

    def bound(self, base: float, tier_max: float) -> float:
        """The highest adjusted score a doc of base score <= ``base`` can have. Each
        operand is at most its maximum and rounded addition is monotone, so the
        float bound holds for float scores too."""
        return (base + tier_max) + self.scoring.recency_weight

    def reasons(self, tier: str | None) -> tuple[str, ...]:
        out: list[str] = []
        if tier is not None and self.tier(tier) != 0.0:
            out.append("curated_memory" if tier == "curated" else "telemetry")
        if self.scoring.recency_weight:
            out.append("recency")
        return tuple(out)


@attrs.frozen
class Ranked:
    """One candidate after the adjustments: what the final hit needs."""

    cache_key: str
    score: float
    base: float
    created: float
    info: MemoryInfo
    superseded: Supersession | None


MAX_RERANK = 2048
"""Candidates the re-rank may ask the engine for in one query (failure rule 8: bounded
work). Past it the answer is the best of those candidates, flagged ``rerank_bounded``."""


def exact_top(
    rank: Callable[[int], list[tuple[str, float]]],
    k: int,
    judge: Callable[[str, float], Ranked | None],
    bound: Callable[[float], float],
    start: int,
    max_n: int = MAX_RERANK,
) -> tuple[list[Ranked], set[str] | None, bool]:
    """The exact top ``k`` by adjusted score (ties: newest, then cache_key, as the engine).

    ``rank(n)`` is the engine's top n by base score; ``judge`` adjusts one, or
    drops it (None); ``bound(s)`` is the best adjusted score of a base score <= s.
    The answer is final once the k-th kept score is strictly above
    ``bound(s_N)`` (an equal score could lose its tie to an unseen newer entry),
    or once the engine returned fewer than asked (it has no more matches).
    Returns the top k, every key the engine matched when it ran dry (else
    None), and whether ``max_n`` candidates were judged without the answer
    becoming final (then it is the best among them, not proven exact).
    """
    n = min(max(start, 1), max_n)
    judged: dict[str, Ranked | None] = {}
    while True:
        got = rank(n)
        kept: list[Ranked] = []
        for key, base in got:
            if key not in judged:
                judged[key] = judge(key, base)
            r = judged[key]
            if r is not None:
                kept.append(r)
        kept.sort(key=_order)
        if len(got) < n:
            return kept[:k], {key for key, _ in got}, False
        if len(kept) >= k and kept[k - 1].score > bound(got[-1][1]):
            return kept[:k], None, False
        if n >= max_n:
            return kept[:k], None, True
        n = min(2 * n, max_n)


def _order(r: Ranked) -> tuple[float, float, str]:
    return (-r.score, -r.created, r.cache_key)


def search(
    index: RecallIndex,
    memory: MemoryState,
    cache: CacheState,
    q: RecallQuery,
    *,
    scoring: Scoring,
    now: float,
    first_n: int | None = None,
) -> list[RecallHit]:
    """Recall's ranking with the memory adjustments and filters (docs/recall.md).

    ``q``: the whole question (the engine's filters, scope and ``live_after``; here
    ``mode``, ``kinds`` and ``include_superseded``).
    ``first_n``: how many the engine is asked for first (default ``max(2k, k + 16)``;
    tests ask for 1 to exercise the doubling).
    """
    limit = q.limit
    kinds = check_kinds(q.kinds)
    include_superseded = q.include_superseded
    prefer = preferred_tier(q.mode, kinds)
    adj = Adjuster(scoring, prefer, now)
    other = "telemetry" if prefer == "curated" else "curated"
    adjusts = bool(scoring.recency_weight) or (
        scoring.tier_bonus > 0 and memory.has_tier(prefer)) or (
        scoring.tier_penalty > 0 and memory.has_tier(other))
    if not kinds and not adjusts and not memory.may_supersede():
        # nothing can move or drop: the engine's answer is the answer
        hits = index.search(q, now=now)
        return [_with_memory(h, memory.info(h.cache_key), None, ()) for h in hits]
    tier_max = scoring.tier_bonus if memory.has_tier(prefer) else 0.0
    # the engine keeps created >= live_after, the memory view created > its argument
    live_after = None if q.live_after is None else math.nextafter(q.live_after, -math.inf)
    want = set(kinds)
    currents: dict[str, str | None] = {}  # dedupe_key -> its current member, this query

    def judge_with(skip: Collection[str]) -> Callable[[str, float], Ranked | None]:
        def judge(key: str, base: float) -> Ranked | None:
            if key in skip:
                return None
            info = memory.info(key)
            if want and info.memory_kind not in want:
                return None
            sup = memory.superseded(key, live_after, currents) if info is not NO_INFO else None
            if sup is not None and not include_superseded:
                return None
            ref = cache.get(key)
            created = ref.created_at if ref is not None else now
            return Ranked(key, adj.score(base, info.source_tier, created), base, created,
                          info, sup)

        return judge

    def bound(s: float) -> float:
        return adj.bound(s, tier_max)

    def ranker(scope: str) -> Callable[[int], list[tuple[str, float]]]:
        return lambda n: index.rank(q.derived(limit=n, scope=scope))

    start = max(2 * limit, limit + 16) if first_n is None else first_n
    if limit == 0:
        return []
    if q.scope == "task-first":
        top, seen, bounded = exact_top(ranker("task-only"), limit, judge_with(()), bound,
                                       start, MAX_RERANK)
        if len(top) < limit and seen is not None:  # the engine ran dry on the task's own
            rest, _, more = exact_top(ranker("global"), limit - len(top), judge_with(seen),
                                      bound, start, MAX_RERANK)
            top, bounded = top + rest, bounded or more
    else:
        top, _, bounded = exact_top(ranker(q.scope), limit,
                                    judge_with(()), bound, start, MAX_RERANK)
    hits = index.hits_for([(r.cache_key, r.score) for r in top], q, now=now)
    flag = ("rerank_bounded",) if bounded else ()
    return [
        _with_memory(h, r.info, r.superseded, adj.reasons(r.info.source_tier) + flag)
        for h, r in zip(hits, top, strict=True)
    ]


def _with_memory(hit: RecallHit, info: MemoryInfo, sup: Supersession | None,
                 reasons: tuple[str, ...]) -> RecallHit:
    if info is NO_INFO and sup is None and not reasons:
        return hit  # a packet without memory fields: the engine's hit as it is (no copy)
    more = reasons + (("superseded",) if sup is not None else ())
    return attrs.evolve(
        hit,
        match_reasons=hit.match_reasons + more,
        memory_kind=info.memory_kind,
        source_tier=info.source_tier,
        superseded_by=None if sup is None else sup.by,
    )
