"""Salvage: the explicit repair of mid-log corruption (``ctxledger salvage``).

:func:`scan` is pure: the current generation's segment bytes in, what can be
kept and what is lost out. A frame is kept only when it checks out in full:
its structure (magic, header crc, footer, count), its payload's shape, a seq
above everything kept before it, and its chain digest against the digest of
the frame before it. After damage that takes a frame header with it, the
frame before the next readable one is unknown, so that next frame cannot be
checked and is counted lost too; the chain is checked again from its digest
on. The seqs of every frame not kept, and every seq no readable frame
claims, are reported as lost. The I/O shell is :meth:`Ledger.salvage`: the
kept batches go into a new generation (format.md §12) whose first event is
``ledger.salvaged``; the damaged segments are copied to ``quarantine/`` first.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs
import blake3

from .frame import (
    FRAME_HEADER_SIZE,
    FRAME_MAGIC,
    SEGMENT_HEADER_SIZE,
    FrameError,
    SegmentHeaderError,
    decode_payload,
    decode_segment_header,
    read_frame_header,
)
from .generation import SALVAGED as SALVAGED
from .generation import Written
from .reader import raw_batch
from .records import RawBatch
from .verify import check_rows


@attrs.define
class Scan:
    """What :func:`scan` found."""

    batches: list[RawBatch] = attrs.field(factory=list)  # kept, original seqs
    lost: list[list[int]] = attrs.field(factory=list)  # [first, last] seq ranges
    damaged: list[str] = attrs.field(factory=list)  # segment names
    head: int = 0  # the highest seq any readable frame claims
    head_digest: bytes = b""  # that frame's digest (as its header says)
    frames: list[tuple[int, bytes]] = attrs.field(factory=list)  # (last seq, digest) read
    torn_tail: bool = False  # the last segment ends in bytes no frame follows (ignored)

    @property
    def lost_events(self) -> int:
        return sum(b - a + 1 for a, b in self.lost)

    def lose(self, first: int, last: int) -> None:
        if last < first:
            return
        if self.lost and self.lost[-1][1] + 1 >= first:
            self.lost[-1][1] = max(self.lost[-1][1], last)
        else:
            self.lost.append([first, last])


def _next_frame(data: bytes, pos: int, min_seq: int) -> int | None:
    """The offset of the next well-formed frame header after ``pos`` claiming a seq of at
    least ``min_seq``, or None."""
    while True:
        pos = data.find(FRAME_MAGIC, pos + 1)
        if pos < 0:  # equivalent mutants `<= 0`, `< 1`: a find from pos + 1 >= 65 is never 0
            return None
        try:
            info = read_frame_header(data, pos)
        except FrameError:
            continue
        if info.first_seq >= min_seq:
            return pos


def scan(
    segments: Sequence[tuple[Path, bytes]], start_seq: int, start_digest: bytes
) -> Scan:
    """Walk every segment (content without preallocated zeros) from ``start_seq`` chained
    to ``start_digest`` and sort frames into kept and lost."""
    out = Scan(head=start_seq - 1, head_digest=start_digest)
    prev: bytes | None = start_digest
    expect = start_seq
    for k, (path, data) in enumerate(segments):
        last_seg = k == len(segments) - 1
        try:  # a damaged or misplaced header: the segment is rewritten, its frames kept
            hdr = decode_segment_header(data)
            bad = hdr.base_seq != expect or (prev is not None and hdr.prev_digest != prev)
        except SegmentHeaderError:
            bad = True
        pos = SEGMENT_HEADER_SIZE
        while pos < len(data):
            try:
                info = read_frame_header(data, pos)
            except FrameError:
                nxt = _next_frame(data, pos, expect)
                if nxt is None:
                    if last_seg and not bad:
                        out.torn_tail = True  # never acknowledged: not a loss
                    else:
                        bad = True
                    break
                # (bad = False here, and in the gap below, are equivalent mutants: the
                # next frame's digest cannot be checked with prev None, which sets bad)
                bad, prev, pos = True, None, nxt
                continue
            first, count, digest = info.first_seq, info.count, info.digest
            last = first + count - 1
            if first < expect:  # a frame for seqs already passed: damage
                bad, pos = True, info.end
                continue
            if first > expect:
                out.lose(expect, first - 1)
                bad, prev = True, None
            p0, p1 = pos + FRAME_HEADER_SIZE, info.end - 8
            ok = prev is not None and blake3.blake3(
                prev + data[pos + 8 : pos + 24] + data[p0:p1]).digest() == digest
            if ok:
                try:
                    _at, _bid, rows = decode_payload(data[p0:p1])
                    ok = check_rows(rows, count) is None
                except ValueError:  # (ok = True or None: equivalent mutants; raw_batch
                    ok = False  # decodes the same payload again and fails the same way)
            if ok:  # (path and pos name the frame only in raw_batch's error, which is
                try:  # caught here: None for either is an equivalent mutant)
                    out.batches.append(raw_batch(path, pos, memoryview(data)[p0:p1], first,
                                                 count))
                except Exception:
                    ok = False  # (None: an equivalent mutant, as false as False)
            if not ok:
                out.lose(first, last)
                bad = True
            out.frames.append((last, digest))
            out.head, out.head_digest = last, digest
            prev, expect, pos = digest, last + 1, info.end
        if bad:
            out.damaged.append(path.name)
    return out


@attrs.frozen
class SalvageReport:
    """What :meth:`Ledger.salvage` did."""

    scan: Scan
    salvaged: bool
    written: Written | None = None
    quarantined: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "salvaged": self.salvaged,
            "lost": self.scan.lost,
            "lost_events": self.scan.lost_events,
            "kept_events": sum(len(b.rows) for b in self.scan.batches),
            "damaged_segments": self.scan.damaged,
            "quarantined": list(self.quarantined),
        }
        if self.written is not None:
            out.update({"new_base_seq": self.written.base, "new_head_seq": self.written.head})
        return out
