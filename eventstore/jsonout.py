"""Any value the log can hold as one JSON document: the one encoder of ctxledger's JSON.

Event data is CBOR, which holds more than JSON can (bytes, NaN, tags, dates,
non-string map keys, ...). :func:`to_jsonable` maps every such value to plain
JSON with a ``{"$type": ...}`` wrapper, so no stored value can make a JSON
document crash or turn invalid; :func:`dumps` prints it, ASCII by default.

It lives here, below both the views and the CLI, because both print the same
documents: ``ctxledger ... --json`` prints them (:mod:`cli.output` re-exports
these names) and an artifact (:mod:`projections.artifacts`) stores exactly what
``store get --json`` prints. Importing it costs the CLI nothing: the log's
package is loaded by every command anyway.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
from collections.abc import Mapping
from typing import Any
from uuid import UUID

import attrs
import cbor2


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
    # only NaN and ±inf come here: `x >= 0` or `x > 1` for `x > 0` are equivalent mutants
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _key(k: Any, path: set[int]) -> str:
    if isinstance(k, str):
        return k
    # allow_nan=False here and in dumps() guards what to_jsonable already ensures (no
    # non-finite float is left): mutants of it are equivalent
    return json.dumps(_conv(k, path), sort_keys=True, allow_nan=False)


def dumps(obj: Any, *, compact: bool = False, ascii_only: bool = True) -> str:
    """One JSON document for ``obj``; never raises for a value the log can hold."""
    seps = (",", ":") if compact else (", ", ": ")
    # the fast path prints the walk's exact text (tests/test_output.py): a mutant that
    # skips it is equivalent, only slower
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
    try:  # (allow_nan=None is as false as False: an equivalent mutant)
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
