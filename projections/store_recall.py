"""ContextStore's recall: ranking (with the memory adjustments), freshness, budgets.

A mixin of :class:`projections.store.ContextStore`, kept apart so that each
module reads in one sitting; it uses the store's views, config and log.
"""

from __future__ import annotations

import builtins
import math
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import attrs

from . import cache
from . import fingerprints as fingerprints_view
from . import memory as memory_view
from .cache import CacheState
from .freshness import UNKNOWN_FRESHNESS, CheckBudget, check
from .recall.query import RecallQuery

if TYPE_CHECKING:
    from .budget import RecallAnswer
    from .calibration import Profile
    from .recall import RecallHit
    from .recall_view import RecallState
    from .store import ContextStore

RECALL_NAME = "recall"


class Recalling:
    """``recall``, ``recall_answer`` and their helpers, for :class:`ContextStore`."""

    def recall(
        self: ContextStore,
        query: str,
        limit: int = 8,
        since: float | None = None,
        until: float | None = None,
        target: str | None = None,
        task_id: str | None = None,
        scope: str = "global",
        packet_types: Iterable[str] = (),
        path_filters: Iterable[str] = (),
        symbol_filters: Iterable[str] = (),
        as_of: int | float | None = None,
        provider: str | None = None,
        model: str | None = None,
        fresh_only: bool = False,
        include_superseded: bool = False,
        mode: str = "auto",
        kinds: Iterable[str] = (),
    ) -> builtins.list[RecallHit]:
        """Rank live entries for ``query`` (BM25 plus structured matches; docs/recall.md).

        The arguments make a :class:`~projections.recall.RecallQuery` (validated
        there); :meth:`recall_query` takes one already made.

        Memory fields (docs/recall.md, "Memory and scoring"): superseded entries are
        left out unless ``include_superseded``; ``kinds`` keeps only those memory
        kinds; ``mode`` (auto, conceptual, telemetry) says which source tier the
        score prefers; a recency term favours newer entries.

        ``provider`` and ``model`` (default: ``[recall]`` in config.toml) name the
        calibration profile whose capacity multiplier scales each hit's
        ``budget_estimate`` (docs/calibration.md); without them the agent log is
        never opened. Each hit carries its ``freshness`` when the store has a
        project root on disk; ``fresh_only`` drops ``stale`` hits (docs/recall.md,
        "Freshness"). :meth:`recall_answer` adds a token budget.
        """
        return self.recall_query(RecallQuery(
            query, limit, since, until, target, task_id, scope, tuple(packet_types),
            tuple(path_filters), tuple(symbol_filters), mode=mode, kinds=tuple(kinds),
            include_superseded=include_superseded, fresh_only=fresh_only,
            provider=provider, model=model, as_of=as_of))

    def recall_query(self: ContextStore, q: RecallQuery) -> builtins.list[RecallHit]:
        """:meth:`recall` of a :class:`~projections.recall.RecallQuery` (the CLI and the
        MCP server make one from their options)."""
        capacity = self._recall_capacity(q.provider, q.model)
        as_of = q.as_of
        if as_of is None:
            # a cold process: the views' checkpoints are checksummed on another core
            # while this thread imports numpy and the recall index
            self.runner.prefetch([cache.NAME, RECALL_NAME, memory_view.NAME])
        from . import memory_rank, recall_view  # noqa: F401
        fresh = self.files_root is not None
        states = self._state_as_of(as_of, [cache.NAME, RECALL_NAME, memory_view.NAME] + (
            [fingerprints_view.NAME] if fresh else []))
        rstate = cast("RecallState", states[1])
        cstate, mstate = states[0], states[2]
        assert isinstance(cstate, CacheState) and isinstance(mstate, memory_view.MemoryState)
        now = self.clock()
        # the engine keeps created >= live_after; the store expires created <= now - ttl
        # (get, list): the next float up makes them agree at the edge itself
        live_after = math.nextafter(now - self.config.ttl_seconds, math.inf)
        hits = memory_rank.search(
            rstate.index, mstate, cstate, q.derived(live_after=live_after),
            scoring=memory_rank.Scoring(self.config.recall_tier_bonus,
                                        self.config.recall_tier_penalty,
                                        self.config.recall_recency_weight),
            now=now,
        )
        found: dict[str, Any] = {}
        if fresh:  # checked in rank order (one budget per query), before any snippet
            found = self._freshness(states[3], [h.cache_key for h in hits])
            if q.fresh_only:
                hits = [h for h in hits if found[h.cache_key].state != "stale"]
        out = [self._with_snippet(h, cstate, capacity, found.get(h.cache_key)) for h in hits]
        self._check_mapped()
        return out

    def recall_answer(
        self: ContextStore, query: str | RecallQuery, *, budget_tokens: int | None = None, **kw: Any
    ) -> RecallAnswer:
        """:meth:`recall` (``query`` and ``kw`` as there; or a ``RecallQuery`` alone), then,
        with ``budget_tokens``, the ranked hits that fit in that many tokens and a report
        of the ones that did not (:mod:`projections.budget`, docs/recall.md "Budgets")."""
        from .budget import RecallAnswer, check_budget, fit

        if budget_tokens is not None:
            check_budget(budget_tokens)
        if isinstance(query, RecallQuery):
            if kw:
                raise TypeError(f"options beside a RecallQuery: {', '.join(sorted(kw))}")
            hits = self.recall_query(query)
        else:
            hits = self.recall(query, **kw)
        if budget_tokens is None:
            return RecallAnswer(tuple(hits))
        kept, report = fit(hits, budget_tokens)
        return RecallAnswer(tuple(kept), report)

    def _freshness(self: ContextStore, fstate: Any, keys: Iterable[str]) -> dict[str, Any]:
        """cache_key -> :class:`Freshness` for ``keys`` in order, on one query's budget."""
        assert self.files_root is not None
        recs = [(key, fstate.get(key)) for key in keys]
        if all(rec is None for _key, rec in recs):  # nothing fingerprinted: nothing to check
            return dict.fromkeys(keys, UNKNOWN_FRESHNESS)
        root = os.fspath(self.files_root)
        budget = CheckBudget()
        out = {}
        for key, rec in recs:
            files, complete = rec if rec is not None else (None, True)
            out[key] = check(root, files, complete, budget)
        return out

    def _recall_capacity(
        self: ContextStore, provider: str | None, model: str | None
    ) -> Profile | None:
        """The chars-v1 profile for recall's budgets, or None (uncalibrated)."""
        provider = provider if provider is not None else self.config.recall_provider
        model = model if model is not None else self.config.recall_model
        if provider is None and model is None:
            return None
        if provider is None or model is None:
            raise ValueError("calibrated recall needs both a provider and a model")
        profile = self.calibration.profile(provider, model)
        return profile if profile.exact is not None else None

    def _with_snippet(self: ContextStore, hit: RecallHit, cstate: CacheState,
                      profile: Profile | None = None, freshness: Any = None) -> RecallHit:
        """The hit with its snippet, calibrated budget estimate and ``freshness`` (one copy).

        The index keeps no payload text; the snippet window comes from the logged body.

        The body is read and authenticated whole (its content address covers all
        of it); the snippet then reads its texts lazily and only up to its scan
        limit, so a huge packet costs about its bytes' hash, not a walk of its text.
        """
        from .recall import budget_estimate, make_snippet, packet_texts

        budget = budget_estimate(hit.budget_estimate["est_bytes"], profile)
        ref = cstate.get(hit.cache_key)
        if ref is None:
            return attrs.evolve(hit, budget_estimate=budget, freshness=freshness)
        packet, _meta = self._logged_packet(ref)
        return attrs.evolve(hit, snippet=make_snippet(packet_texts(packet),
                                                      list(hit.matched_tokens)),
                            budget_estimate=budget, freshness=freshness)
