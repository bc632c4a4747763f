"""The payload head parser behind point reads (``row_bounds``), head by head.

A point read finds event ``i`` of a batch from the payload's first bytes: the CBOR
heads of ``[at, batch_id, offsets, events]`` and two offsets. Writers use the
shortest heads, but any CBOR width is a valid payload (and another writer's, or a
mirror's, may use it), and bytes that are not such a payload must give None (the
caller then reads the batch whole, which names the damage), never a wrong span or
an exception. Each case below builds the payload by hand and says where each
event's bytes are. (Mutation testing found the widths and refusals unpinned.)
"""

from __future__ import annotations

import struct

import cbor2
import pytest

from eventstore.frame import payload_head_fast, payload_prefix, row_bounds

ROWS = [cbor2.dumps(["p.p", None, {"i": i, "pad": "z" * i}]) for i in range(3)]


def head(major: int, n: int, width: int) -> bytes:
    """The CBOR head of ``major`` (0x40 bytes, 0x60 text, 0x80 array) with argument
    ``n`` in ``width`` bytes (0: in the head byte itself)."""
    if width == 0:
        assert n < 24
        return bytes([major | n])
    return bytes([major | {1: 24, 2: 25, 4: 26, 8: 27}[width]]) + n.to_bytes(width, "big")


def payload(rows: list[bytes], offs_width: int = 1, rows_width: int = 0,
            bid: str | None = None, offsets: list[int] | None = None,
            count: int | None = None) -> tuple[bytes, int]:
    """``(payload, where the events start)``."""
    if offsets is None:
        offsets, at = [], 0
        for r in rows:
            offsets.append(at)
            at += len(r)
    table = struct.pack(f"<{len(offsets)}I", *offsets)
    width = 0 if bid is None or len(bid) < 24 else 1 if len(bid) < 256 else 2
    bid_bytes = b"\xf6" if bid is None else head(0x60, len(bid), width) + bid.encode()
    front = (b"\x84\xfb" + struct.pack(">d", 2.5) + bid_bytes
             + head(0x40, len(table), offs_width) + table
             + head(0x80, len(rows) if count is None else count, rows_width))
    return front + b"".join(rows), len(front)


def spans(rows: list[bytes], start: int) -> list[tuple[int, int]]:
    out, at = [], start
    for r in rows:
        out.append((at, at + len(r)))
        at += len(r)
    return out


@pytest.mark.parametrize("offs_width", [0, 1, 2, 4, 8])
@pytest.mark.parametrize("rows_width", [0, 1, 2, 4, 8])
def test_every_head_width_gives_the_events_where_they_are(offs_width: int,
                                                         rows_width: int) -> None:
    p, start = payload(ROWS, offs_width, rows_width, bid="batch-7")
    assert [row_bounds(p, i) for i in range(3)] == spans(ROWS, start)
    assert [cbor2.loads(p[a:b]) for a, b in spans(ROWS, start)] == [cbor2.loads(r) for r in ROWS]
    assert row_bounds(p, 3) is None and row_bounds(p, -1) is None


def test_a_long_batch_id_and_no_batch_id() -> None:
    for bid in (None, "", "b" * 30, "b" * 300):  # "": a head whose argument is 0
        p, start = payload(ROWS, bid=bid)
        assert [row_bounds(p, i) for i in range(3)] == spans(ROWS, start)


def _replace(p: bytes, at: int, new: bytes) -> bytes:
    return p[:at] + new + p[at + len(new):]


