"""Two pure helpers the log's failure rules rest on, pinned byte by byte:
``has_valid_frame_after`` (a torn tail, where nothing valid follows, or media
corruption, where it does) and ``reader.raw_batch`` (a batch's events exactly as
stored). Mutation testing found both reached only through whole-log tests that never
put a frame at the edges they test (docs/reliability.md)."""

from __future__ import annotations

from pathlib import Path

import cbor2
import pytest

from eventstore import CorruptLogError, Event
from eventstore.event import encode_batch
from eventstore.frame import (
    FRAME_MAGIC,
    encode_frame_parts,
    encode_raw_rows,
    encode_row,
    has_valid_frame_after,
    payload_prefix,
)
from eventstore.reader import raw_batch

D0 = b"\x33" * 32


def frame(first: int, count: int = 1) -> bytes:
    rows, _ = encode_batch([Event("search.test", None, {"i": first + j})
                            for j in range(count)], None)
    return encode_frame_parts(D0, first, count, (payload_prefix(1.0, None), rows))[0]


def test_a_frame_right_after_the_offset_or_at_the_start_is_found() -> None:
    f = frame(7)
    assert has_valid_frame_after(f, -1, 0)  # a frame at byte 0
    assert has_valid_frame_after(b"\0" * 5 + f, 4, 0)  # the byte right after ``off``
    assert not has_valid_frame_after(b"\0" * 5 + f, 5, 0)  # only bytes after ``off``
    assert has_valid_frame_after(memoryview(b"\0" * 5 + f), 4, 7)


def test_the_seq_bound_is_inclusive() -> None:
    f = b"\0" * 3 + frame(7)
    assert has_valid_frame_after(f, 0, 7)
    assert not has_valid_frame_after(f, 0, 8)
    assert not has_valid_frame_after(f + frame(5), 0, 8)  # an older frame is no proof


def test_bad_magics_before_or_after_a_frame_do_not_hide_it() -> None:
    """Bytes that start like a frame but are not one are stepped over, whether they
    come before the valid frame or after it; with no valid frame, False."""
    junk = FRAME_MAGIC + b"\xff" * 60
    assert has_valid_frame_after(junk + frame(9), -1, 0)
    assert has_valid_frame_after(frame(9) + junk, -1, 0)
    assert has_valid_frame_after(junk + junk + frame(9) + junk, 10, 9)
    assert not has_valid_frame_after(junk * 3, -1, 0)
    assert not has_valid_frame_after(b"", -1, 0)


def _payload(rows: list[bytes]) -> memoryview:
    return memoryview(payload_prefix(2.5, "bid") + encode_raw_rows(rows))


def test_raw_batch_gives_the_stored_bytes_not_a_new_encoding() -> None:
    """An event stored in a CBOR form ``encode_row`` would not write (an integer in two
    bytes) comes back as stored: the bytes are what the chain covers."""
    canonical = encode_row(["search.test", None, {"i": 1}])
    odd = canonical.replace(b"\x61i\x01", b"\x61i\x18\x01")
    assert odd != canonical and cbor2.loads(odd) == cbor2.loads(canonical)
    batch = raw_batch(Path("s.seg"), 64, _payload([odd, canonical]), 3, 2)
    assert (batch.first_seq, batch.at, batch.batch_id, batch.rows) == (
        3, 2.5, "bid", (odd, canonical))


def test_raw_batch_of_a_payload_without_offsets_encodes_its_rows() -> None:
    rows = [["search.test", None, {"i": 1}], ["search.test", "k", [1, 2]]]
    payload = memoryview(cbor2.dumps([2.5, None, rows]))
    batch = raw_batch(Path("s.seg"), 64, payload, 1, 2)
    assert batch.rows == tuple(encode_row(r) for r in rows) and batch.at == 2.5


def test_raw_batch_refuses_a_payload_whose_count_disagrees() -> None:
    path = Path("s.seg")
    payload = _payload([encode_row(["search.test", None, 1])])
    with pytest.raises(CorruptLogError) as err:
        raw_batch(path, 120, payload, 1, 2)
    assert (err.value.offset, err.value.reason) == (
        120, "payload does not decode: event count does not match the header")
