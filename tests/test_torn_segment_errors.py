"""A writer that finds a torn new segment (a power cut while it was being created) moves
it to quarantine/ before its next append (``SegmentWriter.set_aside_torn_segment``).
Each I/O failure on that way is one ``LedgerIOError`` that names the file and gives the
system's words, and leaves the log as it was: the next append, once the fault is gone,
sets the segment aside and goes on. (Mutation testing found no test of these errors.)
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

import eventstore.segments as segments_mod
import eventstore.writer as writer_mod
from eventstore import Event, Ledger, LedgerIOError
from eventstore.frame import SEGMENT_HEADER_SIZE


def ev(i: int) -> Event:
    return Event("torn.test", None, {"i": i})


def torn_log(tmp_path: Path) -> tuple[Path, Path, int]:
    """A log of two events and, after it, a torn new segment (a zero header, no frame)."""
    log = tmp_path / "log"
    with Ledger.open(log) as led:
        head = led.append([ev(0), ev(1)]).last_seq
    torn = log / f"{head + 1:020d}.seg"
    torn.write_bytes(bytes(SEGMENT_HEADER_SIZE))
    return log, torn, head


def files(log: Path) -> dict[str, bytes]:
    return {str(p.relative_to(log)): p.read_bytes() for p in sorted(log.rglob("*"))
            if p.is_file() and p.name != "LOCK"}


def recovers(log: Path, torn: Path, head: int) -> None:
    """With the fault gone, the next append sets the torn segment aside and goes on."""
    with Ledger.open(log) as led:
        assert led.append([ev(2)]).first_seq == head + 1
        assert [e.data["i"] for e in led.read()] == [0, 1, 2]
        assert led.verify().ok
    assert (log / "quarantine" / f"{torn.name}.header.torn").read_bytes() == bytes(
        SEGMENT_HEADER_SIZE)


def fail_on(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, target: Path,
            error: OSError, arg: int = 0) -> list[int]:
    """Make ``module.name`` raise ``error`` when its argument ``arg`` is (or is the
    descriptor of) ``target``; the list counts the failures."""
    real = getattr(module, name)
    failed: list[int] = []

    def patched(*args: Any, **kwargs: Any) -> Any:
        a = args[arg]
        if isinstance(a, int):
            try:
                a = os.readlink(f"/proc/self/fd/{a}")
            except OSError:
                a = ""
        if Path(a) == target:
            failed.append(1)
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, patched)
    return failed


# the call that fails (module, name, which argument is the torn segment), the error,
# and the words the writer says: "{torn}" is the segment's path, "{name}" its name
FAULTS = {
    "open": (lambda: os, "open", 0, PermissionError(errno.EACCES, "Permission denied"),
             "cannot open {torn}: Permission denied"),
    "read": (lambda: writer_mod, "pread_all", 0, OSError(errno.EIO, "Input/output error"),
             "cannot read {torn}: Input/output error"),
    # a zero header makes the writer read the whole file (a frame after it would make
    # the segment real): that read's failure names the segment too
    "read-whole": (lambda: segments_mod, "pread_all", 0,
                   OSError(errno.EIO, "Input/output error"),
                   "cannot read {torn}: Input/output error"),
    "move": (lambda: writer_mod, "quarantine_file", 1,
             OSError(errno.EROFS, "Read-only file system"),
             "cannot move the torn segment {name} to quarantine/: Read-only file system"),
    "move-no-errno": (lambda: writer_mod, "quarantine_file", 1,
                      OSError("no room in quarantine/"),
                      "cannot move the torn segment {name} to quarantine/: no room in quarantine/"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_torn_segment_that_cannot_be_set_aside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 fault: str) -> None:
    module, name, arg, error, words = FAULTS[fault]
    log, torn, head = torn_log(tmp_path)
    before = files(log)
    with Ledger.open(log) as led:
        assert led.head == head  # found torn and passed over while opening
        failed = fail_on(monkeypatch, module(), name, torn, error, arg=arg)
        with pytest.raises(LedgerIOError) as info:
            led.append([ev(2)])
        monkeypatch.undo()
    assert failed and str(info.value) == words.format(torn=torn, name=torn.name)
    assert files(log) == before
    recovers(log, torn, head)


# -- last_segment_is_torn: what readers ask of the segment after the one they read ------


def test_last_segment_is_torn_answers_for_each_kind_of_file(tmp_path: Path) -> None:
    from eventstore.frame import encode_segment_header
    from eventstore.segments import last_segment_is_torn

    seg = tmp_path / "x.seg"
    assert last_segment_is_torn(seg)  # gone (moved to quarantine/ meanwhile): torn
    seg.write_bytes(b"")
    assert last_segment_is_torn(seg)
    seg.write_bytes(bytes(SEGMENT_HEADER_SIZE))
    assert last_segment_is_torn(seg)
    seg.write_bytes(encode_segment_header(1, bytes(32), 4096))  # a whole header: not torn
    assert not last_segment_is_torn(seg)
    seg.write_bytes(encode_segment_header(1, bytes(32), 4096)[:30])
    assert last_segment_is_torn(seg)


def test_last_segment_is_torn_names_a_file_it_cannot_open_or_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seg = tmp_path / "x.seg"
    seg.write_bytes(bytes(SEGMENT_HEADER_SIZE))
    failed = fail_on(monkeypatch, os, "open", seg,
                     PermissionError(errno.EACCES, "Permission denied"))
    with pytest.raises(LedgerIOError) as info:
        segments_mod.last_segment_is_torn(seg)
    assert failed and str(info.value) == f"cannot open {seg}: Permission denied"
    monkeypatch.undo()
    fail_on(monkeypatch, segments_mod, "pread_all", seg, OSError(errno.EIO, "Input/output error"))
    with pytest.raises(LedgerIOError) as info:
        segments_mod.last_segment_is_torn(seg)
    assert str(info.value) == f"cannot read {seg}: Input/output error"
    monkeypatch.undo()
    # a zero header makes it read the whole file for frame headers: that read fails too
    real = segments_mod.pread_all

    def whole_read_fails(fd: int, n: int, offset: int) -> bytes:
        if n > SEGMENT_HEADER_SIZE:
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, n, offset)

    seg.write_bytes(bytes(SEGMENT_HEADER_SIZE + 100))
    monkeypatch.setattr(segments_mod, "pread_all", whole_read_fails)
    with pytest.raises(LedgerIOError) as info:
        segments_mod.last_segment_is_torn(seg)
    assert str(info.value) == f"cannot read {seg}: Input/output error"


# -- following another writer's roll: a next segment that does not continue the log ----


def full_segment_log(tmp_path: Path) -> tuple[Path, int, bytes]:
    """A log whose only segment is full (the next append would roll): its head and digest."""
    from eventstore.segments import segment_content

    log = tmp_path / "log"
    with Ledger.open(log, segment_bytes=4096) as led:
        while not list(log.glob("*.seg")) or len(segment_content(next(log.glob("*.seg")))) < 4096:
            led.append([Event("roll.test", None, {"pad": "x" * 300})])
        assert len(list(log.glob("*.seg"))) == 1
        return log, led.head, led.head_digest


@pytest.mark.parametrize("case", ["prev", "base"])
def test_a_next_segment_that_does_not_continue_the_log_fails_closed(
        tmp_path: Path, case: str) -> None:
    from eventstore import CorruptLogError
    from eventstore.frame import encode_segment_header
    from eventstore.segments import segment_name

    log, head, digest = full_segment_log(tmp_path)
    with Ledger.open(log, readonly=True) as reader:
        assert reader.head == head
        base = head + 1 if case == "prev" else head + 5
        prev = bytes(32) if case == "prev" else digest
        if case == "base":  # the roll's segment, still empty, then one past a gap
            (log / segment_name(head + 1)).write_bytes(
                encode_segment_header(head + 1, digest, 4096))
        nxt = log / segment_name(base)
        nxt.write_bytes(encode_segment_header(base, prev, 4096))
        with pytest.raises(CorruptLogError) as info:
            reader.head  # noqa: B018  (a look at the head follows the roll)
        e = info.value
        why = ("segment does not chain to the one before it" if case == "prev"
               else f"segment starts at seq {base}, expected {head + 1}")
        assert (e.segment, e.offset, e.reason) == (nxt, 0, why)
