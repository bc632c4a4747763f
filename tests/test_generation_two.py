"""The smallest compacted log: a generation that starts at seq 2, after one frame.

Base 2 is the edge of every "is this log compacted?" test (``base > 1``) and its
anchors file holds exactly one entry (the edge of "is there an entry to fall back
on?"). Export must carry that file on the generation's marker, and salvage must fall
back on it when the generation's first header is damaged, whether this process saw
the header before (its generation flag cached) or reads it afresh. Salvage also seals
the segment it replaces, for handles that still follow it. (Mutation testing found
these edges unpinned: docs/reliability.md.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from eventstore import Event, GenerationChangedError, Ledger
from eventstore.generation import ANCHOR_ENTRY, SEAL_MAGIC, read_anchors
from eventstore.segments import list_generation, list_segments, segment_content


def base_two(d: Path) -> Ledger:
    """A log of one event compacted to a generation at seq 2, then one more event."""
    led = Ledger.open(d)
    led.append([Event("a.a", None, {"i": 1})])
    assert led.start_generation(1, {}, [], at=5.0).base == 2
    led.append([Event("a.a", None, {"i": 2})])
    assert (led.base, led.head) == (2, 3)
    assert len(read_anchors(d, 2)) == ANCHOR_ENTRY.size  # one entry: seq 1
    return led


def test_export_of_a_generation_at_2_carries_its_anchors_file(tmp_path: Path) -> None:
    d = tmp_path / "log"
    with base_two(d) as led:
        lines = [json.loads(x) for x in led.export_lines()]
    assert [x["seq"] for x in lines] == [2, 3]
    assert lines[0]["kind"] == "ledger.compacted"
    assert lines[0]["anchors"] == read_anchors(d, 2).hex()
    assert "anchors" not in lines[1]


def test_an_export_whose_previous_frame_went_away_says_the_generation_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a range that does not start at the generation's base takes the digest before it
    # from the log; None there means a compaction or salvage removed that frame meanwhile
    d = tmp_path / "log"
    with base_two(d) as led:
        monkeypatch.setattr(led, "digest_at", lambda seq: None)
        with pytest.raises(GenerationChangedError) as info:
            list(led.export_lines(3))
    assert info.value.segment == d


def replace_with_flipped(path: Path, offset: int) -> None:
    """The file replaced by a copy with one byte flipped (a new inode: no cache knows it)."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(bytes(data))
    os.replace(tmp, path)


def flip_in_place(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))


@pytest.mark.parametrize("damage", [flip_in_place, replace_with_flipped])
def test_salvage_of_a_generation_at_2_with_a_damaged_header_uses_its_one_anchor(
    tmp_path: Path, damage: Callable[[Path, int], None]
) -> None:
    d = tmp_path / "log"
    with base_two(d) as led:
        kept = [(e.seq, e.kind, dict(e.data)) for e in led.read()][1:]  # the events past the marker
    seg = d / f"{2:020d}.seg"
    damage(seg, 20)  # inside the header: its checksum fails
    with Ledger.open(d) as led:
        rep = led.salvage()
        assert rep.salvaged
        assert rep.scan.lost == [] and rep.scan.damaged == [seg.name]
        assert [(e.kind, dict(e.data)) for e in led.read()][1:] == [(k, x) for _s, k, x in kept]
        assert led.verify().ok


def test_salvage_seals_the_segment_it_replaces(tmp_path: Path) -> None:
    """A handle still on the old last segment meets the seal (the new base) where its
    frames end, and looks for the new generation."""
    d = tmp_path / "log"
    with Ledger.open(d) as led:
        for i in range(4):
            led.append([Event("a.a", None, {"i": i})])
    seg = sorted(d.glob("*.seg"))[-1]
    end = len(segment_content(seg))
    data = bytearray(seg.read_bytes())
    data[end - 30] ^= 0x5A  # inside the last frame: it is lost, the rest kept
    seg.write_bytes(bytes(data))
    fd = os.open(seg, os.O_RDONLY)
    try:
        with Ledger.open(d) as led:
            rep = led.salvage()
            assert rep.salvaged and rep.written is not None
            base = rep.written.base
        assert os.pread(fd, 12, end) == SEAL_MAGIC + base.to_bytes(8, "little")
    finally:
        os.close(fd)


def test_compaction_seals_the_segment_it_replaces(tmp_path: Path) -> None:
    d = tmp_path / "log"
    with Ledger.open(d) as led:
        for i in range(3):
            led.append([Event("a.a", None, {"i": i})])
        seg = sorted(d.glob("*.seg"))[-1]
        end = len(segment_content(seg))
        fd = os.open(seg, os.O_RDONLY)
        try:
            written = led.start_generation(led.head, {}, [], at=5.0)
            assert os.pread(fd, 12, end) == SEAL_MAGIC + written.base.to_bytes(8, "little")
        finally:
            os.close(fd)


def test_a_generation_of_two_segments_is_found_from_its_last(tmp_path: Path) -> None:
    """The newest generation start is looked for from the last segment back, one by
    one: a compacted generation that rolled once (two segments) reads from its first,
    and so does one that rolled twice."""
    d = tmp_path / "log"
    with Ledger.open(d, segment_bytes=4096) as led:
        for i in range(5):
            led.append([Event("a.a", None, {"i": i})])
        base = led.start_generation(led.head, {}, [], at=5.0).base
        for n in (2, 3):
            while len(list_segments(d)) < n:
                led.append([Event("a.a", None, {"i": led.head, "pad": "x" * 200})])
            segs, gen = list_generation(d)
            assert gen and segs[0][0] == base and len(segs) == n
            with Ledger.open(d, readonly=True) as ro:
                assert ro.head == led.head and next(ro.read(base)).seq == base