def test_bytes_that_are_not_such_a_payload_give_none() -> None:
    good, start = payload(ROWS)
    offs_head = 11  # after 0x84, the float64 and the null batch id
    bad = {
        "not an array of 4": _replace(good, 0, b"\x83"),
        "at not a float64": _replace(good, 1, b"\xfa"),
        "cut after the batch id": good[:11],
        "cut inside a head": good[:12],
        "offsets as text": _replace(good, offs_head, b"\x78"),
        "offsets as an array": _replace(good, offs_head, b"\x98"),
        "a reserved head": _replace(good, offs_head, b"\x5c"),
        "offsets of 11 bytes": _replace(good, offs_head, b"\x58\x0b"),
        "offsets past the end": _replace(good, offs_head, b"\x58\xff"),
    }
    for why, p in bad.items():
        assert [row_bounds(p, i) for i in range(3)] == [None] * 3, why
    # the width bytes of a head cut off by the end of the payload
    for width in (1, 2, 4, 8):
        p, _ = payload(ROWS, offs_width=width)
        assert row_bounds(p[: offs_head + width], 0) is None, width
    # as many events as offsets, or nothing
    for count in (2, 4):
        p, _ = payload(ROWS, count=count)
        assert [row_bounds(p, i) for i in range(3)] == [None] * 3, count


def test_offsets_that_leave_the_events_give_none_for_that_event() -> None:
    p, start = payload(ROWS, offsets=[0, len(ROWS[0]), 10**6])  # the third past the end
    want = spans(ROWS, start)
    assert [row_bounds(p, i) for i in range(3)] == [want[0], None, None]
    p, start = payload(ROWS, offsets=[0, 0, len(ROWS[0]) + len(ROWS[1])])  # an empty event
    assert [row_bounds(p, i) for i in range(3)] == [None, spans([ROWS[0] + ROWS[1]], start)[0],
                                                  spans(ROWS, start)[2]]


# --- payload_head_fast: (at, batch_id) from the first bytes --------------------------

@pytest.mark.parametrize("bid", [None, "", "b", "x" * 23, "x" * 24, "é" * 100, "x" * 255,
                                 "x" * 256, "y" * 1000])
@pytest.mark.parametrize("elements", [3, 4])
def test_the_fast_head_reads_at_and_the_batch_id_of_every_writers_shape(
        bid: str | None, elements: int) -> None:
    """What writers write (``payload_prefix``), and the 3-element payloads written
    before per-event offsets: the fast parser answers, it does not fall back."""
    at = 1234.5678
    rows = cbor2.dumps([["k", None, {}]])
    if elements == 4:
        p = payload_prefix(at, bid) + cbor2.dumps(b"\0\0\0\0") + rows
        assert p[0] == 0x84
    else:
        p = b"\x83\xfb" + struct.pack(">d", at) + cbor2.dumps(bid) + rows
    assert payload_head_fast(p) == (at, bid)
    head_len = 11 + (len(cbor2.dumps(bid)) - 1 if bid is not None else 0)
    assert payload_head_fast(p[:head_len]) == (at, bid)  # the head alone is enough
    if bid:
        assert payload_head_fast(p[: head_len - 1]) is None  # the id cut short


def test_the_fast_head_reads_a_batch_id_in_a_wider_head_than_needed() -> None:
    """CBOR allows a text length in more bytes than it needs (another writer's, a
    mirror's): an empty id in a 1- and a 2-byte length, the payload ending there."""
    at = 3.25
    p = b"\x84\xfb" + struct.pack(">d", at)
    assert payload_head_fast(p + b"\x78\x00") == (at, "")
    assert payload_head_fast(p + b"\x79\x00\x00") == (at, "")
    assert payload_head_fast(p + b"\x79\x01\x00" + b"q" * 256) == (at, "q" * 256)
    assert payload_head_fast(p + b"\x78") is None and payload_head_fast(p + b"\x79\x00") is None


def test_the_fast_head_gives_none_for_other_shapes() -> None:
    at = b"\xfb" + struct.pack(">d", 1.0)
    for p in [b"", b"\x84" + at,  # too short for a head
              b"\x82" + at + b"\xf6", b"\x85" + at + b"\xf6",  # not 3 or 4 elements
              b"\x84\xfa" + struct.pack(">f", 1.0) + b"\xf6\xf6",  # a float32 at
              b"\x84" + at + b"\x01",  # an integer batch id
              b"\x84" + at + b"\x7a\0\0\0\1x",  # a text head of 4 length bytes
              b"\x84" + at + b"\x62\xff\xfe"]:  # not UTF-8
        assert payload_head_fast(p) is None, p
