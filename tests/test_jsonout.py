"""eventstore/jsonout.py value by value: every wrapper's exact JSON.

tests/test_output.py checks that the fast path and the walk agree, which they
do whatever the walk prints; these pin what it prints (the wrappers are a
contract: docs/cli.md, "JSON output") and where each boundary lies.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import types
from decimal import Decimal
from fractions import Fraction
from typing import Any
from uuid import UUID

import attrs
import cbor2
import pytest

from eventstore.jsonout import dumps, dumps_if_plain, to_jsonable


@attrs.frozen
class Point:
    x: int
    tag: bytes


@dataclasses.dataclass
class Row:
    name: str
    data: bytes


class HasToJson:
    def to_json(self) -> dict[str, Any]:
        return {"b": b"\x01", "n": 1}


class NotCallableToJson:
    to_json = 5

    def __repr__(self) -> str:
        return "<odd>"


class Plain:
    def __repr__(self) -> str:
        return "<plain>"


CASES: list[tuple[str, Any, Any]] = [
    ("none", None, None),
    ("bools", [True, False], [True, False]),
    ("str", "é", "é"),
    ("int", -7, -7),
    ("float", 2.5, 2.5),
    ("bytes", b"\x00\xff", {"$bytes": "00ff"}),
    ("bytearray", bytearray(b"\x01"), {"$bytes": "01"}),
    ("memoryview", memoryview(b"\x02\x03"), {"$bytes": "0203"}),
    ("tuple", (1, (2, "x")), [1, [2, "x"]]),
    ("set sorted by its JSON text", {10, 9}, {"$set": [10, 9]}),
    ("frozenset", frozenset({"b", "a"}), {"$set": ["a", "b"]}),
    ("mapping proxy", types.MappingProxyType({"a": b"\x01"}), {"a": {"$bytes": "01"}}),
    ("tag", cbor2.CBORTag(1234, b"\x01"), {"$tag": 1234, "value": {"$bytes": "01"}}),
    ("attrs", Point(3, b"\x04"), {"x": 3, "tag": {"$bytes": "04"}}),
    ("dataclass", Row("r", b"\x05"), {"name": "r", "data": {"$bytes": "05"}}),
    ("a dataclass type is no instance", Row, {"$repr": repr(Row)}),
    ("to_json", HasToJson(), {"b": {"$bytes": "01"}, "n": 1}),
    ("to_json not callable", NotCallableToJson(), {"$repr": "<odd>"}),
    ("datetime", dt.datetime(2026, 12, 2, 13, 4, 5, tzinfo=dt.UTC),
     {"$datetime": "2026-12-02T13:04:05+00:00"}),
    ("date", dt.date(2026, 12, 2), {"$date": "2026-12-02"}),
    ("decimal", Decimal("1.10"), {"$decimal": "1.10"}),
    ("fraction", Fraction(1, 3), {"$fraction": "1/3"}),
    ("uuid", UUID(int=1), {"$uuid": "00000000-0000-0000-0000-000000000001"}),
    ("simple", cbor2.CBORSimpleValue(99), {"$simple": 99}),
    ("undefined", cbor2.undefined, {"$undefined": True}),
    ("anything else", Plain(), {"$repr": "<plain>"}),
    ("bytes key", {b"\x01": 1}, {'{"$bytes": "01"}': 1}),
    ("tuple key", {(1, "a"): 2}, {'[1, "a"]': 2}),
    ("tag key, its JSON with sorted keys", {cbor2.CBORTag(7, 1): 0},
     {'{"$tag": 7, "value": 1}': 0}),
    ("none key", {None: 1}, {"null": 1}),
]


@pytest.mark.parametrize(("name", "value", "want"), CASES, ids=[c[0] for c in CASES])
def test_each_value_has_its_exact_json(name: str, value: Any, want: Any) -> None:
    assert to_jsonable(value) == want
    assert json.loads(dumps(value)) == want


@attrs.frozen
class BA:
    """Fields in non-alphabetical order: sorted keys are visible in its JSON text."""

    b: int
    a: int


def test_containers_inside_pairs_tags_sets_and_keys() -> None:
    # keys that print alike, with containers on both sides of a pair
    assert to_jsonable({(1,): [1], "[1]": [2]}) == {"$map": [[[1], [1]], ["[1]", [2]]]}
    assert to_jsonable(cbor2.CBORTag(9, [b"\x01"])) == {"$tag": 9,
                                                         "value": [{"$bytes": "01"}]}
    # a set sorts by each element's JSON text with sorted keys ({"a": 1, "b": 2} first)
    assert to_jsonable({BA(1, 2), BA(2, 1)}) == {"$set": [{"b": 2, "a": 1}, {"b": 1, "a": 2}]}
    # a key that is an object prints as its JSON text with sorted keys
    assert to_jsonable({BA(1, 2): 0}) == {'{"a": 2, "b": 1}': 0}


def test_ints_print_as_decimal_up_to_14000_bits_then_as_hex() -> None:
    small = (1 << 14000) - 1  # 14,000 bits: still decimal
    big = 1 << 14000
    assert to_jsonable(small) == small
    assert to_jsonable(-small) == -small
    assert to_jsonable(big) == {"$int": hex(big)}
    assert to_jsonable([-big]) == [{"$int": hex(-big)}]


def test_cycles_print_as_a_marker_and_shared_values_print_in_full() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    assert to_jsonable(loop) == [1, {"$cycle": True}]
    d: dict[str, Any] = {}
    d["me"] = d
    assert to_jsonable(d) == {"me": {"$cycle": True}}
    shared = [b"\x01"]
    assert to_jsonable([shared, shared, {"k": shared}]) == [
        [{"$bytes": "01"}], [{"$bytes": "01"}], {"k": [{"$bytes": "01"}]}]
    plain_shared = {"a": 1}
    assert dumps([plain_shared, plain_shared], compact=True) == '[{"a":1},{"a":1}]'


def test_separators_and_ascii() -> None:
    v = {"a": [1, "é"]}
    assert dumps(v) == '{"a": [1, "\\u00e9"]}'
    assert dumps(v, compact=True) == '{"a":[1,"\\u00e9"]}'
    assert dumps(v, ascii_only=False) == '{"a": [1, "é"]}'
    w = {"b": b"\x01", "é": 1}  # through the walk: the same options
    assert dumps(w) == '{"b": {"$bytes": "01"}, "\\u00e9": 1}'
    assert dumps(w, compact=True, ascii_only=False) == '{"b":{"$bytes":"01"},"é":1}'


def test_the_fast_path_takes_plain_json_only() -> None:
    seps = (",", ":")
    assert dumps_if_plain({"a": (1, [2.5, None])}, seps, True) == '{"a":[1,[2.5,null]]}'
    assert dumps_if_plain({"é": 1}, seps, False) == '{"é":1}'
    assert dumps_if_plain({"é": 1}, (", ", ": "), True) == '{"\\u00e9": 1}'

    class L(list):  # type: ignore[type-arg]
        pass

    shared = [1]
    for declined in ({1: "a"}, L([1]), [shared, shared], {"a": {"b": {2: 0}}},
                     [1e400], [float("nan")]):
        assert dumps_if_plain(declined, seps, True) is None, declined
    deep: Any = []
    for _ in range(5000):  # deeper than the encoder recurses: declined, then walked
        deep = [deep]
    assert dumps_if_plain(deep, seps, True) is None
