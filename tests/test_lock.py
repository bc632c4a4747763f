"""The writer lock on its own: the file's layout, the bounded wait, errors, close.

``flock`` locks belong to an open file description, so two ``WriterLock`` objects on
one path in one process exclude each other as two processes would: no child process
is needed. The wait runs on a fake clock, so its backoff is checked exactly.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

import eventstore.lock as lock_mod
from eventstore import LedgerIOError, LockTimeout
from eventstore.lock import GEN_FIELD, PID_FIELD, WriterLock


@pytest.fixture
def locks(tmp_path: Path) -> Any:
    made: list[WriterLock] = []

    def make(timeout: float = 0.0) -> WriterLock:
        lk = WriterLock(tmp_path / "LOCK", timeout)
        made.append(lk)
        return lk

    yield make
    for lk in made:
        lk.close()


class FakeTime:
    """``time`` for eventstore.lock: ``sleep`` moves ``monotonic`` on, and may act."""

    def __init__(self, on_sleep: Any = None) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep

    def monotonic(self) -> float:
        return self.now

    def sleep(self, d: float) -> None:
        assert len(self.sleeps) < 1000, "the wait does not end"
        self.sleeps.append(d)
        self.now += d
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))


def test_a_new_lock_has_read_no_generation(locks: Any) -> None:
    assert locks().generation == 0


def test_acquire_writes_the_pid_field_and_leaves_the_generation_field(
        locks: Any, tmp_path: Path) -> None:
    a = locks()
    a.acquire()
    a.set_generation(7)
    a.release()
    b = locks()
    (tmp_path / "LOCK").write_bytes(b"x" * PID_FIELD + (7).to_bytes(GEN_FIELD, "little"))
    b.acquire()
    raw = (tmp_path / "LOCK").read_bytes()
    assert raw[:PID_FIELD] == str(os.getpid()).encode().ljust(PID_FIELD - 1) + b"\n"
    assert raw[PID_FIELD:] == (7).to_bytes(GEN_FIELD, "little")
    assert locks().holder_pid() == os.getpid()


def test_the_generation_field_is_little_endian_and_read_back_at_acquire(locks: Any,
                                                                       tmp_path: Path) -> None:
    a = locks()
    a.acquire()
    a.set_generation(1000)
    assert a.generation == 1000
    a.release()
    assert (tmp_path / "LOCK").read_bytes()[PID_FIELD:] == (1000).to_bytes(GEN_FIELD, "little")
    b = locks()
    b.acquire()
    assert b.generation == 1000


def test_try_acquire_says_no_while_another_holds_the_lock(locks: Any) -> None:
    a, b = locks(), locks()
    a.acquire()
    assert b.try_acquire() is False
    a.release()
    assert b.try_acquire() is True
    assert a.try_acquire() is False


def test_a_lock_file_that_cannot_be_opened_is_an_io_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "LOCK"
    with pytest.raises(LedgerIOError) as e:
        WriterLock(path, 0.0)
    assert str(e.value) == f"cannot open lock file {path}: No such file or directory"
    assert isinstance(e.value.__cause__, FileNotFoundError)


@pytest.mark.parametrize(("error", "shown"), [
    (OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
    (OSError("injected"), "injected"),  # no strerror: the error itself
])
def test_a_pid_that_cannot_be_written_releases_the_lock(
        locks: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: OSError,
        shown: str) -> None:
    a = locks()

    def fail(*args: Any) -> int:
        raise error

    monkeypatch.setattr(os, "pwrite", fail)  # the os module eventstore.lock calls
    with pytest.raises(LedgerIOError) as e:
        a.acquire()
    assert str(e.value) == f"cannot write lock file {tmp_path / 'LOCK'}: {shown}"
    assert e.value.__cause__ is error
    assert locks().try_acquire() is True  # released


def test_the_wait_backs_off_from_half_a_millisecond_doubling_to_20ms(
        locks: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = locks(), locks(timeout=10.0)
    a.acquire()
    fake = FakeTime(lambda n: a.release() if n == 9 else None)
    monkeypatch.setattr(lock_mod, "time", fake)
    b.acquire()
    assert fake.sleeps == [0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.02, 0.02, 0.02]
    assert a.try_acquire() is False  # b holds it


def test_the_last_sleep_ends_at_the_timeout_then_the_wait_gives_up(
        locks: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = locks(), locks(timeout=0.01)
    a.acquire()
    fake = FakeTime()
    monkeypatch.setattr(lock_mod, "time", fake)
    with pytest.raises(LockTimeout) as e:
        b.acquire()
    assert fake.sleeps[:5] == pytest.approx([0.0005, 0.001, 0.002, 0.004, 0.0025])
    assert sum(fake.sleeps) == pytest.approx(0.01)
    assert e.value.holder_pid == os.getpid() and e.value.waited == pytest.approx(0.01)


def test_a_wait_that_reached_its_timeout_exactly_gives_up_without_sleeping(
        locks: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = locks(), locks(timeout=1.0)
    a.acquire()
    fake = FakeTime()
    ticks = iter([0.0, 1.0])
    fake.monotonic = lambda: next(ticks)  # type: ignore[method-assign]
    monkeypatch.setattr(lock_mod, "time", fake)
    with pytest.raises(LockTimeout) as e:
        b.acquire()
    assert fake.sleeps == [] and e.value.waited == 1.0


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_close_twice_closes_the_lock_file_once(locks: Any) -> None:
    a = locks()
    before = _open_fds()
    a.close()
    after = _open_fds()
    assert len(before - after) == 1
    a.close()  # no error, and no other descriptor closed
    assert _open_fds() == after


def test_a_lock_on_descriptor_0_is_closed_too(tmp_path: Path) -> None:
    """A daemon that closed stdin gets descriptor 0 for its lock file."""
    saved = os.dup(0)
    try:
        os.close(0)
        lk = WriterLock(tmp_path / "LOCK", 0.0)
        try:
            assert lk._fd == 0
        finally:
            lk.close()
        with pytest.raises(OSError):
            os.fstat(0)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
