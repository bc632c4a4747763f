"""Recall engine: BM25 plus path, symbol, test and task matching (pure, no I/O).

    from projections.recall import RecallIndex, RecallDoc, RecallHit, RecallQuery, tokenize

See docs/recall.md for the module map and the semantics. Importing the package
loads no numpy: the index (and numpy) load on first use of ``RecallIndex``, so
the CLI can read :data:`SCOPES` or build a :class:`RecallQuery` cheaply.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .constants import BOOSTS, K1, MAX_QUERY_CHARS, MAX_QUERY_TERMS, SCOPES, B
from .query import RecallQuery
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

if TYPE_CHECKING:
    from .index import RecallIndex

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
    "RecallQuery",
    "budget_estimate",
    "est_tokens",
    "make_snippet",
    "packet_texts",
    "payload_strings",
    "tokenize",
]


def __getattr__(name: str) -> Any:
    """``RecallIndex`` on first use (it imports numpy)."""
    if name == "RecallIndex":
        value = importlib.import_module(".index", __name__).RecallIndex
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
