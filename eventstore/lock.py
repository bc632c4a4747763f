"""The writer lock: one appender at a time, bounded wait, the holder named."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from . import private
from .errors import LedgerIOError, LockTimeout

PID_FIELD = 24
#: Bytes 24..32 of the lock file: the base seq of the newest generation written (u64 LE,
#: format.md §9, §12), so a writer learns of one from the read it does anyway.
GEN_FIELD = 8


class WriterLock:
    """An exclusive ``flock`` on ``LOCK`` beside the segments.

    The holder writes its pid into the file after it gets the lock, so a
    writer that times out can say who is in the way. ``flock`` is released by
    the kernel when the holder dies, so a killed writer never wedges the log.
    """

    def __init__(self, path: Path, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        try:
            try:
                self._fd = private.create_file(path, os.O_RDWR | os.O_EXCL)
            except FileExistsError:  # the usual case: only the first writer creates it
                self._fd = os.open(path, os.O_RDWR)
        except OSError as e:
            raise LedgerIOError(f"cannot open lock file {path}: {e.strerror}") from e
        self._pid_bytes = str(os.getpid()).encode().ljust(PID_FIELD - 1) + b"\n"
        #: The generation field as read at the last acquire (0: none written).
        self.generation = 0

    def acquire(self) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._wait()
        head = self._read_head()
        self.generation = int.from_bytes(head[PID_FIELD:], "little")
        if self._pid_bytes[:PID_FIELD] != head[:PID_FIELD]:
            try:
                os.pwrite(self._fd, self._pid_bytes, 0)
            except OSError as e:  # callers release only a lock acquire() returned
                self.release()
                raise LedgerIOError(f"cannot write lock file {self.path}: {e.strerror or e}") from e

    def try_acquire(self) -> bool:
        """Take the lock only if it is free now (for tidying that can be skipped)."""
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _wait(self) -> None:
        start = time.monotonic()
        delay = 0.0005
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                waited = time.monotonic() - start
                if waited >= self.timeout:
                    raise LockTimeout(self.path, self.holder_pid(), waited) from None
                time.sleep(min(delay, max(self.timeout - waited, 0.0)))
                delay = min(delay * 2, 0.02)

    def _read_pid_bytes(self) -> bytes:
        return self._read_head()[:PID_FIELD]

    def _read_head(self) -> bytes:
        try:
            return os.pread(self._fd, PID_FIELD + GEN_FIELD, 0)
        except OSError:
            # no pid, generation 0; any other short bytes without a pid read the same
            # (equivalent mutants)
            return b""

    def set_generation(self, base: int) -> None:
        """Record (holding the lock) that a generation starting at ``base`` is being
        written; raises ``OSError``. Not synced: only live processes read it."""
        os.pwrite(self._fd, base.to_bytes(GEN_FIELD, "little"), PID_FIELD)
        self.generation = base

    def holder_pid(self) -> int | None:
        raw = self._read_pid_bytes().strip()
        return int(raw) if raw.isdigit() else None

    def release(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1  # any negative reads as closed (-2: an equivalent mutant)
