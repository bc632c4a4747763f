"""A log whose batches were written before payloads carried per-event offsets.

Such a payload is plain CBOR ``[at, batch_id, rows]``: a point read cannot jump to one
event in it, so ``read_raw`` reads the batch in full (verified) and gives the event's
CBOR. Logs mixing both shapes read back alike through every read. (Mutation testing
found the fallback unpinned: docs/reliability.md.)
"""

from __future__ import annotations

from pathlib import Path

import cbor2
from segments_by_hand import segment_of_frames

from eventstore import Event, Ledger
from eventstore.event import encode_batch
from eventstore.frame import payload_prefix

OLD = [["o.o", None, {"i": 3}], ["o.o", "k", {"i": 4}]]


def old_and_new_log(tmp_path: Path) -> Path:
    """seqs 1-2 a batch of today's shape, 3-4 one of the old, 5 today's again."""
    new1 = encode_batch([Event("n.n", None, {"i": 1}), Event("n.n", None, {"i": 2})], "b1")[0]
    new2 = encode_batch([Event("n.n", "z", {"i": 5})], None)[0]
    payloads = [(2, payload_prefix(1.5, "b1") + new1), (2, cbor2.dumps([7.25, "old", OLD])),
                (1, payload_prefix(9.5, None) + new2)]
    d = tmp_path / "log"
    d.mkdir()
    (d / f"{1:020d}.seg").write_bytes(segment_of_frames(payloads)[0])
    return d


def test_a_point_read_of_an_old_batch_gives_each_events_cbor(tmp_path: Path) -> None:
    d = old_and_new_log(tmp_path)
    with Ledger.open(d, readonly=True) as led:
        assert led.head == 5
        for seq, row in ((3, OLD[0]), (4, OLD[1])):
            got = led.read_raw(seq)
            assert got is not None
            assert (got.seq, got.at, cbor2.loads(got.row)) == (seq, 7.25, row)
        # today's shape beside it, and what no seq names
        one = led.read_raw(1)
        assert one is not None and (one.seq, one.at) == (1, 1.5)
        five = led.read_raw(5)
        assert five is not None and cbor2.loads(five.row) == ["n.n", "z", {"i": 5}]
        assert led.read_raw(6) is None and led.read_raw(0) is None
        assert [(e.seq, e.kind, e.key, e.data["i"]) for e in led.read()] == [
            (1, "n.n", None, 1), (2, "n.n", None, 2), (3, "o.o", None, 3), (4, "o.o", "k", 4),
            (5, "n.n", "z", 5)]
        assert led.verify().ok


def test_a_writer_appends_after_old_batches(tmp_path: Path) -> None:
    d = old_and_new_log(tmp_path)
    with Ledger.open(d) as led:
        assert led.append([Event("n.n", None, {"i": 6})], batch_id="old").duplicate
        r = led.append([Event("n.n", None, {"i": 6})])
        assert r.first_seq == 6
        got = led.read_raw(4)
        assert got is not None and cbor2.loads(got.row) == OLD[1]
        assert led.verify().ok
