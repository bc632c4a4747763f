"""Appending to a log whose active segment ends in a torn frame.

A writer that died mid-append leaves part of a frame after the last whole one. The
window of recent batch ids is read back from the frames before the end the writer
sees (the tip's), not from the end of the file's bytes, where the footer walk would
meet the torn part and find nothing: a batch re-sent after the crash is a duplicate.
The next append moves the torn part aside and cuts it off, once: the appends after it
never cut the segment again. (Mutation testing found both unpinned:
docs/reliability.md.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eventstore import Event, Ledger, _osio
from eventstore.segments import list_segments, segment_content


def tear(d: Path) -> None:
    """The start of a frame that was never finished, after the log's last frame."""
    path = list_segments(d)[-1][1]
    end = len(segment_content(path))
    with open(path, "r+b") as f:
        f.seek(end)
        f.write(b"\x01" * 40)


def test_a_batch_resent_after_a_torn_append_is_a_duplicate(tmp_path: Path) -> None:
    d = tmp_path / "log"
    with Ledger.open(d) as led:
        first = led.append([Event("a.a", None, {"i": 1})], batch_id="b1")
        led.append([Event("a.a", None, {"i": 2})], batch_id="b2")
        head = led.head
    tear(d)
    with Ledger.open(d) as led:
        again = led.append([Event("a.a", None, {"i": 1})], batch_id="b1")
        assert again.duplicate and (again.first_seq, again.last_seq) == (
            first.first_seq, first.last_seq)
        assert led.head == head
        assert [e.data["i"] for e in led.read()] == [1, 2]


def test_a_torn_tail_is_cut_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "log"
    with Ledger.open(d) as led:
        led.append([Event("a.a", None, {"i": 1})])
    tear(d)
    cuts: list[int] = []
    real = _osio.ftruncate

    def counting(fd: int, length: int) -> None:
        cuts.append(length)
        real(fd, length)

    monkeypatch.setattr(_osio, "ftruncate", counting)
    with Ledger.open(d) as led:
        led.append([Event("a.a", None, {"i": 2})])
        assert len(cuts) == 1 and list((d / "quarantine").iterdir())
        for i in range(3, 6):
            led.append([Event("a.a", None, {"i": i})])
        assert len(cuts) == 1
        assert [e.data["i"] for e in led.read()] == [1, 2, 3, 4, 5]
