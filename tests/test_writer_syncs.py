"""What each sync mode costs in system calls, and the words of each write or sync
failure a writer reports.

``sync="always"`` syncs each frame once and nothing again at a roll or on close;
``"batch"`` syncs when ``sync_interval`` has passed, before leaving a segment and on
close; ``"none"`` syncs nothing until :meth:`Ledger.flush`, which syncs every
segment it left unsynced. Counting the calls pins this where an answer cannot:
an extra sync is only slower, a missing one only loses data at a power cut
(mutation testing found both unpinned: docs/reliability.md).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults import oserror

from eventstore import Event, Ledger, LedgerIOError, _osio
from eventstore.segments import TMP_RE, create_segment, segment_name, sweep_tmp

EIO = os.strerror(errno.EIO)


def ev(i: int) -> Event:
    return Event("a.a", None, {"i": i, "pad": "x" * 300})


@pytest.fixture
def datasyncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The descriptors ``_osio.fdatasync`` is called with, in order."""
    calls: list[int] = []
    real = _osio.fdatasync

    def counted(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(_osio, "fdatasync", counted)
    yield calls


def segments(d: Path) -> int:
    return len(list(d.glob("*.seg")))


def test_always_syncs_each_frame_once_and_nothing_more(
    tmp_path: Path, datasyncs: list[int]
) -> None:
    d = tmp_path / "log"
    with Ledger.open(d, sync="always", segment_bytes=4096) as led:
        for i in range(20):
            led.append([ev(i)])
        assert segments(d) > 1  # it rolled: the frames were synced already
        assert len(datasyncs) == 20
    assert len(datasyncs) == 20  # nor on close


def test_batch_syncs_when_the_interval_has_passed(
    tmp_path: Path, datasyncs: list[int]
) -> None:
    with Ledger.open(tmp_path / "a", sync="batch", sync_interval=0.0) as led:
        for i in range(3):
            led.append([ev(i)])
        assert len(datasyncs) == 3  # an interval of 0 has always passed
    assert len(datasyncs) == 3
    datasyncs.clear()
    with Ledger.open(tmp_path / "b", sync="batch", sync_interval=3600.0) as led:
        for i in range(3):
            led.append([ev(i)])
        assert datasyncs == []
    assert len(datasyncs) == 1  # on close, once


def test_batch_syncs_a_segment_before_leaving_it_and_only_then(
    tmp_path: Path, datasyncs: list[int]
) -> None:
    d = tmp_path / "log"
    with Ledger.open(d, sync="batch", sync_interval=3600.0, segment_bytes=4096) as led:
        while segments(d) < 3:
            led.append([ev(len(datasyncs))])
        assert len(datasyncs) == 2  # one per segment left
        led.flush()
        assert len(datasyncs) == 3  # the active one
        led.flush()
        assert len(datasyncs) == 3  # nothing unsynced: nothing to do
    assert len(datasyncs) == 3


def test_none_syncs_only_on_flush_every_segment_it_left(
    tmp_path: Path, datasyncs: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "log"
    fsyncs: list[int] = []
    real = _osio.fsync
    def counted(fd: int) -> None:
        fsyncs.append(fd)
        real(fd)

    with Ledger.open(d, sync="none", segment_bytes=4096) as led:
        monkeypatch.setattr(_osio, "fsync", counted)
        while segments(d) < 3:
            led.append([ev(0)])
        assert datasyncs == [] and fsyncs == []  # new segments and the directory too
        led.flush()
        assert len(datasyncs) == 3  # two segments left behind, and the active one


def failed_second_append(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync: str,
                         call: str) -> tuple[str, Path]:
    """The words of a handle's second append when ``_osio.<call>`` fails with EIO."""
    d = tmp_path / "log"
    with Ledger.open(d, sync=sync) as led:  # type: ignore[arg-type]
        led.append([ev(0)])
        monkeypatch.setattr(_osio, call, oserror(errno.EIO))
        with pytest.raises(LedgerIOError) as info:
            led.append([ev(1)])
    return str(info.value), next(d.glob("*.seg"))


def test_a_failed_frame_write_says_where_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    words, seg = failed_second_append(tmp_path, monkeypatch, "batch", "pwrite")
    assert words == f"append failed writing {seg}: {EIO}"


def test_a_failed_frame_sync_says_the_append_is_not_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    words, seg = failed_second_append(tmp_path, monkeypatch, "always", "fdatasync")
    assert words == (f"append not durable: fsync of {seg} failed ({EIO}); "
                     "this handle refuses further appends until the log is reopened")


def test_a_failed_sync_before_leaving_a_segment_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "log"
    with Ledger.open(d, sync="batch", sync_interval=3600.0, segment_bytes=4096) as led:
        monkeypatch.setattr(_osio, "fdatasync", oserror(errno.EIO))
        first = d / segment_name(1)
        with pytest.raises(LedgerIOError) as info:
            for i in range(40):
                led.append([ev(i)])
        assert str(info.value) == (
            f"sync of {first} before leaving it failed ({EIO}); "
            "this handle refuses further appends until the log is reopened")


def test_a_segment_is_made_under_the_temp_name_the_sweep_knows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renames: list[tuple[str, str]] = []
    real = _osio.replace

    def spy(src: Any, dst: Any) -> None:
        renames.append((Path(src).name, Path(dst).name))
        real(src, dst)

    monkeypatch.setattr(_osio, "replace", spy)
    tmp_path.joinpath("log").mkdir()
    create_segment(tmp_path / "log", 7, bytes(32), 4096, False)
    assert renames == [(segment_name(7) + ".tmp", segment_name(7))]
    assert TMP_RE.fullmatch(renames[0][0])


def test_a_segment_that_exists_or_cannot_be_synced_is_not_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log"
    log.mkdir()
    final = create_segment(log, 7, bytes(32), 4096, False)
    with pytest.raises(LedgerIOError) as info:
        create_segment(log, 7, bytes(32), 4096, False)
    assert str(info.value) == f"cannot create segment {final}: segment already exists"
    monkeypatch.setattr(_osio, "fsync", oserror(errno.EIO))
    with pytest.raises(LedgerIOError) as info:
        create_segment(log, 8, bytes(32), 4096, True)
    assert str(info.value) == f"cannot create segment {log / segment_name(8)}: {EIO}"
    assert sorted(p.name for p in log.iterdir()) == [segment_name(7)]  # no temp file left


def test_the_sweep_removes_only_segment_temp_files_and_names_them(tmp_path: Path) -> None:
    stray, other = segment_name(5) + ".tmp", "notes.tmp"
    for name in (stray, other, segment_name(1)):
        (tmp_path / name).write_bytes(b"x")
    assert sweep_tmp(tmp_path) == [stray]
    assert sorted(p.name for p in tmp_path.iterdir()) == [segment_name(1), other]


@pytest.mark.parametrize("sync", ["always", "batch", "none"])
def test_a_handle_that_never_appended_syncs_nothing(
    tmp_path: Path, datasyncs: list[int], sync: Any
) -> None:
    """Looking, following another writer into a new segment, flushing and closing:
    nothing this handle wrote, so nothing to sync."""
    d = tmp_path / "log"
    with Ledger.open(d, segment_bytes=4096) as w:
        w.append([ev(0)])
    with Ledger.open(d, sync=sync, segment_bytes=4096) as a:
        assert a.head == 1
        with Ledger.open(d, sync="none", segment_bytes=4096) as b:
            while segments(d) < 2:
                b.append([ev(b.head)])
            datasyncs.clear()
            assert a.head == b.head  # a moved into the new segment
            a.flush()
            assert datasyncs == []
        datasyncs.clear()  # (b's close syncs what b wrote)
    assert datasyncs == []


def test_a_poisoned_handle_cuts_nothing_when_it_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Close trims the zeros a durable writer preallocated, unless the handle is
    poisoned: a cut is a write, and a poisoned handle writes nothing more (the next
    writer to open the log writes over them)."""
    d = tmp_path / "log"
    a = Ledger.open(d)
    try:
        a.append([ev(0)])
        a.append([ev(1)])  # from the second append on, zeros ahead of the frames
        (seg,) = d.glob("*.seg")
        size = seg.stat().st_size
        with monkeypatch.context() as m:
            m.setattr(_osio, "pwrite", oserror(errno.EIO))
            m.setattr(_osio, "ftruncate", oserror(errno.EIO))
            with pytest.raises(LedgerIOError):
                a.append([ev(2)])
        assert a._writer.poisoned and a._writer._preallocated
    finally:
        a.close()
    assert seg.stat().st_size == size
    with Ledger.open(d) as b:  # the next writer writes over the zeros
        b.append([ev(2)])
        b.append([ev(3)])
    with Ledger.open(d, readonly=True) as ro:
        assert [e.data["i"] for e in ro.read()] == [0, 1, 2, 3]


def test_a_poisoned_handle_syncs_nothing_when_it_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, datasyncs: list[int]
) -> None:
    """A handle that could not undo a failed write is poisoned: it trusts nothing it
    holds, so following another writer into the next segment it leaves its own without
    another sync (fsyncgate: a sync after a failure proves nothing)."""
    d = tmp_path / "log"
    with Ledger.open(d, sync="batch", sync_interval=3600.0, segment_bytes=4096) as a:
        a.append([ev(0)])  # left unsynced: the interval has not passed
        with monkeypatch.context() as m:
            m.setattr(_osio, "pwrite", oserror(errno.EIO))
            m.setattr(_osio, "ftruncate", oserror(errno.EIO))
            with pytest.raises(LedgerIOError):
                a.append([ev(1)])
        assert a._writer.poisoned
        with Ledger.open(d, sync="none", segment_bytes=4096) as b:
            while segments(d) < 2:
                b.append([ev(b.head + 1)])
            datasyncs.clear()
            assert a.head == b.head and a._tip.base > 1  # a moved into the new segment
        assert datasyncs == []
