"""The segment header decoder's every refusal, by its exact reason (format.md §6).

A reason is what ``verify`` and the open error print for a damaged or foreign
segment; the fuzz tests only check that the type is right.
"""

from __future__ import annotations

import blake3
import pytest

from eventstore.frame import (
    SEGMENT_HEADER,
    SEGMENT_MAGIC,
    SegmentHeader,
    SegmentHeaderError,
    decode_segment_header,
    encode_segment_header,
)

PREV = bytes(range(32))


def header(magic: bytes = SEGMENT_MAGIC, version: int = 2, flags: int = 0, roll_kib: int = 64,
           base: int = 5, prev: bytes = PREV) -> bytes:
    """A header with its checksum right, whatever its fields say."""
    head = SEGMENT_HEADER.pack(magic, version, flags, roll_kib, base, prev)
    return head + blake3.blake3(head).digest()[:8]


def reason(buf: bytes) -> tuple[str, int | None]:
    with pytest.raises(SegmentHeaderError) as e:
        decode_segment_header(buf)
    assert str(e.value) == e.value.reason
    return e.value.reason, e.value.version


def test_good_headers_decode() -> None:
    assert decode_segment_header(encode_segment_header(5, PREV, 64 * 1024)) == SegmentHeader(
        2, 5, PREV, 64 * 1024, 0)
    assert decode_segment_header(encode_segment_header(9, PREV, 2048, True)) == SegmentHeader(
        3, 9, PREV, 2048, 1)
    assert decode_segment_header(header(version=1, flags=7)).flags == 0  # v1-2: not read
    assert decode_segment_header(header() + b"more").base_seq == 5  # the first 64 bytes


@pytest.mark.parametrize(("buf", "want"), [
    (b"", ("segment header is 0 bytes, expected 64", None)),
    (header()[:63], ("segment header is 63 bytes, expected 64", None)),
    (header(magic=b"CTXLSEG\x01"), ("not a ctxledger segment (bad magic)", None)),
    (header()[:60] + b"\0\0\0\0", ("segment header checksum mismatch", None)),
    (header(version=4), ("format version 4", 4)),
    (header(version=0), ("format version 0 does not exist (versions start at 1)", None)),
    (header(base=0), ("segment base_seq is 0", None)),
    (header(roll_kib=0), ("segment roll size is 0", None)),
    (header(version=3, flags=0), ("version 3 segment with flags 0x0", None)),
    (header(version=3, flags=3), ("version 3 segment with flags 0x3", None)),
], ids=["empty", "short", "magic", "checksum", "newer", "version0", "base0", "roll0",
        "v3-no-flag", "v3-flags"])
def test_each_refusal_has_its_reason(buf: bytes, want: tuple[str, int | None]) -> None:
    assert reason(buf) == want
