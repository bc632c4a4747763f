"""Recall engine: BM25 plus path, symbol, test and task matching (pure, no I/O).

    from projections.recall import RecallIndex, RecallDoc, RecallHit, tokenize, make_snippet

See docs/recall.md for the semantics and docs/architecture.md for the layout.
"""

from __future__ import annotations

from .index import BOOSTS, K1, MAX_QUERY_CHARS, MAX_QUERY_TERMS, SCOPES, B, RecallIndex
from .snippet import make_snippet
from .tokenize import tokenize
from .types import (
    ESTIMATOR,
    RecallDoc,
    RecallHit,
    budget_estimate,
    est_tokens,
    packet_texts,
    payload_strings,
)

__all__ = [
    "B",
    "BOOSTS",
    "ESTIMATOR",
    "K1",
    "MAX_QUERY_CHARS",
    "MAX_QUERY_TERMS",
    "SCOPES",
    "RecallDoc",
    "RecallHit",
    "RecallIndex",
    "budget_estimate",
    "est_tokens",
    "make_snippet",
    "packet_texts",
    "payload_strings",
    "tokenize",
]
