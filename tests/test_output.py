"""The CLI's JSON rendering: the direct encoding of plain JSON equals the converting walk."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from strategies import values

from cli.output import dumps, dumps_if_plain, to_jsonable

_keys = st.one_of(st.text(max_size=6), st.integers(-5, 5), st.booleans(), st.none(),
                  st.floats(allow_nan=True, allow_infinity=True))
_any = st.recursive(
    st.one_of(values, st.floats(), st.sets(st.integers(), max_size=3)),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=10,
)


@given(_any, st.booleans(), st.booleans())
def test_plain_json_fast_path_equals_the_walk(obj: Any, compact: bool, ascii_only: bool) -> None:
    seps = (",", ":") if compact else (", ", ": ")
    walked = json.dumps(to_jsonable(obj), separators=seps, ensure_ascii=ascii_only,
                        allow_nan=False)
    fast = dumps_if_plain(obj, seps, ascii_only)
    assert fast is None or fast == walked
    assert dumps(obj, compact=compact, ascii_only=ascii_only) == walked


def test_fast_path_declines_what_needs_a_wrapper() -> None:
    cyc: list[Any] = []
    cyc.append(cyc)
    for v in (b"x", {1, 2}, float("nan"), {"a": float("inf")}, cyc, object()):
        assert dumps_if_plain(v, (",", ":"), True) is None
    assert dumps_if_plain({"a": [1, 2.5, None, True]}, (",", ":"), True) == \
        '{"a":[1,2.5,null,true]}'


def test_keys_that_print_alike_keep_every_pair_and_huge_ints_print() -> None:
    assert dumps({1: "a", "1": "b"}, compact=True) == '{"$map":[[1,"a"],["1","b"]]}'
    assert dumps({True: 1, "true": 2}, compact=True) == '{"$map":[[true,1],["true",2]]}'
    assert dumps({1: "a", 2: "b"}, compact=True) == '{"1":"a","2":"b"}'  # no collision
    n = 10**5000  # past Python's int-to-decimal limit
    assert json.loads(dumps({"n": n})) == {"n": {"$int": hex(n)}}
    assert dumps({"n": 10**300}, compact=True) == '{"n":' + str(10**300) + '}'


def test_a_mapping_subclass_with_to_json_takes_the_walk() -> None:
    class D(dict):  # type: ignore[type-arg]
        def to_json(self) -> dict[str, int]:
            return {"x": 1}

    assert dumps_if_plain(D(a=1), (",", ":"), True) is None
    assert dumps(D(a=1), compact=True) == '{"x":1}'


def test_non_finite_floats_print_by_name_as_values_and_keys() -> None:
    # the names are the contract (docs/cli.md); the property test above compares two
    # paths that share them, so it cannot see a wrong one
    nan, inf = float("nan"), float("inf")
    assert dumps({"a": nan, "b": inf, "c": -inf, "d": [1.5, -inf]}, compact=True) == (
        '{"a":{"$float":"nan"},"b":{"$float":"inf"},"c":{"$float":"-inf"},'
        '"d":[1.5,{"$float":"-inf"}]}')
    assert json.loads(dumps({inf: 1, -inf: 2, nan: 3})) == {
        '{"$float": "inf"}': 1, '{"$float": "-inf"}': 2, '{"$float": "nan"}': 3}
