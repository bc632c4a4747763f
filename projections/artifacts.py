"""Artifacts: full entry documents on disk, each named by the sha256 of its bytes.

An agent that asks for a big entry often wants a small answer to pass around
(a *handle*) and the whole document in a file. An artifact is that file: the
entry exactly as ``ctxledger store get --json`` prints it, stored flat in the
store's artifact directory as ``<sha256 hex>`` (no fan-out: gc keeps the
directory at about one file per live entry asked for). The handle is the name,
so a reader re-checks the bytes against their name before trusting them.

Artifacts are a cache beside the log, never part of it: any file may be lost or
damaged and is rebuilt by asking again. Writes are atomic (a unique 0600 temp
file made ``O_EXCL|O_NOFOLLOW`` in the same directory, fsync, rename, directory
fsync), so a crash leaves at most a temp file, never a name whose bytes do not
hash to it. :meth:`ArtifactDir.gc` removes artifacts whose entry is no longer
live, and damaged ones; it never touches a file whose name is not a handle, nor
anything that is not a regular file, nor anything outside its directory.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from eventstore import LedgerError, LedgerIOError, _osio, private
from eventstore.jsonout import dumps

HANDLE_DIGITS = 64
_HANDLE = re.compile(r"[0-9a-f]{64}")
_HEX_CHARS = frozenset("0123456789abcdefABCDEF")
_TEMP = re.compile(r"\.tmp\.([0-9a-f]{64})\.([0-9]{1,10})\.[0-9a-f]{8}")
"""A writer's temp file: ``.tmp.<handle>.<pid>.<token>`` (hidden; never a handle)."""
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
MAX_LISTED = 20
"""Names :class:`GcResult` lists of what it left alone; the rest are only counted."""


class ArtifactError(LedgerError):
    """An artifact that cannot be served (missing, damaged, not a regular file)."""


class ArtifactNotFoundError(ArtifactError):
    """No artifact with this handle in the directory."""

    def __init__(self, handle: str, path: Path) -> None:
        self.handle = handle
        self.path = path
        super().__init__(f"no artifact {handle} (no file {path}); ask for the entry again")


class ArtifactCorruptError(ArtifactError):
    """The file's bytes do not hash to its name: it was damaged or tampered with."""

    def __init__(self, path: Path, actual: str) -> None:
        self.path = path
        self.actual = actual
        super().__init__(
            f"artifact {path} is damaged: its sha256 is {actual}, not its name; nothing "
            "was served (`ctxledger artifact gc` removes it; ask for the entry again)"
        )


def check_handle(text: object) -> str:
    """``text`` as a handle: exactly 64 hex digits (either case), returned lower case.

    Anything else raises ``ValueError`` before any file is looked at: a handle
    becomes a file name, so separators, ``..``, NUL, non-ASCII digits and every
    other character are refused rather than cleaned. No prefixes: a handle is
    passed around by programs, whole.
    """
    if not isinstance(text, str):
        raise ValueError(f"a handle is text, not {type(text).__name__}")
    if not text or not set(text) <= _HEX_CHARS:
        raise ValueError(f"{text[:80]!r} is not a handle (64 hex digits)")
    if len(text) != HANDLE_DIGITS:
        raise ValueError(f"a handle has {HANDLE_DIGITS} hex digits, not {len(text)}")
    return text.lower()


def entry_document(entry: Any) -> bytes:
    """The bytes of an entry's artifact: exactly what ``store get --json`` prints for it.

    ``entry`` is anything with ``to_json()`` (a :class:`CacheEntry`); the same
    encoder as the CLI's, so the artifact and the printed document are one text.
    """
    return (dumps(entry.to_json()) + "\n").encode("ascii")


@attrs.frozen
class ArtifactRef:
    """Where one artifact is: the small answer an agent passes around instead of the entry."""

    handle: str
    path: Path
    sha256: str
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"handle": self.handle, "path": str(self.path), "sha256": self.sha256,
                "bytes": self.bytes}


