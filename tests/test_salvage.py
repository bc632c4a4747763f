"""``salvage``: the explicit repair of mid-log corruption (docs/operations.md).

Every frame that checks out is kept, every seq that does not is reported
lost (exactly), damaged segments are copied to quarantine/ before anything
is removed, and the store verifies afterwards.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import blake3
import pytest
from click.testing import CliRunner
from test_compact import count_io  # noqa: F401  (the fixture)

from cli.main import ctxledger
from eventstore import Event, Ledger, LedgerClosedError, LedgerError, LedgerIOError
from eventstore.generation import SALVAGED
from projections import ContextStore


def make(d: Path, n: int = 30) -> list[Mapping[str, Any]]:
    with Ledger.open(d, segment_bytes=4096) as led:
        for i in range(n):
            if i % 5 == 4:
                led.append([Event("a.b", None, {"i": i, "pad": "x" * 150}),
                            Event("a.c", None, {"i": i, "second": True})], batch_id=f"b{i}")
            else:
                led.append([Event("a.b", f"k{i}", {"i": i, "pad": "x" * 150})])
        return [e.data for e in led.read()]


def files(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.blake2b(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def kept_data(led: Ledger) -> list[Mapping[str, Any]]:
    return [e.data for e in led.read() if e.kind != SALVAGED]


def lost_seqs(lost: list[list[int]]) -> set[int]:
    return {s for a, b in lost for s in range(a, b + 1)}


def test_salvage_of_a_healthy_log_changes_nothing(tmp_path: Path) -> None:
    make(tmp_path / "log")
    before = files(tmp_path)
    with Ledger.open(tmp_path / "log") as led:
        rep = led.salvage()
    assert not rep.salvaged and rep.scan.lost == [] and files(tmp_path) == before


def test_a_damaged_payload_loses_exactly_its_batch(tmp_path: Path) -> None:
    d = tmp_path / "log"
    original = make(d)
    segs = sorted(d.glob("*.seg"))
    damaged = segs[1]
    flip(damaged, 64 + 56 + 20)  # inside the first frame's payload of segment 2
    damaged_bytes = damaged.read_bytes()
    with Ledger.open(d) as led:
        assert not led.verify().ok
        first_seq = int(damaged.name[:20])
        rep = led.salvage()
        assert rep.salvaged and rep.scan.damaged == [damaged.name]
        assert lost_seqs(rep.scan.lost) == {first_seq}
        assert led.verify().ok
        assert kept_data(led) == [x for s, x in enumerate(original, 1) if s != first_seq]
        marker = next(led.read())
        assert marker.kind == SALVAGED and marker.data["lost"] == [[first_seq, first_seq]]
        assert led.base == len(original) + 1  # above every seq the old log had
        led.append([Event("x.y", None, {})])
        assert led.verify().ok
    q = d / "quarantine" / f"{damaged.name}.damaged"
    assert q.read_bytes() == damaged_bytes  # the damaged segment, byte for byte
    assert not damaged.exists()


@pytest.mark.parametrize("seed", range(12))
def test_any_flipped_byte_is_salvaged_with_an_exact_account(tmp_path: Path, seed: int) -> None:
    d = tmp_path / "log"
    original = make(d, n=20)
    rng = random.Random(seed)
    segs = sorted(d.glob("*.seg"))
    target = rng.choice(segs[:-1] if len(segs) > 1 else segs)
    flip(target, rng.randrange(0, target.stat().st_size))
    with Ledger.open(d) as led:
        rep = led.salvage()
        assert led.verify().ok
        lost = lost_seqs(rep.scan.lost)
        assert kept_data(led) == [x for s, x in enumerate(original, 1) if s not in lost]
        if rep.salvaged:
            assert rep.scan.damaged and (d / "quarantine").is_dir()


def test_a_damaged_frame_header_loses_the_next_frame_too(tmp_path: Path) -> None:
    d = tmp_path / "log"
    original = make(d)
    seg = sorted(d.glob("*.seg"))[1]
    base = int(seg.name[:20])
    flip(seg, 64 + 10)  # the first frame's header: its crc fails, its digest is unknown
    with Ledger.open(d) as led:
        rep = led.salvage()
        # the frame after cannot be checked (the digest before it is gone): lost as well
        lost = lost_seqs(rep.scan.lost)
        assert base in lost and min(lost) == base
        assert kept_data(led) == [x for s, x in enumerate(original, 1) if s not in lost]
        assert led.verify().ok


def test_a_failure_at_every_io_call_of_salvage_leaves_a_usable_log(
    tmp_path: Path, count_io: Callable[[int | None], list[str]]  # noqa: F811
) -> None:
    template = tmp_path / "t"
    original = make(template / "log")
    flip(sorted((template / "log").glob("*.seg"))[1], 64 + 56 + 20)
    probe = tmp_path / "probe"
    shutil.copytree(template, probe)
    with Ledger.open(probe / "log") as led:
        calls = count_io(None)
        want = led.salvage()
        total = list(calls)
    count_io(None)
    for n in range(1, len(total) + 1):
        root = tmp_path / f"r{n}"
        shutil.copytree(template, root)
        with Ledger.open(root / "log") as led:
            count_io(n)
            try:
                led.salvage()
            except LedgerIOError:
                pass
            count_io(None)
        with Ledger.open(root / "log") as led:
            if led.base == 1:  # the old (damaged) log is still the log: salvage again
                led.salvage()
            assert led.verify().ok, n
            lost = lost_seqs(want.scan.lost)
            assert kept_data(led) == [x for s, x in enumerate(original, 1) if s not in lost]


def test_salvage_command_then_the_store_opens(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path) as s:
        for i in range(40):
            s.put({"target": "t", "summary": f"entry {i}", "pad": "p" * 300})
    log = tmp_path / ".ctxledger" / "log"
    segs = sorted(log.glob("*.seg"))
    flip(segs[0], 64 + 56 + 30)
    run = CliRunner().invoke
    bad = run(ctxledger, ["verify", "--root", str(tmp_path)])
    assert bad.exit_code == 1 and "media corruption" in bad.stdout
    res = run(ctxledger, ["salvage", "--root", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["salvaged"] and doc["lost_events"] == 1 and doc["quarantined"]
    assert run(ctxledger, ["verify", "--root", str(tmp_path)]).exit_code == 0
    listed = run(ctxledger, ["store", "list", "--root", str(tmp_path), "--json"])
    assert listed.exit_code == 0 and len(json.loads(listed.stdout)["entries"]) == 39
    again = run(ctxledger, ["salvage", "--root", str(tmp_path)])
    assert again.exit_code == 0 and again.stdout.startswith("nothing to salvage")


def test_salvage_goes_above_an_empty_last_segment(tmp_path: Path) -> None:
    from eventstore.segments import create_segment

    d = tmp_path / "log"
    original = make(d)
    flip(sorted(d.glob("*.seg"))[1], 64 + 56 + 20)
    with Ledger.open(d) as led:
        head = len(original)
    create_segment(d, head + 1, bytes(32), 4096, True)  # no frame in it
    with Ledger.open(d) as led:
        rep = led.salvage()
        assert rep.salvaged and led.base == head + 2 and led.verify().ok
        lost = lost_seqs(rep.scan.lost)
        assert kept_data(led) == [x for s, x in enumerate(original, 1) if s not in lost]


def test_a_note_that_resolves_a_question_still_resolves_it_after_salvage(
        tmp_path: Path) -> None:
    """Salvage renumbers the frames it keeps: a note's ``resolves`` must follow them."""
    with ContextStore.open(tmp_path) as s:
        tid = s.tasks.create("t").id
        q = s.tasks.note(tid, "question", {"text": "which?"}).last_seq
        for i in range(10):
            s.put({"target": "t", "summary": f"entry {i}"})
        s.tasks.note(tid, "decision", {"text": "this", "resolves": q})
        assert s.tasks.record(tid).open_questions == ()  # type: ignore[union-attr]
    seg = sorted((tmp_path / ".ctxledger" / "log").glob("*.seg"))[0]
    flip(seg, seg.read_bytes().index(b"entry 5"))
    res = CliRunner().invoke(ctxledger, ["salvage", "--root", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["lost_events"] == 1
    with ContextStore.open(tmp_path) as s:
        rec = s.tasks.record(tid)
        assert rec is not None and rec.open_questions == ()
        assert rec.questions[0]["resolved_by"] == rec.decisions[0]["seq"]


def test_a_damaged_generation_start_header_loses_no_seq_before_the_cut(
        tmp_path: Path) -> None:
    """The seqs before a compaction's cut are gone by design, not lost: with the header of
    the generation's first segment damaged, salvage still starts at that generation
    (its anchors file gives the digest before it) and keeps its anchors."""
    from eventstore import check_anchor, head_anchor
    from projections.compaction import compact

    d = tmp_path / "log"
    make(d)
    with Ledger.open(d) as led:
        led.append([Event("a.b", "k0", {"i": 99})])  # supersedes nothing the plan keeps...
        before = head_anchor(led)
        plan_head = led.head
    with Ledger.open(d, segment_bytes=4096) as led:
        # ...so drop something: re-put a key as a cache.put pair the plan supersedes
        led.append([Event("cache.put", "00" * 32, {"bytes": 1, "packet": {"target": "t"}})])
        led.append([Event("cache.put", "00" * 32, {"bytes": 1, "packet": {"target": "t"}})])
        assert compact(led).compacted
        base = led.base
        kept = kept_data(led)
    assert base > plan_head
    seg = d / f"{base:020d}.seg"
    flip(seg, 20)  # inside the segment header
    with Ledger.open(d) as led:
        rep = led.salvage()
        assert rep.salvaged and rep.scan.lost == [] and rep.scan.damaged == [seg.name]
        assert kept_data(led) == kept[1:]  # the old ledger.compacted is not copied
        assert led.verify().ok
        assert check_anchor(led, before) is None


def test_salvage_of_a_compacted_store_leaves_views_that_answer(tmp_path: Path) -> None:
    """Salvage must not copy the old generation's ledger.compacted into the middle of the
    new one: the views met a cut that was not there and failed for good."""
    from projections.compaction import compact

    with ContextStore.open(tmp_path) as s:
        for i in range(6):
            s.put({"target": f"t{i % 3}", "summary": f"entry {i % 3}"})
        assert compact(s.ledger).compacted
        s.put({"target": "ta", "summary": "after"})
        want = sorted(e.target for e in s.list())
    seg = sorted((tmp_path / ".ctxledger" / "log").glob("*.seg"))[-1]
    flip(seg, seg.read_bytes().index(b"entry 1"))
    run = CliRunner().invoke
    res = run(ctxledger, ["salvage", "--root", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["lost_events"] == 1
    listed = run(ctxledger, ["store", "list", "--root", str(tmp_path), "--json"])
    assert listed.exit_code == 0, listed.output
    with ContextStore.open(tmp_path) as s:
        assert sorted(e.target for e in s.list()) == [x for x in want if x != "t1"]


def test_salvage_records_an_exact_marker_anchors_and_renumbering(tmp_path: Path) -> None:
    """Everything salvage writes besides the kept events, pinned value by value: the
    marker's every field, the anchors file (each kept frame's digest at its old seq),
    the renumbering ``rewrite`` hears of, the progress count, the report's removed
    segments, the new generation's first time, and its refusals' exact words."""
    d = tmp_path / "log"
    ticks = iter(range(1000, 10_000))

    def clock() -> float:
        return float(next(ticks))

    with Ledger.open(d, segment_bytes=4096, clock=clock) as led:
        for i in range(60):
            rows = [Event("a.b", f"k{i}", {"i": i, "pad": "x" * 150})]
            if i % 5 == 4:
                rows.append(Event("a.c", None, {"i": i}))
            led.append(rows, batch_id=f"b{i}")
        frames = list(led.read_digests())  # (first seq, last seq, digest) of every frame
        times = {b.first_seq: b.at for b in led.read_batches()}
        head, head_digest = led.head, led.head_digest
    segs = sorted(d.glob("*.seg"))
    assert len(segs) >= 3
    damaged = segs[1]
    first_seq = int(damaged.name[:20])
    flip(damaged, 64 + 56 + 20)  # the payload of the damaged segment's first frame
    lost = next(f for f in frames if f[0] == first_seq)
    kept_frames = [f for f in frames if f is not lost]
    progress: list[int] = []
    renumbered: list[dict[int, int]] = []

    def rewrite(row: bytes, new_seq: Mapping[int, int]) -> bytes:
        renumbered.append(dict(new_seq))
        return row

    with Ledger.open(d) as led:
        rep = led.salvage(clock=lambda: 5e9, progress=progress.append, rewrite=rewrite)
        assert rep.salvaged and progress == [1] * len(segs)
        assert rep.quarantined == (f"{damaged.name}.damaged",)
        assert rep.written is not None and rep.written.removed == tuple(p.name for p in segs)
        base = head + 1
        assert led.base == base
        marker = next(led.read(base, base))
        assert marker.kind == SALVAGED
        anchors_file = next(d.glob("*.anchors"))
        assert dict(marker.data) == {
            "old_base": 1, "old_head": head, "old_digest": head_digest.hex(),
            "anchors_blake3": blake3.blake3(anchors_file.read_bytes()).hexdigest(),
            "anchors_frames": len(frames),  # every frame read, the lost one too
            "lost": [[lost[0], lost[1]]], "lost_events": lost[1] - lost[0] + 1,
            "kept_events": head - (lost[1] - lost[0] + 1),
            "quarantined": [f"{damaged.name}.damaged"], "salvaged_at": 5e9,
        }
        # the new generation's first batch carries the first kept batch's time
        assert next(led.read_batches(base, base)).at == times[1]
        # each frame's digest as its header recorded it, at its old last seq
        for _first, last, digest in frames:
            assert led.anchor_digest(last) == digest
        two = next(f for f in frames if f[0] < f[1])  # a batch of two events
        assert led.anchor_digest(two[0]) is None  # not a frame end
        # every kept event renumbered past the marker, in order, one by one
        kept_seqs = [s for f, la, _ in kept_frames for s in range(f, la + 1)]
        assert renumbered and renumbered[-1] == {
            s: base + 1 + i for i, s in enumerate(kept_seqs)}
    with Ledger.open(d, readonly=True) as ro, pytest.raises(LedgerError) as info:
        ro.salvage()
    assert str(info.value) == "ledger was opened read-only"
    closed = Ledger.open(d)
    closed.close()
    with pytest.raises(LedgerClosedError) as info2:
        closed.salvage()
    assert str(info2.value) == "ledger is closed"


def test_salvage_of_a_log_without_a_segment_finds_nothing(tmp_path: Path) -> None:
    d = tmp_path / "log"
    with Ledger.open(d) as led:
        rep = led.salvage()
        assert rep.salvaged is False and rep.scan.head == 0 and rep.scan.batches == []
        assert rep.to_json()["salvaged"] is False
    assert not list(d.glob("*.seg"))


def test_the_marker_counts_anchors_frames_as_a_whole_number(tmp_path: Path) -> None:
    d = tmp_path / "log"
    make(d)
    flip(sorted(d.glob("*.seg"))[1], 64 + 56 + 20)
    with Ledger.open(d) as led:
        assert led.salvage().salvaged
        marker = next(led.read(led.base, led.base))
        assert type(marker.data["anchors_frames"]) is int and marker.data["anchors_frames"] > 0


def test_a_log_whose_every_frame_is_lost_starts_its_new_generation_at_the_clock(
        tmp_path: Path) -> None:
    d = tmp_path / "log"
    with Ledger.open(d) as led:
        led.append([Event("a.b", None, {"i": 1, "pad": "x" * 50})])
    seg = next(d.glob("*.seg"))
    flip(seg, 64 + 56 + 20)  # the only frame's payload
    with Ledger.open(d) as led:
        rep = led.salvage(clock=lambda: 4242.0)
        assert rep.salvaged and rep.scan.batches == [] and rep.scan.lost == [[1, 1]]
        marker = next(led.read())
        assert marker.kind == SALVAGED and marker.at == 4242.0
        assert marker.data["kept_events"] == 0 and led.head == led.base == 2


def test_a_damaged_first_segment_header_of_a_plain_log_is_salvaged(tmp_path: Path) -> None:
    """A log that never had a generation: the scan starts at seq 1 from the genesis
    digest whatever its first header says, so a damaged one loses no frame."""
    d = tmp_path / "log"
    original = make(d)
    first = sorted(d.glob("*.seg"))[0]
    flip(first, 20)  # inside the segment header (its prev digest): its checksum fails
    with Ledger.open(d) as led:
        rep = led.salvage()
        assert rep.salvaged and rep.scan.damaged == [first.name] and rep.scan.lost == []
        assert kept_data(led) == original and led.verify().ok


def test_a_plain_log_missing_its_first_segment_records_old_base_1(tmp_path: Path) -> None:
    d = tmp_path / "log"
    make(d)
    segs = sorted(d.glob("*.seg"))
    gone = int(segs[1].name[:20]) - 1  # the first segment held seqs 1..gone
    segs[0].unlink()
    with Ledger.open(d) as led:
        rep = led.salvage()
        # the next segment's first frame cannot be checked either (its chain starts in
        # the missing segment): lost too
        first_lost = rep.scan.lost[0]
        assert rep.salvaged and first_lost[0] == 1 and first_lost[1] > gone
        marker = next(led.read(led.base, led.base))
        assert marker.data["old_base"] == 1 and marker.data["lost"][0] == first_lost


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"),
                                   OSError("copy refused")], ids=["errno", "plain"])
def test_a_quarantine_copy_that_fails_stops_salvage_with_its_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: OSError) -> None:
    import eventstore.ledger as ledger_mod

    d = tmp_path / "log"
    make(d)
    damaged = sorted(d.glob("*.seg"))[1]
    flip(damaged, 64 + 56 + 20)
    before = files(d)

    def refuse(*_a: Any, **_k: Any) -> Path:
        raise error

    monkeypatch.setattr(ledger_mod, "quarantine_bytes", refuse)
    with Ledger.open(d) as led, pytest.raises(LedgerIOError) as info:
        led.salvage()
    reason = "No space left on device" if error.strerror else "copy refused"
    assert str(info.value) == f"cannot copy {damaged.name} to quarantine/: {reason}"
    assert files(d) == before
