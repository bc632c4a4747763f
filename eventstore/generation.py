"""Log generations: writing a new one (compaction), checking its start, removing old ones.

A generation is a log whose first segment starts at ``base_seq = H + 1`` with
``prev_digest`` = the chain digest at ``H`` of the generation before it, its
header marked as a generation start (format.md §12). Its first event,
``ledger.compacted``, records the old head and digest and the blake3 of the
*anchors file* ``<base>.anchors``: every frame end ``(seq, digest)`` of every
older generation, so an anchor taken before the cut still verifies.

The commit point is one rename: the new generation's only segment is written
whole to ``<base>.seg.tmp`` and fsynced, its anchors file before it (renamed
into place and the directory fsynced), then the rename makes it ``<base>.seg``
and the directory is fsynced. Before the
rename the old generation is the log; after it the new one (readers take the
newest generation start). Old segments are removed only after that, and a
crash before they are gone leaves left-overs that nothing reads and the next
compaction removes.
"""

from __future__ import annotations

import os
import re
import struct
from bisect import bisect_left
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs
import blake3
import cbor2

from . import _osio, private
from .errors import LedgerIOError
from .frame import (
    SEGMENT_HEADER_SIZE,
    FrameError,
    SegmentHeader,
    decode_payload,
    encode_frame_parts,
    encode_raw_rows,
    encode_segment_header,
    payload_prefix,
    walk_frames,
)
from .segments import TMP_RE, list_all_segments, segment_name

COMPACTED = "ledger.compacted"
"""The first event of a generation written by ``compact``."""
SALVAGED = "ledger.salvaged"
"""The first event of a generation written by ``salvage``."""
MARKERS = frozenset({COMPACTED, SALVAGED})
"""The kinds a generation may start with."""


def is_marker(row: bytes) -> bool:
    """Is ``row`` (a checked event's stored CBOR ``[kind, key, data]``) a generation
    marker (``ledger.compacted``/``ledger.salvaged``)? A kind shorter than 24 characters
    starts at byte 2 (after the array's and the text's one-byte heads), so the bytes
    there tell most rows apart without decoding them."""
    return row[2:9] == b"ledger." and cbor2.loads(row)[0] in MARKERS


ANCHORS_RE = re.compile(r"(\d{20})\.anchors")
ANCHOR_ENTRY = struct.Struct("<Q32s")
"""One entry of an anchors file: a frame's last seq (u64 LE) and its chain digest."""

#: A batch to copy: ``(at, batch_id, rows)``, each row an event's stored CBOR bytes.
RawRows = tuple[float, "str | None", list[bytes]]


def anchors_name(base: int) -> str:
    return f"{base:020d}.anchors"


def read_anchors(log_dir: Path, base: int) -> bytes:
    """The anchors file of the generation starting at ``base`` (b"" if it has none)."""
    try:
        with open(log_dir / anchors_name(base), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""
    except OSError as e:
        raise LedgerIOError(f"cannot read {log_dir / anchors_name(base)}: {e.strerror}") from e


def anchor_digest(anchors: bytes, seq: int) -> bytes | None:
    """The digest the anchors file records for the frame ending at ``seq`` (None: no
    frame of the older generations ended there)."""
    n = len(anchors) // ANCHOR_ENTRY.size
    seqs = _SeqView(anchors, n)
    k = bisect_left(seqs, seq)
    if k < n and seqs[k] == seq:
        return bytes(ANCHOR_ENTRY.unpack_from(anchors, k * ANCHOR_ENTRY.size)[1])
    return None


class _SeqView:
    """The seqs of an anchors file as a sequence, for bisect (no copy)."""

    def __init__(self, data: bytes, n: int) -> None:
        self.data, self.n = data, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k: int) -> int:
        # "<q" (signed) is an equivalent mutant: seqs count up from 1 and never reach 2**63
        return int(struct.unpack_from("<Q", self.data, k * ANCHOR_ENTRY.size)[0])


