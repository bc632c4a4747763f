"""The file-backed ledger: append-only, checksummed, hash-chained segments."""

from __future__ import annotations

import os
import threading
import time
import zlib
from bisect import bisect_right
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, cast

import blake3
import cbor2

from . import _osio
from .errors import (
    CorruptLogError,
    HeadMismatchError,
    InvalidEventError,
    LedgerClosedError,
    LedgerError,
    LedgerIOError,
    StoreNotFoundError,
    WriterPoisonedError,
)
from .event import Event, Receipt, check_batch
from .frame import (
    FOOTER,
    FOOTER_MAGIC,
    FOOTER_SIZE,
    FORMAT_VERSION,
    FRAME_HEADER,
    FRAME_HEADER_SIZE,
    FRAME_MAGIC,
    FRAME_OVERHEAD,
    GENESIS_DIGEST,
    PREALLOC_VERSION,
    SEGMENT_HEADER_SIZE,
    FrameError,
    decode_rows_at,
    encode_frame_parts,
    encode_rows,
    has_valid_frame_after,
    header_roll_bytes,
    iter_frames,
    payload_head,
    payload_head_fast,
    payload_of,
    payload_prefix,
    segment_header_is_torn,
)
from .lock import WriterLock
from .point import PointReader
from .records import Batch, StoredEvent
from .segments import (
    PREALLOC_BYTES,
    FrameIndex,
    Tail,
    create_segment,
    data_end,
    fast_tail,
    header_is_torn,
    list_segments,
    open_segment,
    pread_all,
    quarantine_bytes,
    quarantine_file,
    read_header,
    recent_heads,
    scan_tail,
    segment_name,
    sweep_tmp,
)
from .verify import VerifyReport, verify_log

SyncMode = Literal["always", "batch", "none"]
SYNC_MODES = ("always", "batch", "none")
DEFAULT_SEGMENT_BYTES = 16 * 1024 * 1024
DEFAULT_LOCK_TIMEOUT = 5.0
DEFAULT_BATCH_WINDOW = 10_000
DEFAULT_SYNC_INTERVAL = 0.2

#: How many segments' frame indexes one handle keeps (least recently used dropped).
INDEX_CACHE = 64
#: A later segment of a bounded read is read through its index only above this size.
INDEX_MIN_BYTES = 1024 * 1024

# what Ledger._scan yields
_BATCHES, _EVENTS, _DIGESTS = 0, 1, 2

# Readers build each Event without __init__: object.__new__ and the five slot setters.
# Event is a frozen slotted attrs class with no validators, converters or cached hash,
# so this builds exactly what Event(kind, key, data, seq=seq, at=at) would, in about
# half the time (the frozen __init__ goes through object.__setattr__ per field).
_new = object.__new__
_set_kind, _set_key, _set_data, _set_seq, _set_at = (
    Event.__dict__[name].__set__ for name in ("kind", "key", "data", "seq", "at")
)


