"""What ``verify`` reports, word for word: the problems it names, where, and its progress.

``ctxledger verify`` prints these reasons to people deciding whether to salvage, and
scripts read them from ``--json``: each is pinned here. (Mutation testing found them
unpinned: docs/reliability.md.)
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from eventstore import Event, Ledger, LedgerClosedError, LedgerIOError
from eventstore import verify as verify_mod
from eventstore.frame import SEGMENT_HEADER_SIZE
from eventstore.segments import list_segments, segment_name

TORN_TAIL = "; ignored, the next append moves it to quarantine/"


def log_of_segments(d: Path, at_least: int) -> Ledger:
    led = Ledger.open(d, segment_bytes=4096)
    while len(list_segments(d)) < at_least:
        led.append([Event("v.v", None, {"pad": "x" * 300})])
    return led


def test_progress_hears_of_each_segment_after_the_first(tmp_path: Path) -> None:
    with log_of_segments(tmp_path / "log", 4) as led:
        heard: list[int] = []
        report = led.verify(heard.append)
        assert report.ok and report.segments == len(list_segments(tmp_path / "log"))
        assert heard == [1] * (report.segments - 1)


def test_a_closed_ledger_refuses_to_verify(tmp_path: Path) -> None:
    led = Ledger.open(tmp_path / "log")
    led.close()
    with pytest.raises(LedgerClosedError) as err:
        led.verify()
    assert str(err.value) == "ledger is closed"


@pytest.mark.parametrize(("content", "why"), [
    (b"\x01" * 10, "segment header is 10 bytes"),
    (b"\x01" * (SEGMENT_HEADER_SIZE - 1), f"segment header is {SEGMENT_HEADER_SIZE - 1} bytes"),
    (bytes(SEGMENT_HEADER_SIZE), "segment header is all zeros and no frame follows"),
    (bytes(4096), "segment header is all zeros and no frame follows"),
], ids=["short", "one-short", "zeros", "preallocated-zeros"])
def test_a_torn_new_segment_is_named_with_its_reason(
        tmp_path: Path, content: bytes, why: str) -> None:
    d = tmp_path / "log"
    with Ledger.open(d) as led:
        led.append([Event("v.v", None, {"i": 1})])
        head = led.head
    name = segment_name(head + 1)
    (d / name).write_bytes(content)
    with Ledger.open(d, readonly=True) as led:
        report = led.verify()
    assert not report.ok and report.head_seq == head and report.events == head
    assert [(p.segment, p.offset, p.error) for p in report.problems] == [
        (name, 0, f"torn new segment ({why}){TORN_TAIL}")]


def test_a_segment_that_cannot_be_read_is_named_and_the_rest_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "log"
    with log_of_segments(d, 3):
        pass
    segs = [p for _, p in list_segments(d)]
    real = verify_mod.read_bytes

    def failing(path: Path, offset: int = 0) -> bytes:
        if path == segs[1]:
            raise LedgerIOError(f"cannot read {path}: {errno.errorcode[errno.EIO]}")
        return real(path, offset)

    monkeypatch.setattr(verify_mod, "read_bytes", failing)
    report = verify_mod.verify_log(d)
    assert not report.ok and report.segments == len(segs)
    assert [(p.segment, p.offset, p.error) for p in report.problems[:1]] == [
        (segs[1].name, 0, f"cannot read {segs[1]}: EIO")]
    # the segment after it is read, and found not to start where the chain left off
    assert [p.segment for p in report.problems[1:]] == [segs[2].name]
