"""RecallQuery.derived and quick_query: the fast copies equal the validated constructor."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.recall import RecallQuery
from projections.recall.query import quick_query

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


# quick_query: every option with valid and invalid values (wrong types, bad scopes,
# negative limits, empty filter values, an unknown option, text given twice)
_OPTION_VALUES: dict[str, Any] = {
    "limit": st.one_of(st.none(), st.integers(-2, 50), st.just(2.5), st.just("3")),
    "since": st.none() | st.floats(0, 10),
    "until": st.none() | st.floats(0, 10),
    "target": st.none() | st.sampled_from(["", "x", "claude"]),
    "task_id": st.none() | st.sampled_from(["", "t-1"]),
    "scope": st.sampled_from(["global", "task-first", "task-only", "nope", ""]),
    "packet_types": st.none() | st.lists(st.sampled_from(["", "note", "diff"]), max_size=3),
    "path_filters": st.none() | st.lists(st.sampled_from(["", "a/b.py"]), max_size=3),
    "symbol_filters": st.none() | st.lists(st.sampled_from(["", "Foo"]), max_size=3),
    "live_after": st.none() | st.floats(0, 10),
    "mode": st.sampled_from(["auto", "conceptual"]),
    "kinds": st.none() | st.lists(st.sampled_from(["decision", ""]), max_size=2),
    "include_superseded": st.booleans(),
    "fresh_only": st.booleans(),
    "provider": st.none() | st.just("p"),
    "model": st.none() | st.just("m"),
    "as_of": st.none() | st.integers(0, 9),
    "text": st.just("again"),
    "colour": st.just("red"),
}
_texts = st.one_of(st.none(), st.just(""), st.sampled_from(["login", "parse_header a/b.py x"]),
                   st.text(max_size=30), st.just("w " * 40), st.just("x" * 5000))


def _outcome(make: Any) -> tuple[Any, ...]:
    try:
        q = make()
    except (TypeError, ValueError) as e:
        return (type(e), str(e))
    return _fields(q)


@settings(max_examples=400, deadline=None)
@given(_texts, st.fixed_dictionaries({}, optional=_OPTION_VALUES))
def test_quick_query_equals_the_constructor(text: str | None, options: dict[str, Any]) -> None:
    want = _outcome(lambda: RecallQuery(text, **options))  # type: ignore[arg-type]
    assert _outcome(lambda: quick_query(text, options)) == want  # type: ignore[arg-type]
    if not isinstance(want[0], type):
        assert type(quick_query(text, options)) is RecallQuery  # type: ignore[arg-type]
