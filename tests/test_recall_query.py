"""RecallQuery.derived: the fast copy equals the validated constructor."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from projections.recall import RecallQuery

QUERIES = [
    RecallQuery("login handler", 8),
    RecallQuery("parse_header src/http/parse.py", 3, since=1.0, until=9.0, live_after=2.0),
    RecallQuery("", 5, packet_types=("note",), path_filters=("", "a/b.py")),
    RecallQuery("retry", 4, task_id="t-1", scope="task-first", kinds=("decision",),
                mode="conceptual", include_superseded=True, fresh_only=True,
                provider="p", model="m", as_of=7),
    RecallQuery("Foo.bar_baz", None, symbol_filters=("Foo",), target="x"),
]
CHANGES: list[dict[str, Any]] = [
    {"live_after": 123.5},
    {"live_after": None},
    {"limit": 40, "scope": "global"},
    {"limit": 1},
    {"limit": 17, "scope": "task-only"},
]


def _fields(q: RecallQuery) -> tuple[Any, ...]:
    return (attrs.astuple(q, recurse=False), q.tokens, q.has_filter, q.words(), repr(q),
            hash(q))


#: Every query with every change the store makes to one (it derives task-only only from a
#: task-first query, which names a task).
PAIRS = [(q, c) for q in QUERIES for c in CHANGES
         if c.get("scope", "global") == "global" or q.task_id]


@pytest.mark.parametrize(("q", "changes"), PAIRS)
def test_derived_equals_the_validated_copy(q: RecallQuery, changes: dict[str, Any]) -> None:
    got, want = q.derived(**changes), attrs.evolve(q, **changes)
    assert type(got) is RecallQuery
    assert got == want and _fields(got) == _fields(want)
    assert _fields(q) == _fields(attrs.evolve(q))  # the original is untouched


def test_derived_changes_only_the_store_fields() -> None:
    q = QUERIES[0]
    with pytest.raises(TypeError, match="text"):
        q.derived(text="other")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        q.derived(limit=3).limit = 4  # type: ignore[misc]
