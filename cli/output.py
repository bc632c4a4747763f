"""Rendering for the CLI: any value the log can hold, as JSON or as text for people.

Event data is CBOR, which holds more than JSON can (bytes, NaN, tags, dates,
non-string map keys, ...). :func:`to_jsonable` maps every such value to plain
JSON with a ``{"$type": ...}`` wrapper, so no stored event can make ``--json``
output crash or turn invalid. The wrappers are listed in ``docs/cli.md``.

Text for people never carries a stored string raw: :func:`safe` escapes the
characters a terminal would act on (failure rule 7). ``--json`` output is
ASCII (``ensure_ascii``): every such character arrives as a ``\\u`` escape (four hex digits).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import sys
from collections.abc import Mapping
from typing import Any
from uuid import UUID

import attrs
import cbor2

from eventstore import Event


def to_jsonable(obj: Any) -> Any:
    """Return ``obj`` as values :func:`json.dumps` accepts with ``allow_nan=False``."""
    return _conv(obj, set())


def _conv(obj: Any, path: set[int]) -> Any:
    # one stack frame per nesting level (plain loops, no comprehensions): the
    # CBOR decoder allows ~400 levels and that must fit Python's recursion limit
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        # past Python's int-to-decimal limit (4,300 digits) json cannot print it: hex can
        return obj if obj.bit_length() <= _MAX_DECIMAL_BITS else {"$int": hex(obj)}
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {"$float": _float_name(obj)}
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {"$bytes": bytes(obj).hex()}
    if id(obj) in path:  # CBOR value sharing can build cycles; JSON cannot hold one
        return {"$cycle": True}
    path.add(id(obj))
    try:
        if hasattr(obj, "to_json") and callable(obj.to_json):
            return _conv(obj.to_json(), path)
        if isinstance(obj, Mapping):
            out: dict[str, Any] = {}
            for k, v in obj.items():
                out[_key(k, path)] = _conv(v, path)
            if len(out) < len(obj):  # keys that print alike (1 and "1"): keep every pair
                pairs = []
                for k, v in obj.items():
                    pairs.append([_conv(k, path), _conv(v, path)])
                return {"$map": pairs}
            return out
        if isinstance(obj, (list, tuple, set, frozenset)):
            items = []
            for v in obj:
                items.append(_conv(v, path))
            if isinstance(obj, (set, frozenset)):
                return {"$set": sorted(items, key=lambda v: json.dumps(v, sort_keys=True))}
            return items
        if isinstance(obj, cbor2.CBORTag):
            return {"$tag": obj.tag, "value": _conv(obj.value, path)}
        if attrs.has(type(obj)):
            return _conv({f.name: getattr(obj, f.name) for f in attrs.fields(type(obj))}, path)
        dc = _loaded("dataclasses")
        if dc is not None and dc.is_dataclass(obj) and not isinstance(obj, type):
            return _conv({f.name: getattr(obj, f.name) for f in dc.fields(obj)}, path)
        return _scalar(obj)
    finally:
        path.discard(id(obj))


def _loaded(module: str) -> Any:
    """``module`` if some code imported it, else None.

    An instance of a class means its module is loaded, so the CLI need not
    import ``decimal``, ``fractions`` or ``dataclasses`` (a few ms of every
    start) only to learn that a value is none of them.
    """
    return sys.modules.get(module)


def _scalar(obj: Any) -> Any:
    if isinstance(obj, dt.datetime):
        return {"$datetime": obj.isoformat()}
    if isinstance(obj, dt.date):
        return {"$date": obj.isoformat()}
    decimal, fractions = _loaded("decimal"), _loaded("fractions")
    if decimal is not None and isinstance(obj, decimal.Decimal):
        return {"$decimal": str(obj)}
    if fractions is not None and isinstance(obj, fractions.Fraction):
        return {"$fraction": str(obj)}
    if isinstance(obj, UUID):
        return {"$uuid": str(obj)}
    if isinstance(obj, cbor2.CBORSimpleValue):
        return {"$simple": int(obj.value)}
    if obj is cbor2.undefined:
        return {"$undefined": True}
    return {"$repr": repr(obj)}


_MAX_DECIMAL_BITS = 14_000  # below 4,300 decimal digits (sys.get_int_max_str_digits)


def _float_name(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _key(k: Any, path: set[int]) -> str:
    if isinstance(k, str):
        return k
    return json.dumps(_conv(k, path), sort_keys=True, allow_nan=False)


def dumps(obj: Any, *, compact: bool = False, ascii_only: bool = True) -> str:
    """One JSON document for ``obj``; never raises for a value the log can hold."""
    seps = (",", ":") if compact else (", ", ": ")
    text = dumps_if_plain(obj, seps, ascii_only)
    if text is not None:
        return text
    return json.dumps(to_jsonable(obj), separators=seps, ensure_ascii=ascii_only, allow_nan=False)


def dumps_if_plain(obj: Any, seps: tuple[str, str], ascii_only: bool) -> str | None:
    """``obj`` as JSON when it is plain JSON already, else None.

    The same text :func:`to_jsonable` then ``json.dumps`` gives for such a value
    (tests/test_output.py holds the two equal), without first walking a large
    document (a 10,000-task listing) in Python: the encoder refuses anything
    that needs a wrapper (bytes, sets, NaN, cycles, objects), and then the
    walk decides.
    """
    if not _plain_containers(obj):
        return None
    try:
        return json.dumps(obj, separators=seps, ensure_ascii=ascii_only, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _plain_containers(obj: Any) -> bool:
    """Only dicts with string keys, lists and tuples hold the other containers: what the
    encoder would print differently from the walk (a number key colliding with a string
    key, a mapping type with its own ``to_json``) sends the value to the walk."""
    stack = [obj]
    seen: set[int] = set()  # containers met already: a cycle (or a shared one) -> the walk
    while stack:
        x = stack.pop()
        t = type(x)
        if t is dict or t is list or t is tuple:
            if id(x) in seen:
                return False
            seen.add(id(x))
            if t is dict:
                for k in x:
                    if type(k) is not str:
                        return False
                stack.extend(x.values())
            else:
                stack.extend(x)
        elif isinstance(x, (Mapping, list, tuple)):
            return False  # a subclass: the walk may treat it otherwise
    return True


# --- human forms --------------------------------------------------------------------

_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f"  # C0 controls (ESC, BEL, NUL, tab, newline...), DEL, C1 controls
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidi marks, embeddings, overrides, isolates
    "\u2028\u2029"  # line and paragraph separators
    "\ud800-\udfff]"  # lone surrogates (undecodable bytes of an argument or a file name)
)


_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(m: re.Match[str]) -> str:
    ch = m.group()
    c = ord(ch)
    return _NAMED.get(ch) or (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}")


def safe(text: str, *, multiline: bool = False) -> str:
    """``text`` with every character a terminal would act on shown as an escape.

    Stored strings (targets, summaries, snippets, paths, keys, messages quoting
    input) can hold ESC sequences that clear the screen or retitle the window,
    BEL, NUL, and bidi overrides that make text read differently from what it
    is ("Trojan Source"). Each becomes visible text: ``\\x1b``, ``\\x00``,
    ``\\u202e``. Tabs and newlines are escaped too, so one field stays on one
    line; ``multiline`` keeps ``\\n`` (for whole blocks of our own lines).
    Backslashes are left alone: this is for reading, not a reversible encoding
    (``--json`` is exact).
    """
    if text.isprintable():  # the common case; anything it rejects goes through the regex
        return text
    if multiline:
        return "\n".join(_UNSAFE.sub(_escape, line) for line in text.split("\n"))
    return _UNSAFE.sub(_escape, text)


def iso_time(at: float) -> str:
    """Unix seconds as ISO 8601 UTC with milliseconds, e.g. ``2026-01-02T03:04:05.678Z``."""
    try:
        t = dt.datetime.fromtimestamp(at, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):
        return str(at)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def event_json(e: Event) -> dict[str, Any]:
    """The JSON shape of one event: ``{"seq", "kind", "key", "at", "data"}``."""
    return {"seq": e.seq, "kind": e.kind, "key": e.key, "at": e.at, "data": e.data}


def event_line(e: Event) -> str:
    """One event on one line: seq, ISO time, kind, key (``-`` when null), compact data."""
    key = "-" if e.key is None else _quoted(e.key)
    data = dumps(e.data, compact=True, ascii_only=False)
    return safe(f"{e.seq:>6}  {iso_time(e.at)}  {e.kind}  {key}  {data}")


def _quoted(s: str) -> str:
    """Plain text as is; anything with spaces or unprintable characters as a JSON string
    (so the key stays one column; :func:`safe` then escapes what JSON leaves raw)."""
    if s and s.isprintable() and " " not in s:
        return s
    return json.dumps(s, ensure_ascii=False)


def human(obj: Any) -> str:
    """A readable default form: ``key: value`` lines for a mapping, one line per item."""
    obj = to_jsonable(obj)
    if isinstance(obj, Mapping):
        width = max((len(safe(k)) for k in obj), default=0)
        return "\n".join(f"{safe(k) + ':':<{width + 1}} {_human_value(v)}" for k, v in obj.items())
    if isinstance(obj, list):
        return "\n".join(_human_value(v) for v in obj)
    return _human_value(obj)


def _human_value(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return str(v)
    if not isinstance(v, str):
        v = json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    return safe(v)
