"""Token budgets over recall hits: which ranked hits fit, and which did not.

Greedy in rank order: each hit is taken when its ``budget_estimate.est_tokens``
still fits in what is left of the budget, else listed in ``omitted`` (never
silently dropped) while later, smaller hits may still fit. A hit larger than
the whole budget is omitted, not truncated. ``used`` never exceeds ``limit``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from .recall import RecallHit


@attrs.frozen
class Omitted:
    """A ranked hit left out because it did not fit."""

    cache_key: str
    est_tokens: int
    score: float

    def to_json(self) -> dict[str, Any]:
        return {"cache_key": self.cache_key, "est_tokens": self.est_tokens, "score": self.score}


@attrs.frozen
class BudgetReport:
    """How a token budget was spent: ``overflow`` is True when any hit was omitted."""

    limit: int
    used: int
    omitted: tuple[Omitted, ...]
    overflow: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "used": self.used,
            "omitted": [o.to_json() for o in self.omitted],
            "overflow": self.overflow,
        }


@attrs.frozen
class RecallAnswer:
    """What ``ContextStore.recall_answer`` returns: the hits, and the budget when one
    was asked for (None otherwise)."""

    hits: tuple[RecallHit, ...]
    budget: BudgetReport | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"hits": [h.to_json() for h in self.hits]}
        if self.budget is not None:
            doc["budget"] = self.budget.to_json()
        return doc


def check_budget(limit: Any) -> int:
    """``limit`` if it is a positive int (not a bool); else ValueError."""
    if type(limit) is not int or limit < 1:
        raise ValueError(f"budget_tokens must be a positive integer, not {limit!r}")
    return limit


def fit(hits: Sequence[RecallHit], limit: int) -> tuple[list[RecallHit], BudgetReport]:
    """The hits that fit in ``limit`` tokens (greedy in rank order) and the report."""
    check_budget(limit)
    kept: list[RecallHit] = []
    omitted: list[Omitted] = []
    used = 0
    for h in hits:
        cost = int(h.budget_estimate["est_tokens"])
        if used + cost <= limit:
            kept.append(h)
            used += cost
        else:
            omitted.append(Omitted(h.cache_key, cost, h.score))
    return kept, BudgetReport(limit, used, tuple(omitted), bool(omitted))
