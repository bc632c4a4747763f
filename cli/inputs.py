"""The input rules every command shares: one click type per kind of value.

A bad value is a usage error (exit 2) naming the option, raised while click
parses, before anything is opened. ``docs/cli.md`` ("Input rules") is the
reference; in short:

- ``TIME`` (``--since``, ``--until``): ISO-8601 (no zone means UTC), ``@UNIX``
  or bare unix seconds, or a duration before now (``30s``, ``30m``, ``24h``,
  ``7d``, ``2w``). Finite, from 1970 to year 9999.
- ``SEQ|TIME`` (``--as-of``, ``replay --until``): a bare integer is a **seq**
  (0 is the empty log); anything else is a ``TIME``, which may not be in the
  future. A seq past the head is refused by the library (``AsOfError``), and
  the command names the option.
- ``DURATION`` (``--ttl``, ``--interval``): seconds, or a number with a unit.
- ``KEY`` (``store get --key``): a cache_key or a prefix of it, 8-64 hex digits.
- ``JSON``: strict (``eventstore.jsontext``): no NaN/Infinity, no ``1e999``,
  no duplicate keys, UTF-8 only.
- integers are at most 2**63 - 1; plain numbers (:class:`FiniteFloat`) are
  finite; text arguments must be valid UTF-8 (:func:`check_text_arguments`).
"""

from __future__ import annotations

import datetime as dt
import math
import re
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from eventstore.event import MAX_DATA_DEPTH
from eventstore.jsontext import JSONTextError, loads_strict

MAX_INT = 2**63 - 1
"""Largest integer any option takes: seqs, counts and offsets are 64-bit in the log."""
SEQ = click.IntRange(min=1, max=MAX_INT)
COUNT = click.IntRange(min=0, max=MAX_INT)

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
LATEST = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC).timestamp()
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)")  # ASCII digits only
_UNIX = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_EXAMPLES = "ISO-8601 like 2026-11-30T12:00:00Z, @UNIX seconds, or a duration ago like 24h"

Clock = Callable[[], float]


def read_stdin_bytes() -> bytes:
    """All of stdin as bytes (click 8.5 deprecates ``get_binary_stream``)."""
    stream = getattr(sys.stdin, "buffer", sys.stdin)
    data = stream.read()
    return data.encode() if isinstance(data, str) else data


