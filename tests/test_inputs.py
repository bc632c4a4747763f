"""The input rules, unit by unit: strict JSON, times, durations, keys, packets without NaN."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.inputs import (
    CACHE_KEY,
    INTERVAL,
    JSON_OBJECT,
    MAX_INT,
    TTL,
    FiniteFloat,
    SeqOrTime,
    TimeParam,
    parse_duration,
    parse_time,
)
from eventstore.jsontext import JSONTextError, loads_strict
from projections import InvalidPacketError, cache_key_of, check_packet, parse_packet_json

NOW = 1_800_000_000.0

# --- strict JSON ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"a": NaN}', "NaN"),
        ('{"a": Infinity}', "Infinity"),
        ('{"a": -Infinity}', "-Infinity"),
        ('{"a": 1e999}', "out of range"),
        ('{"a": -1e400}', "out of range"),
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"o": {"k": 1, "k": 1}}', "duplicate key 'k'"),
        ('[{"x": 1, "x": 1}]', "duplicate key 'x'"),
        ('{"s": "\\ud800"}', "lone surrogate"),
        ('["\\udfff"]', "lone surrogate"),
        ('{"\\ud83d": 1}', "lone surrogate"),
        ("{not json", "Expecting"),
        ("", "Expecting"),
        ("[" * 100_000, "nested too deeply"),
        ("1" * 5000, "digits"),
    ],
)
def test_loads_strict_refuses(text: str, why: str) -> None:
    with pytest.raises(JSONTextError, match=why.replace("'", ".")):
        loads_strict(text)


@pytest.mark.parametrize(
    "raw", [b"\xff\xfe{}", b'{"a": "\xc3"}', b"\xef\xbb\xbf{}", '{"a": 1}'.encode("utf-16")]
)
def test_loads_strict_takes_utf8_only(raw: bytes) -> None:
    with pytest.raises(JSONTextError):
        loads_strict(raw)


def test_loads_strict_says_exactly_what_is_wrong() -> None:
    """Word for word: the duplicate named is the repeated key, not the first one."""
    cases = [
        ('{"b": 0, "a": 1, "a": 2}', "duplicate key 'a' in a JSON object"),
        ("[" * 100_000, "nested too deeply"),
        (b'{"a": "\xc3"}', "not UTF-8 (byte 7: invalid continuation byte)"),
        (b"\xff{}", "not UTF-8 (byte 0: invalid start byte)"),
    ]
    for text, why in cases:
        with pytest.raises(JSONTextError) as info:
            loads_strict(text)
        assert str(info.value) == why


def test_loads_strict_reads_what_json_means() -> None:
    assert loads_strict(b'{"a": [1, 2.5, "\\u00e9", "\\ud83d\\ude00", null, true]}') == {
        "a": [1, 2.5, "é", "😀", None, True]
    }
    assert loads_strict('"\\\\ud800"') == "\\ud800"  # an escaped backslash, not a surrogate
    assert loads_strict("1e308") == 1e308 and loads_strict("-0.0") == 0.0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_loads_strict_agrees_with_json_on_strict_documents(value: Any) -> None:
    text = json.dumps(value)
    assert loads_strict(text) == json.loads(text)
    assert loads_strict(json.dumps(value, ensure_ascii=False).encode()) == json.loads(text)


def test_packets_from_json_have_one_key_per_meaning() -> None:
    """1e999 and Infinity used to give one cache_key: both are refused now."""
    for text in ('{"target": "t", "x": 1e999}', '{"target": "t", "x": Infinity}',
                 '{"target": "t", "target": "u"}'):
        with pytest.raises(InvalidPacketError, match="invalid packet JSON"):
            parse_packet_json(text)
    assert parse_packet_json('{"target": "t", "x": 1.5}') == {"target": "t", "x": 1.5}


@pytest.mark.parametrize(
    "packet",
    [
        {"target": "t", "x": float("nan")},
        {"target": "t", "x": float("inf")},
        {"target": "t", "deep": {"l": [1, (2, -math.inf)]}},
        {"target": "t", "m": {float("nan"): 1}},
    ],
)
def test_non_finite_floats_are_refused_by_the_library(packet: dict[str, Any]) -> None:
    with pytest.raises(InvalidPacketError, match="non-finite"):
        check_packet(packet)


def test_finite_floats_still_store() -> None:
    _body, data = check_packet({"target": "t", "x": 1.5, "y": [-0.0, 1e308]})
    assert len(cache_key_of(data)) == 64


# --- times, durations, seqs ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("2026-11-30T12:00:00Z", dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC).timestamp()),
        ("2026-11-30T12:00:00", dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC).timestamp()),
        ("2026-11-30T13:00:00+01:00", dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC).timestamp()),
        ("2026-11-30", dt.datetime(2026, 11, 30, tzinfo=dt.UTC).timestamp()),
        ("@1796046112", 1796046112.0),
        ("@1796046112.5", 1796046112.5),
        ("2000000000", 2000000000.0),
        ("0", 0.0),
        ("30s", NOW - 30),
        ("30m", NOW - 1800),
        ("24h", NOW - 86400),
        ("7d", NOW - 7 * 86400),
        ("2w", NOW - 14 * 86400),
        ("1.5h", NOW - 5400),
        (" 24h ", NOW - 86400),
    ],
)
def test_times(text: str, want: float) -> None:
    assert parse_time(text, NOW) == want


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("@-5", "before 1970"),
        ("-5", "before 1970"),
        ("1969-12-31T23:59:59Z", "before 1970"),
        ("@nan", "not a finite"),
        ("@inf", "not a finite"),
        ("@1e999", "not a finite"),
        ("@1e300", "after the year 9999"),
        ("99999999999999", "after the year 9999"),
        ("9999999w", "before 1970"),
        ("yesterday", "not a time"),
        ("24H", "not a time"),
        ("", "not a time"),
        ("@", "not @UNIX"),
        ("@abc", "not @UNIX"),
    ],
)
def test_bad_times(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_time(text, NOW)


def convert(ptype: click.ParamType, text: str) -> Any:
    return ptype.convert(text, None, None)


def test_seq_or_time_reads_bare_integers_as_seqs() -> None:
    t = SeqOrTime(clock=lambda: NOW)
    assert convert(t, "0") == 0 and isinstance(convert(t, "12"), int)
    assert convert(t, "@1796046112") == 1796046112.0
    assert convert(t, "7d") == NOW - 7 * 86400
    for bad, why in [
        ("-5", "negative"),
        ("@-5", "before 1970"),
        (str(MAX_INT + 1), "past any log"),
        (f"@{NOW + 60}", "in the future"),
        ("2999-01-01", "in the future"),
        ("@nan", "finite"),
    ]:
        with pytest.raises(click.BadParameter, match=why):
            convert(t, bad)


def test_time_param_allows_the_future() -> None:
    """--since/--until are filters: a window in the future is empty, not wrong."""
    assert convert(TimeParam(clock=lambda: NOW), f"@{NOW + 60}") == NOW + 60


@pytest.mark.parametrize(
    ("text", "want"), [("90", 90.0), ("0", 0.0), ("0.5", 0.5), ("30m", 1800.0), ("7d", 604800.0)]
)
def test_durations(text: str, want: float) -> None:
    assert parse_duration(text) == want
    assert convert(TTL, text) == want


@pytest.mark.parametrize("text", ["nan", "inf", "-1", "-1s", "1e3", "", "7y", "1e999d"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(click.BadParameter):
        convert(TTL, text)


def test_finite_float_refuses_what_float_range_lets_through() -> None:
    assert math.isnan(convert(click.FloatRange(0, 1), "nan"))  # the hole FiniteFloat closes
    fraction = FiniteFloat(0, 1)
    assert convert(fraction, "0.25") == 0.25
    for bad in ("nan", "-nan", "2", "-0.1", "x"):
        with pytest.raises(click.BadParameter):
            convert(fraction, bad)
    for bad in ("inf", "1e999", "-inf"):
        with pytest.raises(click.BadParameter, match="finite"):
            convert(FiniteFloat(), bad)


def test_interval_is_bounded() -> None:
    assert convert(INTERVAL, "0.2") == 0.2
    for bad in ("0", "0.001", "2h", "nan"):
        with pytest.raises(click.BadParameter):
            convert(INTERVAL, bad)


# --- keys and JSON options -------------------------------------------------------------------


def test_cache_key_param() -> None:
    assert convert(CACHE_KEY, "ABCDEF01") == "abcdef01"
    for bad, why in [("abc", "at least 8"), ("../../etc/passwd", "not a cache_key"),
                     ("a" * 65, "64 hex digits")]:
        with pytest.raises(click.BadParameter, match=why):
            convert(CACHE_KEY, bad)


def test_json_object_param() -> None:
    assert convert(JSON_OBJECT, '{"a": 1}') == {"a": 1}
    for bad, why in [('{"a": 1e999}', "out of range"), ("[1]", "JSON object"),
                     ('{"a": 1, "a": 2}', "duplicate"), ('{"a": "\udcff"}', "UTF-8"),
                     ("@/nonexistent/x.json", "cannot read")]:
        with pytest.raises(click.BadParameter, match=why):
            convert(JSON_OBJECT, bad)
