"""Rendering for the CLI: any value the log can hold, as JSON or as text for people.

Event data is CBOR, which holds more than JSON can (bytes, NaN, tags, dates,
non-string map keys, ...). :func:`to_jsonable` maps every such value to plain
JSON with a ``{"$type": ...}`` wrapper, so no stored event can make ``--json``
output crash or turn invalid. The wrappers are listed in ``docs/cli.md``. The
encoder itself lives in :mod:`eventstore.jsonout` (artifacts store the same
documents); it is re-exported here.

Text for people never carries a stored string raw: :func:`safe` escapes the
characters a terminal would act on (failure rule 7). ``--json`` output is
ASCII (``ensure_ascii``): every such character arrives as a ``\\u`` escape (four hex digits).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from typing import Any

from eventstore import Event
from eventstore.jsonout import dumps as dumps
from eventstore.jsonout import dumps_if_plain as dumps_if_plain
from eventstore.jsonout import to_jsonable as to_jsonable

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
