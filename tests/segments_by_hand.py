"""Segments written by hand, frame by frame: for payloads no writer of ours makes
(another shape, bad rows, bytes that do not decode) under right checksums and chain."""

from __future__ import annotations

from eventstore.frame import (
    GENESIS_DIGEST,
    SEGMENT_HEADER_SIZE,
    encode_frame_parts,
    encode_segment_header,
)


def segment_of_frames(payloads: list[tuple[int, bytes]]) -> tuple[bytes, list[int]]:
    """The bytes of a first segment (its header, then a frame per ``(count, payload)``
    from seq 1) and each frame's offset in it."""
    prev, seq, body, offsets = GENESIS_DIGEST, 1, b"", []
    for count, payload in payloads:
        frame, prev = encode_frame_parts(prev, seq, count, (payload,))
        offsets.append(SEGMENT_HEADER_SIZE + len(body))
        body += frame
        seq += count
    return encode_segment_header(1, GENESIS_DIGEST, 1 << 20) + body, offsets
