"""Checksummed, atomic, disposable checkpoints: one primary and one backup per view.

File layout (``checkpoints/<name>.ckpt`` and ``<name>.ckpt.bak``), format 2::

    8   magic b"CTXLCKP2"
    4   header length h (u32 LE)
    h   CBOR header {"name", "version", "seq", "digest", "written_at"[, "project"], "pad"}
    n   body (the view's own encoding)
    32  blake3 of everything before it

A checkpoint is only ever a cache of the fold: any doubt (bad checksum, other
format or version, a watermark this log does not have) and the caller rebuilds.
The checksum catches damage; what ties a checkpoint to its log is the
watermark ``(seq, digest)``, which the runner checks against ``digest_at``.
Format 1 carried a keyed MAC whose key lived in this same directory: it
stopped no one who could write the checkpoints (they could read or replace
the key too), and a lost key forced a full rebuild. Format 1 files are
refused like any other unusable checkpoint, and the views are rebuilt.

Files are read into memory by default. ``CheckpointDir(mapped=True)`` maps them
instead (short-lived read-only processes: the CLI's read commands); see
:meth:`CheckpointDir.changed_in_place` for what that trades.
"""

from __future__ import annotations

import _thread
import contextlib
import mmap
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import blake3
import cbor2

from eventstore import LedgerError, LedgerIOError, _osio, private

MAGIC = b"CTXLCKP2"
OLD_MAGIC = b"CTXLCKP1"  # format 1: keyed MAC, key in checkpoints/KEY; refused, rebuilt
SUM_SIZE = 32
_LEN = struct.Struct("<I")


@attrs.frozen
class Checkpoint:
    name: str
    version: int
    seq: int
    digest: bytes
    body: bytes | memoryview
    source: str  # "primary" or "backup"


