"""What a packet's files held when it was put: ``cache.files`` events and their view.

At put time each path a packet names that is a regular file inside the
project root is fingerprinted (blake3 of its bytes, size, mtime in ns). The
fingerprints go to the log as a ``cache.files`` event keyed by the cache_key,
after the ``cache.put`` rows in the same atomic batch: the ``cache.put`` row
stays verbatim (its packet's canonical bytes last), so ``get`` keeps its
authenticated point read. A put whose packet names no existing file writes no
``cache.files`` event.

The view maps each cache_key to the fingerprints of its **latest** put: a
``cache.put`` drops what an earlier put recorded, the ``cache.files`` after it
(if any) sets the new ones, and ``cache.evicted`` drops them. It is a fold,
so ``as_of`` and ``rebuild`` give the fingerprints as they stood.

Bounds at put time (docs/recall.md, "Freshness"): at most
``MAX_PATHS_PER_PACKET`` paths per packet are considered and at most
``MAX_PUT_HASH_BYTES`` bytes hashed per put call (one batch); a file past
either is not fingerprinted and the event says so (``complete: false``), which
makes the packet's freshness ``unknown`` rather than ``fresh``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import cbor2

from eventstore import Event

from .cache import EVICTED, FILES, PUT, parse_evict, parse_put
from .freshness import hash_file, stat_file

NAME = "fingerprints"
VERSION = 1

MAX_PATHS_PER_PACKET = 32
"""Paths of one packet considered for fingerprints (in the packet's order)."""
MAX_PUT_HASH_BYTES = 64 * 1024 * 1024
"""Bytes hashed per put call (``put`` or one ``put_many`` batch), all packets together."""


@attrs.define
class PutBudget:
    """What one put call may still hash (the bound is read when it is made)."""

    hash_bytes: int = attrs.field(factory=lambda: MAX_PUT_HASH_BYTES)
    dirs: dict[str, str | None] = attrs.field(factory=dict)
    """Directories resolved so far in this put call (:func:`freshness.stat_file`)."""
    hashed: dict[str, tuple[bytes, int, int]] = attrs.field(factory=dict)
    """Files hashed so far in this put call: resolved path -> (digest, size, mtime_ns).
    Many packets of one batch name the same file; it is hashed once, and reused
    while its size and mtime are what they were."""


def fingerprint(root: Path, paths: Iterable[Any], budget: PutBudget) -> dict[str, Any] | None:
    """The data of a ``cache.files`` event for a packet naming ``paths``, or None when
    none of them is a regular file inside ``root``.

    Paths outside the root (after resolving symlinks), missing ones, directories
    and anything but a regular file are skipped and never opened. A path past
    ``MAX_PATHS_PER_PACKET``, or a file past the put's hash budget, makes the
    record incomplete.
    """
    files: list[list[Any]] = []
    complete = True
    seen: set[str] = set()
    for p in paths:
        if not isinstance(p, str) or p in seen:
            continue
        if len(seen) >= MAX_PATHS_PER_PACKET:
            complete = False
            break
        seen.add(p)
        found = stat_file(root, p, budget.dirs)
        if found is None:
            continue
        full, st = found
        if st is None or not stat.S_ISREG(st.st_mode):
            continue
        got = budget.hashed.get(full)
        if got is None or got[1:] != (st.st_size, st.st_mtime_ns):
            if st.st_size > budget.hash_bytes:
                complete = False
                continue
            got = hash_file(full, budget.hash_bytes)
            if got is None:
                continue
            budget.hash_bytes -= got[1]
            budget.hashed[full] = got
        digest, size, mtime_ns = got
        files.append([p, digest, size, mtime_ns])
    if not files:
        return None
    return {"files": files, "complete": complete}


def files_error(data: Any) -> str | None:
    """Why ``data`` is no well-formed ``cache.files`` data (None: it is)."""
    if not isinstance(data, Mapping) or type(data.get("complete")) is not bool:
        return "data is not a map with a boolean 'complete'"
    files = data.get("files")
    if not isinstance(files, list) or not files:
        return "files must be a non-empty array"
    for row in files:
        if not (isinstance(row, list) and len(row) == 4 and type(row[0]) is str
                and type(row[1]) is bytes and len(row[1]) == 32
                and type(row[2]) is int and type(row[3]) is int):
            return "each file is [path, 32-byte digest, size, mtime_ns]"
    return None


class FingerprintState:
    """cache_key -> ``(files, complete)`` of its latest put; ``apply`` is idempotent below
    ``seq``."""

    def __init__(self) -> None:
        self.seq = 0
        self.files: dict[str, tuple[list[list[Any]], bool]] = {}
        self.skipped_bad = 0

    def apply(self, event: Event) -> None:
        if event.seq <= self.seq:
            return
        self.seq = event.seq
        kind = event.kind
        if kind == PUT or kind == EVICTED:
            # the cache's rules: a put or eviction it refuses changes nothing here either
            parsed = parse_put(event) if kind == PUT else parse_evict(event)
            if self.files and parsed is not None:
                self.files.pop(parsed[0].hex(), None)
        elif kind == FILES:
            data = event.data
            key = event.key
            if type(key) is not str or len(key) != 64 or files_error(data) is not None:
                self.skipped_bad += 1
                return
            try:
                key = bytes.fromhex(key).hex()  # as the cache keys it (lowercase)
            except ValueError:
                self.skipped_bad += 1
                return
            self.files[key] = (data["files"], data["complete"])

    def get(self, key: str) -> tuple[list[list[Any]], bool] | None:
        return self.files.get(key)

    def to_bytes(self) -> bytes:
        return cbor2.dumps({
            "seq": self.seq,
            "skipped_bad": self.skipped_bad,
            "files": [[k, f, c] for k, (f, c) in self.files.items()],
        })

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> FingerprintState:
        obj = cbor2.loads(bytes(data))
        st = cls()
        st.seq = int(obj["seq"])
        st.skipped_bad = int(obj["skipped_bad"])
        st.files = {k: (f, c) for k, f, c in obj["files"]}
        return st

    def snapshot(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "entries": len(self.files),
            "files": sum(len(f) for f, _c in self.files.values()),
            "skipped_bad": self.skipped_bad,
        }


def project_root(canonical: Path, fallback: bool) -> Path | None:
    """The root freshness is judged against: the project's canonical root when it is a
    directory on disk, and not a broad root (the home directory, ``/``) that only fell
    back to agent scope; None means no fingerprints and no freshness."""
    if fallback:
        return None
    try:
        return canonical if os.path.isdir(canonical) else None
    except (OSError, ValueError):
        return None
