"""A power-cut simulation over ``eventstore._osio``, after SQLite's crash-test VFS.

:class:`PowerCut` wraps the calls that write durable files (``pwrite``,
``ftruncate``, ``fsync``, ``fdatasync``, ``replace``, ``fsync_dir``; the log
and the checkpoints write only through them) and keeps, beside the real files
(what the page cache holds), a model of what the disk holds:

- per file (by inode): its bytes as of its last ``fsync``/``fdatasync``, and
  the writes and truncations made since;
- per directory: its entries as of its last ``fsync_dir``, and the entries
  created (a new file's first write) and renamed since, in order.

:meth:`PowerCut.image` writes what a power cut at this instant could leave
into another directory: everything synced, plus, depending on ``how``,

- ``"drop"``: nothing else;
- ``"prefix"``: a random prefix of each file's unsynced writes (the next one
  possibly torn: only its first bytes written) and of the directory changes;
- ``"reorder"``: a random subset of each file's unsynced writes in a random
  order (each possibly torn), and a random subset of the directory changes.

``os.unlink`` is wrapped too: a file unlinked since its directory was last
synced may come back. Files no wrapped call wrote hold what they held when
the simulation started. The model checks itself: applying every recorded change
to the synced bytes must give the real file.
"""

from __future__ import annotations

import os
import random
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eventstore import _osio

Write = tuple[int, bytes] | tuple[int, None]  # (offset, data) or (size, None): a truncation
Change = tuple[str, Path, str, Path, str, int]  # (op, dir, name, new dir, new name, file id)