@attrs.frozen
class GcResult:
    """What :meth:`ArtifactDir.gc` removed (or, with ``dry_run``, would remove) and left."""

    dry_run: bool
    removed: int
    """Intact artifacts whose entry is not live."""
    damaged: int
    """Damaged artifacts (bytes that do not hash to the name, or no entry document)."""
    bytes_freed: int
    kept: int
    """Intact artifacts of live entries."""
    foreign: int
    """Entries whose name is not a handle, or that are not regular files: left alone."""
    stale_temp: int
    """Temp files of writers that died mid-write (their process is gone)."""
    removed_handles: tuple[str, ...]
    """Every handle removed, damaged ones too, sorted."""
    foreign_names: tuple[str, ...]
    """The first :data:`MAX_LISTED` foreign names, sorted."""

    def to_json(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        out["removed_handles"] = list(self.removed_handles)
        out["foreign_names"] = list(self.foreign_names)
        return out


class ArtifactDir:
    """One artifact directory: atomic, idempotent writes; reads that re-verify; gc.

    ``readonly`` refuses :meth:`write` and :meth:`gc` (reads and :meth:`stats`
    work either way). The directory is created, 0700, by the first write.
    """

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly

    def path_of(self, handle: str) -> Path:
        """The file of ``handle`` (checked by :func:`check_handle` first)."""
        return self.path / check_handle(handle)

    # --- writing --------------------------------------------------------------------

    def write(self, doc: bytes) -> ArtifactRef:
        """Store ``doc`` under its sha256; an intact file already there is kept as it is.

        A damaged file (or a symlink, or anything else that is not an intact
        regular file) at that name is replaced by rename, which never writes
        through it.
        """
        self._check_writable()
        digest = hashlib.sha256(doc).hexdigest()
        path = self.path / digest
        ref = ArtifactRef(digest, path, digest, len(doc))
        try:
            for d in (self.path.parent, self.path):
                private.check_owner(d)
            private.make_dirs(self.path, sync=True)
            if _read_intact(path, digest) is not None:
                return ref
            tmp = self.path / f".tmp.{digest}.{os.getpid()}.{os.urandom(4).hex()}"
            fd = private.create_file(tmp, os.O_WRONLY | os.O_EXCL | os.O_NOFOLLOW)
            try:
                try:
                    _osio.write_all(fd, doc, 0)
                    _osio.fsync(fd)
                finally:
                    os.close(fd)
                _osio.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)  # never leave a partial file behind
                raise
            _osio.fsync_dir(self.path)
        except OSError as e:
            raise LedgerIOError(f"cannot write artifact {path}: {e.strerror or e}") from e
        return ref

    def _check_writable(self) -> None:
        if self.readonly:
            raise LedgerError(f"artifact directory {self.path} was opened read-only")

    # --- reading --------------------------------------------------------------------

    def read(self, handle: str) -> bytes:
        """The bytes of ``handle``, re-verified against it.

        Raises ``ValueError`` for a malformed handle (before touching a file),
        :class:`ArtifactNotFoundError` when there is no such file,
        :class:`ArtifactCorruptError` when its bytes do not hash to its name, and
        :class:`ArtifactError` when the name holds a symlink or anything else
        that is not a regular file (it is never followed).
        """
        name = check_handle(handle)
        path = self.path / name
        try:
            data = _read_regular(path)
        except FileNotFoundError:
            raise ArtifactNotFoundError(name, path) from None
        except _NotRegular as e:
            raise ArtifactError(f"artifact {path} is {e}, not a regular file: "
                                "refused (nothing was followed or served)") from None
        except OSError as e:
            raise LedgerIOError(f"cannot read artifact {path}: {e.strerror or e}") from e
        actual = hashlib.sha256(data).hexdigest()
        if actual != name:
            raise ArtifactCorruptError(path, actual)
        return data

    # --- maintenance ----------------------------------------------------------------

    def gc(self, is_live: Callable[[str], bool], *, dry_run: bool = False) -> GcResult:
        """Remove artifacts no live entry references, and damaged ones.

        An artifact's document names its entry's ``cache_key``; ``is_live(key)``
        says whether that entry is live in this store. Only regular files
        directly in this directory whose names are handles are candidates;
        every other name is counted (and the first few listed) but never
        touched. Temp files of writers whose process is gone are removed too.
        A file replaced by a writer while gc was reading it is left alone.
        """
        if not dry_run:
            self._check_writable()
        removed = damaged = freed = kept = stale = 0
        gone: list[str] = []
        foreign: list[str] = []
        for name, st in self._scan():
            if st is None or not stat.S_ISREG(st.st_mode):
                foreign.append(name)
                continue
            if not _HANDLE.fullmatch(name):
                if _stale_temp(name) and (dry_run or self._unlink(name, st)):
                    stale += 1
                elif not _TEMP.fullmatch(name):
                    foreign.append(name)
                continue
            verdict, size = self._classify(name, is_live)
            if verdict == "live":
                kept += 1
                continue
            if verdict == "foreign":
                foreign.append(name)
                continue
            if not dry_run and not self._unlink(name, st):
                continue
            gone.append(name)
            freed += size
            if verdict == "damaged":
                damaged += 1
            else:
                removed += 1
        if gone and not dry_run:
            try:
                _osio.fsync_dir(self.path)
            except OSError:
                pass  # best effort: an unlink that is lost leaves a file gc removes next time
        foreign.sort()
        return GcResult(dry_run, removed, damaged, freed, kept, len(foreign), stale,
                        tuple(sorted(gone)), tuple(foreign[:MAX_LISTED]))

    def stats(self, is_live: Callable[[str], bool]) -> dict[str, Any]:
        """Diagnostics: how many artifacts, their bytes, how many are orphans or damaged."""
        count = total = orphans = damaged = foreign = 0
        for name, st in self._scan():
            if st is None or not stat.S_ISREG(st.st_mode) or not _HANDLE.fullmatch(name):
                if not (st is not None and stat.S_ISREG(st.st_mode) and _TEMP.fullmatch(name)):
                    foreign += 1
                continue
            verdict, size = self._classify(name, is_live)
            if verdict == "foreign":
                foreign += 1
                continue
            count += 1
            total += size
            orphans += verdict == "orphan"
            damaged += verdict == "damaged"
        return {"path": str(self.path), "count": count, "bytes": total, "orphans": orphans,
                "damaged": damaged, "foreign": foreign}

    def _scan(self) -> list[tuple[str, os.stat_result | None]]:
        """``(name, lstat or None)`` of each entry of the directory (none if it is missing)."""
        out: list[tuple[str, os.stat_result | None]] = []
        try:
            with os.scandir(self.path) as it:
                for e in it:
                    try:
                        out.append((e.name, e.stat(follow_symlinks=False)))
                    except OSError:
                        out.append((e.name, None))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise LedgerIOError(f"cannot list artifacts in {self.path}: {e.strerror}") from e
        return sorted(out, key=lambda x: x[0])

    def _classify(self, name: str, is_live: Callable[[str], bool]) -> tuple[str, int]:
        """``(verdict, size)``: ``live``, ``orphan``, ``damaged`` or ``foreign`` (not a
        regular file when opened: swapped meanwhile)."""
        path = self.path / name
        try:
            data = _read_regular(path)
        except (_NotRegular, FileNotFoundError):
            return "foreign", 0
        except OSError as e:
            raise LedgerIOError(f"cannot read artifact {path}: {e.strerror or e}") from e
        if hashlib.sha256(data).hexdigest() != name:
            return "damaged", len(data)
        key = _cache_key_of(data)
        if key is None:
            return "damaged", len(data)
        return ("live" if is_live(key) else "orphan"), len(data)

    def _unlink(self, name: str, seen: os.stat_result) -> bool:
        """Remove ``name`` if it is still the file that was looked at; True if removed."""
        path = self.path / name
        try:
            now = os.lstat(path)
            if (now.st_ino, now.st_dev) != (seen.st_ino, seen.st_dev):
                return False  # a writer renamed a new file over it meanwhile
            os.unlink(path)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise LedgerIOError(f"cannot remove artifact {path}: {e.strerror}") from e
        return True