def marker_of(data: bytes | memoryview, hdr: SegmentHeader) -> tuple[str, dict[str, Any]] | str:
    """``(kind, data)`` of a generation's first event, or why it cannot be read."""
    try:
        first = next(walk_frames(data, SEGMENT_HEADER_SIZE, hdr.prev_digest, hdr.base_seq), None)
    except FrameError as e:
        return f"first frame is unreadable ({e.reason})"
    if first is None:
        return "a generation start without its first event"
    _off, _end, _first, _count, _digest, p0, p1 = first
    try:
        _at, _bid, rows = decode_payload(memoryview(data)[p0:p1])
    except ValueError as e:
        return f"first frame does not decode ({e})"
    row = rows[0] if rows else None
    if not (isinstance(row, list) and len(row) == 3 and isinstance(row[2], dict)):
        return "first event is not [kind, key, data]"
    return str(row[0]), row[2]


def check_generation_start(
    log_dir: Path, data: bytes | memoryview, hdr: SegmentHeader
) -> str | None:
    """None when a generation's first event proves the cut; else what is wrong.

    ``ledger.compacted`` must name the old head ``base - 1`` and the header's
    ``prev_digest``, and the anchors file must hash to what it records and end
    with that same ``(seq, digest)``.
    """
    got = marker_of(data, hdr)
    if isinstance(got, str):
        return got
    kind, d = got
    if kind not in MARKERS:
        return f"a generation must start with {COMPACTED} or {SALVAGED}, not {kind}"
    if d.get("old_head") != hdr.base_seq - 1 or d.get("old_digest") != hdr.prev_digest.hex():
        return f"{kind} does not name the head the segment header continues"
    anchors = read_anchors(log_dir, hdr.base_seq)
    if blake3.blake3(anchors).hexdigest() != d.get("anchors_blake3"):
        return f"{anchors_name(hdr.base_seq)} is missing or does not match {kind}"
    if kind == COMPACTED and anchors and anchors[-ANCHOR_ENTRY.size:] != ANCHOR_ENTRY.pack(
            hdr.base_seq - 1, hdr.prev_digest):
        return f"{anchors_name(hdr.base_seq)} does not end at the old head"
    return None


@attrs.frozen
class Written:
    """What :func:`write_generation` committed."""

    base: int
    head: int
    digest: bytes
    frames: int
    events: int
    size: int
    path: Path
    removed: tuple[str, ...] = ()
    """Files of the older generation removed after the commit."""