class PowerCut:
    """Files are known by an id of their own (an inode number is reused once freed)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fid_of: dict[int, int] = {}  # inode of a live file -> its id
        self.synced: dict[int, bytes] = {}  # id -> bytes on disk
        self.unsynced: dict[int, list[Write]] = {}  # id -> changes since
        self.touched: set[int] = set()  # ids written through the wrapped calls
        self.entries: dict[Path, dict[str, int]] = {}  # dir -> name -> id, on disk
        self.dir_changes: list[Change] = []  # in the order they were made
        self.syncs = 0
        #: Called at the start of every wrapped call, before it acts (to take images
        #: in the middle of an operation).
        self.before: Callable[[], None] = lambda: None
        for d, _dirs, files in os.walk(root):
            listing = self.entries.setdefault(Path(d), {})
            for name in files:
                p = Path(d) / name
                listing[name] = self._new(os.lstat(p).st_ino, p.read_bytes())

    def _new(self, ino: int, on_disk: bytes) -> int:
        fid = len(self.synced)
        self.fid_of[ino] = fid
        self.synced[fid] = on_disk
        self.unsynced[fid] = []
        return fid

    # --- the wrapped calls ----------------------------------------------------------------

    def install(self, mp: pytest.MonkeyPatch) -> None:
        real = {n: getattr(_osio, n) for n in ("pwrite", "ftruncate", "fsync", "fdatasync",
                                               "replace", "fsync_dir")}
        real_unlink = os.unlink

        def pwrite(fd: int, data: Any, offset: int) -> int:
            self.before()
            fid = self._track(fd)
            n = int(real["pwrite"](fd, data, offset))
            self.unsynced[fid].append((offset, bytes(data[:n])))
            return n

        def ftruncate(fd: int, size: int) -> None:
            self.before()
            fid = self._track(fd)
            real["ftruncate"](fd, size)
            self.unsynced[fid].append((size, None))

        def sync(name: str) -> Any:
            def call(fd: int) -> None:
                if stat.S_ISDIR(os.fstat(fd).st_mode):  # fsync_dir's own sync
                    real[name](fd)
                    return
                self.before()
                fid = self._track(fd)
                real[name](fd)
                self.synced[fid] = apply(self.synced[fid], self.unsynced[fid])
                self.unsynced[fid] = []
                self.syncs += 1

            return call

        def replace(src: Any, dst: Any) -> None:
            self.before()
            s, d = Path(src), Path(dst)
            fid = self._fid_at(s)
            old = os.lstat(d).st_ino if os.path.lexists(d) else None
            real["replace"](src, dst)
            if old is not None:
                self.fid_of.pop(old, None)  # freed: its number may come back
            self.dir_changes.append(("rename", s.parent, s.name, d.parent, d.name, fid))

        def unlink(path: Any, *a: Any, **kw: Any) -> None:
            self.before()
            p = Path(path)
            ino = os.lstat(p).st_ino if os.path.lexists(p) else None
            real_unlink(path, *a, **kw)
            fid = self.fid_of.pop(ino, None) if ino is not None else None
            if fid is not None:
                self.dir_changes.append(("unlink", p.parent, p.name, p.parent, p.name, fid))

        def fsync_dir(path: Any) -> None:
            self.before()
            real["fsync_dir"](path)
            d = Path(path)
            keep = []
            for change in self.dir_changes:
                if d in (change[1], change[3]):
                    self._apply_dir(self.entries, change)
                else:
                    keep.append(change)
            self.dir_changes = keep
            self.syncs += 1

        for name, fn in (("pwrite", pwrite), ("ftruncate", ftruncate),
                         ("fsync", sync("fsync")), ("fdatasync", sync("fdatasync")),
                         ("replace", replace), ("fsync_dir", fsync_dir)):
            mp.setattr(_osio, name, fn)
        mp.setattr(os, "unlink", unlink)

    def _track(self, fd: int) -> int:
        ino = os.fstat(fd).st_ino
        fid = self.fid_of.get(ino)
        if fid is None:  # a file created since: on disk, it is empty and has no name yet
            fid = self._new(ino, b"")
            path = Path(os.readlink(f"/proc/self/fd/{fd}"))
            self.dir_changes.append(("create", path.parent, path.name, path.parent, path.name,
                                     fid))
        self.touched.add(fid)
        return fid

    def _fid_at(self, path: Path) -> int:
        ino = os.lstat(path).st_ino
        fid = self.fid_of.get(ino)
        if fid is None:  # created and filled without a tracked call: all of it unsynced
            fid = self._new(ino, b"")
            self.unsynced[fid] = [(0, path.read_bytes())]
            self.dir_changes.append(("create", path.parent, path.name, path.parent, path.name,
                                     fid))
        return fid

    @staticmethod
    def _apply_dir(entries: dict[Path, dict[str, int]], change: Change) -> None:
        op, sdir, sname, ddir, dname, fid = change
        if op in ("rename", "unlink") and entries.get(sdir, {}).get(sname) == fid:
            del entries[sdir][sname]
        if op != "unlink":
            entries.setdefault(ddir, {})[dname] = fid

    # --- questions --------------------------------------------------------------------------

    def clean(self, under: Path) -> bool:
        """Nothing written to the files in directory ``under`` waits for a sync, nor does
        any change to its entries (truncations aside: the writer cuts, unsynced, only
        zeros it preallocated, which readers skip anyway)."""
        if any(under in (c[1], c[3]) for c in self.dir_changes):
            return False
        fids = set(self.entries.get(under, {}).values())
        for p in under.iterdir():
            fid = self.fid_of.get(os.lstat(p).st_ino)
            if fid is not None:
                fids.add(fid)
        return not any(data is not None for f in fids for _o, data in self.unsynced[f])

    # --- the crash ---------------------------------------------------------------------------

    def image(self, dest: Path, how: str, rng: random.Random) -> None:
        """Write what a power cut now could leave on disk into ``dest`` (see the module)."""
        changes = list(self.dir_changes)
        if how == "drop":
            changes = []
        elif how == "prefix":
            changes = changes[: rng.randint(0, len(changes))]
        else:
            changes = [c for c in changes if rng.random() < 0.5]
        entries = {d: dict(names) for d, names in self.entries.items()}
        for change in changes:
            self._apply_dir(entries, change)
        for walked, _dirs, _files in os.walk(self.root):
            entries.setdefault(Path(walked), {})
        for d, names in entries.items():
            target = dest / d.relative_to(self.root)
            target.mkdir(parents=True, exist_ok=True)
            for name, fid in names.items():
                (target / name).write_bytes(self._content(fid, how, rng))

    def _content(self, fid: int, how: str, rng: random.Random) -> bytes:
        writes = self.unsynced[fid]
        if how == "drop" or not writes:
            return self.synced[fid]
        if how == "prefix":
            k = rng.randint(0, len(writes))
            chosen = writes[:k]
            if k < len(writes) and rng.random() < 0.5:
                chosen = [*chosen, torn(writes[k], rng)]
        else:
            chosen = [w if rng.random() < 0.7 else torn(w, rng)
                      for w in writes if rng.random() < 0.5]
            rng.shuffle(chosen)
        return apply(self.synced[fid], chosen)

    def check_model(self) -> None:
        """Every file written through the wrapped calls holds what the model says."""
        for d, _dirs, files in os.walk(self.root):
            for name in files:
                p = Path(d) / name
                fid = self.fid_of.get(os.lstat(p).st_ino)
                if fid in self.touched:
                    assert apply(self.synced[fid], self.unsynced[fid]) == p.read_bytes(), p


def torn(w: Write, rng: random.Random) -> Write:
    """A write of which only the first bytes (a whole number of 512-byte sectors when it
    is longer than one) reached the disk."""
    off, data = w
    if data is None or len(data) < 2:
        return w
    if len(data) > 512:
        return off, data[: 512 * rng.randint(0, (len(data) - 1) // 512)]
    return off, data[: rng.randint(0, len(data) - 1)]


def apply(base: bytes, writes: list[Write]) -> bytes:
    buf = bytearray(base)
    for off, data in writes:
        if data is None:
            del buf[off:]
            buf.extend(bytes(max(0, off - len(buf))))
        else:
            if len(buf) < off:
                buf.extend(bytes(off - len(buf)))
            buf[off : off + len(data)] = data
    return bytes(buf)
