"""``generation.check_generation_start`` and ``marker_of``: what a generation's first
segment must prove (its marker names the head its header continues, the anchors file
matches the marker and ends at that head), each refusal in its words, over segments
built here frame by frame. (Mutation testing found these rules unpinned.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import blake3
import cbor2
import pytest

from eventstore.frame import (
    decode_segment_header,
    encode_frame_parts,
    encode_raw_rows,
    encode_segment_header,
    payload_prefix,
)
from eventstore.generation import (
    ANCHOR_ENTRY,
    COMPACTED,
    anchors_name,
    check_generation_start,
    marker_of,
)

BASE = 8
PREV = bytes(range(32))
OLD = ANCHOR_ENTRY.pack(3, b"\x01" * 32) + ANCHOR_ENTRY.pack(BASE - 1, PREV)


def segment(rows: list[bytes] | None) -> bytes:
    """A generation's first segment at BASE after PREV, its first frame holding ``rows``
    (None: no frame at all; no rows: a frame that says one event and holds none)."""
    head = encode_segment_header(BASE, PREV, 4096, generation_start=True)
    if rows is None:
        return head
    parts = (payload_prefix(1.0, None), encode_raw_rows(rows))
    frame, _ = encode_frame_parts(PREV, BASE, len(rows) or 1, parts)
    return head + frame


def marker(**changes: Any) -> bytes:
    data = {"old_base": 1, "old_head": BASE - 1, "old_digest": PREV.hex(),
            "anchors_blake3": blake3.blake3(OLD).hexdigest(), "anchors_frames": 2}
    data.update(changes)
    return cbor2.dumps([COMPACTED, None, data])


def check(tmp_path: Path, data: bytes, anchors: bytes = OLD) -> str | None:
    (tmp_path / anchors_name(BASE)).write_bytes(anchors)
    return check_generation_start(tmp_path, data, decode_segment_header(data))


def test_a_whole_generation_start_proves_its_cut(tmp_path: Path) -> None:
    assert check(tmp_path, segment([marker()])) is None
    assert marker_of(segment([marker()]), decode_segment_header(segment(None)))[0] == COMPACTED


@pytest.mark.parametrize("changes", [{"old_head": BASE - 2}, {"old_digest": "00" * 32},
                                     {"old_head": BASE, "old_digest": "11" * 32}],
                         ids=["head", "digest", "both"])
def test_a_marker_that_names_another_head_is_refused(tmp_path: Path,
                                                     changes: dict[str, Any]) -> None:
    assert check(tmp_path, segment([marker(**changes)])) == (
        f"{COMPACTED} does not name the head the segment header continues")


def test_anchors_that_do_not_end_at_the_old_head_are_refused(tmp_path: Path) -> None:
    other = ANCHOR_ENTRY.pack(BASE - 1, b"\x02" * 32)
    data = segment([marker(anchors_blake3=blake3.blake3(other).hexdigest())])
    assert check(tmp_path, data, other) == f"{anchors_name(BASE)} does not end at the old head"
    assert check(tmp_path, segment([marker()]), other) == (
        f"{anchors_name(BASE)} is missing or does not match {COMPACTED}")


@pytest.mark.parametrize("rows,why", [
    (None, "a generation start without its first event"),
    ([], "first event is not [kind, key, data]"),
    ([cbor2.dumps(["ledger.compacted", None])], "first event is not [kind, key, data]"),
    ([cbor2.dumps(["ledger.compacted", None, [1]])], "first event is not [kind, key, data]"),
    ([cbor2.dumps({"a": 1})], "first event is not [kind, key, data]"),
], ids=["no-frame", "no-row", "two-items", "data-not-a-map", "not-a-list"])
def test_a_first_event_that_cannot_be_read_says_why(tmp_path: Path, rows: list[bytes] | None,
                                                   why: str) -> None:
    data = segment(rows)
    assert marker_of(data, decode_segment_header(data)) == why
    assert check(tmp_path, data) == why