class _NotRegular(Exception):
    """The name holds a symlink, directory, FIFO, ...: what it is, for the message."""


def _read_regular(path: Path) -> bytes:
    """The bytes of the regular file at ``path``; a symlink there is never followed."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _NotRegular("a symlink") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _NotRegular("a directory" if stat.S_ISDIR(st.st_mode) else "a special file")
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _read_intact(path: Path, digest: str) -> bytes | None:
    """The bytes at ``path`` if it is a regular file hashing to ``digest``, else None."""
    try:
        data = _read_regular(path)
    except (_NotRegular, OSError):
        return None
    return data if hashlib.sha256(data).hexdigest() == digest else None


def _cache_key_of(data: bytes) -> str | None:
    """The ``cache_key`` an entry document names, or None if it is no entry document."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return None
    key = doc.get("cache_key") if isinstance(doc, dict) else None
    return key if isinstance(key, str) and _HANDLE.fullmatch(key) else None


def _stale_temp(name: str) -> bool:
    """A writer's temp file whose process is gone (never this process's own)."""
    m = _TEMP.fullmatch(name)
    if m is None:
        return False
    pid = int(m.group(2))
    if pid == os.getpid():
        return False
    if pid < 1:
        return True  # no writer has it (and kill(0) would signal our own group)
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # (past any pid: no such process)
        return True
    except OSError:  # another user's process: alive
        return False
    return False
