"""A recall question as one value: every option, validated once when it is made.

The CLI, the MCP server and ``ContextStore.recall`` build a :class:`RecallQuery`;
the store passes it to the memory re-ranker and the index, which never validate
again. Pure and light: no numpy (the CLI builds one before the index loads).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import attrs

from .constants import DEFAULT_LIMIT, MAX_QUERY_CHARS, MAX_QUERY_TERMS, SCOPES
from .tokenize import tokenize

_TRIM = "\"'`()[]{}<>,;!?"
_IDENT_SHAPED = re.compile(r"_|[a-z][A-Z]|[A-Za-z][0-9]|[0-9][A-Za-z]|\.")


def _text(value: str | None) -> str:
    return value or ""


def _strings(values: Iterable[str] | None) -> tuple[str, ...]:
    return tuple(values) if values else ()


def _nonempty(values: Iterable[str] | None) -> tuple[str, ...]:
    """Filter values without the empty ones (an empty filter value filters nothing)."""
    return tuple(v for v in values if v) if values else ()


def _limit(value: Any) -> Any:
    return DEFAULT_LIMIT if value is None else value


_DERIVABLE = frozenset({"limit", "scope", "live_after"})
"""The fields :meth:`RecallQuery.derived` may change (the store's internal changes)."""


# slots=False: a frozen dict class's generated __init__ writes its fields into the
# instance dict instead of calling object.__setattr__ per field, and ``derived``
# copies that dict; a query is made per call, so this is most of its cost.
@attrs.frozen(slots=False)
class RecallQuery:
    """One recall: the text, the engine's filters and scope, and the store's options.

    Made once (by the CLI, the MCP server or ``ContextStore.recall``); making it
    checks the engine's rules (docs/recall.md, "Filters, scopes, ordering") and
    raises ``ValueError`` with the message a user acts on. The store's own options
    (``mode``, ``kinds``, ``provider``/``model``) are checked by the store, which
    owns their meaning (memory kinds, calibration profiles).
    """

    text: str = attrs.field(default="", converter=_text)
    limit: int = attrs.field(default=DEFAULT_LIMIT, converter=_limit)
    since: float | None = None
    until: float | None = None
    target: str | None = None
    task_id: str | None = None
    scope: str = "global"
    packet_types: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    path_filters: tuple[str, ...] = attrs.field(default=(), converter=_nonempty)
    symbol_filters: tuple[str, ...] = attrs.field(default=(), converter=_nonempty)
    live_after: float | None = None
    """Entries created before this are expired (the store sets it from its TTL)."""
    # the store's options (ContextStore.recall; the index does not read them)
    mode: str = "auto"
    kinds: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    include_superseded: bool = False
    fresh_only: bool = False
    provider: str | None = None
    model: str | None = None
    as_of: int | float | None = None
    tokens: tuple[str, ...] = attrs.field(init=False, eq=False, repr=False)
    """The distinct tokens of ``text``, in order (what BM25 sums over)."""

    def __attrs_post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"unknown scope {self.scope!r}: expected one of {', '.join(SCOPES)}")
        limit = self.limit
        if not isinstance(limit, int) or limit < 0:
            raise ValueError(f"limit must be a non-negative integer, got {limit!r}")
        text = self.text
        if len(text) > MAX_QUERY_CHARS:
            raise ValueError(f"query is {len(text)} characters long; at most {MAX_QUERY_CHARS}")
        if self.scope != "global" and not self.task_id:
            raise ValueError(f"scope {self.scope} needs a task id")
        toks = tuple(tokenize(text)) if text else ()
        if len(toks) > 1:  # one token needs no de-duplication (the common short query)
            toks = tuple(dict.fromkeys(toks))
        if len(toks) > MAX_QUERY_TERMS:
            raise ValueError(f"query has {len(toks)} distinct terms; at most {MAX_QUERY_TERMS}")
        if not toks and not self.has_filter:
            raise ValueError("empty query: give query text or at least one filter "
                             "(since, until, target, packet type, path, symbol, task scope)")
        self.__dict__["tokens"] = toks

    def derived(self, **changes: Any) -> RecallQuery:
        """This query with the store's own changes (``limit``, ``scope``, ``live_after``),
        not validated again.

        ``attrs.evolve`` would re-run every converter and check; the store and the
        memory re-ranker derive from a query that was validated when it was made, and
        only set a positive limit, the TTL's ``live_after``, or ``task-only``/``global``
        for a ``task-first`` query (whose task id was checked). Equal to
        ``attrs.evolve(self, **changes)`` for those (tests/test_recall_query.py).
        """
        if not changes.keys() <= _DERIVABLE:
            raise TypeError(f"derived changes only {', '.join(sorted(_DERIVABLE))}, "
                            f"not {', '.join(sorted(changes.keys() - _DERIVABLE))}")
        new = object.__new__(RecallQuery)
        d = new.__dict__
        d.update(self.__dict__)
        d.update(changes)
        return new

    @property
    def has_filter(self) -> bool:
        """Whether anything but the text narrows the answer (an empty text needs one)."""
        return bool(self.since is not None or self.until is not None or self.target is not None
                    or self.packet_types or self.path_filters or self.symbol_filters
                    or (self.task_id and self.scope != "global"))

    def words(self) -> list[str]:
        """The query's words for structured matching (:func:`query_words`)."""
        return query_words(self.text)


def query_words(query: str) -> list[str]:
    """Whitespace-separated words of a query, outer punctuation trimmed, without repeats."""
    out = []
    for w in query.split():
        w = w.strip(_TRIM)
        if w.endswith((".", ":")):
            w = w.rstrip(".:")
        if w:
            out.append(w)
    return list(dict.fromkeys(out))


def is_path_like(w: str) -> bool:
    """A word that may name a path: it has a separator or an inner dot."""
    return "/" in w or "\\" in w or ("." in w.strip("."))


def partial_symbol_ok(w: str) -> bool:
    """Prefix/contains symbol matching only for identifier-shaped words of 4+ chars."""
    return len(w) >= 4 and _IDENT_SHAPED.search(w) is not None


def as_query(query: RecallQuery | str, options: dict[str, Any]) -> RecallQuery:
    """``query`` itself, or a :class:`RecallQuery` of the text and keyword ``options``
    (the index's ``rank("text", limit=3, ...)`` spelling)."""
    if isinstance(query, RecallQuery):
        if options:
            raise TypeError(f"options beside a RecallQuery: {', '.join(sorted(options))}; "
                            "put them in the RecallQuery")
        return query
    return RecallQuery(query, **options)
