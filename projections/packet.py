"""Packets: the unit an agent caches. Validation and the content address."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import blake3
import cbor2

from eventstore import InvalidEventError
from eventstore.event import MAX_DATA_DEPTH, check_depth
from eventstore.frame import Encoded, encode_row
from eventstore.jsontext import JSONTextError, loads_strict

from .cache import PUT
from .memory import memory_field_error
from .scope import PROJECT_TAG

DEFAULT_MAX_PACKET_BYTES = 16 * 1024 * 1024
LIST_FIELDS = ("paths", "symbols", "tests", "task_ids", "packet_types")


class InvalidPacketError(InvalidEventError):
    """A packet that may not be stored; nothing was written."""


#: A packet is stored at this level of its event's data (data is 1, the packet 2).
PACKET_LEVEL = 2


def canonical_bytes(packet: Mapping[str, Any]) -> bytes:
    """Deterministic CBOR (sorted keys), so key order never changes the cache key."""
    try:
        return cbor2.dumps(packet, canonical=True)
    except Exception as e:
        raise InvalidPacketError(f"packet cannot be encoded: {e}") from None


class _NotPlain(Exception):
    """Raised by :func:`_sorted_copy` for anything but JSON's types without floats."""


def _canonical_key(k: str) -> tuple[int, str]:
    # canonical CBOR orders map keys by encoded length, then bytes: for str keys that is
    # UTF-8 length, then code points (UTF-8 preserves code point order)
    return (len(k), k) if k.isascii() else (len(k.encode()), k)


_ORDERS: dict[tuple[Any, ...], list[Any]] = {}


def canonical_order(d: dict[Any, Any]) -> list[Any]:
    """``d``'s keys in canonical CBOR order, remembered per key tuple (packets repeat
    the same few key sets: a dict lookup instead of a keyed sort per map).
    :func:`canonical_order_plain` is the plain twin a test holds it equal to."""
    ks = tuple(d)
    order = _ORDERS.get(ks)
    if order is None:
        if not all(type(k) is str for k in ks):
            raise _NotPlain
        order = sorted(ks, key=_canonical_key)
        if len(_ORDERS) >= 4096:
            _ORDERS.clear()
        _ORDERS[ks] = order
    return order


def canonical_order_plain(d: dict[str, Any]) -> list[str]:
    return sorted(d, key=_canonical_key)


def _sorted_copy(v: Any, level: int, deepest: list[int]) -> Any:
    """``v`` with every map's keys in canonical order: what decoding its canonical CBOR gives."""
    if level > deepest[0]:
        deepest[0] = level
    if level > MAX_DATA_DEPTH:
        raise _NotPlain
    if type(v) is dict:
        out = {}
        for k in canonical_order(v) if len(v) > 1 else v:
            if type(k) is not str:
                raise _NotPlain
            x = v[k]
            tx = type(x)
            out[k] = x if tx is str or tx is int or tx is bool or x is None else _sorted_copy(
                x, level + 1, deepest
            )
        return out
    if type(v) is list:
        return [
            x if type(x) is str or type(x) is int or type(x) is bool or x is None
            else _sorted_copy(x, level + 1, deepest)
            for x in v
        ]
    if type(v) is str or type(v) is int or type(v) is bool or v is None:
        return v
    raise _NotPlain


def encode_packet(packet: Mapping[str, Any]) -> tuple[dict[str, Any], bytes, int]:
    """``(body, canonical bytes, depth)``: the packet as the log gives it back, its
    canonical encoding, and how many levels of maps and arrays it nests -- or -1
    when the packet is not plain JSON and must not be stored verbatim.

    JSON's types without floats (what agents send) take a fast path: one walk
    that copies the packet with its maps' keys in canonical order, then plain
    CBOR of the copy, which is then byte for byte the canonical encoding
    (``canonical_bytes``; a property test holds the two equal). Anything else
    (floats, tuples, bytes, tags, other mappings...) is encoded canonically and
    decoded back, and its depth is -1: such a packet is stored as a value (the
    writer checks and trial-decodes it), not verbatim, because bytes like
    value-sharing tags mean something else inside a bigger payload.
    """
    deepest = [0]
    try:
        body = _sorted_copy(packet, 1, deepest)
        if type(body) is not dict:
            raise _NotPlain
        return body, cbor2.dumps(body), deepest[0]
    except _NotPlain:
        if deepest[0] > MAX_DATA_DEPTH:
            raise _too_deep() from None  # (cbor2's encoder itself crashes on very deep data)
    except RecursionError:
        raise _too_deep() from None
    except (UnicodeEncodeError, ValueError) as e:  # lone surrogates, say
        raise InvalidPacketError(f"packet cannot be encoded: {e}") from None
    try:
        check_depth(packet, PACKET_LEVEL)  # before cbor2's encoder sees very deep data
    except InvalidEventError:
        raise _too_deep() from None
    _check_finite(packet)
    data = canonical_bytes(packet)
    try:
        body = cbor2.loads(data)
        same = canonical_bytes(body) == data
    except Exception as e:
        raise InvalidPacketError(f"packet does not decode from CBOR: {e}") from None
    if not same:  # value-sharing or string-reference tags, say: no stable content address
        raise InvalidPacketError(
            "packet does not encode to the same canonical bytes once decoded "
            "(its cache_key could not be checked again)"
        )
    return body, data, -1


