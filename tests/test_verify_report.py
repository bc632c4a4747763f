"""What ``verify`` reports, word for word: the problems it names, where, and its progress.

``ctxledger verify`` prints these reasons to people deciding whether to salvage, and
scripts read them from ``--json``: each is pinned here. (Mutation testing found them
unpinned: docs/reliability.md.)
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import blake3
import cbor2
import pytest
from faults import failing_for
from segments_by_hand import segment_of_frames

from eventstore import (
    CorruptLogError,
    Event,
    Ledger,
    LedgerClosedError,
    LedgerIOError,
    UnsupportedFormatError,
)
from eventstore import verify as verify_mod
from eventstore.frame import (
    GENERATION_START,
    GENERATION_VERSION,
    GENESIS_DIGEST,
    SEGMENT_HEADER,
    SEGMENT_HEADER_SIZE,
    decode_payload,
    walk_frames,
)
from eventstore.generation import COMPACTED, anchors_name
from eventstore.segments import list_segments, read_header, segment_content, segment_name

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
    monkeypatch.setattr(verify_mod, "read_bytes", failing_for(
        verify_mod.read_bytes, segs[1],
        LedgerIOError(f"cannot read {segs[1]}: {errno.errorcode[errno.EIO]}")))
    report = verify_mod.verify_log(d)
    assert not report.ok and report.segments == len(segs)
    assert [(p.segment, p.offset, p.error) for p in report.problems[:1]] == [
        (segs[1].name, 0, f"cannot read {segs[1]}: EIO")]
    # the segment after it is read, and found not to start where the chain left off
    assert [p.segment for p in report.problems[1:]] == [segs[2].name]


def _rewrite_header(path: Path, **change: Any) -> None:
    """The segment's header with fields changed and its checksum made anew."""
    data = bytearray(path.read_bytes())
    magic, version, flags, roll_kib, base, prev = SEGMENT_HEADER.unpack_from(data, 0)
    fields = {"version": version, "flags": flags, "roll_kib": roll_kib, "base": base,
              "prev": prev, **change}
    head = SEGMENT_HEADER.pack(magic, fields["version"], fields["flags"], fields["roll_kib"],
                               fields["base"], fields["prev"])
    data[:SEGMENT_HEADER_SIZE] = head + blake3.blake3(head).digest()[:8]
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["flipped-byte", "newer-version"])
def test_a_bad_header_inside_the_log_is_named_and_the_rest_checked(
        tmp_path: Path, damage: str) -> None:
    d = tmp_path / "log"
    with log_of_segments(d, 4):
        pass
    segs = [p for _, p in list_segments(d)]
    if damage == "flipped-byte":
        data = bytearray(segs[1].read_bytes())
        data[20] ^= 0x40  # inside the base seq: the header's checksum fails
        segs[1].write_bytes(bytes(data))
    else:
        _rewrite_header(segs[1], version=99)
    try:
        read_header(segs[1])
    except (CorruptLogError, UnsupportedFormatError) as e:
        # the reason alone where the error has one, else its whole message
        want = e.reason if isinstance(e, CorruptLogError) else str(e)
    report = verify_mod.verify_log(d)
    assert not report.ok
    assert (report.problems[0].segment, report.problems[0].offset, report.problems[0].error) \
        == (segs[1].name, 0, want)
    # the segments after it are still checked: the next no longer chains on
    assert [p.segment for p in report.problems[1:]] == [segs[2].name]


def test_a_generation_whose_anchors_do_not_match_is_named(tmp_path: Path) -> None:
    d = tmp_path / "log"
    with Ledger.open(d) as led:
        for i in range(3):
            led.append([Event("v.v", None, {"i": i})])
        written = led.start_generation(3, {}, [], at=5.0)
    (d / anchors_name(written.base)).write_bytes(b"not the anchors")
    report = verify_mod.verify_log(d)
    seg = list_segments(d)[0][1]
    assert [(p.segment, p.offset, p.error) for p in report.problems] == [
        (seg.name, SEGMENT_HEADER_SIZE,
         f"{anchors_name(written.base)} is missing or does not match {COMPACTED}")]


@pytest.mark.parametrize("case", ["chain", "generation-start", "seq"])
def test_a_header_that_does_not_continue_the_log_is_named(tmp_path: Path, case: str) -> None:
    d = tmp_path / "log"
    with log_of_segments(d, 3):
        pass
    (base, path) = list_segments(d)[1]
    change = {"chain": {"prev": bytes(32)},
              "generation-start": {"version": GENERATION_VERSION, "flags": GENERATION_START},
              "seq": {"base": base + 1}}[case]
    _rewrite_header(path, **change)
    if case == "seq":
        path = path.rename(d / segment_name(base + 1))
    want = {"chain": "segment does not chain to the one before it",
            "generation-start": "a generation start inside the generation",
            "seq": f"segment starts at seq {base + 1}, expected {base}"}[case]
    report = verify_mod.verify_log(d)
    assert (report.problems[0].segment, report.problems[0].offset, report.problems[0].error) \
        == (path.name, 0, want)