class Ledger:
    """One log directory. Thread-safe; many processes may append at once.

    Open it with :meth:`open`. Appends take the writer lock per call, catch up
    with frames other writers added, write one frame per batch and sync as
    ``sync`` says. Readers take no lock and see only whole batches.
    """

    def __init__(
        self,
        log_dir: Path,
        *,
        sync: SyncMode,
        segment_bytes: int,
        lock_timeout: float,
        readonly: bool,
        batch_window: int,
        sync_interval: float,
    ) -> None:
        self.log_dir = log_dir
        self.sync = sync
        self.segment_bytes = segment_bytes
        self.lock_timeout = lock_timeout
        self.readonly = readonly
        self.batch_window = batch_window
        self.sync_interval = sync_interval
        self._mutex = threading.RLock()
        self._lock: WriterLock | None = None
        self._closed = False
        self._poisoned: str | None = None
        self._fault: LedgerError | None = None
        # the active (last) segment as this handle last saw it
        self._active_base = 0
        self._active_path: Path | None = None
        self._roll_at = segment_bytes
        self._fd = -1  # on the active segment: O_RDONLY until this handle writes to it
        self._fd_writable = False
        self._end = 0
        self._head = 0
        self._digest = GENESIS_DIGEST
        self._last_at = 0.0
        self._torn: tuple[int, str] | None = None
        # a last segment with a torn header (power cut while it was created): ignored,
        # and moved to quarantine/ by this handle's next append
        self._torn_seg: Path | None = None
        # False while the active segment was only fast-scanned (footer of the last
        # frame); a writer walks it fully before its first write (see _check_active)
        self._active_checked = True
        # True when the frame ending at _end cannot vanish any more: this handle wrote
        # it, or saw it while holding the writer lock (see _refresh)
        self._end_stable = True
        self._swept = False
        self._may_preallocate = False
        self._alloc_hint = 0  # the active segment's size as this handle last knew it
        self._appended = False  # this handle has appended (see _preallocate)
        self._preallocated = False  # ... and left zeros past the end (trimmed on close)
        self._unsynced = False
        self._left_unsynced: list[Path] = []  # segments left with unsynced frames (sync="none")
        self._last_sync = time.monotonic()
        # the batch_id window: id -> (frame number, receipt), and the id frames in order
        self._batches: dict[str, tuple[int, Receipt]] | None = None
        self._batch_frames: deque[tuple[int, str]] = deque()
        self._nframes = 0
        # per-segment frame indexes for reads by seq (see segments.FrameIndex)
        self._indexes: OrderedDict[Path, FrameIndex] = OrderedDict()
        self._index_lock = threading.Lock()
        self._points = PointReader(log_dir)

    # --- opening ------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        log_dir: str | os.PathLike[str],
        *,
        sync: SyncMode = "always",
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        readonly: bool = False,
        batch_window: int = DEFAULT_BATCH_WINDOW,
        sync_interval: float = DEFAULT_SYNC_INTERVAL,
    ) -> Ledger:
        """Open (and unless ``readonly``, create) the log in ``log_dir``.

        A corrupt log still opens, so that :meth:`verify` can report on it;
        reads, appends and :attr:`head` then raise :class:`CorruptLogError`.
        """
        if sync not in SYNC_MODES:
            raise ValueError(f"sync must be one of {', '.join(SYNC_MODES)}, not {sync!r}")
        if segment_bytes < 4096:
            raise ValueError("segment_bytes must be at least 4096")
        path = Path(log_dir)
        if readonly:
            if not path.is_dir():
                raise StoreNotFoundError(path)
        else:
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise LedgerIOError(f"cannot create {path}: {e.strerror}") from e
        led = cls(
            path,
            sync=sync,
            segment_bytes=segment_bytes,
            lock_timeout=lock_timeout,
            readonly=readonly,
            batch_window=batch_window,
            sync_interval=sync_interval,
        )
        led._load()
        return led

    def _load(self) -> None:
        try:
            segs = list_segments(self.log_dir)
            for _base, path in segs[:-1]:
                read_header(path)
            if segs and not self._load_active(*segs[-1], may_be_torn=True):
                self._torn_seg = segs[-1][1]  # a torn new segment: the one before is the last
                if len(segs) > 1:
                    self._load_active(*segs[-2], may_be_torn=False)
        except LedgerError as e:
            if isinstance(e, LedgerIOError):
                raise
            self._fault = e

    def _load_active(self, base: int, path: Path, *, may_be_torn: bool) -> bool:
        """Take the last segment as the active one (False: its header is torn)."""
        fd = open_segment(path)
        try:
            try:
                head = pread_all(fd, SEGMENT_HEADER_SIZE, 0)
                size = data_end(fd, os.fstat(fd).st_size)
            except OSError as e:
                raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
            if may_be_torn and header_is_torn(path, fd, size, head):
                return False
            hdr = read_header(path, head)
            self._set_active(base, path, hdr.roll_bytes, hdr.version)
            tail = fast_tail(path, fd, size, hdr.prev_digest, base)
            if tail is None:  # unclear ending: walk the whole segment
                try:
                    data = pread_all(fd, size, 0)
                except OSError as e:
                    raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
                tail = scan_tail(path, data, SEGMENT_HEADER_SIZE, hdr.prev_digest, base, fast=False)
            else:
                self._active_checked = False
            self._adopt(tail)
            self._end_stable = False
            return True
        finally:
            os.close(fd)

    def _set_active(self, base: int, path: Path, roll_bytes: int, version: int) -> None:
        if self._fd >= 0:
            self._sync_before_leaving()
            os.close(self._fd)
            self._fd, self._fd_writable = -1, False
        self._active_base, self._active_path, self._roll_at = base, path, roll_bytes
        # zeros past the last frame are free space from format version 2 on; a version 1
        # segment is never preallocated, so older readers of it never meet them
        self._may_preallocate = version >= PREALLOC_VERSION
        self._alloc_hint = 0
        self._end, self._torn = SEGMENT_HEADER_SIZE, None
        self._active_checked = True  # new, or about to be walked in full by the caller

    def _sync_before_leaving(self) -> None:
        """This handle leaves the active segment: sync frames it left unsynced there.

        ``sync="batch"`` syncs now (a roll must not strand acknowledged frames in
        a segment nobody will sync again); ``sync="none"`` remembers the segment
        for :meth:`flush`.
        """
        if not self._unsynced or self._fd < 0 or self._poisoned:
            return
        if self.sync == "none":
            if self._active_path is not None:
                self._left_unsynced.append(self._active_path)
            self._unsynced = False
            return
        try:
            _osio.fdatasync(self._fd)
        except OSError as e:
            self._poisoned = "an fsync failed; reopen the log before appending again"
            raise LedgerIOError(
                f"sync of {self._active_path} before leaving it failed ({e.strerror or e}); "
                "this handle refuses further appends until the log is reopened"
            ) from e
        self._unsynced = False
        self._last_sync = time.monotonic()

    def _adopt(self, tail: Tail, data_offset: int = 0) -> None:
        """Take ``tail`` (found in data starting at ``data_offset``) as our state."""
        if tail.at is not None and tail.at > self._last_at:
            self._last_at = tail.at
        self._end, self._head, self._digest = tail.end + data_offset, tail.head, tail.digest
        self._torn = None if tail.torn is None else (tail.torn[0] + data_offset, tail.torn[1])

    # --- state ----------------------------------------------------------------------

    @property
    def head(self) -> int:
        """The last committed seq (0 when empty), including other writers' appends."""
        with self._mutex:
            self._check_open()
            self._refresh()
            return self._head

    @property
    def head_digest(self) -> bytes:
        """The chain digest at :attr:`head` (32 zero bytes when empty)."""
        with self._mutex:
            self._check_open()
            self._refresh()
            return self._digest

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosedError("ledger is closed")
        if self._fault is not None:
            raise self._fault

    def _refresh(self) -> None:
        """Catch up with frames other processes appended (never modifies files)."""
        if self._active_path is None:
            segs = list_segments(self.log_dir)
            if not segs or not self._switch_to(segs[0], GENESIS_DIGEST, 1, len(segs) == 1):
                return
        assert self._active_path is not None
        fd = self._active_fd()
        try:
            # Zeros at _end (preallocated space) mean nothing new: a frame another
            # process writes always starts with its non-zero magic (junk that a power
            # cut leaves behind zeros is found by the full walk of every handle that
            # opens after it). Only then is the file's size needed: on this machine a
            # stat between two durable appends made the second fdatasync ~35 us
            # slower (ext4, Linux 6.18), so the append path never stats.
            peek = pread_all(fd, 4, self._end)
            intact = self._end_stable or self._last_frame_still_there(fd)
            size = os.fstat(fd).st_size if peek != b"\0\0\0\0" or not intact else -1
            if size > self._end and intact:
                size = data_end(fd, size)
        except OSError as e:
            raise LedgerIOError(f"cannot read {self._active_path}: {e.strerror}") from e
        if not intact or 0 <= size < self._end:
            # A frame we saw was cut again: its writer's fsync failed and it truncated
            # (see _after_failed_sync). Forget it and walk the segment afresh, or we
            # would chain to a frame that is gone, or cut the frames written since.
            self._rescan_active()
        elif size > self._end:
            try:
                data = pread_all(fd, size - self._end, self._end)
            except OSError as e:
                raise LedgerIOError(f"cannot read {self._active_path}: {e.strerror}") from e
            try:
                tail = scan_tail(
                    self._active_path, data, 0, self._digest, self._head + 1, fast=False
                )
                self._note_batches(data, tail)
            except CorruptLogError as e:
                self._fault = CorruptLogError(e.segment, e.offset + self._end, e.reason)
                raise self._fault from None
            self._adopt(tail, self._end)
            self._end_stable = False
        else:  # nothing past _end but zeros: another writer cut any torn tail we saw
            self._torn = None
        if (self._end >= self._roll_at and self._torn is None
                and (self.log_dir / segment_name(self._head + 1)).exists()):
            # a full segment is followed by the one starting at head + 1 or by none: a
            # stat says which without listing the directory on every look at the head
            segs = list_segments(self.log_dir)
            for k, (base, path) in enumerate(segs):
                if base <= self._active_base:
                    continue
                last = k == len(segs) - 1
                if base != self._head + 1 and not (last and self._torn_segment(path)):
                    self._fault = CorruptLogError(
                        path, 0, f"segment starts at seq {base}, expected {self._head + 1}"
                    )
                    raise self._fault
                if not self._switch_to((base, path), self._digest, base, last):
                    break

    def _last_frame_still_there(self, fd: int) -> bool:
        """Does the frame we believe ends at ``_end`` still end there, with our digest?"""
        if self._end <= SEGMENT_HEADER_SIZE:
            return True  # no frame of this segment adopted yet
        try:
            foot = pread_all(fd, FOOTER_SIZE, self._end - FOOTER_SIZE)
            flen = int.from_bytes(foot[:4], "little")
            if not FRAME_OVERHEAD <= flen <= self._end - SEGMENT_HEADER_SIZE:
                return False
            return pread_all(fd, 32, self._end - flen + FRAME_HEADER_SIZE - 32) == self._digest
        except OSError as e:
            raise LedgerIOError(f"cannot read {self._active_path}: {e.strerror}") from e

    def _read_active(self) -> bytes:
        assert self._active_path is not None
        fd = self._active_fd()
        try:
            return pread_all(fd, data_end(fd, os.fstat(fd).st_size), 0)
        except OSError as e:
            raise LedgerIOError(f"cannot read {self._active_path}: {e.strerror}") from e

    def _rescan_active(self) -> None:
        assert self._active_path is not None
        path = self._active_path
        data = self._read_active()
        try:
            hdr = read_header(path, data)
            tail = scan_tail(
                path, data, SEGMENT_HEADER_SIZE, hdr.prev_digest, self._active_base, fast=False
            )
        except CorruptLogError as e:
            self._fault = e
            raise
        self._batches = None  # it may hold the vanished batch's id: rebuild on demand
        self._adopt(tail)
        self._active_checked = True
        self._end_stable = False

    def _switch_to(
        self, seg: tuple[int, Path], prev_digest: bytes, next_seq: int, last: bool
    ) -> bool:
        """Move on to a newer segment (False: it is the last one and its header is torn)."""
        base, path = seg
        fd = open_segment(path)
        try:
            data = pread_all(fd, data_end(fd, os.fstat(fd).st_size), 0)
        except OSError as e:
            raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
        finally:
            os.close(fd)
        if last and segment_header_is_torn(data):
            self._torn_seg = path
            return False
        try:
            hdr = read_header(path, data)
            if hdr.prev_digest != prev_digest:
                raise CorruptLogError(path, 0, "segment does not chain to the one before it")
            self._set_active(base, path, hdr.roll_bytes, hdr.version)
            self._head, self._digest = base - 1, prev_digest
            tail = scan_tail(path, data, SEGMENT_HEADER_SIZE, prev_digest, next_seq, fast=False)
            self._note_batches(data, tail, SEGMENT_HEADER_SIZE)
        except CorruptLogError as e:
            self._fault = e
            raise
        if self._torn_seg == path:
            self._torn_seg = None
        self._adopt(tail)
        self._end_stable = False
        return True

    # --- appending ----------------------------------------------------------------

    def append(
        self,
        events: Iterable[Event],
        *,
        expected_head: int | None = None,
        batch_id: str | None = None,
    ) -> Receipt:
        """Append ``events`` as one atomic batch and return its :class:`Receipt`.

        ``expected_head`` makes the append conditional (optimistic concurrency);
        ``batch_id`` makes a retry idempotent within the last ``batch_window``
        batches: a committed id writes nothing and returns the original receipt.
        """
        rows, needs_trial_decode = check_batch(events)
        if not rows:
            raise InvalidEventError("a batch needs at least one event")
        if batch_id is not None and (
            not isinstance(batch_id, str) or not batch_id or len(batch_id) > 200
        ):
            raise InvalidEventError("batch_id must be a non-empty string of at most 200 characters")
        try:
            encoded = encode_rows(rows)
        except Exception as e:
            raise InvalidEventError(f"event data cannot be encoded as CBOR: {e}") from None
        if needs_trial_decode:
            try:
                cbor2.loads(b"\x82" + encoded)  # [offsets, events]
            except Exception as e:
                raise InvalidEventError(f"event data would not decode from CBOR: {e}") from None
        with self._mutex:
            self._check_writable()
            lock = self._writer_lock()
            lock.acquire()
            try:
                return self._append_locked(encoded, len(rows), expected_head, batch_id)
            finally:
                lock.release()

    def _check_writable(self) -> None:
        self._check_open()
        if self.readonly:
            raise LedgerError("ledger was opened read-only")
        if self._poisoned:
            raise WriterPoisonedError(self._poisoned)

    def _writer_lock(self) -> WriterLock:
        if self._lock is None:
            self._lock = WriterLock(self.log_dir / "LOCK", self.lock_timeout)
        return self._lock

    def _append_locked(
        self, rows: bytes, count: int, expected_head: int | None, batch_id: str | None
    ) -> Receipt:
        self._refresh()
        self._check_active()
        self._end_stable = True  # under the lock nobody can cut what we see now
        if batch_id is not None:
            seen = self._batch_index().get(batch_id)
            if seen is not None:
                r = seen[1]
                return Receipt(r.first_seq, r.last_seq, r.at, batch_id, duplicate=True)
        if expected_head is not None and expected_head != self._head:
            raise HeadMismatchError(expected_head, self._head)
        # this append writes: tidy what crashes left (never data), then write
        if not self._swept:
            sweep_tmp(self.log_dir)
            self._swept = True
        if self._torn_seg is not None:
            self._set_aside_torn_segment()
        if self._active_path is None or self._end >= self._roll_at:
            self._roll()
        fd = self._active_fd(write=True)
        if self._torn is not None:
            self._repair_tail(fd)
        at = max(time.time(), self._last_at)
        first = self._head + 1
        try:
            frame, digest = encode_frame_parts(
                self._digest, first, count, (payload_prefix(at, batch_id), rows)
            )
        except ValueError as e:
            raise InvalidEventError(str(e)) from None
        start = self._end
        if self.sync == "always" and self._appended and self._may_preallocate:
            self._preallocate(fd, start + len(frame))
        try:
            _osio.write_all(fd, frame, start)
        except OSError as e:
            self._undo_write(fd, start)
            raise LedgerIOError(
                f"append failed writing {self._active_path}: {e.strerror or e}"
            ) from e
        self._unsynced = True
        if self.sync == "always" or (
            self.sync == "batch" and time.monotonic() - self._last_sync >= self.sync_interval
        ):
            try:
                _osio.fdatasync(fd)
            except OSError as e:
                self._after_failed_sync(fd, start)
                raise LedgerIOError(
                    f"append not durable: fsync of {self._active_path} failed "
                    f"({e.strerror or e}); this handle refuses further appends until the "
                    "log is reopened"
                ) from e
            self._unsynced = False
            self._last_sync = time.monotonic()
        last = first + count - 1
        self._end, self._head, self._digest, self._last_at = start + len(frame), last, digest, at
        self._appended = True
        self._note_frame(first, last, at, batch_id)
        return Receipt(first, last, at, batch_id)

    def _preallocate(self, fd: int, need: int) -> None:
        """Make the active segment at least ``need`` bytes long, writing zeros ahead.

        A durable append that grows its file makes fdatasync commit the new size
        as well as the data; overwriting zeros written (and synced) earlier does
        not. So ``sync="always"`` writers (from a handle's second append on: a
        one-shot writer gains nothing) keep up to :data:`PREALLOC_BYTES` of real
        zeros (not a sparse hole) past the last frame, never past the roll point
        by more than the frame that crosses it. Readers see zeros as the end of
        the content (:func:`data_end`). Zeros go only past the current end of the
        file, never over bytes already there: ``_alloc_hint`` (what this handle
        last knew the file's size to be) only ever lets it skip the check when
        the frame fits; a stale hint (another writer cut the file) just means the
        frame write grows the file.
        """
        if need <= self._alloc_hint:  # no fstat per append (see _refresh)
            return
        try:
            size = os.fstat(fd).st_size
            if need <= size:
                self._alloc_hint = size
                return
            target = max(need, min(need + PREALLOC_BYTES, self._roll_at))
            target = -(-target // 4096) * 4096
            _osio.write_all(fd, bytes(target - size), size)
            self._preallocated = True
            self._alloc_hint = target
        except OSError as e:
            self._undo_write(fd, self._end)
            raise LedgerIOError(
                f"append failed preallocating {self._active_path}: {e.strerror or e}"
            ) from e

    def _check_active(self) -> None:
        """Walk the active segment in full before this handle first writes to it.

        Opening trusts a clean ending (the fast path), which cannot see bad bytes
        in the middle of the segment. A writer must not append behind media
        corruption (failure rule 3 in docs/architecture.md: fail closed, never modify the
        damaged file).
        """
        if self._active_checked or self._active_path is None:
            return
        self._rescan_active()

    def _set_aside_torn_segment(self) -> None:
        """Move a last segment whose header is torn (it holds no frame) into quarantine/."""
        path = self._torn_seg
        assert path is not None
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # another writer moved it already
            self._torn_seg = None
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
            self._torn_seg = None
            self._refresh()
            return
        try:
            quarantine_file(self.log_dir, path, f"{path.name}.header")
        except OSError as e:
            raise LedgerIOError(
                f"cannot move the torn segment {path.name} to quarantine/: {e.strerror or e}"
            ) from e
        self._torn_seg = None
        self._drop_index(path)

    def _undo_write(self, fd: int, start: int) -> None:
        """A write failed part-way: cut the partial frame so the tail stays clean."""
        try:
            _osio.ftruncate(fd, start)
        except OSError as e:
            self._poisoned = f"could not undo a failed write ({e.strerror}); reopen the log"

    def _after_failed_sync(self, fd: int, start: int) -> None:
        """fsyncgate: never retry-and-trust a failed sync; drop the frame and stop."""
        self._poisoned = "an earlier fsync failed; reopen the log before appending again"
        if self.sync == "always":  # everything before ``start`` was synced already
            try:
                _osio.ftruncate(fd, start)
                _osio.fdatasync(fd)
            except OSError:
                pass

    def _active_fd(self, write: bool = False) -> int:
        """The descriptor on the active segment (read-only until a write needs it)."""
        if self._fd >= 0 and (self._fd_writable or not write):
            return self._fd
        assert self._active_path is not None
        try:
            fd = os.open(self._active_path, os.O_RDWR if write else os.O_RDONLY)
        except OSError as e:
            raise LedgerIOError(f"cannot open {self._active_path}: {e.strerror}") from e
        if self._fd >= 0:  # a read-only one: nothing was written through it
            os.close(self._fd)
        self._fd, self._fd_writable = fd, write
        return fd

    def _roll(self) -> None:
        if self._torn is not None:  # a torn tail in a full segment: cut it before sealing
            self._repair_tail(self._active_fd(write=True))
        self._sync_before_leaving()  # sync="batch": seal only synced frames
        self._trim_preallocation()
        base = self._head + 1
        path = create_segment(
            self.log_dir, base, self._digest, self.segment_bytes, self.sync != "none"
        )
        # seal where the header says, as every other handle will (whole KiB)
        self._set_active(base, path, header_roll_bytes(self.segment_bytes), FORMAT_VERSION)
        self._end_stable = True

    def _trim_preallocation(self) -> None:
        """Cut the zeros preallocated past the last frame of a segment being sealed.

        Only tidiness: readers take trailing zeros as the end of any segment, so
        a failed or lost truncation (not synced) leaves nothing to repair.
        """
        if self._active_path is None or self._torn is not None:
            return
        try:
            fd = self._active_fd()
            if os.fstat(fd).st_size > self._end:
                fd = self._active_fd(write=True)
                _osio.ftruncate(fd, self._end)
        except OSError:
            pass

    def _trim_on_close(self) -> None:
        """Leave no preallocated zeros behind: cut them under the lock if it is free now.

        Skipped (harmlessly: readers take zeros as the end) when another writer
        holds the lock, or anything fails.
        """
        lock = self._lock
        if lock is None or self._poisoned or self._fault is not None or not lock.try_acquire():
            return
        try:
            self._refresh()
            self._trim_preallocation()
        except (LedgerError, OSError):
            pass
        finally:
            lock.release()

    def _repair_tail(self, fd: int) -> None:
        """Move a torn tail aside (never deleted), then truncate to the valid prefix.

        The copy in quarantine/ (a new file, never one that exists) and its
        directory are synced before the segment is cut, in every sync mode.
        """
        assert self._torn is not None and self._active_path is not None
        try:
            size = os.fstat(fd).st_size
            junk = pread_all(fd, size - self._end, self._end)
            if junk.count(0) != len(junk):
                quarantine_bytes(self.log_dir, f"{self._active_path.name}.{self._end}", junk)
            _osio.ftruncate(fd, self._end)
            if self.sync != "none":
                _osio.fsync(fd)
        except OSError as e:
            raise LedgerIOError(
                f"cannot repair torn tail of {self._active_path}: {e.strerror or e}"
            ) from e
        self._torn = None

    # --- idempotent retries -----------------------------------------------------------

    def _batch_index(self) -> dict[str, tuple[int, Receipt]]:
        """Ids of the last ``batch_window`` frames (built lazily, then kept up to date)."""
        if self._batches is None:
            found = list(self._recent_frames(self.batch_window))
            self._batches, self._batch_frames = {}, deque()
            self._nframes = -len(found)
            for first, count, at, bid in reversed(found):
                self._note_frame(first, first + count - 1, at, bid)
        return self._batches

    def _note_frame(self, first: int, last: int, at: float, batch_id: str | None) -> None:
        """One more frame at the head of the log: it enters the window, the oldest leaves."""
        batches = self._batches
        if batches is None:
            return
        self._nframes += 1
        if batch_id is not None:
            batches[batch_id] = (self._nframes, Receipt(first, last, at, batch_id))
            self._batch_frames.append((self._nframes, batch_id))
        oldest = self._nframes - self.batch_window
        frames = self._batch_frames
        while frames and frames[0][0] <= oldest:
            n, bid = frames.popleft()
            if batches.get(bid, (None,))[0] == n:  # not re-committed since
                del batches[bid]

    def _note_batches(self, data: bytes, tail: Tail, start: int = 0) -> None:
        """Frames another writer added (found from ``start`` in ``data``): note their ids."""
        if self._batches is None or tail.last is None:
            return
        assert self._active_path is not None
        for info in iter_frames(data[: tail.end], start, b"", self._head + 1, check=False):
            try:
                at, bid = payload_head(payload_of(data, info))
            except ValueError as e:
                raise CorruptLogError(self._active_path, info.offset, str(e)) from None
            self._note_frame(info.first_seq, info.last_seq, float(at), bid)

    def _recent_frames(self, limit: int) -> Iterator[tuple[int, int, float, str | None]]:
        """``(first_seq, count, at, batch_id)`` of the newest frames, newest first."""
        n = 0
        segs = [s for s in list_segments(self.log_dir) if s[0] <= self._active_base]
        for _base, path in reversed(segs):
            if n >= limit:
                return
            fd = open_segment(path)
            try:
                end = (
                    self._end if path == self._active_path
                    else data_end(fd, os.fstat(fd).st_size)
                )
                for head in recent_heads(path, fd, SEGMENT_HEADER_SIZE, end):
                    yield head
                    n += 1
                    if n >= limit:
                        return
            except OSError as e:
                raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
            finally:
                os.close(fd)

    # --- reading --------------------------------------------------------------------

    def read(self, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Event]:
        """Events with ``from_seq <= seq <= to_seq``, checked against the chain."""
        return cast(Iterator[Event], self._scan(max(1, from_seq), to_seq, _EVENTS))

    def read_batches(self, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Batch]:
        """Whole batches overlapping the range, in order, checked against the chain."""
        return cast(Iterator[Batch], self._scan(max(1, from_seq), to_seq, _BATCHES))

    def read_raw(self, seq: int) -> StoredEvent | None:
        """Event ``seq`` alone, at about the cost of its own bytes (see ``point.py``).

        The frame header and the event's bounds are checked, the batch's chain
        digest is not: authenticate the content (a cache body by its content
        address) or use :meth:`read`. None when the log has no such seq. A
        batch written before per-event offsets existed is read in full instead.
        """
        with self._mutex:
            self._check_open()
            if seq > self._head:
                self._refresh()
            if seq < 1 or seq > self._head:
                return None
        try:
            return self._points.read(seq)
        except ValueError:
            for ev in self.read(seq, seq):  # verified: names the damage, if any
                return StoredEvent(seq, ev.at, cbor2.dumps([ev.kind, ev.key, ev.data]))
            return None

    def digest_at(self, seq: int) -> bytes | None:
        """The chain digest after the batch ending exactly at ``seq`` (None otherwise)."""
        with self._mutex:
            self._check_open()
            self._refresh()
            if seq == self._head:
                return self._digest
            head = self._head
        if seq == 0:
            return GENESIS_DIGEST
        if seq < 0 or seq > head:
            return None
        for _first, last, digest in self._scan(seq, seq, _DIGESTS):
            return cast(bytes, digest) if last == seq else None
        return None

    def _scan(self, from_seq: int, to_seq: int | None, mode: int) -> Iterator[Any]:
        """The one read loop: frames overlapping ``[from_seq, to_seq]``, fully checked.

        Yields one :class:`Batch` per batch (``_BATCHES``), one ``Event``
        per seq (``_EVENTS``) or ``(first_seq, last_seq, digest)`` per frame
        (``_DIGESTS``). Every frame it passes is checked structurally (header
        crc, bounds, footer, count, seq continuity); every frame it yields from
        also has its chain digest checked. The first segment is read through its
        frame index when the read starts inside it or is bounded.
        """
        with self._mutex:
            self._check_open()
        if to_seq is not None and to_seq < from_seq:
            return
        unpack, funpack, crc, b3, loads = (
            FRAME_HEADER.unpack_from, FOOTER.unpack_from, zlib.crc32, blake3.blake3, cbor2.loads
        )
        new, set_kind, set_key, set_data, set_seq, set_at = (
            _new, _set_kind, _set_key, _set_data, _set_seq, _set_at
        )
        bounded = to_seq is not None
        stop_seq = to_seq if to_seq is not None else 0
        need = from_seq  # the next seq the caller still wants
        try:
            segs = list_segments(self.log_dir)
            if not segs:
                return
            i = max(bisect_right([b for b, _p in segs], from_seq) - 1, 0)
            if i == 0 and segs[0][0] != 1:
                raise CorruptLogError(
                    segs[0][1], 0, f"segments before seq {segs[0][0]} are missing"
                )
            chain: tuple[int, bytes] | None = None  # (seq, digest) the next segment continues
            n_segs = len(segs)
            for j in range(i, n_segs):
                base, path = segs[j]
                if bounded and base > stop_seq:
                    return
                use_index = j == i or bounded
                while True:
                    span = self._span(path, base, j == n_segs - 1, need, to_seq, use_index, j > i)
                    if span is None:
                        return  # the last segment's header is torn: it holds nothing
                    data, off, data_off, seq, digest, hdr_base, hdr_prev, indexed_end = span
                    if chain is not None and (hdr_base != chain[0] or hdr_prev != chain[1]):
                        raise CorruptLogError(
                            path, 0, "segment does not continue the one before it"
                        )
                    mv = memoryview(data)
                    size = len(data)
                    try:
                        while off < size:
                            if size - off < FRAME_HEADER_SIZE:
                                raise FrameError(
                                    off + data_off,
                                    f"incomplete frame header ({size - off} bytes)",
                                    seq,
                                )
                            magic, hcrc, n, count, first, fdigest = unpack(data, off)
                            if magic != FRAME_MAGIC or crc(mv[off + 8 : off + 56]) != hcrc:
                                raise FrameError(off + data_off, "bad frame header", seq)
                            end = off + n + FRAME_OVERHEAD
                            if end > size:
                                raise FrameError(
                                    off + data_off,
                                    f"frame extends {end - size} bytes past the end of the segment",
                                    seq,
                                )
                            flen, fmagic = funpack(data, end - FOOTER_SIZE)
                            if fmagic != FOOTER_MAGIC or flen != n + FRAME_OVERHEAD:
                                raise FrameError(off + data_off, "bad frame footer", seq)
                            if count < 1:
                                raise FrameError(off + data_off, "frame holds no events", seq)
                            if first != seq:
                                raise FrameError(
                                    off + data_off,
                                    f"frame starts at seq {first}, expected {seq}",
                                    seq,
                                )
                            nxt = first + count
                            if nxt <= need:  # before the range: structure and seqs only
                                digest, seq, off = fdigest, nxt, end
                                continue
                            if bounded and first > stop_seq:
                                return
                            p0, p1 = off + FRAME_HEADER_SIZE, end - FOOTER_SIZE
                            if n < 4096:  # one call on a small copy beats three on views
                                h = b3(digest + data[off + 8 : off + 24] + data[p0:p1])
                            else:
                                h = b3(digest)
                                h.update(mv[off + 8 : off + 24])
                                h.update(mv[p0:p1])
                            if h.digest() != fdigest:
                                raise FrameError(
                                    off + data_off, "checksum mismatch (payload or chain)", seq
                                )
                            digest, seq, need = fdigest, nxt, nxt
                            if mode == _DIGESTS:
                                off = end
                                yield first, nxt - 1, fdigest
                                continue
                            rows = None
                            if mode == _EVENTS and bounded and count > 8:
                                lo = from_seq - first if from_seq > first else 0
                                hi = min(stop_seq, nxt - 1) - first + 1
                                if (hi - lo) * 4 <= count:  # a few events of a big batch
                                    rows = decode_rows_at(mv[p0:p1], lo, hi)
                                    head = payload_head_fast(mv[p0:p1]) if rows else None
                                    if rows is not None and head is not None:
                                        at, first, nxt = head[0], first + lo, first + hi
                                        rows_pre_sliced = True
                                    else:
                                        rows = None
                            try:
                                if rows is None:
                                    rows_pre_sliced = False
                                    # small payloads decode faster from bytes than a view
                                    obj = loads(data[p0:p1] if n < 65536 else mv[p0:p1])
                                    at = obj[0]
                                    if type(at) is not float:
                                        at = float(at)
                                    if len(obj) == 3:  # written before per-event offsets
                                        rows = obj[2]
                                        if type(rows) is not list:
                                            raise ValueError("payload is not [at, bid, events]")
                                    else:
                                        rows = obj[3]
                                        if (len(obj) != 4 or type(rows) is not list
                                                or len(obj[2]) != 4 * len(rows)):
                                            raise ValueError(
                                                "payload is not [at, batch_id, offsets, events]"
                                            )
                            except Exception as e:
                                raise CorruptLogError(
                                    path, off + data_off, f"payload does not decode: {e}"
                                ) from None
                            if not rows_pre_sliced and len(rows) != count:
                                raise CorruptLogError(
                                    path, off + data_off, "event count does not match the header"
                                )
                            frame_off, off = off + data_off, end
                            if mode == _BATCHES:
                                try:
                                    batch = Batch.of_rows(first, at, obj[1], rows)
                                except ValueError as e:
                                    raise CorruptLogError(path, frame_off, str(e)) from None
                                yield batch
                                continue
                            lo = from_seq - first if from_seq > first else 0
                            if bounded and stop_seq < nxt - 1:
                                rows = rows[lo : stop_seq - first + 1]
                            elif lo:
                                rows = rows[lo:]
                            s = first + lo
                            try:
                                for kind, key, d in rows:
                                    ev = new(Event)
                                    set_kind(ev, kind)
                                    set_key(ev, key)
                                    set_data(ev, d)
                                    set_seq(ev, s)
                                    set_at(ev, at)
                                    yield ev
                                    s += 1
                            except (TypeError, ValueError):
                                raise CorruptLogError(
                                    path, frame_off, "event is not [kind, key, data]"
                                ) from None
                    except FrameError as e:
                        if e.offset < indexed_end:
                            # the index said a valid frame is here: stale (a frame it saw was
                            # cut and rewritten) or real damage; the whole segment decides
                            self._drop_index(path)
                            use_index = False
                            continue
                        if j < n_segs - 1 and not (
                            j == n_segs - 2 and self._torn_segment(segs[-1][1])
                        ):  # bad bytes in a segment that is not the last
                            raise CorruptLogError(path, e.offset, e.reason) from None
                        if has_valid_frame_after(data, e.offset - data_off, e.next_seq):
                            raise CorruptLogError(path, e.offset, e.reason) from None
                        return  # torn tail of the last segment: the valid prefix ends here
                    break
                chain = (seq, digest)
        except CorruptLogError as e:
            # media corruption seen by a read closes this handle for appends too: a
            # writer that made the segment never re-walks it and would append behind it
            with self._mutex:
                if self._fault is None:
                    self._fault = e
            raise

    def _span(
        self,
        path: Path,
        base: int,
        last: bool,
        need: int,
        to_seq: int | None,
        use_index: bool,
        later: bool,
    ) -> tuple[bytes, int, int, int, bytes, int, bytes, int] | None:
        """The bytes of ``path`` a read needs, and where the walk starts in them.

        Returns ``(data, start, data_offset, seq, digest, base_seq, prev_digest,
        indexed_end)``: ``data`` holds the file from byte ``data_offset``; the
        walk starts at ``data[start]`` with the frame of ``seq`` chained to
        ``digest``; ``base_seq``/``prev_digest`` are the header's; frames before
        ``indexed_end`` were promised by the index. None: a torn last segment.
        """
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            if last:  # a torn segment another writer just moved to quarantine/
                return None
            raise LedgerIOError(f"cannot open {path}: segment vanished") from None
        except OSError as e:
            raise LedgerIOError(f"cannot open {path}: {e.strerror}") from e
        try:
            st = os.fstat(fd)
            size = data_end(fd, st.st_size)
            if use_index and (need > base or to_seq is not None) and (
                not later or size > INDEX_MIN_BYTES
            ):
                found = self._indexed_span(path, fd, st.st_ino, size, last, need, to_seq)
                return found if found else None
            data = pread_all(fd, size, 0)
        except OSError as e:
            raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
        finally:
            os.close(fd)
        if last and segment_header_is_torn(data):
            return None
        hdr = read_header(path, data)
        return (
            data, SEGMENT_HEADER_SIZE, 0, hdr.base_seq, hdr.prev_digest, hdr.base_seq,
            hdr.prev_digest, 0,
        )

    def _indexed_span(
        self, path: Path, fd: int, ino: int, size: int, last: bool, need: int, to_seq: int | None
    ) -> Any:
        """:meth:`_span` through the segment's frame index (built or extended here).

        ``size`` is where the segment's content ends (:func:`data_end`). Returns
        the span, ``()`` for a torn last segment. Raises ``OSError``.
        """
        with self._index_lock:
            idx = self._indexes.get(path)
            if idx is not None and (idx.ino != ino or size < idx.end):
                idx = None  # another file now, or it shrank: walk it afresh
            if idx is None:
                head = pread_all(fd, SEGMENT_HEADER_SIZE, 0)
                if last and header_is_torn(path, fd, size, head):
                    return ()
                idx = FrameIndex(ino, read_header(path, head))
                self._indexes[path] = idx
                while len(self._indexes) > INDEX_CACHE:
                    self._indexes.popitem(last=False)
            else:
                self._indexes.move_to_end(path)
            if size > idx.end and need >= idx.next_seq:
                idx.extend(fd, size)
            seq, off, digest = idx.locate(need)
            stop = idx.bound(to_seq) if to_seq is not None else None
            indexed_end, hdr_base, hdr_prev = idx.end, idx.base, idx.prev_digest
        if stop is None or stop > size:
            stop = size
        data = pread_all(fd, stop - off, off)
        return data, 0, off, seq, digest, hdr_base, hdr_prev, indexed_end

    def _drop_index(self, path: Path) -> None:
        with self._index_lock:
            self._indexes.pop(path, None)

    def _torn_segment(self, path: Path) -> bool:
        """Is ``path`` (the last segment) a torn new segment that readers ignore?"""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return True  # moved to quarantine/ meanwhile
        except OSError as e:
            raise LedgerIOError(f"cannot open {path}: {e.strerror}") from e
        try:
            size = os.fstat(fd).st_size
            return header_is_torn(path, fd, size, pread_all(fd, SEGMENT_HEADER_SIZE, 0))
        except OSError as e:
            raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
        finally:
            os.close(fd)

    def verify(self) -> VerifyReport:
        """Check every byte of every segment; never modifies anything."""
        with self._mutex:
            if self._closed:
                raise LedgerClosedError("ledger is closed")
        return verify_log(self.log_dir)

    # --- lifecycle ------------------------------------------------------------------

    def flush(self) -> None:
        """Make every acknowledged append durable now (for ``sync="batch"|"none"``)."""
        with self._mutex:
            if self._poisoned:
                return
            try:
                for path in self._left_unsynced:
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        _osio.fdatasync(fd)
                    finally:
                        os.close(fd)
                self._left_unsynced.clear()
                if self._fd >= 0 and self._unsynced:
                    _osio.fdatasync(self._fd)
            except OSError as e:
                self._poisoned = "an fsync failed; reopen the log before appending again"
                raise LedgerIOError(f"flush failed: {e.strerror or e}") from e
            self._unsynced = False
            self._last_sync = time.monotonic()

    def close(self) -> None:
        with self._mutex:
            if self._closed:
                return
            try:
                if self.sync == "batch":
                    self.flush()
                if self._preallocated:
                    self._trim_on_close()
            finally:
                self._closed = True
                if self._fd >= 0:
                    os.close(self._fd)
                    self._fd, self._fd_writable = -1, False
                if self._lock is not None:
                    self._lock.close()
                with self._index_lock:
                    self._indexes.clear()
                self._points.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({str(self.log_dir)!r}, head={self._head})"