def _check_finite(packet: Mapping[str, Any]) -> None:
    """Refuse NaN and infinities: NaN equals nothing (not even itself) and JSON has
    neither, so a packet holding one has no text form that reads back to it."""
    stack: list[Any] = [packet]
    while stack:
        v = stack.pop()
        if isinstance(v, float):
            if not math.isfinite(v):
                raise InvalidPacketError(f"packet holds a non-finite number ({v}); JSON has none")
        elif isinstance(v, Mapping):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple, set, frozenset)):
            stack.extend(v)


def _too_deep() -> InvalidPacketError:
    return InvalidPacketError(f"packet nests deeper than {MAX_DATA_DEPTH - 1} levels")


def packet_data(
    canonical: bytes,
    depth: int,
    metadata: Mapping[str, Any] | None,
    body: Any = None,
    project: str | None = None,
) -> dict[str, Any]:
    """The data of a ``cache.put`` event; a plain packet (``depth >= 0``) is stored
    as its canonical bytes verbatim, anything else as the value ``body``.

    The packet comes last in the event's CBOR (keys ``project`` in agent scope,
    ``bytes``, ``metadata``, ``packet``, in that order), so a point read finds
    its bytes at the end of the event's row: the row's last ``bytes`` bytes
    hash to the key.
    """
    data: dict[str, Any] = {} if project is None else {PROJECT_TAG: project}
    data["bytes"] = len(canonical)
    if metadata:
        data["metadata"] = dict(metadata)
    data["packet"] = Encoded(canonical, depth) if depth >= 0 else body
    return data


def verbatim_packet(
    row: bytes, key: str, nbytes: int, project: str | None = None
) -> memoryview | None:
    """The packet's bytes in ``row``, if ``row`` is exactly the event row
    :func:`packet_data` makes for a plain ``nbytes``-byte packet under ``key``
    without metadata (for ``project``, in agent scope); else None. Whether they
    hash to the key is the caller's check.

    The row is the packet's bytes after a head that depends only on ``key`` and
    ``nbytes``: the head is compared and the packet viewed, nothing copied (a
    16 MiB packet is read once and hashed once, not copied and re-encoded).
    """
    if not 0 < nbytes < len(row):
        return None
    data = packet_data(b"", 0, None, project=project)
    data["bytes"] = nbytes  # the head of the row of any nbytes-byte packet
    head = encode_row([PUT, key, data])
    if len(head) + nbytes != len(row) or not row.startswith(head):
        return None
    return memoryview(row)[len(head) :]


def cache_key_of(canonical: bytes) -> str:
    return blake3.blake3(canonical).hexdigest()


def check_packet(
    packet: object, max_bytes: int = DEFAULT_MAX_PACKET_BYTES
) -> tuple[dict[str, Any], bytes]:
    """Return ``(body, canonical_bytes)`` or raise :class:`InvalidPacketError`.

    ``body`` is the packet decoded from its canonical bytes: what the log reads back.
    """
    body, data, _depth = check_packet_full(packet, max_bytes)
    return body, data


def check_packet_fields(packet: object) -> None:
    """The packet's own rules (a mapping, a target, lists of strings); raises
    :class:`InvalidPacketError`."""
    if type(packet) is not dict and not isinstance(packet, Mapping):
        raise InvalidPacketError(f"a packet must be a JSON object, got {_json_type(packet)}")
    target = packet.get("target")
    if not isinstance(target, str) or not target.strip():
        raise InvalidPacketError("a packet needs a non-empty string field 'target'")
    summary = packet.get("summary")
    if summary is not None and not isinstance(summary, str):
        raise InvalidPacketError("packet field 'summary' must be a string")
    get = packet.get
    for name in LIST_FIELDS:
        value = get(name)
        if value is None:
            continue
        if not isinstance(value, list):
            raise InvalidPacketError(f"packet field {name!r} must be a list of strings")
        for v in value:
            if type(v) is not str and not isinstance(v, str):
                raise InvalidPacketError(f"packet field {name!r} must be a list of strings")
    why = memory_field_error(packet)
    if why is not None:
        raise InvalidPacketError(why)


def _checked(packet: Mapping[str, Any], max_bytes: int) -> tuple[dict[str, Any], bytes, int]:
    body, data, depth = encode_packet(packet)
    if len(data) > max_bytes:
        raise InvalidPacketError(
            f"packet is {len(data)} bytes encoded, over the {max_bytes}-byte limit"
        )
    if PACKET_LEVEL - 1 + depth > MAX_DATA_DEPTH:
        raise _too_deep()
    # body: the packet as the log will give it back (plain dicts and lists, no tuples
    # or other mappings): views fold a fresh append from memory, a rebuild from the log
    return body, data, depth


def check_packet_full(
    packet: object, max_bytes: int = DEFAULT_MAX_PACKET_BYTES
) -> tuple[dict[str, Any], bytes, int]:
    """:func:`check_packet`, also returning the packet's depth (for :func:`packet_data`)."""
    check_packet_fields(packet)
    assert isinstance(packet, Mapping)
    return _checked(packet, max_bytes)


def parse_packet_json(text: str | bytes) -> object:
    """A packet from JSON text, read strictly (``eventstore.jsontext``: no NaN, no
    out-of-range numbers, no duplicate keys), so the text has one cache key."""
    try:
        return loads_strict(text)
    except JSONTextError as e:
        raise InvalidPacketError(f"invalid packet JSON: {e}") from None


def _json_type(value: object) -> str:
    return {
        list: "an array",
        str: "a string",
        int: "a number",
        float: "a number",
        bool: "a boolean",
        type(None): "null",
    }.get(type(value), type(value).__name__)
