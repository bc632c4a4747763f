"""The active-segment writer: frames written, synced, preallocated, trimmed, rolled.

Everything here runs under the writer lock, after :meth:`Tip.refresh` caught
the handle up with the log. It also tidies what crashes leave (torn tails and
torn new segments go to quarantine/, never deleted) before it writes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from . import _osio
from .errors import InvalidEventError, LedgerError, LedgerIOError
from .event import Receipt
from .frame import (
    FORMAT_VERSION,
    SEGMENT_HEADER_SIZE,
    encode_frame_parts,
    header_roll_bytes,
    payload_prefix,
)
from .lock import WriterLock
from .segments import (
    PREALLOC_BYTES,
    create_segment,
    header_is_torn,
    pread_all,
    quarantine_bytes,
    quarantine_file,
    sweep_tmp,
)
from .tip import Tip

SyncMode = Literal["always", "batch", "none"]
_POISONED = "an fsync failed; reopen the log before appending again"


class SegmentWriter:
    """Writes one handle's frames into the active segment that :class:`Tip` tracks."""

    def __init__(
        self,
        tip: Tip,
        *,
        sync: SyncMode,
        sync_interval: float,
        segment_bytes: int,
        clock: Callable[[], float],
        forget_segment: Callable[[Path], None],
    ) -> None:
        self.tip = tip
        self.sync = sync
        self.sync_interval = sync_interval
        self.segment_bytes = segment_bytes
        self.clock = clock
        self.forget_segment = forget_segment  # a segment moved to quarantine/ (reads' index)
        # (the flags below are read as true or false: "" or None for their initial
        # None or False are equivalent mutants)
        #: Why this handle refuses to append (an fsync or an undo failed), if it does.
        self.poisoned: str | None = None
        self._swept = False
        self._appended = False  # this handle has appended (see _preallocate)
        self._preallocated = False  # ... and left zeros past the end (trimmed on close)
        self._unsynced = False
        self._left_unsynced: list[Path] = []  # segments left with unsynced frames (sync="none")
        self._last_sync = time.monotonic()
        tip.on_leave = self._sync_before_leaving

    def append(self, rows: bytes, count: int, batch_id: str | None) -> Receipt:
        """Write one frame of ``count`` encoded ``rows`` at the head of the log."""
        tip = self.tip
        if not self._swept:  # tidy what crashes left (never data), then write
            sweep_tmp(tip.log_dir)
            self._swept = True  # (None or False: equivalent, a sweep per append finds no more)
        if tip.torn_seg is not None:
            self.set_aside_torn_segment()
        if tip.path is None or tip.end >= tip.roll_at:
            self._roll()
        fd = tip.active_fd(write=True)
        if tip.torn is not None:
            self._repair_tail(fd)
        at = max(self.clock(), tip.last_at)
        first = tip.head + 1
        try:
            frame, digest = encode_frame_parts(
                tip.digest, first, count, (payload_prefix(at, batch_id), rows)
            )
        except ValueError as e:
            raise InvalidEventError(str(e)) from None
        start = tip.end
        if self.sync == "always" and self._appended and tip.may_preallocate:
            self._preallocate(fd, start + len(frame))
        try:
            _osio.write_all(fd, frame, start)
        except OSError as e:
            self._undo_write(fd, start)
            raise LedgerIOError(f"append failed writing {tip.path}: {e.strerror or e}") from e
        self._unsynced = True
        # (`>` for `>=`: an equivalent mutant, the monotonic clock moves between appends)
        if self.sync == "always" or (
            self.sync == "batch" and time.monotonic() - self._last_sync >= self.sync_interval
        ):
            try:
                _osio.fdatasync(fd)
            except OSError as e:
                self._after_failed_sync(fd, start)
                raise LedgerIOError(
                    f"append not durable: fsync of {tip.path} failed ({e.strerror or e}); "
                    "this handle refuses further appends until the log is reopened"
                ) from e
            self._unsynced = False  # (None: an equivalent mutant, as false)
            self._last_sync = time.monotonic()
        last = first + count - 1
        tip.end, tip.head, tip.digest, tip.last_at = start + len(frame), last, digest, at
        self._appended = True
        return Receipt(first, last, at, batch_id)

    # --- durability -------------------------------------------------------------------

    def flush(self) -> None:
        """Make every acknowledged append durable now (for ``sync="batch"|"none"``)."""
        if self.poisoned:
            return
        try:
            for path in self._left_unsynced:
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:
                    # only a compaction or salvage removes a segment, and only after its
                    # frames are durable in the new generation it wrote (format.md §12)
                    continue
                try:
                    _osio.fdatasync(fd)
                finally:
                    os.close(fd)
            self._left_unsynced.clear()
            if self.tip.fd >= 0 and self._unsynced:
                _osio.fdatasync(self.tip.fd)
        except OSError as e:
            self.poisoned = _POISONED
            raise LedgerIOError(f"flush failed: {e.strerror or e}") from e
        self._unsynced = False  # (None: as false; an equivalent mutant)
        self._last_sync = time.monotonic()

    def generation_written(self) -> None:
        """This handle wrote a new generation (synced whole, every frame it appended in
        it): nothing it left unsynced in the replaced segments needs a sync any more."""
        self._left_unsynced.clear()
        # (equivalent mutants: None, as false; True, one more fdatasync of a synced file)
        self._unsynced = False

    def _sync_before_leaving(self) -> None:
        """This handle leaves the active segment: sync frames it left unsynced there.

        ``sync="batch"`` syncs now (a roll must not strand acknowledged frames in
        a segment nobody will sync again); ``sync="none"`` remembers the segment
        for :meth:`flush`.
        """
        tip = self.tip
        # (below, None for False: an equivalent mutant, as false)
        if not self._unsynced or tip.fd < 0 or self.poisoned:
            return
        if self.sync == "none":
            if tip.path is not None:
                self._left_unsynced.append(tip.path)
            self._unsynced = False
            return
        try:
            _osio.fdatasync(tip.fd)
        except OSError as e:
            self.poisoned = _POISONED
            raise LedgerIOError(
                f"sync of {tip.path} before leaving it failed ({e.strerror or e}); "
                "this handle refuses further appends until the log is reopened"
            ) from e
        self._unsynced = False  # (None: as false)
        self._last_sync = time.monotonic()

    def _undo_write(self, fd: int, start: int) -> None:
        """A write failed part-way: cut the partial frame so the tail stays clean."""
        try:
            _osio.ftruncate(fd, start)
        except OSError as e:
            self.poisoned = f"could not undo a failed write ({e.strerror}); reopen the log"

    def _after_failed_sync(self, fd: int, start: int) -> None:
        """fsyncgate: never retry-and-trust a failed sync; drop the frame and stop."""
        self.poisoned = "an earlier fsync failed; reopen the log before appending again"
        if self.sync == "always":  # everything before ``start`` was synced already
            try:
                _osio.ftruncate(fd, start)
                _osio.fdatasync(fd)
            except OSError:
                pass

    # --- space --------------------------------------------------------------------------

    def _preallocate(self, fd: int, need: int) -> None:
        """Make the active segment at least ``need`` bytes long, writing zeros ahead.

        A durable append that grows its file makes fdatasync commit the new size
        as well as the data; overwriting zeros written (and synced) earlier does
        not. So ``sync="always"`` writers (from a handle's second append on: a
        one-shot writer gains nothing) keep up to :data:`PREALLOC_BYTES` of real
        zeros (not a sparse hole) past the last frame, never past the roll point
        by more than the frame that crosses it. Readers see zeros as the end of
        the content (:func:`data_end`). Zeros go only past the current end of the
        file, never over bytes already there: ``alloc_hint`` (what this handle
        last knew the file's size to be) only ever lets it skip the check when
        the frame fits; a stale hint (another writer cut the file) just means the
        frame write grows the file.
        """
        tip = self.tip
        # no fstat per append (see Tip.refresh); `<` is an equivalent mutant: at need ==
        # alloc_hint the fstat finds the file that long and returns below
        if need <= tip.alloc_hint:
            return
        try:
            size = os.fstat(fd).st_size
            if need <= size:
                tip.alloc_hint = size
                return
            target = max(need, min(need + PREALLOC_BYTES, tip.roll_at))
            target = -(-target // 4096) * 4096
            _osio.write_all(fd, bytes(target - size), size)
            self._preallocated = True
            tip.alloc_hint = target
        except OSError as e:
            self._undo_write(fd, tip.end)
            raise LedgerIOError(
                f"append failed preallocating {tip.path}: {e.strerror or e}"
            ) from e

    def _roll(self) -> None:
        tip = self.tip
        if tip.torn is not None:  # a torn tail in a full segment: cut it before sealing
            self._repair_tail(tip.active_fd(write=True))
        self._sync_before_leaving()  # sync="batch": seal only synced frames
        self._trim_preallocation()
        base = tip.head + 1
        path = create_segment(
            tip.log_dir, base, tip.digest, self.segment_bytes, self.sync != "none"
        )
        # seal where the header says, as every other handle will (whole KiB)
        tip.set_active(base, path, header_roll_bytes(self.segment_bytes), FORMAT_VERSION)
        # (None or False: equivalent mutants; a look at an empty segment reads 4 bytes
        # past its header either way, and the next append sets it again)
        tip.end_stable = True

    def _trim_preallocation(self) -> None:
        """Cut the zeros preallocated past the last frame of a segment being sealed.

        Only tidiness: readers take trailing zeros as the end of any segment, so
        a failed or lost truncation (not synced) leaves nothing to repair.
        """
        tip = self.tip
        if tip.path is None or tip.torn is not None:
            return
        try:
            fd = tip.active_fd()
            # (>=: an equivalent mutant, a cut to the size the file has)
            if os.fstat(fd).st_size > tip.end:
                fd = tip.active_fd(write=True)
                _osio.ftruncate(fd, tip.end)
        except OSError:
            pass

    def trim_on_close(self, lock: WriterLock | None) -> None:
        """Leave no preallocated zeros behind: cut them under the lock if it is free now.

        Skipped (harmlessly: readers take zeros as the end) when nothing was
        preallocated, another writer holds the lock, or anything fails.
        """
        if not self._preallocated or lock is None or self.poisoned:
            return
        if self.tip.fault is not None or not lock.try_acquire():
            return
        try:
            self.tip.refresh()
            self._trim_preallocation()
        except (LedgerError, OSError):
            pass
        finally:
            lock.release()

    # --- what crashes leave -------------------------------------------------------------

    def _repair_tail(self, fd: int) -> None:
        """Move a torn tail aside (never deleted), then truncate to the valid prefix.

        The copy in quarantine/ (a new file, never one that exists) and its
        directory are synced before the segment is cut, in every sync mode.
        """
        tip = self.tip
        assert tip.torn is not None and tip.path is not None
        try:
            size = os.fstat(fd).st_size
            # (more than size - end: an equivalent mutant, the read stops at the end)
            junk = pread_all(fd, size - tip.end, tip.end)
            if junk.count(0) != len(junk):
                quarantine_bytes(tip.log_dir, f"{tip.path.name}.{tip.end}", junk)
            _osio.ftruncate(fd, tip.end)
            if self.sync != "none":
                _osio.fsync(fd)
        except OSError as e:
            raise LedgerIOError(
                f"cannot repair torn tail of {tip.path}: {e.strerror or e}"
            ) from e
        # ("" for None: an equivalent mutant; the refresh before the next append reads
        # the tail again and sets it)
        tip.torn = None

    def set_aside_torn_segment(self) -> None:
        """Move a last segment whose header is torn (it holds no frame) into quarantine/."""
        tip = self.tip
        path = tip.torn_seg
        assert path is not None
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # another writer moved it already
            # (here and below, "" for None is an equivalent mutant: the next append would
            # call this again, fail to open "" and clear it: one extra failed open)
            tip.torn_seg = None
            return
        except OSError as e:
            raise LedgerIOError(f"cannot open {path}: {e.strerror}") from e
        try:
            try:
                size = os.fstat(fd).st_size
                head = pread_all(fd, SEGMENT_HEADER_SIZE, 0)
            except OSError as e:
                raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
            torn = header_is_torn(path, fd, size, head)
        finally:
            os.close(fd)
        if not torn:  # another writer replaced it with a real segment: catch up with it
            tip.torn_seg = None
            tip.refresh()
            return
        try:
            quarantine_file(tip.log_dir, path, f"{path.name}.header")
        except OSError as e:
            raise LedgerIOError(
                f"cannot move the torn segment {path.name} to quarantine/: {e.strerror or e}"
            ) from e
        tip.torn_seg = None
        # (forget_segment(None), an equivalent mutant: a read never indexes a last
        # segment whose header is torn, and an index is checked against the inode)
        self.forget_segment(path)