def parse_duration(text: str) -> float | None:
    """Seconds in ``30``, ``1.5s``, ``30m``, ``24h``, ``7d``, ``2w``; None if ``text`` is none."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        return None
    seconds = float(m.group(1)) * UNITS[m.group(2) or "s"]
    return seconds if math.isfinite(seconds) else None


class Duration(click.ParamType):
    """A span of time: seconds (``90``, ``0.5``) or a number with a unit (``30m``, ``7d``)."""

    name = "DURATION"

    def __init__(self, min: float = 0.0, max: float | None = None) -> None:
        self.min, self.max = min, max

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        text = str(value).strip()
        seconds = parse_duration(text)
        if seconds is None:
            why = "is negative" if text.startswith("-") else "is not a duration"
            self.fail(f"{text!r} {why} (seconds, or a number with s, m, h, d or w)", param, ctx)
        if seconds < self.min:
            self.fail(f"{text!r} is less than {self.min:g} seconds", param, ctx)
        if self.max is not None and seconds > self.max:
            self.fail(f"{text!r} is more than {self.max:g} seconds", param, ctx)
        return seconds


class FiniteFloat(click.FloatRange):
    """A number in a range, never NaN or infinite.

    ``click.FloatRange`` lets NaN through (every comparison with NaN is false),
    and infinities past an open end; use this for any plain number option.
    """

    name = "NUMBER"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return rv


class TimeParam(click.ParamType):
    """A point in time (unix seconds): ISO-8601, ``@UNIX``, bare unix seconds, or ``24h`` ago."""

    name = "TIME"

    def __init__(self, clock: Clock = time.time) -> None:
        self.clock = clock

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        try:
            return parse_time(str(value), self.clock())
        except ValueError as e:
            self.fail(str(e), param, ctx)


def parse_time(text: str, now: float) -> float:
    """Unix seconds for a ``TIME`` (see the module docstring), or ValueError saying why."""
    t = text.strip()
    if t.startswith("@") or _UNIX.fullmatch(t):
        try:
            when = float(t[1:] if t.startswith("@") else t)
        except ValueError:
            raise ValueError(f"{text!r} is not @UNIX seconds") from None
    elif (ago := parse_duration(t)) is not None:
        when = now - ago
    else:
        try:
            parsed = dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{text!r} is not a time (use {_EXAMPLES})") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        try:
            when = parsed.timestamp()
        except (OverflowError, OSError, ValueError):
            raise ValueError(f"{text!r} is out of range") from None
    if not math.isfinite(when):
        raise ValueError(f"{text!r} is not a finite time")
    if when < 0:
        raise ValueError(f"{text!r} is before 1970-01-01T00:00:00Z")
    if when > LATEST:
        raise ValueError(f"{text!r} is after the year 9999")
    return when


class SeqOrTime(TimeParam):
    """A seq (a bare integer: 0 is the empty log) or a ``TIME`` not in the future."""

    name = "SEQ|TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        text = str(value).strip()
        if text.isascii() and text.isdigit():
            seq = int(text)
            if seq > MAX_INT:
                self.fail(f"seq {text} is past any log (at most {MAX_INT})", param, ctx)
            return seq
        if re.fullmatch(r"-[0-9]+", text):
            self.fail(f"seq {text} is negative (0 is the empty log)", param, ctx)
        if _UNIX.fullmatch(text):  # a bare decimal: neither a seq nor clearly a time
            self.fail(f"{text!r} is not a seq (a whole number); for a unix time write @{text}",
                      param, ctx)
        now = self.clock()  # one reading: "0s" ago is now, not after it
        try:
            when = parse_time(text, now)
        except ValueError as e:
            self.fail(str(e), param, ctx)
        if when > now:
            self.fail(f"{text!r} is in the future", param, ctx)
        return when


class CacheKey(click.ParamType):
    """A cache_key or a unique prefix of one (8-64 hex digits, either case)."""

    name = "KEY"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from projections.cache import key_prefix  # (the library's rule; loads with the store)

        try:
            return key_prefix(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


class JsonInput(click.ParamType):
    """Strict JSON from the value itself (``inline``), ``@FILE`` or ``-`` (stdin); or,
    without ``inline``, from FILE or ``-``. Anything but a strict document is a usage error."""

    def __init__(self, *, inline: bool, want_object: bool) -> None:
        self.inline, self.want_object = inline, want_object
        self.name = "JSON" if inline else "FILE|-"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a default already parsed
        text = self._read(value, param, ctx)
        try:
            obj = loads_strict(text)
        except JSONTextError as e:
            self.fail(f"not valid JSON ({e})", param, ctx)
        if self.want_object:
            if not isinstance(obj, dict):
                self.fail(f"must be a JSON object ({{...}}), not {_json_type(obj)}", param, ctx)
            if _depth(obj) > MAX_DATA_DEPTH:
                self.fail(f"JSON is nested deeper than {MAX_DATA_DEPTH} levels", param, ctx)
        return obj

    def _read(
        self, value: str, param: click.Parameter | None, ctx: click.Context | None
    ) -> str | bytes:
        if value == "-":
            return read_stdin_bytes()
        if not self.inline:
            path = value
        elif value.startswith("@"):
            path = value[1:]
        else:  # the JSON itself, as an argument
            if _has_surrogate(value):
                self.fail("not valid JSON (the argument is not valid UTF-8)", param, ctx)
            return value
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError as e:
            self.fail(f"cannot read {path}: {e.strerror}", param, ctx)


JSON_OBJECT = JsonInput(inline=True, want_object=True)
"""``--data``: a JSON object inline, ``@FILE`` or ``-``."""
JSON_FILE = JsonInput(inline=False, want_object=False)
"""A JSON document from FILE or ``-`` (the value's own rules are the library's)."""
TIME = TimeParam()
SEQ_OR_TIME = SeqOrTime()
CACHE_KEY = CacheKey()
TTL = Duration(min=0.0)
INTERVAL = Duration(min=0.01, max=3600.0)


def check_text_arguments(ctx: click.Context, values: dict[str, Any]) -> None:
    """Refuse a text option or argument holding bytes that are not UTF-8.

    Python hands such bytes over as lone surrogates; stored, they could not be
    encoded, printed, they could not be written. Paths (``click.Path``) are
    exempt: a file name need not be UTF-8.
    """
    for p in ctx.command.params:
        value = values.get(p.name or "")
        items = value if isinstance(value, tuple) else (value,)
        if any(isinstance(v, str) and _has_surrogate(v) for v in items):
            raise click.BadParameter("not valid UTF-8 text", ctx=ctx, param=p)


def _has_surrogate(text: str) -> bool:
    return not text.isascii() and any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _depth(obj: object) -> int:
    """Nesting depth of parsed JSON (iterative: the input may be deep)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def _json_type(obj: object) -> str:
    if isinstance(obj, list):
        return "an array"
    if isinstance(obj, str):
        return "a string"
    if isinstance(obj, bool):
        return "a boolean"
    if isinstance(obj, (int, float)):
        return "a number"
    return "null"
