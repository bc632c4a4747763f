"""What a writer refuses before it writes a byte, word for word, and which batches it
decodes once before writing them (``event.check_batch``'s flag).

Data made only of dicts, lists and plain scalars is judged by the depth walk
alone; anything else (a tuple, a set, a tag, another mapping) may encode into
CBOR that does not decode back, so such a batch is decoded once first.
Mutation testing found both unpinned (docs/reliability.md).
"""

from __future__ import annotations

import types
from typing import Any

import cbor2
import pytest

from eventstore import Event, InvalidEventError
from eventstore.event import MAX_DATA_DEPTH, check_batch, encode_batch
from eventstore.frame import Encoded

DEEP = f"event data nests deeper than {MAX_DATA_DEPTH} levels of maps and arrays"


def nest(levels: int, leaf: Any = 1) -> Any:
    """A dict nested ``levels`` deep: {"a": {"a": ... leaf}}."""
    v = leaf
    for _ in range(levels):
        v = {"a": v}
    return v


@pytest.mark.parametrize(
    ("events", "batch_id", "words"),
    [
        ([], None, "a batch needs at least one event"),
        ([{"kind": "a"}], None, "expected an Event, got dict"),
        ([Event("")], None, "event kind must be a non-empty string"),
        ([Event("a" * 201)], None, "event kind is 201 characters long; at most 200"),
        ([Event("a..b")], None,
         "invalid event kind 'a..b': use dotted words of letters, digits, '_' or '-'"),
        ([Event("ledger.compacted")], None,
         "event kind 'ledger.compacted' is reserved: only compaction and salvage write it"),
        ([Event("a", "k" * 1025)], None,
         "event key must be a string of at most 1024 characters, or null"),
        ([Event("a", None, [1])], None,  # type: ignore[arg-type]
         "event data must be a mapping (a JSON object), got list"),
        ([Event("a")], "", "batch_id must be a non-empty string of at most 200 characters"),
        ([Event("a", None, nest(MAX_DATA_DEPTH + 1))], None, DEEP),
    ],
    ids=["empty", "not-an-event", "no-kind", "long-kind", "bad-kind", "reserved-kind",
         "long-key", "data-not-a-map", "empty-batch-id", "too-deep"],
)
def test_each_refusal_says_what_is_wrong(events: list[Any], batch_id: str | None,
                                         words: str) -> None:
    with pytest.raises(InvalidEventError) as info:
        encode_batch(events, batch_id)
    assert str(info.value) == words


def test_the_limits_themselves_pass() -> None:
    encode_batch([Event("a" * 200, "k" * 1024, nest(MAX_DATA_DEPTH))], "b" * 200)


def test_data_that_would_not_decode_is_refused_after_a_trial_decode() -> None:
    with pytest.raises(InvalidEventError) as info:
        encode_batch([Event("a.b", None, {"t": cbor2.CBORTag(1, "not a time")})], None)
    assert str(info.value).startswith("event data would not decode from CBOR: ")


@pytest.mark.parametrize(
    ("data", "other"),
    [
        ({"a": 1, "b": [1, 2.5, None, True, b"x", "s"], "c": {"d": {"e": []}}}, False),
        ({1: "an int key", None: "a null key", "s": "x"}, False),
        ({"a": 1, "b": (1, 2)}, True),
        ({"a": "x", "b": [1, {"c": 2, "d": {1, 2}}], "e": [3]}, True),  # deep inside
        ({"a": 1, (1, 2): "a tuple key"}, True),
        ({"a": 1, "p": Encoded(cbor2.dumps(1), 0)}, False),  # encoded: its depth is known
        (types.MappingProxyType({"a": 1}), True),  # another mapping
    ],
    ids=["plain", "scalar-keys", "tuple", "set-deep-inside", "tuple-key", "encoded",
         "other-mapping"],
)
def test_a_batch_is_decoded_once_first_only_if_its_data_is_not_plain(
    data: Any, other: bool
) -> None:
    rows, flag = check_batch([Event("a.b", None, data)])
    assert rows == [["a.b", None, data]] and flag is other
    assert check_batch([Event("a.b"), Event("a.b", None, data), Event("a.b")])[1] is other


def test_an_encoded_value_counts_its_own_depth() -> None:
    fits = {"a": Encoded(cbor2.dumps(1), MAX_DATA_DEPTH - 1)}  # 1 + 199 levels
    assert check_batch([Event("a.b", None, fits)])[1] is False
    with pytest.raises(InvalidEventError, match=DEEP):
        check_batch([Event("a.b", None, {"a": Encoded(cbor2.dumps(1), MAX_DATA_DEPTH)})])


def test_another_mapping_counts_as_the_first_level() -> None:
    fits = types.MappingProxyType(nest(MAX_DATA_DEPTH))  # a view of the outermost dict
    assert check_batch([Event("a.b", None, fits)])[1] is True
    with pytest.raises(InvalidEventError, match=DEEP):
        check_batch([Event("a.b", None, types.MappingProxyType(nest(MAX_DATA_DEPTH + 1)))])


def test_a_subclass_of_event_is_an_event() -> None:
    class Tagged(Event):
        pass

    assert check_batch([Tagged("a.b", None, {"x": 1})]) == ([["a.b", None, {"x": 1}]], False)
