"""The read loop's ways through a batch: a few events of a big batch decoded alone
(``decode_rows_at`` and the payload's head, no full decode), everything else decoded
whole, and raw batches placed by segment and offset. Each window below is checked
event by event against what was written, and the way it took is pinned by counting
the decodes (mutation testing found the fast path's bounds held by no test: a wrong
bound there falls back to the full decode and still answers right, or answers wrong
only at the edges checked here; docs/reliability.md).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import cbor2
import pytest

from eventstore import Batch, CorruptLogError, Event, Ledger
from eventstore import reader as reader_mod
from eventstore.frame import encode_frame_parts, encode_payload, payload_prefix
from eventstore.segments import list_segments

SIZES = [100, 100, 9, 8, 100]  # batch sizes, in seq order
FIRSTS = [1, 101, 201, 210, 218]


def ev(i: int) -> Event:
    return Event("r.r", f"k{i}", {"i": i, "pad": "p" * 40})


@attrs.define
class Decodes:
    rows_at: list[tuple[int, int]] = attrs.field(factory=list)  # (lo, hi) per fast decode
    heads: int = 0
    big_loads: int = 0  # full decodes of a payload over 2 KiB


@pytest.fixture
def log(tmp_path: Path) -> Path:
    d = tmp_path / "log"
    now = [0.0]
    with Ledger.open(d, sync="none", clock=lambda: now[0]) as led:
        seq = 1
        for n in SIZES:
            now[0] = float(seq)  # each batch's time: its first seq
            led.append([ev(seq + i) for i in range(n)])
            seq += n
    return d


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Decodes]:
    seen = Decodes()
    real_rows, real_head, real_loads = (reader_mod.decode_rows_at, reader_mod.payload_head_fast,
                                        cbor2.loads)

    def rows_at(payload: Any, lo: int, hi: int) -> Any:
        seen.rows_at.append((lo, hi))
        return real_rows(payload, lo, hi)

    def head(payload: Any) -> Any:
        seen.heads += 1
        return real_head(payload)

    def loads(data: Any, *a: Any, **k: Any) -> Any:
        if len(data) > 2048:
            seen.big_loads += 1
        return real_loads(data, *a, **k)

    monkeypatch.setattr(reader_mod, "decode_rows_at", rows_at)
    monkeypatch.setattr(reader_mod, "payload_head_fast", head)
    monkeypatch.setattr(cbor2, "loads", loads)
    yield seen


def at_of(seq: int) -> float:
    return float(max(f for f in FIRSTS if f <= seq))


# (from, to) -> the fast decodes it makes, as (lo, hi) within each batch
WINDOWS = {
    (1, 1): [(0, 1)],
    (2, 3): [(1, 3)],
    (100, 100): [(99, 100)],
    (1, 25): [(0, 25)],  # 25 of 100: a quarter, still "a few"
    (1, 26): [],  # 26 of 100: decoded whole
    (99, 102): [(98, 100), (0, 2)],  # the end of one batch, the start of the next
    (150, 160): [(49, 60)],
    (201, 202): [(0, 2)],  # a batch of 9 is big enough
    (203, 203): [(2, 3)],
    (210, 211): [],  # a batch of 8 is not
    (300, 317): [(82, 100)],
    (317, 317): [(99, 100)],
}


@pytest.mark.parametrize(("lo", "hi"), list(WINDOWS))
def test_each_window_reads_its_events_and_decodes_only_what_it_needs(
        log: Path, decodes: Decodes, lo: int, hi: int) -> None:
    with Ledger.open(log, readonly=True) as led:
        got = [(e.seq, e.key, e.data["i"], e.at) for e in led.read(lo, hi)]
    assert got == [(s, f"k{s}", s, at_of(s)) for s in range(lo, hi + 1)]
    assert decodes.rows_at == WINDOWS[(lo, hi)]
    assert decodes.heads == len(WINDOWS[(lo, hi)])  # the head read from the bytes


def test_a_fast_window_never_decodes_its_big_batch_whole(log: Path, decodes: Decodes) -> None:
    with Ledger.open(log, readonly=True) as led:
        assert [e.seq for e in led.read(150, 151)] == [150, 151]
        assert decodes.big_loads == 0
        assert [e.seq for e in led.read(150, 200)] == list(range(150, 201))
        assert decodes.big_loads == 1  # 51 of 100: the whole batch


def test_a_frame_whose_count_is_not_its_events_is_refused(tmp_path: Path) -> None:
    """A chain-valid frame that says 3 events and holds 2: corrupt, where it starts."""
    d = tmp_path / "log"
    with Ledger.open(d, sync="none") as led:
        led.append([ev(1)])
        prev = led.head_digest
    (_b, seg), = list_segments(d)
    rows = cbor2.dumps(b"\0\0\0\0\0\0\0\0") + cbor2.dumps([["r.r", None, {}], ["r.r", None, {}]])
    frame, _ = encode_frame_parts(prev, 2, 3, (payload_prefix(2.0, None) + rows,))
    start = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(frame)
    with Ledger.open(d, readonly=True) as led, pytest.raises(CorruptLogError) as err:
        list(led.read(2, 4))
    assert (err.value.segment, err.value.offset, err.value.reason) == (
        seg, start, "event count does not match the header")


def with_frames(tmp_path: Path, payloads: list[tuple[int, bytes]], pad: int = 40,
                before: int = 1) -> tuple[Path, Path, list[int]]:
    """A log of ``before`` one-event batches, then frames made by hand (count, payload),
    chain-valid; the segment and where each hand-made frame starts."""
    d = tmp_path / "log"
    with Ledger.open(d, sync="none") as led:
        for i in range(before):
            led.append([Event("r.r", None, {"i": i, "pad": "p" * pad})])
        prev, seq = led.head_digest, led.head + 1
    (_b, seg), = list_segments(d)
    starts = []
    with open(seg, "ab") as f:
        for count, p in payloads:
            starts.append(f.tell())
            frame, prev = encode_frame_parts(prev, seq, count, (p,))
            f.write(frame)
            seq += count
    return d, seg, starts


ROWS20 = [["r.r", None, {"i": i}] for i in range(20)]


def test_a_big_batch_with_an_integer_time_is_read_as_floats(
        tmp_path: Path, decodes: Decodes) -> None:
    """``at`` as a CBOR integer (not the writers' float64): the batch is decoded whole,
    and each event's time is a float all the same."""
    p = encode_payload(5.0, None, ROWS20)
    p = b"\x84\x05" + p[10:]  # [5, None, offsets, rows]
    d, _seg, _ = with_frames(tmp_path, [(20, p)])
    with Ledger.open(d, readonly=True) as led:
        got = [(e.seq, e.data, e.at, type(e.at)) for e in led.read(3, 4)]
    assert got == [(3, {"i": 1}, 5.0, float), (4, {"i": 2}, 5.0, float)]
    assert decodes.rows_at == [(1, 3)] and decodes.heads == 0


def test_a_big_batch_whose_head_the_fast_parser_does_not_know(
        tmp_path: Path, decodes: Decodes) -> None:
    """A batch id in a 4-byte length head: the events a window wants decode alone, the
    head does not, so the batch is decoded whole."""
    p = encode_payload(5.0, "abc", ROWS20)
    assert p[10] == 0x63
    p = p[:10] + b"\x7a\x00\x00\x00\x03" + p[11:]
    d, _seg, _ = with_frames(tmp_path, [(20, p)])
    with Ledger.open(d, readonly=True) as led:
        got = [(e.seq, e.data, e.at) for e in led.read(3, 4)]
        assert [(b.batch_id, len(b.events)) for b in led.read_batches(2, 2)] == [("abc", 20)]
    assert got == [(3, {"i": 1}, 5.0), (4, {"i": 2}, 5.0)]
    assert decodes.rows_at == [(1, 3)] and decodes.heads == 1


def test_a_big_batch_written_before_offsets_is_decoded_whole(
        tmp_path: Path, decodes: Decodes) -> None:
    """A 3-element payload has no offsets table: nothing to decode alone, and no head
    to read for rows that did not decode."""
    p = b"\x83\xfb" + struct.pack(">d", 5.0) + b"\xf6" + cbor2.dumps(ROWS20)
    d, _seg, _ = with_frames(tmp_path, [(20, p)])
    with Ledger.open(d, readonly=True) as led:
        assert [(e.seq, e.data["i"]) for e in led.read(3, 4)] == [(3, 1), (4, 2)]
    assert decodes.rows_at == [(1, 3)] and decodes.heads == 0


def test_a_raw_batch_that_does_not_decode_is_placed_in_its_segment(tmp_path: Path) -> None:
    """Read through the index from the middle of a big segment: the offset is the
    frame's in the file, not in the bytes the read began at."""
    good = encode_payload(9.0, None, [["r.r", None, {}]])
    d, seg, starts = with_frames(tmp_path, [(1, b"\x01not a batch"), (1, good)], pad=1500,
                                 before=60)
    with Ledger.open(d, readonly=True) as led, pytest.raises(CorruptLogError) as err:
        list(led.read_raw_batches(61, 61))
    assert (err.value.segment, err.value.offset) == (seg, starts[0])
    assert err.value.reason.startswith("payload does not decode")


# --- payloads that chain but are not batches ---------------------------------------------

OFFS1 = cbor2.dumps(b"\0\0\0\0")
ROW = ["r.r", None, {}]
BAD_PAYLOADS = {
    "3 elements, events no list": (
        cbor2.dumps([1.0, None, 5]), "payload is not [at, bid, events]"),
    "4 elements, events no list": (
        cbor2.dumps([1.0, None, b"\0\0\0\0", 5]),
        "payload is not [at, batch_id, offsets, events]"),
    "offsets of another length": (
        cbor2.dumps([1.0, None, b"\0" * 8, [ROW]]),
        "payload is not [at, batch_id, offsets, events]"),
    "5 elements": (
        cbor2.dumps([1.0, None, b"\0\0\0\0", [ROW], 0]),
        "payload is not [at, batch_id, offsets, events]"),
}


@pytest.mark.parametrize("case", list(BAD_PAYLOADS))
def test_a_payload_of_another_shape_is_refused_in_words(tmp_path: Path, case: str) -> None:
    """Read through the index from inside a big segment (the frame's offset is the
    file's, not the read's): the refusal's segment, offset and words."""
    p, why = BAD_PAYLOADS[case]
    d, seg, starts = with_frames(tmp_path, [(1, p), (1, encode_payload(9.0, None, [ROW]))],
                                 pad=1500, before=60)
    with Ledger.open(d, readonly=True) as led, pytest.raises(CorruptLogError) as err:
        list(led.read(61, 61))
    assert (err.value.segment, err.value.offset, err.value.reason) == (
        seg, starts[0], f"payload does not decode: {why}")


def test_a_payload_that_is_no_cbor_is_placed_in_its_segment(tmp_path: Path) -> None:
    d, seg, starts = with_frames(tmp_path, [(1, b"\xff\xff"), (1, encode_payload(9.0, None,
                                                                              [ROW]))],
                                 pad=1500, before=60)
    with Ledger.open(d, readonly=True) as led, pytest.raises(CorruptLogError) as err:
        list(led.read(61, 61))
    assert (err.value.segment, err.value.offset) == (seg, starts[0])
    assert err.value.reason.startswith("payload does not decode: ")


def test_a_batch_whose_rows_are_not_events_is_refused_in_words(tmp_path: Path) -> None:
    """Read as batches: the row's own refusal, at the frame's offset in the file."""
    rows = [["r.r", None, {}], [1, 2]]
    p = cbor2.dumps([1.0, None, b"\0" * 8, rows])
    d, seg, starts = with_frames(tmp_path, [(2, p), (1, encode_payload(9.0, None, [ROW]))],
                                 pad=1500, before=60)
    with pytest.raises(ValueError) as want:
        Batch.of_rows(61, 1.0, None, rows)
    with Ledger.open(d, readonly=True) as led, pytest.raises(CorruptLogError) as err:
        list(led.read_batches(61, 61))
    assert (err.value.segment, err.value.offset, err.value.reason) == (
        seg, starts[0], str(want.value))


def test_an_event_row_of_another_shape_is_refused_in_words(tmp_path: Path) -> None:
    p = cbor2.dumps([1.0, None, b"\0\0\0\0", [[1, 2]]])
    d, seg, starts = with_frames(tmp_path, [(1, p), (1, encode_payload(9.0, None, [ROW]))],
                                 pad=1500, before=60)
    with Ledger.open(d, readonly=True) as led, pytest.raises(CorruptLogError) as err:
        list(led.read(61, 61))
    assert (err.value.segment, err.value.offset, err.value.reason) == (
        seg, starts[0], "event is not [kind, key, data]")
