"""The file-backed ledger: append-only, checksummed, hash-chained segments."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

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
from .event import Event, Receipt, check_event
from .frame import (
    FOOTER_SIZE,
    FRAME_HEADER_SIZE,
    FRAME_OVERHEAD,
    GENESIS_DIGEST,
    SEGMENT_HEADER_SIZE,
    FrameError,
    FrameInfo,
    check_digest,
    decode_payload,
    encode_frame,
    frame_before,
    has_valid_frame_after,
    header_roll_bytes,
    iter_frames,
    last_frame_by_footer,
    payload_of,
)
from .lock import WriterLock
from .segments import (
    Tail,
    create_segment,
    list_segments,
    read_bytes,
    read_header,
    scan_tail,
    walk_sealed,
)
from .verify import VerifyReport, verify_log

SyncMode = Literal["always", "batch", "none"]
SYNC_MODES = ("always", "batch", "none")
DEFAULT_SEGMENT_BYTES = 16 * 1024 * 1024
DEFAULT_LOCK_TIMEOUT = 5.0
DEFAULT_BATCH_WINDOW = 10_000
DEFAULT_SYNC_INTERVAL = 0.2


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
        self._fd = -1
        self._end = 0
        self._head = 0
        self._digest = GENESIS_DIGEST
        self._last_at = 0.0
        self._torn: tuple[int, str] | None = None
        # False while the active segment was only fast-scanned (footer of the last
        # frame); a writer walks it fully before its first write (see _check_active)
        self._active_checked = True
        self._unsynced = False
        self._last_sync = time.monotonic()
        self._batches: OrderedDict[str, Receipt] | None = None

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
            for _base, path in segs:
                read_header(path)
            if segs:
                base, path = segs[-1]
                data = read_bytes(path)
                hdr = read_header(path, data)
                self._set_active(base, path, hdr.roll_bytes)
                self._adopt(scan_tail(path, data, SEGMENT_HEADER_SIZE, hdr.prev_digest, base, fast=True), data)
                self._active_checked = False
        except (CorruptLogError, LedgerError) as e:
            if isinstance(e, LedgerIOError):
                raise
            self._fault = e

    def _set_active(self, base: int, path: Path, roll_bytes: int) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._active_base, self._active_path, self._roll_at = base, path, roll_bytes
        self._end, self._torn = SEGMENT_HEADER_SIZE, None
        self._active_checked = True  # new, or about to be walked in full by the caller

    def _adopt(self, tail: Tail, data: bytes, data_offset: int = 0) -> None:
        """Take ``tail`` (found in ``data``, which starts at ``data_offset``) as our state."""
        if tail.last is not None:
            at, _bid, _rows = decode_payload(payload_of(data, tail.last))
            self._last_at = max(self._last_at, float(at))
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
            if not segs:
                return
            self._switch_to(segs[0], GENESIS_DIGEST, 1)
        assert self._active_path is not None
        try:
            size = os.stat(self._active_path).st_size
        except OSError as e:
            raise LedgerIOError(f"cannot stat {self._active_path}: {e.strerror}") from e
        if size < self._end or not self._last_frame_still_there():
            # A frame we saw was cut again: its writer's fsync failed and it truncated
            # (see _after_failed_sync). Forget it and walk the segment afresh, or we
            # would chain to a frame that is gone, or cut the frames written since.
            self._rescan_active()
        elif size > self._end:
            data = read_bytes(self._active_path, self._end)
            try:
                tail = scan_tail(self._active_path, data, 0, self._digest, self._head + 1, fast=False)
            except CorruptLogError as e:
                self._fault = CorruptLogError(e.segment, e.offset + self._end, e.reason)
                raise self._fault from None
            self._note_batches(data, tail, 0)
            self._adopt(tail, data, self._end)
        else:
            self._torn = None  # size == _end: another writer already cut the torn tail we saw
        if self._end >= self._roll_at and self._torn is None:
            for base, path in list_segments(self.log_dir):
                if base > self._active_base:
                    if base != self._head + 1:
                        self._fault = CorruptLogError(path, 0, f"segment starts at seq {base}, expected {self._head + 1}")
                        raise self._fault
                    self._switch_to((base, path), self._digest, base)

    def _last_frame_still_there(self) -> bool:
        """Does the frame we believe ends at ``_end`` still end there, with our digest?"""
        assert self._active_path is not None
        if self._end <= SEGMENT_HEADER_SIZE:
            return True  # no frame of this segment adopted yet
        try:
            with open(self._active_path, "rb") as f:
                f.seek(self._end - FOOTER_SIZE)
                flen = int.from_bytes(f.read(4), "little")
                if not FRAME_OVERHEAD <= flen <= self._end - SEGMENT_HEADER_SIZE:
                    return False
                f.seek(self._end - flen + FRAME_HEADER_SIZE - 32)
                return f.read(32) == self._digest
        except OSError as e:
            raise LedgerIOError(f"cannot read {self._active_path}: {e.strerror}") from e

    def _rescan_active(self) -> None:
        assert self._active_path is not None
        path = self._active_path
        data = read_bytes(path)
        try:
            hdr = read_header(path, data)
            tail = scan_tail(
                path, data, SEGMENT_HEADER_SIZE, hdr.prev_digest, self._active_base, fast=False
            )
        except CorruptLogError as e:
            self._fault = e
            raise
        self._batches = None  # it may hold the vanished batch's id: rebuild on demand
        self._adopt(tail, data)
        self._active_checked = True

    def _switch_to(self, seg: tuple[int, Path], prev_digest: bytes, next_seq: int) -> None:
        base, path = seg
        data = read_bytes(path)
        try:
            hdr = read_header(path, data)
            if hdr.prev_digest != prev_digest:
                raise CorruptLogError(path, 0, "segment does not chain to the one before it")
            self._set_active(base, path, hdr.roll_bytes)
            self._head, self._digest = base - 1, prev_digest
            tail = scan_tail(path, data, SEGMENT_HEADER_SIZE, prev_digest, next_seq, fast=False)
        except CorruptLogError as e:
            self._fault = e
            raise
        self._note_batches(data, tail, SEGMENT_HEADER_SIZE)
        self._adopt(tail, data)

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
        batch = [check_event(e) for e in events]
        if not batch:
            raise InvalidEventError("a batch needs at least one event")
        if batch_id is not None and (not isinstance(batch_id, str) or not batch_id or len(batch_id) > 200):
            raise InvalidEventError("batch_id must be a non-empty string of at most 200 characters")
        try:
            rows = cbor2.dumps([[e.kind, e.key, e.data] for e in batch])
        except Exception as e:
            raise InvalidEventError(f"event data cannot be encoded as CBOR: {e}") from None
        with self._mutex:
            self._check_writable()
            lock = self._writer_lock()
            lock.acquire()
            try:
                return self._append_locked(rows, len(batch), expected_head, batch_id)
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
        if batch_id is not None:
            seen = self._batch_index().get(batch_id)
            if seen is not None:
                return Receipt(seen.first_seq, seen.last_seq, seen.at, batch_id, duplicate=True)
        if expected_head is not None and expected_head != self._head:
            raise HeadMismatchError(expected_head, self._head)
        if self._active_path is None or self._end >= self._roll_at:
            self._roll()
        fd = self._active_fd()
        if self._torn is not None:
            self._repair_tail(fd)
        at = max(time.time(), self._last_at)
        payload = b"\x83" + cbor2.dumps(at) + cbor2.dumps(batch_id) + rows
        first = self._head + 1
        try:
            frame, digest = encode_frame(self._digest, first, count, payload)
        except ValueError as e:
            raise InvalidEventError(str(e)) from None
        start = self._end
        try:
            _osio.write_all(fd, frame, start)
        except OSError as e:
            self._undo_write(fd, start)
            raise LedgerIOError(f"append failed writing {self._active_path}: {e.strerror or e}") from e
        self._unsynced = True
        if self.sync == "always" or (
            self.sync == "batch" and time.monotonic() - self._last_sync >= self.sync_interval
        ):
            try:
                _osio.fdatasync(fd)
            except OSError as e:
                self._after_failed_sync(fd, start)
                raise LedgerIOError(
                    f"append not durable: fsync of {self._active_path} failed ({e.strerror or e}); "
                    "this handle refuses further appends until the log is reopened"
                ) from e
            self._unsynced = False
            self._last_sync = time.monotonic()
        self._end, self._head, self._digest, self._last_at = start + len(frame), first + count - 1, digest, at
        receipt = Receipt(first, first + count - 1, at, batch_id)
        if batch_id is not None:
            self._remember(batch_id, receipt)
        return receipt

    def _check_active(self) -> None:
        """Walk the active segment in full before this handle first writes to it.

        Opening trusts a clean ending (the fast path), which cannot see bad bytes
        in the middle of the segment. A writer must not append behind media
        corruption (DESIGN.md rule 3: fail closed, never modify the damaged file).
        """
        if self._active_checked or self._active_path is None:
            return
        self._rescan_active()

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

    def _active_fd(self) -> int:
        if self._fd < 0:
            assert self._active_path is not None
            try:
                self._fd = os.open(self._active_path, os.O_RDWR)
            except OSError as e:
                raise LedgerIOError(f"cannot open {self._active_path}: {e.strerror}") from e
        return self._fd

    def _roll(self) -> None:
        if self._torn is not None:  # a torn tail in a full segment: cut it before sealing
            self._repair_tail(self._active_fd())
        base = self._head + 1
        path = create_segment(self.log_dir, base, self._digest, self.segment_bytes, self.sync != "none")
        # seal where the header says, as every other handle will (whole KiB)
        self._set_active(base, path, header_roll_bytes(self.segment_bytes))

    def _repair_tail(self, fd: int) -> None:
        """Move a torn tail aside (never deleted), then truncate to the valid prefix."""
        assert self._torn is not None and self._active_path is not None
        offset, reason = self._torn
        try:
            junk = read_bytes(self._active_path, self._end)
            if junk.strip(b"\0"):
                qdir = self.log_dir / "quarantine"
                qdir.mkdir(exist_ok=True)
                (qdir / f"{self._active_path.name}.{self._end}.torn").write_bytes(junk)
            _osio.ftruncate(fd, self._end)
            if self.sync != "none":
                _osio.fsync(fd)
        except OSError as e:
            raise LedgerIOError(f"cannot repair torn tail of {self._active_path}: {e.strerror}") from e
        self._torn = None

    # --- idempotent retries -----------------------------------------------------------

    def _batch_index(self) -> OrderedDict[str, Receipt]:
        if self._batches is None:
            found: list[tuple[str, Receipt]] = []
            for info, at, batch_id in self._recent_frames(self.batch_window):
                if batch_id is not None:
                    found.append((batch_id, Receipt(info.first_seq, info.last_seq, at, batch_id)))
            self._batches = OrderedDict()
            for bid, r in reversed(found):
                self._remember(bid, r)
        return self._batches

    def _remember(self, batch_id: str, receipt: Receipt) -> None:
        if self._batches is None:
            return
        self._batches[batch_id] = receipt
        self._batches.move_to_end(batch_id)
        while len(self._batches) > self.batch_window:
            self._batches.popitem(last=False)

    def _note_batches(self, data: bytes, tail: Tail, start: int) -> None:
        """Frames another writer added (found from ``start`` in ``data``): note their ids."""
        if self._batches is None or tail.last is None:
            return
        for info in iter_frames(data[: tail.end], start, b"", self._head + 1, check=False):
            at, bid, _ = decode_payload(payload_of(data, info))
            if bid is not None:
                self._remember(bid, Receipt(info.first_seq, info.last_seq, float(at), bid))

    def _recent_frames(self, limit: int) -> Iterator[tuple[FrameInfo, float, str | None]]:
        """Newest frames first, walking footers backwards across segments."""
        n = 0
        segs = [s for s in list_segments(self.log_dir) if s[0] <= self._active_base]
        for _base, path in reversed(segs):
            data = read_bytes(path)
            end = self._end if path == self._active_path else len(data)
            info = last_frame_by_footer(data[:end], SEGMENT_HEADER_SIZE)
            while info is not None and n < limit:
                at, bid, _ = decode_payload(payload_of(data, info))
                yield info, float(at), bid
                n += 1
                info = frame_before(data, info, SEGMENT_HEADER_SIZE)
            if n >= limit:
                return

    # --- reading --------------------------------------------------------------------

    def read(self, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Event]:
        """Events with ``from_seq <= seq <= to_seq``, checked against the chain."""
        for at, first, rows in self.read_batches(from_seq, to_seq):
            for i, row in enumerate(rows):
                seq = first + i
                if seq < from_seq:
                    continue
                if to_seq is not None and seq > to_seq:
                    return
                yield Event(row[0], row[1], row[2], seq=seq, at=at)

    def read_batches(
        self, from_seq: int = 1, to_seq: int | None = None
    ) -> Iterator[tuple[float, int, list[list[Any]]]]:
        """Whole batches ``(at, first_seq, rows)`` overlapping the range, in order."""
        with self._mutex:
            self._check_open()
        try:
            for data, info, _path in self._frames(max(1, from_seq), to_seq):
                try:
                    at, _bid, rows = decode_payload(payload_of(data, info))
                except ValueError as e:
                    raise CorruptLogError(_path, info.offset, str(e)) from None
                if len(rows) != info.count:
                    raise CorruptLogError(_path, info.offset, "event count does not match header")
                yield float(at), info.first_seq, rows
        except CorruptLogError as e:
            # media corruption seen by a read closes this handle for appends too: a
            # writer that made the segment never re-walks it and would append behind it
            with self._mutex:
                if self._fault is None:
                    self._fault = e
            raise

    def _frames(self, from_seq: int, to_seq: int | None) -> Iterator[tuple[bytes, FrameInfo, Path]]:
        segs = list_segments(self.log_dir)
        start = 0
        for i, (base, _p) in enumerate(segs):
            if base <= from_seq:
                start = i
        prev_digest: bytes | None = None
        next_seq: int | None = None
        for i in range(start, len(segs)):
            base, path = segs[i]
            data = read_bytes(path)
            hdr = read_header(path, data)
            if next_seq is not None and (base != next_seq or hdr.prev_digest != prev_digest):
                raise CorruptLogError(path, 0, "segment does not continue the one before it")
            if next_seq is None and i == 0 and base != 1:
                raise CorruptLogError(path, 0, f"segments before seq {base} are missing")
            last = i == len(segs) - 1
            digest, seq = hdr.prev_digest, hdr.base_seq
            off = SEGMENT_HEADER_SIZE
            try:
                for info in iter_frames(data, off, digest, seq, check=False):
                    if info.last_seq >= from_seq:
                        check_digest(data, info, digest)
                        if to_seq is not None and info.first_seq > to_seq:
                            return
                        yield data, info, path
                    digest, seq, off = info.digest, info.last_seq + 1, info.end
            except FrameError as e:
                if not last or has_valid_frame_after(data, e.offset, seq):
                    raise CorruptLogError(path, e.offset, e.reason) from None
                return  # torn tail of the last segment: the valid prefix ends here
            prev_digest, next_seq = digest, seq

    def digest_at(self, seq: int) -> bytes | None:
        """The chain digest after the batch ending exactly at ``seq`` (None otherwise)."""
        with self._mutex:
            self._check_open()
            self._refresh()
            if seq == self._head:
                return self._digest
        if seq == 0:
            return GENESIS_DIGEST
        if seq < 0 or seq > self._head:
            return None
        for _data, info, _path in self._frames(seq, seq):
            return info.digest if info.last_seq == seq else None
        return None

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
            if self._fd >= 0 and self._unsynced and not self._poisoned:
                try:
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
            finally:
                self._closed = True
                if self._fd >= 0:
                    os.close(self._fd)
                    self._fd = -1
                if self._lock is not None:
                    self._lock.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({str(self.log_dir)!r}, head={self._head})"


