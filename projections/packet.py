"""Packets: the unit an agent caches. Validation and the content address."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import blake3
import cbor2

from eventstore import InvalidEventError

DEFAULT_MAX_PACKET_BYTES = 16 * 1024 * 1024
LIST_FIELDS = ("paths", "symbols", "tests", "task_ids", "packet_types")


class InvalidPacketError(InvalidEventError):
    """A packet that may not be stored; nothing was written."""


def canonical_bytes(packet: Mapping[str, Any]) -> bytes:
    """Deterministic CBOR (sorted keys), so key order never changes the cache key."""
    try:
        return cbor2.dumps(packet, canonical=True)
    except Exception as e:
        raise InvalidPacketError(f"packet cannot be encoded: {e}") from None


def cache_key_of(canonical: bytes) -> str:
    return blake3.blake3(canonical).hexdigest()


def check_packet(
    packet: object, max_bytes: int = DEFAULT_MAX_PACKET_BYTES
) -> tuple[dict[str, Any], bytes]:
    """Return ``(body, canonical_bytes)`` or raise :class:`InvalidPacketError`.

    ``body`` is the packet decoded from its canonical bytes: what the log reads back.
    """
    if not isinstance(packet, Mapping):
        raise InvalidPacketError(f"a packet must be a JSON object, got {_json_type(packet)}")
    target = packet.get("target")
    if not isinstance(target, str) or not target.strip():
        raise InvalidPacketError("a packet needs a non-empty string field 'target'")
    summary = packet.get("summary")
    if summary is not None and not isinstance(summary, str):
        raise InvalidPacketError("packet field 'summary' must be a string")
    for name in LIST_FIELDS:
        value = packet.get(name)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InvalidPacketError(f"packet field {name!r} must be a list of strings")
    data = canonical_bytes(packet)
    if len(data) > max_bytes:
        raise InvalidPacketError(
            f"packet is {len(data)} bytes encoded, over the {max_bytes}-byte limit"
        )
    # the packet as the log will give it back (plain dicts and lists, no tuples or
    # other mappings): views fold a fresh append from memory, a rebuild from the log
    body: dict[str, Any] = cbor2.loads(data)
    return body, data


def parse_packet_json(text: str | bytes) -> object:
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
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