@pytest.mark.parametrize("case", ["torn", "media"])
def test_a_torn_final_frame_and_damage_before_valid_frames_are_told_apart(
        tmp_path: Path, case: str) -> None:
    """The walk of a segment stops at its first bad frame: the cut a crash leaves at
    the end, or damage with whole frames after it."""
    d = tmp_path / "log"
    with Ledger.open(d) as led:
        for i in range(4):
            led.append([Event("v.v", None, {"i": i, "pad": "y" * 30})])
    path = list_segments(d)[0][1]
    data = bytearray(path.read_bytes())
    offs = [f[0] for f in walk_frames(bytes(data), SEGMENT_HEADER_SIZE, GENESIS_DIGEST, 1)]
    end = len(segment_content(path))
    if case == "media":
        data[offs[1] + 40] ^= 0x20  # inside frame 2: frames 3 and 4 still check out
    else:
        data[end : end + 40] = b"\x01" * 40  # the start of a frame never finished
    path.write_bytes(bytes(data))
    (problem,) = verify_mod.verify_log(d).problems
    if case == "media":
        assert (problem.segment, problem.offset, problem.error) == (
            path.name, offs[1], "bad frame header; valid data follows (media corruption)")
    else:
        assert (problem.segment, problem.offset) == (path.name, end)
        assert problem.error.startswith("torn final frame (")
        assert problem.error.endswith("); ignored, the next append truncates it")


def test_opening_a_store_with_progress_hears_of_every_event_folded(tmp_path: Path) -> None:
    """``ContextStore.open(progress=...)`` loads the views at once and reports the
    events each fold goes through (no checkpoint yet: the whole log)."""
    from projections import ContextStore

    with ContextStore.open(tmp_path) as store:
        for i in range(5):
            store.put({"target": "t", "summary": f"entry {i}"})
        head = store.ledger.head
    for ck in tmp_path.rglob("*.ckpt*"):  # no checkpoint: every view folds the whole log
        ck.unlink()
    heard: list[int] = []
    with ContextStore.open(tmp_path, readonly=True, progress=heard.append) as store:
        assert heard and all(n > 0 for n in heard)
        views = len(store.runner.projections)
        assert sum(heard) == head * views


ROW = ["v.v", None, {"i": 1}]
BAD_ROWS = [
    # (rows in the payload, events the frame header says, the reason verify gives)
    ([ROW], 2, "frame header says 2 events, payload holds 1"),
    ([["v.v", None]], 1, "event is not [kind, key, data]"),   # a kind, but two items
    (["abc"], 1, "event is not [kind, key, data]"),           # three items, not a list
    ([[5, None, {}]], 1, "event is not [kind, key, data]"),
    ([["v.v", 5, {}]], 1, "event key or data has the wrong type"),
    ([["v.v", None, []]], 1, "event key or data has the wrong type"),
]


def _log_of_payloads(d: Path, payloads: list[tuple[int, bytes]]) -> list[int]:
    """A log of one segment holding frames (count, payload) from seq 1, their checksums
    and chain right; returns each frame's offset."""
    data, offs = segment_of_frames(payloads)
    d.mkdir()
    (d / segment_name(1)).write_bytes(data)
    return offs


@pytest.mark.parametrize(("rows", "count", "why"), BAD_ROWS)
def test_a_payload_whose_events_are_not_events_is_named(
        tmp_path: Path, rows: list[Any], count: int, why: str) -> None:
    d = tmp_path / "log"
    good = cbor2.dumps([1.5, None, [ROW]])
    offs = _log_of_payloads(d, [(1, good), (count, cbor2.dumps([2.5, None, rows])), (1, good)])
    report = verify_mod.verify_log(d)
    assert [(p.segment, p.offset, p.error) for p in report.problems] == [
        (segment_name(1), offs[1], why)]
    assert report.frames == 3 and report.events == 2 + count  # the walk goes on past it


def test_a_payload_that_does_not_decode_is_named_with_the_decoders_reason(
        tmp_path: Path) -> None:
    d = tmp_path / "log"
    bad = cbor2.dumps("no batch")
    offs = _log_of_payloads(d, [(1, cbor2.dumps([1.5, None, [ROW]])), (1, bad)])
    with pytest.raises(ValueError) as err:
        decode_payload(bad)
    report = verify_mod.verify_log(d)
    assert [(p.offset, p.error) for p in report.problems] == [(offs[1], str(err.value))]
