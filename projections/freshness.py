"""Is a cached packet still about the code as it is? Fingerprints checked against the disk.

A packet's fingerprints (:mod:`projections.fingerprints`) say what each of its
files held when it was put. Checking them costs a ``stat`` per file; a file is
hashed again only when its size is unchanged but its mtime moved (same size,
new mtime: maybe the same bytes, a ``touch`` or a checkout). Every check draws
on one :class:`CheckBudget` per query, so a recall over many hits with many
paths costs at most ``MAX_QUERY_STATS`` stats and ``MAX_QUERY_HASH_BYTES``
hashed bytes; a hit past either bound is ``unknown``, never guessed.

Nothing outside the project root is ever opened: each path is resolved again
(symlinks followed) and one that now leaves the root is ``changed`` without
being read (docs/recall.md, "Freshness").
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import blake3

FRESH, STALE, UNKNOWN = "fresh", "stale", "unknown"
STATES = (FRESH, STALE, UNKNOWN)

MAX_QUERY_STATS = 256
"""Files stat'ed per query (one recall, or one ``get``): past it, hits are ``unknown``."""
MAX_QUERY_HASH_BYTES = 16 * 1024 * 1024
"""Bytes hashed again per query (files whose size held but whose mtime moved)."""
CHUNK = 1 << 20
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


@attrs.frozen
class Freshness:
    """What a hit's files look like now: ``fresh``, ``stale`` (a file changed or is
    gone) or ``unknown`` (nothing was fingerprinted, or a bound was hit)."""

    state: str
    changed_paths: tuple[str, ...] = ()
    missing_paths: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "changed_paths": list(self.changed_paths),
            "missing_paths": list(self.missing_paths),
        }


UNKNOWN_FRESHNESS = Freshness(UNKNOWN)


@attrs.define
class CheckBudget:
    """What one query may still spend on freshness checks (shared by all its hits);
    the bounds are read when it is made."""

    stats: int = attrs.field(factory=lambda: MAX_QUERY_STATS)
    hash_bytes: int = attrs.field(factory=lambda: MAX_QUERY_HASH_BYTES)
    dirs: dict[str, str | None] = attrs.field(factory=dict)
    """Directories resolved so far in this query (see :func:`stat_file`)."""


def inside(root: str | Path, path: str) -> str | None:
    """``path`` (relative to ``root``, or absolute) with symlinks resolved, if it stays
    inside ``root``; None otherwise (or when it cannot be resolved)."""
    if not path or "\x00" in path:
        return None
    try:
        full = os.path.realpath(os.path.join(root, path))  # an absolute path replaces root
    except (OSError, ValueError, RuntimeError):
        return None
    return full if _under(root, full) else None


_O_PATH = getattr(os, "O_PATH", 0)
_PROC_FD = "/proc/self/fd/"