class CheckpointDir:
    """The ``checkpoints/`` directory: checked reads and atomic writes."""

    def __init__(
        self, path: Path, *, readonly: bool, mapped: bool = False, project: str | None = None
    ) -> None:
        # (mapped=True by default is an equivalent mutant for the tests: a mapping serves
        # the same bytes; what it trades is in changed_in_place)
        self.path = path
        self.readonly = readonly
        self.mapped = mapped
        self.project = project
        """Agent scope: the project whose views these are; written into each header and
        required on load, so a checkpoint of one project never serves another."""
        # files mapped so far: (path, identity when mapped), for changed_in_place
        self._maps: list[tuple[Path, tuple[int, ...]]] = []
        self._prefetched: dict[str, _Prefetch] = {}

    def load(self, name: str, refused: list[str]) -> Iterator[Checkpoint]:
        """Intact checkpoints of ``name``, primary first, checked lazily.

        The backup is read and hashed only if the caller asks for it (the
        primary was refused). Views may keep zero-copy views of the returned
        body. Reasons for refusing a file are appended to ``refused``.
        """
        pre = self._prefetched.pop(name, None)
        for suffix, source in ((".ckpt", "primary"), (".ckpt.bak", "backup")):
            path = self.path / (name + suffix)
            digest = None
            try:
                if pre is not None and source == "primary":
                    raw, ident, digest = pre.result()
                else:
                    raw, ident = _mmap(path) if self.mapped else (_read(path), None)
            except FileNotFoundError:
                continue
            except (OSError, ValueError):
                refused.append(f"{source}: unreadable")
                continue
            # (digest None: an equivalent mutant, _decode then hashes the bytes the
            # prefetch hashed)
            ck, why = _decode(raw, name, source, digest, self.project)
            if ck is None:
                refused.append(f"{source}: {why}")
            else:
                if ident is not None:
                    self._maps.append((path, ident))
                yield ck

    def prefetch(self, names: list[str]) -> None:
        """Read (or map) the primaries of ``names`` and checksum them on another thread.

        :meth:`load` then takes the result instead of doing the work itself. The
        point is overlap: blake3 and file reads release the GIL, so on a second
        core the checksums of a big store's checkpoints run while the
        caller imports numpy. The bytes are those of each file when it was
        opened: a checkpoint that was intact then is as good a starting point
        as one read a moment later (the watermark is still checked against the
        log).
        """
        names = [n for n in names if n not in self._prefetched]
        if not names:
            return
        # (equivalent mutants: mapped None, so each file is read rather than mapped, the
        # same bytes; zip not strict, as the jobs are made one per name)
        jobs = [_Prefetch(self.path / (n + ".ckpt"), self.mapped) for n in names]
        self._prefetched.update(zip(names, jobs, strict=True))
        # one low-level thread for all: threading.Thread.start would wait until the
        # new thread runs, which takes ms when the other core is busy
        _thread.start_new_thread(_Prefetch.run_all, (jobs,))

    def close(self) -> None:
        """Wait for prefetches nobody collected (their thread never outlives the store)."""
        pending, self._prefetched = self._prefetched, {}
        for pre in pending.values():
            pre.wait()

    def changed_in_place(self) -> list[str]:
        """Mapped files (``mapped=True``) that were written in place since they were mapped.

        The trade of mapping: no copy of the file into memory (a 70 MB recall
        checkpoint costs ~35 ms to read here, ~0 to map), but a view built on a
        mapping changes if someone rewrites the file in place (ctxledger never
        does: it replaces checkpoints by rename, which leaves a mapping on the
        old file intact), and dies of SIGBUS if it is truncated. Callers that
        map check this before they hand out an answer: a file still at the
        same inode whose size, mtime or ctime moved was written in place (a
        best-effort check: it cannot see a write that leaves all three as they
        were). A file renamed over is fine (the mapping keeps the old one).
        """
        changed = []
        for path, ident in self._maps:
            try:
                st = os.stat(path)
            except OSError:
                continue  # removed or renamed away: the mapping keeps the old file
            now = _identity(st)
            if now[:2] == ident[:2] and now != ident:
                changed.append(path.name)
        return changed

    def check_unchanged(self) -> None:
        """Raise ``LedgerError`` if :meth:`changed_in_place` finds any file."""
        changed = self.changed_in_place()
        if changed:
            raise LedgerError(
                f"checkpoint {', '.join(changed)} in {self.path} was rewritten in place while "
                "in use (ctxledger only replaces checkpoints by rename): nothing was served; "
                "run the command again"
            )

    def peek_seq(self, name: str) -> int | None:
        """The watermark a primary checkpoint claims (unverified: a hint for scheduling)."""
        try:
            with open(self.path / (name + ".ckpt"), "rb") as f:
                head = f.read(4096)  # (read(None) or 4097: equivalent, more of the same)
            (hlen,) = _LEN.unpack_from(head, 8)
            return int(cbor2.loads(head[12 : 12 + hlen])["seq"])
        except Exception:
            return None

    def write(self, name: str, version: int, seq: int, digest: bytes, body: bytes,
              *, rotate: bool = True) -> None:
        """temp file, fsync, primary -> backup, temp -> primary, directory fsync.

        ``rotate=False`` replaces the primary and keeps the backup (the caller
        knows the primary is no good: it must not become the backup).
        """
        if self.readonly:
            return
        try:
            private.make_dirs(self.path)
            header = {"name": name, "version": version, "seq": seq, "digest": digest,
                      "written_at": time.time()}
            if self.project is not None:
                header["project"] = self.project
            prefix = _prefix(header)
            h = blake3.blake3()
            h.update(prefix)
            h.update(body)
            primary = self.path / (name + ".ckpt")
            # unique per writer (process and call): concurrent writers never share one
            tmp = self.path / f"{name}.ckpt.{os.getpid()}.{_token()}.tmp"
            fd = private.create_file(tmp, os.O_WRONLY | os.O_EXCL)
            try:
                try:
                    at = 0
                    for part in (prefix, body, h.digest()):
                        _osio.write_all(fd, part, at)
                        at += len(part)
                    _osio.fsync(fd)
                finally:
                    os.close(fd)
                if rotate and primary.exists():
                    _osio.replace(primary, self.path / (name + ".ckpt.bak"))
                _osio.replace(tmp, primary)
            except BaseException:
                tmp.unlink(missing_ok=True)  # never leave a partial checkpoint behind
                raise
            self._sweep(name)
            _osio.fsync_dir(self.path)
        except OSError as e:
            raise LedgerIOError(f"cannot write checkpoint {name}: {e.strerror or e}") from e

    def discard(self, name: str, source: str) -> None:
        """Delete the primary or backup of ``name`` (one known to be no good)."""
        if self.readonly:
            return
        try:
            (self.path / (name + {"primary": ".ckpt", "backup": ".ckpt.bak"}[source])).unlink()
        except FileNotFoundError:
            pass
        except OSError as e:
            raise LedgerIOError(f"cannot remove checkpoint {name} {source}: {e.strerror}") from e

    def _sweep(self, name: str) -> None:
        """Delete temp files that writers which died mid-checkpoint left behind."""
        try:
            strays = list(self.path.glob(f"{name}.ckpt.*.tmp"))
        except OSError:
            return  # best effort: a stray file costs only space
        for p in strays:
            pid = p.name[len(name) + 6 :].partition(".")[0]  # <name>.ckpt.<pid>.<token>.tmp
            if not pid.isdigit() or (int(pid) != os.getpid() and not _alive(int(pid))):
                with contextlib.suppress(OSError):  # gone already (another writer swept it)
                    p.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process
        return True
    return True


def _token() -> str:
    """8 random hex digits: names temp files uniquely per writer and call."""
    # not `secrets`: importing it loads OpenSSL on every start (urandom(5): an equivalent
    # mutant, as unique and no reader looks at the length)
    return os.urandom(4).hex()


