"""A full integrity check of a log directory that never modifies it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from .errors import CorruptLogError, LedgerIOError, UnsupportedFormatError
from .frame import (
    GENESIS_DIGEST,
    SEGMENT_HEADER_SIZE,
    FrameError,
    content_end,
    decode_payload,
    has_valid_frame_after,
    segment_header_is_torn,
    walk_frames,
)
from .generation import check_generation_start
from .segments import list_all_segments, list_generation, read_bytes, read_header


def _content(path: Path) -> bytes:
    """A segment's bytes without the zeros preallocated past its last frame."""
    data = read_bytes(path)
    end = content_end(data, SEGMENT_HEADER_SIZE)
    return data if end == len(data) else data[:end]  # (always the slice: equivalent)


@attrs.frozen
class Problem:
    segment: str
    offset: int
    error: str

    def to_json(self) -> dict[str, object]:
        return {"segment": self.segment, "offset": self.offset, "error": self.error}


@attrs.frozen
class VerifyReport:
    """What ``verify`` found: ``ok`` only when every byte checks out."""

    ok: bool
    events: int
    frames: int
    head_seq: int
    segments: int
    problems: tuple[Problem, ...]
    base_seq: int = 1
    """The first seq of the current generation (format.md §12)."""
    stale_segments: int = 0
    """Segments of an older generation not removed yet (ignored by readers)."""

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "events": self.events,
            "frames": self.frames,
            "head_seq": self.head_seq,
            "segments": self.segments,
            "base_seq": self.base_seq,
            "stale_segments": self.stale_segments,
            "problems": [p.to_json() for p in self.problems],
        }


def check_rows(rows: Sequence[Any], count: int) -> str | None:
    if len(rows) != count:
        return f"frame header says {count} events, payload holds {len(rows)}"
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str)):
            return "event is not [kind, key, data]"
        if not (row[1] is None or isinstance(row[1], str)) or not isinstance(row[2], dict):
            return "event key or data has the wrong type"
    return None


def verify_log(log_dir: Path, progress: Callable[[int], None] | None = None) -> VerifyReport:
    """Check headers, chain, seq continuity, checksums and payload shape of every frame.

    A torn final frame is reported too (a crash left bytes the next writer will
    cut), so ``ok`` means the files hold exactly the committed batches.
    ``progress`` hears of each segment checked.
    """
    problems: list[Problem] = []
    events = frames = 0
    digest, next_seq = GENESIS_DIGEST, 1
    segs, gen = list_generation(log_dir)
    stale = len(list_all_segments(log_dir)) - len(segs)
    base_seq = segs[0][0] if gen else 1
    n_segs = len(segs)
    torn_last: Problem | None = None
    if segs:
        path = segs[-1][1]
        try:
            data = _content(path)
        except LedgerIOError:
            pass  # reported below
        else:
            if segment_header_is_torn(data):
                why = (
                    f"segment header is {len(data)} bytes"
                    if len(data) < SEGMENT_HEADER_SIZE
                    else "segment header is all zeros and no frame follows"
                )
                torn_last = Problem(
                    path.name, 0, f"torn new segment ({why}); ignored, the next append moves "
                    "it to quarantine/"
                )
                segs = segs[:-1]
    for i, (base, path) in enumerate(segs):
        if progress is not None and i:
            progress(1)
        last = i == len(segs) - 1
        try:
            data = _content(path)
        except LedgerIOError as e:
            problems.append(Problem(path.name, 0, str(e)))
            continue
        try:
            # (read_header(path) without ``data``: equivalent mutants, it reads the same bytes)
            hdr = read_header(path, data)
        except (CorruptLogError, UnsupportedFormatError) as e:
            problems.append(Problem(path.name, 0, getattr(e, "reason", str(e))))
            continue
        if i == 0 and gen:  # a generation start: the cut is checked from its first event
            digest, next_seq = hdr.prev_digest, base
            bad = check_generation_start(log_dir, data, hdr)
            if bad is not None:
                problems.append(Problem(path.name, SEGMENT_HEADER_SIZE, bad))
        elif hdr.generation_start:
            problems.append(Problem(path.name, 0, "a generation start inside the generation"))
        if base != next_seq:
            problems.append(
                Problem(path.name, 0, f"segment starts at seq {base}, expected {next_seq}")
            )
        elif hdr.prev_digest != digest:
            problems.append(Problem(path.name, 0, "segment does not chain to the one before it"))
        digest, next_seq = hdr.prev_digest, base
        try:
            view = memoryview(data)
            for off, _end, first, count, fdigest, p0, p1 in walk_frames(
                data, SEGMENT_HEADER_SIZE, digest, next_seq
            ):
                try:
                    _at, _bid, rows = decode_payload(view[p0:p1])
                    bad = check_rows(rows, count)
                except ValueError as e:
                    bad = str(e)
                if bad:
                    problems.append(Problem(path.name, off, bad))
                frames += 1
                events += count
                digest, next_seq = fdigest, first + count
        except FrameError as e:
            if last and not has_valid_frame_after(data, e.offset, next_seq):
                reason = f"torn final frame ({e.reason}); ignored, the next append truncates it"
            else:
                reason = f"{e.reason}; valid data follows (media corruption)"
            problems.append(Problem(path.name, e.offset, reason))
    if torn_last is not None:
        problems.append(torn_last)
    return VerifyReport(not problems, events, frames, next_seq - 1, n_segs, tuple(problems),
                        base_seq, stale)
