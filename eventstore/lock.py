"""The writer lock: one appender at a time, bounded wait, the holder named."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from . import private
from .errors import LedgerIOError, LockTimeout

PID_FIELD = 24


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

    def acquire(self) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._wait()
        if self._pid_bytes[:PID_FIELD] != self._read_pid_bytes():
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
        try:
            return os.pread(self._fd, PID_FIELD, 0)
        except OSError:
            return b""

    def holder_pid(self) -> int | None:
        raw = self._read_pid_bytes().strip()
        return int(raw) if raw.isdigit() else None

    def release(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