def _prefix(header: dict[str, object]) -> bytes:
    """Magic, length and CBOR header, padded so the body starts 64-byte aligned.

    Views read their columns in place from the body; aligned columns are
    faster for numpy (and for the CPU).
    """
    pad = 0  # the shortest pad that aligns: fewer than 128 bytes (the byte-string head
    while True:  # grows at 24 bytes, so some residues need pad + 64)
        raw = cbor2.dumps({**header, "pad": bytes(pad)})
        if (len(MAGIC) + 4 + len(raw)) % 64 == 0:
            return MAGIC + _LEN.pack(len(raw)) + raw
        pad += 1


def _read(path: Path) -> memoryview:
    """The whole file, read into memory (the default).

    Not memory-mapped: a view built on a mapping would change (or die of
    SIGBUS) if someone rewrote the file in place while a store is open, and a
    view must never serve state the log does not imply. ctxledger itself only
    ever replaces checkpoints by rename.
    """
    with open(path, "rb") as f:
        return memoryview(f.read())  # sized by fstat, read to the end of the file


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _mmap(path: Path) -> tuple[memoryview, tuple[int, ...]]:
    """The whole file, mapped read-only, and its identity at that moment."""
    # equivalent mutants here: text mode (only the descriptor is used); any other few
    # bytes for an empty file (they are "not a checkpoint" exactly as no bytes are)
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if not st.st_size:
            return memoryview(b""), _identity(st)
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return memoryview(m), _identity(st)


class _Prefetch:
    """One checkpoint file read (or mapped) and its checksum computed, on a worker thread.

    A mapping is made right here, on the caller's thread (a fraction of a ms):
    the worker then only hashes, which releases the GIL once per file. Every
    extra release costs a worker up to a switch interval (5 ms) to get the GIL
    back from a busy importer.
    """

    def __init__(self, path: Path, mapped: bool) -> None:
        self.path = path
        self._raw: memoryview | None = None
        self._ident: tuple[int, ...] | None = None
        self._digest: bytes | None = None  # ("": equivalent, run_all sets it or an error)
        self._error: BaseException | None = None
        self._done = _thread.allocate_lock()
        self._done.acquire()  # released by the worker when this file is done
        if mapped:
            try:
                self._raw, self._ident = _mmap(path)
            except BaseException as e:  # handed to the caller by result()
                # (None: an equivalent mutant; run_all then reads the file, which fails
                # the same way or gives the bytes the mapping would have)
                self._error = e

    @staticmethod
    def run_all(jobs: list[_Prefetch]) -> None:
        for job in jobs:
            try:
                if job._error is None:
                    if job._raw is None:
                        job._raw = _read(job.path)
                    # (None: an equivalent mutant; _decode then computes the checksum)
                    job._digest = _checksum(job._raw)
            except BaseException as e:  # handed to the caller by result()
                job._error = e
            finally:
                job._done.release()

    def wait(self) -> None:
        self._done.acquire()
        self._done.release()

    def result(self) -> tuple[memoryview, tuple[int, ...] | None, bytes | None]:
        """``(bytes, identity if mapped, checksum or None)``; raises what the worker raised."""
        self.wait()
        if self._error is not None:
            raise self._error
        assert self._raw is not None
        return self._raw, self._ident, self._digest


def _checksum(raw: memoryview) -> bytes:
    """blake3 of everything but the stored checksum. (Of a file too short to hold one,
    some digest: :func:`_decode` refuses such a file before it looks at any.)"""
    return blake3.blake3(raw[: len(raw) - SUM_SIZE]).digest()


def _decode(
    raw: memoryview, name: str, source: str, digest: bytes | None = None,
    project: str | None = None,
) -> tuple[Checkpoint | None, str]:
    """Check and split one checkpoint file; ``digest``: its checksum, already computed."""
    if len(raw) < len(MAGIC) + 4 + SUM_SIZE:
        return None, "not a checkpoint"
    magic = bytes(raw[:8])
    if magic == OLD_MAGIC:
        return None, "format 1 (keyed MAC), no longer read"
    if magic != MAGIC:
        return None, "not a checkpoint"
    body_end = len(raw) - SUM_SIZE
    if digest is None:
        digest = _checksum(raw)
    if digest != raw[body_end:]:
        return None, "checksum mismatch"
    (hlen,) = _LEN.unpack_from(raw, 8)
    try:
        # (13 + hlen: an equivalent mutant, cbor2 reads the one item)
        header = cbor2.loads(bytes(raw[12 : 12 + hlen]))
        ck = Checkpoint(
            header["name"], int(header["version"]), int(header["seq"]), bytes(header["digest"]),
            raw[12 + hlen : body_end], source,
        )
        owner = header.get("project")
    except Exception:
        return None, "bad header"
    if ck.name != name:
        return None, "belongs to another view"
    if owner != project:
        return None, "belongs to another project"
    return ck, ""
