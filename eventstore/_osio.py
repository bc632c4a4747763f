"""The system calls that write the log and the checkpoints, named in one place.

Fault-injection tests replace these attributes (``_osio.fsync = boom``) to
prove that a failing write or sync never acknowledges anything, and the
torture suite's power-cut simulation (``tests/torture/powercut.py``) wraps
them to learn what a crash could lose. Files are still created and opened
with ``os.open``.
"""

from __future__ import annotations

import os

pwrite = os.pwrite
fsync = os.fsync
fdatasync = getattr(os, "fdatasync", os.fsync)
ftruncate = os.ftruncate
replace = os.replace


def write_all(fd: int, data: bytes, offset: int) -> None:
    """pwrite until every byte is written (a short write is not an error by itself)."""
    view = memoryview(data)
    while view:
        n = pwrite(fd, view, offset)
        if n <= 0:
            raise OSError("short write")
        view = view[n:]
        offset += n


def fsync_dir(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fsync(fd)
    finally:
        os.close(fd)