def _durable_file(path: Path, data: bytes) -> None:
    """``data`` at ``path`` by temp file, fsync, rename (the directory is synced later)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = private.create_temp(tmp, os.O_WRONLY)
    try:
        _osio.write_all(fd, data, 0)
        _osio.fsync(fd)
    finally:
        os.close(fd)
    _osio.replace(tmp, path)


def write_generation(
    log_dir: Path,
    base: int,
    prev_digest: bytes,
    roll_bytes: int,
    batches: Iterable[RawRows],
    anchors: bytes | None,
    progress: Callable[[int], None] | None = None,
) -> Written:
    """Write and commit a generation starting at ``base``; call under the writer lock.

    ``anchors`` None: not a generation start but the first segment of a log
    (``log import`` of a log that starts at seq 1 into an empty directory).

    Every step is synced whatever the log's sync mode. Any failure before the
    rename leaves the old generation in use and removes the temp segment; a
    crash may leave ``<base>.seg.tmp`` or ``<base>.anchors`` behind, which
    nothing reads (a writer removes the temp file, the next compaction both).
    """
    final = log_dir / segment_name(base)
    tmp = log_dir / (segment_name(base) + ".tmp")
    seq, digest, frames, events = base, prev_digest, 0, 0
    renamed = False  # (None: an equivalent mutant, read only as a truth value)
    try:
        if anchors is not None:
            _durable_file(log_dir / anchors_name(base), anchors)
            # its name durable before the segment's rename can be: a power cut may keep
            # either rename of one directory, and the generation needs its anchors file
            _osio.fsync_dir(log_dir)
        fd = private.create_temp(tmp, os.O_RDWR)
        try:
            head = encode_segment_header(base, prev_digest, roll_bytes,
                                         generation_start=anchors is not None)
            _osio.write_all(fd, head, 0)
            pos = len(head)
            for at, batch_id, rows in batches:
                frame, digest = encode_frame_parts(
                    digest, seq, len(rows), (payload_prefix(at, batch_id), encode_raw_rows(rows))
                )
                _osio.write_all(fd, frame, pos)
                pos += len(frame)
                seq += len(rows)
                frames += 1
                events += len(rows)
                if progress is not None:
                    progress(len(rows))
            _osio.fsync(fd)
        finally:
            os.close(fd)
        if os.path.lexists(final):  # never replace a segment
            raise FileExistsError(f"{final.name} already exists")
        _osio.replace(tmp, final)  # the commit point
        renamed = True
        _osio.fsync_dir(log_dir)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if renamed:  # (not "final exists": a segment already there was never replaced)
            # renamed, but the directory sync failed: the new generation may or may not
            # survive a power cut; in this process it is the log
            raise LedgerIOError(
                f"new generation {final.name} written but not synced ({e.strerror or e}); "
                "run `ctxledger verify`"
            ) from e
        raise LedgerIOError(f"cannot write new generation {final.name}: {e.strerror or e}") \
            from e
    return Written(base, seq - 1, digest, frames, events, pos, final)


SEAL_MAGIC = b"CTXG"
"""The seal: ``CTXG`` and the new generation's base (u64 LE), written after the last
frame of the segment a committed generation replaced (format.md §12)."""


def open_for_seal(path: Path | None) -> int:
    """A write descriptor on the segment a generation is about to replace, opened before
    the commit (its name may be reused after); -1 if it cannot be opened."""
    if path is None:
        return -1
    try:
        return os.open(path, os.O_WRONLY)
    except OSError:
        return -1


def seal_segment(fd: int, offset: int, base: int) -> None:
    """Write the seal at ``offset`` (the end of the old segment's frames) through ``fd``
    (from :func:`open_for_seal`; the caller closes it), after the commit: handles that follow
    the old generation meet it as a torn tail and look for the new one. Best effort (a
    handle also looks on its own, at most ``GEN_CHECK_INTERVAL`` later); never synced:
    only live processes need it."""
    if fd < 0:
        return
    try:
        _osio.write_all(fd, SEAL_MAGIC + base.to_bytes(8, "little"), offset)
    except OSError:
        pass


def chain(*parts: Iterable[RawRows]) -> Iterable[RawRows]:
    for part in parts:
        yield from part


def remove_older(log_dir: Path, base: int) -> list[str]:
    """Remove what a committed generation starting at ``base`` left behind: older
    segments and anchors files, anchors files of generations never committed, stray
    temp files. Call under the writer lock, after the commit. Never touches
    ``quarantine/``. Returns the names removed; failures stay for the next time."""
    removed: list[str] = []
    segs = {b for b, _p, _i in list_all_segments(log_dir)}
    try:
        names = os.listdir(log_dir)
    except OSError:
        return removed
    for name in sorted(names):
        m = ANCHORS_RE.fullmatch(name)
        from_seg = re.fullmatch(r"(\d{20})\.seg", name)
        stale = (
            (from_seg is not None and int(from_seg.group(1)) < base)
            or (m is not None and (int(m.group(1)) < base or int(m.group(1)) not in segs))
            or TMP_RE.fullmatch(name) is not None
            or name.endswith(".anchors.tmp")
        )
        if stale:
            try:
                os.unlink(log_dir / name)
                removed.append(name)
            except OSError:
                pass
    if removed:
        try:
            _osio.fsync_dir(log_dir)
        except OSError:
            pass
    return removed


def build_anchors(older: bytes, frames: Iterable[tuple[int, int, bytes]]) -> bytes:
    """The anchors file of a new generation: the old one's entries, then every frame
    end of the generation being replaced."""
    parts = [older]
    parts.extend(ANCHOR_ENTRY.pack(last, digest) for _first, last, digest in frames)
    return b"".join(parts)


def marker_row(data: dict[str, Any]) -> bytes:
    """The stored bytes of a ``ledger.compacted`` event."""
    return cbor2.dumps([COMPACTED, None, data])
