"""The batch-id window of a log whose active segment ends in a torn frame.

A writer that died mid-append leaves part of a frame after the last whole one. The
window of recent batch ids is read back from the frames before the end the writer
sees (the tip's), not from the end of the file's bytes, where the footer walk would
meet the torn part and find nothing: a batch re-sent after the crash is a duplicate.
(Mutation testing found this unpinned: docs/reliability.md.)
"""

from __future__ import annotations

from pathlib import Path

from eventstore import Event, Ledger
from eventstore.segments import list_segments, segment_content


def test_a_batch_resent_after_a_torn_append_is_a_duplicate(tmp_path: Path) -> None:
    d = tmp_path / "log"
    with Ledger.open(d) as led:
        first = led.append([Event("a.a", None, {"i": 1})], batch_id="b1")
        led.append([Event("a.a", None, {"i": 2})], batch_id="b2")
        head = led.head
    path = list_segments(d)[-1][1]
    end = len(segment_content(path))
    with open(path, "r+b") as f:  # the start of a frame that was never finished
        f.seek(end)
        f.write(b"\x01" * 40)
    with Ledger.open(d) as led:
        again = led.append([Event("a.a", None, {"i": 1})], batch_id="b1")
        assert again.duplicate and (again.first_seq, again.last_seq) == (
            first.first_seq, first.last_seq)
        assert led.head == head
        assert [e.data["i"] for e in led.read()] == [1, 2]
