"""Private by default (failure rule 7): what ctxledger creates is 0700 or 0600, and ours.

Agent context holds secrets (tokens in tool output, file contents, prompts), so
every directory ctxledger creates is 0700 and every file 0600, whatever the
umask. The mode is given at creation and then set exactly with ``chmod``:
creation honours the umask, which can only take bits away, and a umask such
as 0o277 would otherwise leave a file its owner cannot write. Nothing changes
the process's umask (other threads create files too).

Opening a store for writing refuses one that another user owns: files we
added would mix owners, and whoever owns the directory controls what we read
back from it. Readers are not refused (auditing someone else's store is a
legitimate read). Existing files keep their modes; :func:`mode_warnings` says
which ones are wider than ours, for ``verify`` and ``store stats``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from . import _osio
from .errors import LedgerIOError, NotOwnerError

DIR_MODE = 0o700
FILE_MODE = 0o600
MAX_MODE_WARNINGS = 20
"""Paths listed by :func:`mode_warnings`; the rest are counted in one more line."""


def make_dirs(path: Path, *, sync: bool = False) -> bool:
    """Create ``path`` and every missing parent, each 0700; True if ``path`` was created.

    Directories that already exist are left as they are (their modes are their
    owner's business; :func:`mode_warnings` reports them). ``sync``: make the new
    entries durable too (fsync of each parent; best effort, as not every file
    system can). Raises ``OSError``.
    """
    missing: list[Path] = []
    p = path
    while not os.path.isdir(p):
        missing.append(p)
        if p.parent == p:  # "/" or ".", which are directories: never reached, so
            break  # return for break is an equivalent mutant
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)  # (no mode: an equivalent mutant, chmod sets it at once)
        except FileExistsError:
            if not os.path.isdir(d):
                raise
            continue  # another process made it first: its mode is its creator's
        os.chmod(d, DIR_MODE)
        if sync:
            try:
                _osio.fsync_dir(d.parent)
            except OSError:
                pass
    return bool(missing)


def create_file(path: str | os.PathLike[str], flags: int) -> int:
    """``os.open(path, flags | O_CREAT, 0600)`` and then mode exactly 0600; a descriptor.

    For files this process is about to fill (``O_EXCL``, or a temp file it
    truncates), so the mode is set whether or not the file existed.
    """
    # (no mode: an equivalent mutant, fchmod sets it at once; only a racing process
    # could see the file between the two calls)
    fd = os.open(path, flags | os.O_CREAT, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_temp(path: str | os.PathLike[str], flags: int) -> int:
    """A new temp file at ``path`` (0600, ``O_EXCL``); a descriptor.

    A stale one (a writer killed while filling it) is removed first; then
    ``O_EXCL``: a file or a symlink planted at the name meanwhile fails the
    call rather than being written through (with ``O_CREAT``, ``O_EXCL`` fails on
    any existing name, a symlink included, so ``O_NOFOLLOW`` would add nothing;
    callers hold the writer lock, so no other writer is there).
    """
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return create_file(path, flags | os.O_EXCL)


def check_owner(path: Path) -> None:
    """Raise :class:`NotOwnerError` if ``path`` exists and another user owns it.

    Called on the store and log directories by everything that opens them for
    writing. ``os.geteuid`` is looked up at each call (tests stand in for
    another user by replacing it: CI runs as root, where chown proves little).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise LedgerIOError(f"cannot stat {path}: {e.strerror}") from e
    euid = os.geteuid()
    if st.st_uid != euid:
        raise NotOwnerError(path, st.st_uid, euid)


def mode_warnings(root: Path) -> list[str]:
    """One line per directory or file under ``root`` (itself included) that group or
    others may use: ctxledger makes them 0700 and 0600. Symlinks are not followed.

    At most :data:`MAX_MODE_WARNINGS` paths are named; one more line counts the
    rest. An unreadable directory is a warning too (we cannot check inside it).
    """
    wide: list[str] = []
    more = 0
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            # the store itself may be a symlink (moved to another disk): check where it
            # points; what is found inside is checked as it is (links not followed)
            st = os.stat(d) if d == root else os.lstat(d)
        except OSError:
            continue  # removed meanwhile (a checkpoint temp file, say)
        if stat.S_ISDIR(st.st_mode):
            entries: list[Path] = []
            try:
                with os.scandir(d) as it:
                    entries = [Path(e.path) for e in it]
            except OSError as e:
                wide.append(f"{d}: cannot list it to check its modes ({e.strerror})")
            stack.extend(sorted(entries, reverse=True))
            want = DIR_MODE
        elif stat.S_ISREG(st.st_mode):
            want = FILE_MODE
        else:
            continue  # symlinks, sockets...: not something ctxledger creates
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            if len(wide) >= MAX_MODE_WARNINGS:
                more += 1
                continue
            import shlex  # only when there is something to say

            wide.append(
                f"{d} is mode {mode:04o}: group or others can use it "
                f"(ctxledger makes it {want:04o}; chmod {want:o} {shlex.quote(str(d))})"
            )
    if more:
        wide.append(f"... and {more} more paths under {root} that group or others can use")
    return wide