def stat_file(
    root: str | Path, path: str, dirs: dict[str, str | None] | None = None
) -> tuple[str, os.stat_result | None] | None:
    """``(resolved path, its stat or None when it is gone)`` for ``path`` if it resolves
    inside ``root``; None if it leads out of it or cannot be resolved (a name too
    long, a directory that may not be searched). The one stat a freshness check
    spends per file (tests count calls to it).

    ``dirs``: directories already resolved in this query (one query's hits
    name files in a few directories): the file's directory is resolved once
    per query, then the file itself costs one ``lstat`` (a final symlink takes
    the full resolution below). A directory swapped for a symlink during the
    query is seen by the next query; nothing is read through it before
    :func:`hash_file`, which opens the resolved path without following a final
    symlink.

    On Linux the kernel resolves it: an ``O_PATH`` descriptor (which reads
    nothing, and with ``O_NOFOLLOW`` never follows a final symlink), its real
    path from ``/proc/self/fd`` and an ``fstat`` -- about a third of
    ``os.path.realpath``'s Python walk. A final symlink, or a system without
    ``O_PATH``, takes :func:`inside` and ``lstat``.
    """
    if not path or "\x00" in path:
        return None
    joined = os.path.normpath(os.path.join(root, path))
    if not _under(root, joined):  # out of the root as written: not even looked at
        return None
    if dirs is not None:
        found = _stat_in_dir(root, joined, dirs)
        if found is not _FULL_WAY:
            return found  # type: ignore[return-value]
    if _O_PATH:
        try:
            fd = os.open(joined, _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            fd = -1
        except OSError:
            fd = -2
        if fd >= 0:
            try:
                st = os.fstat(fd)
                real = os.readlink(f"{_PROC_FD}{fd}") if not stat.S_ISLNK(st.st_mode) else None
            except OSError:
                real = None
            finally:
                os.close(fd)
            if real is not None:
                return (real, st) if _under(root, real) else None
        elif fd == -1:  # gone; say so only if where it would be is inside the root
            full = inside(root, path)
            return None if full is None else (full, None)
    full = inside(root, path)
    if full is None:
        return None
    try:
        return full, os.lstat(full)
    except (FileNotFoundError, NotADirectoryError):
        return full, None
    except OSError:  # a name too long, a directory we may not search: unresolvable
        return None


_FULL_WAY = object()
_GONE, _OUTSIDE = "\x00gone", "\x00outside"  # cached verdicts on a missing directory


def _stat_in_dir(
    root: str | Path, joined: str, dirs: dict[str, str | None]
) -> tuple[str, os.stat_result | None] | None | object:
    """:func:`stat_file` through the query's directory cache; ``_FULL_WAY``: take the
    full way (the file is a symlink, or its directory cannot be resolved here)."""
    parent, name = os.path.split(joined)
    real = dirs.get(parent, "")
    if real == "":
        real = _real_dir(parent)
        if real is None and not os.path.isdir(parent):  # no such directory (or not one):
            # where it would be, with the existing part of it resolved, says inside or not
            where = inside(root, parent)
            real = _GONE if where is not None else _OUTSIDE
        dirs[parent] = real
    if real is None:
        return _FULL_WAY
    if real == _GONE:  # the file cannot exist: missing, nothing to stat
        return joined, None
    if real == _OUTSIDE or not _under(root, real):
        return None
    full = os.path.join(real, name)
    try:
        st = os.lstat(full)
    except (FileNotFoundError, NotADirectoryError):
        return full, None
    except OSError:
        return _FULL_WAY
    if stat.S_ISLNK(st.st_mode):
        return _FULL_WAY
    return full, st


def _real_dir(path: str) -> str | None:
    """``path`` (a directory) with symlinks resolved by the kernel; None if it is not
    an existing directory or the kernel cannot say (no ``O_PATH``)."""
    if not _O_PATH:
        return None
    try:
        fd = os.open(path, _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.readlink(f"{_PROC_FD}{fd}")
    except OSError:
        return None
    finally:
        os.close(fd)


def _under(root: str | Path, real: str) -> bool:
    base = str(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def hash_file(path: str | Path, limit: int) -> tuple[bytes, int, int] | None:
    """``(blake3 digest, size, mtime_ns)`` of the regular file at ``path`` (resolved,
    inside the root), or None when it is not a regular file, is bigger than
    ``limit`` bytes, or cannot be read.

    Opened without following a final symlink and without blocking (a FIFO put
    in a file's place is never waited on), then checked with ``fstat``: what
    is read is the file that was checked. On Linux the opened file's real path
    must be ``path`` itself (a directory on the way swapped for a symlink since
    ``path`` was resolved is refused, not read through).
    """
    try:
        fd = os.open(path, OPEN_FLAGS)
    except OSError:
        return None
    try:
        # O_NOFOLLOW guards only the last component: a parent directory swapped for
        # a symlink since ``path`` was resolved would lead the open out of the root.
        # The kernel says what was opened; anything but ``path`` itself is not read.
        if _O_PATH and os.readlink(f"{_PROC_FD}{fd}") != os.fspath(path):
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        h = blake3.blake3()
        left = st.st_size
        while left > 0:
            chunk = os.read(fd, min(CHUNK, left))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
        return h.digest(), st.st_size, st.st_mtime_ns
    except OSError:
        return None
    finally:
        os.close(fd)


def check(root: str | Path, files: Sequence[Any] | None, complete: bool,
          budget: CheckBudget) -> Freshness:
    """The freshness of one packet whose fingerprints are ``files``
    (``[path, digest, size, mtime_ns]`` rows; None: none recorded).

    ``complete`` is False when the put hit a bound (some paths were not
    fingerprinted): the packet is then ``unknown`` unless a checked file
    already shows it ``stale``.
    """
    if not files:
        return UNKNOWN_FRESHNESS
    changed: list[str] = []
    missing: list[str] = []
    for path, digest, size, mtime_ns in files:
        if budget.stats <= 0:
            complete = False
            break
        budget.stats -= 1
        found = stat_file(root, path, budget.dirs)
        if found is None:  # now a symlink out of the root (or unresolvable): never read
            changed.append(path)
            continue
        full, st = found
        if st is None:
            missing.append(path)
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            changed.append(path)
            continue
        if st.st_mtime_ns == mtime_ns:
            continue
        if size > budget.hash_bytes:
            complete = False
            continue
        budget.hash_bytes -= size
        now = hash_file(full, size)
        if now is None or now[0] != digest:
            changed.append(path)
    if changed or missing:
        return Freshness(STALE, tuple(changed), tuple(missing))
    return Freshness(FRESH) if complete else UNKNOWN_FRESHNESS
