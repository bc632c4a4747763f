"""A process without stdin (a daemon, ``cmd <&-``) hands descriptor 0 to the next file
it opens, so a segment's descriptor may be 0: every "has a descriptor" check must count
it (``fd >= 0``, never ``fd > 0``). Mutation testing had listed ``> 0`` there as
equivalent while stdin held 0; these tests close stdin around the opens they pin.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from eventstore import Event, Ledger, _osio
from eventstore import ledger as ledger_mod
from eventstore.generation import SEAL_MAGIC


@contextmanager
def stdin_closed() -> Iterator[None]:
    """Descriptor 0 free for the block; stdin back after it (whatever holds 0 then is
    closed by the restore, so each test checks 0 is free before it leaves)."""
    saved = os.dup(0)
    os.close(0)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)


def fd0_is_open() -> bool:
    try:
        os.fstat(0)
    except OSError:
        return False
    return True


def ev(i: int) -> Event:
    return Event("a.a", None, {"i": i, "pad": "x" * 100})


def append_until_roll(led: Ledger, i: int) -> int:
    """Append ``ev(i)``, ``ev(i + 1)``, ... until ``led`` moves to a new segment."""
    assert led.head == i  # (a look: the handle knows its segment)
    path = led._tip.path
    while led._tip.path == path:
        led.append([ev(i)])
        i += 1
    return i


def test_a_segment_on_descriptor_0_is_kept_synced_left_and_closed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_sync = _osio.fdatasync

    def spy(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_sync(fd)

    monkeypatch.setattr(_osio, "fdatasync", spy)
    led = Ledger.open(tmp_path / "log", segment_bytes=4096, sync="none")
    try:
        i = 1
        led.append([ev(0)])
        with stdin_closed():
            i = append_until_roll(led, i)
            on_zero = led._tip.path
            assert on_zero is not None and led._tip.fd == 0  # the new segment got 0
            for _ in range(2):
                led.append([ev(i)])
                i += 1
            assert led._tip.fd == 0  # appends write through it, none opens another
            led.flush()
            assert on_zero.name in synced  # what was written through 0 is synced
            synced.clear()
            i = append_until_roll(led, i)
            # the segment left behind is remembered for the next flush, and its
            # descriptor 0 was closed: the next segment got 0 again
            assert led._tip.fd == 0 and led._tip.path != on_zero
            led.flush()
            assert on_zero.name in synced
            led.close()
            assert not fd0_is_open()  # closing the handle closed descriptor 0
            os.fstat(1)  # and nothing else: stdout is still open
    finally:
        led.close()
    with Ledger.open(tmp_path / "log", readonly=True) as ro:
        assert [e.data["i"] for e in ro.read()] == list(range(i))


def generation_seal_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         replace: Any) -> None:
    """``replace(led)`` writes a new generation while stdin is closed: the descriptor
    the old segment is sealed through is 0; the seal must be written and 0 closed."""
    seal_fds: list[int] = []
    real_open = ledger_mod.open_for_seal

    def spy(path: Path | None) -> int:
        fd = real_open(path)
        seal_fds.append(fd)
        return fd

    monkeypatch.setattr(ledger_mod, "open_for_seal", spy)
    d = tmp_path / "log"
    led = Ledger.open(d)
    try:
        for i in range(4):
            led.append([ev(i)])
        seg = led._tip.path
        assert seg is not None
        end = led._tip.end
        check = os.open(seg, os.O_RDONLY)
        try:
            with stdin_closed():
                base = replace(led)
                assert seal_fds == [0]
                led.close()
                assert not fd0_is_open()  # the sealing descriptor 0 was closed
            assert os.pread(check, 12, end) == SEAL_MAGIC + base.to_bytes(8, "little")
        finally:
            os.close(check)
    finally:
        led.close()


def test_a_compaction_seals_through_descriptor_0_and_closes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def compact(led: Ledger) -> int:
        return led.start_generation(led.head, {}, [], at=5.0).base

    generation_seal_case(tmp_path, monkeypatch, compact)


def test_a_salvage_seals_through_descriptor_0_and_closes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def salvage(led: Ledger) -> int:
        seg = led._tip.path
        assert seg is not None
        data = bytearray(seg.read_bytes())
        data[led._tip.end - 30] ^= 0x5A  # inside the last frame: it is lost
        seg.write_bytes(bytes(data))
        rep = led.salvage()
        assert rep.salvaged and rep.written is not None
        return rep.written.base

    generation_seal_case(tmp_path, monkeypatch, salvage)


def test_a_handle_that_follows_a_roll_reads_through_descriptor_0_then_writes(
        tmp_path: Path) -> None:
    d = tmp_path / "log"
    a = Ledger.open(d, segment_bytes=4096)
    b = Ledger.open(d, segment_bytes=4096)
    try:
        a.append([ev(0)])
        i = append_until_roll(b, 1)
        b.append([ev(i)])
        with stdin_closed():
            assert a.head == i + 1  # a follows b into the new segment
            for n in (i + 1, i + 2):  # then looks past its frames through one read-only fd
                b.append([ev(n)])
                assert a.head == n + 1
                assert (a._tip.fd, a._tip.fd_writable) == (0, False)
            a.append([ev(i + 3)])
            # the write opened a descriptor of its own and closed the read-only 0
            assert a._tip.fd_writable and a._tip.fd > 0 and not fd0_is_open()
    finally:
        a.close()
        b.close()
    with Ledger.open(d, readonly=True) as ro:
        assert [e.data["i"] for e in ro.read()] == list(range(i + 4))
