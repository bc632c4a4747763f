"""Strict JSON text: a document has exactly one reading, or it is refused.

Python's :func:`json.loads` accepts ``NaN``/``Infinity``, turns ``1e999`` into
infinity, keeps the last of two equal object keys and decodes escaped lone
surrogates. Each makes one document mean something other than it says (and
``1e999`` and ``Infinity`` share one canonical encoding, so one cache key).
Everything that reads JSON from a person or a script (the CLI, and
``projections.parse_packet_json``) goes through :func:`loads_strict`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# a \uD800-\uDFFF escape somewhere in the text: only then is the result walked for one
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class JSONTextError(ValueError):
    """The text is not strict JSON (the message says where and why)."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for k, _v in pairs:
            if k in seen:
                raise JSONTextError(f"duplicate key {k!r} in a JSON object")
            seen.add(k)
    return obj


def _constant(name: str) -> Any:
    raise JSONTextError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise JSONTextError(f"number {text} is out of range (not a finite double)")
    return x


def loads_strict(text: str | bytes) -> Any:
    """The value of a strict JSON document (UTF-8 when bytes), or :class:`JSONTextError`.

    Refused: invalid UTF-8 or a byte order mark, syntax errors, ``NaN``/``Infinity``,
    numbers past the double range (``1e999``), duplicate object keys, escaped
    lone surrogates (``"\\ud800"``) and nesting deeper than Python can parse.
    """
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")  # ("UTF-8": an equivalent mutant)
        except UnicodeDecodeError as e:
            raise JSONTextError(f"not UTF-8 (byte {e.start}: {e.reason})") from None
    try:
        value = json.loads(
            text, object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_finite
        )
    except JSONTextError:
        raise
    except RecursionError:
        raise JSONTextError("nested too deeply") from None
    except ValueError as e:  # JSONDecodeError; an integer past the digit limit
        raise JSONTextError(str(e)) from None
    if _SURROGATE_ESCAPE.search(text):
        _no_surrogates(value)
    return value


def _no_surrogates(value: Any) -> None:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str) and not v.isascii():
            try:
                v.encode("utf-8")  # ("UTF-8": an equivalent mutant, codec names ignore case)
            except UnicodeEncodeError as e:
                raise JSONTextError(
                    f"string holds a lone surrogate (\\u{ord(v[e.start]):04x}), not text"
                ) from None
