"""``Ledger.start_generation`` (what compaction calls) pinned value by value: its refusals,
the ``ledger.compacted`` marker it writes, the anchors file, the generation it announces
in the lock file, its progress and its report. Compaction's own tests judge the store
after it; these judge the log's half alone. (Mutation testing found it unpinned.)
"""

from __future__ import annotations

from pathlib import Path

import blake3
import cbor2
import pytest

from eventstore import CompactionRefusedError, Event, HeadMismatchError, Ledger
from eventstore.generation import COMPACTED, read_anchors
from eventstore.lock import GEN_FIELD, PID_FIELD


def rows(*items: int) -> list[bytes]:
    return [cbor2.dumps(["k.k", None, {"i": i}]) for i in items]


def three_batches(log: Path) -> Ledger:
    led = Ledger.open(log, segment_bytes=4096)
    led.append([Event("a.a", None, {"i": 1}), Event("a.a", None, {"i": 2})])
    led.append([Event("a.a", None, {"i": 3})])
    led.append([Event("a.a", None, {"i": 4})])
    return led


def test_an_empty_log_is_refused(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "log") as led:
        with pytest.raises(CompactionRefusedError) as info:
            led.start_generation(0, {}, [], at=1.0)
        assert str(info.value) == "the log is empty: there is nothing to compact"
    assert not list((tmp_path / "log").glob("*.seg"))


def test_a_log_that_moved_on_is_refused_with_both_heads(tmp_path: Path) -> None:
    with three_batches(tmp_path / "log") as led:
        with pytest.raises(HeadMismatchError) as info:
            led.start_generation(2, {}, [], at=1.0)
        assert (info.value.expected, info.value.actual) == (2, 4)
        assert led.head == 4 and led.base == 1


def test_a_log_of_one_event_is_compacted(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "log") as led:
        led.append([Event("a.a", None, {"i": 1})])
        first = led.head_digest
        written = led.start_generation(1, {}, [], at=5.0)
        assert (written.base, led.base, led.head) == (2, 2, 2)
        # compacted again (from generation start 2): the anchors of generation 1 go on
        led.append([Event("a.a", None, {"i": 2})])
        assert led.start_generation(3, {}, [], at=6.0).base == 4
        assert next(led.read(4, 4)).data["anchors_frames"] == 3  # seq 1, marker 2, seq 3
        assert led.anchor_digest(1) == first


def test_the_marker_anchors_lock_progress_and_report(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with three_batches(log) as led:
        frames = list(led.read_digests())
        head_digest = led.head_digest.hex()
        old_segments = tuple(p.name for p in sorted(log.glob("*.seg")))
        progress: list[int] = []
        written = led.start_generation(4, {"reason": "test"}, [(2.5, "kept", rows(3, 4))],
                                       at=9.0, progress=progress.append)
        assert (written.base, written.head, led.base, led.head) == (5, 7, 5, 7)
        assert (written.frames, written.events) == (2, 3)  # the marker's frame, the batch's
        assert written.path == log / "00000000000000000005.seg"
        assert written.size == len(written.path.read_bytes().rstrip(b"\0"))
        assert written.digest == led.head_digest
        assert written.removed == old_segments and progress and sum(progress) > 0
        anchors = read_anchors(log, 5)
        marker = next(led.read(5, 5))
        assert (marker.kind, marker.at) == (COMPACTED, 9.0)
        assert dict(marker.data) == {
            "reason": "test", "old_base": 1, "old_head": 4, "old_digest": head_digest,
            "anchors_blake3": blake3.blake3(anchors).hexdigest(), "anchors_frames": 3}
        assert type(marker.data["anchors_frames"]) is int
        for _first, last, digest in frames:  # each old frame end, as its header said
            assert led.anchor_digest(last) == digest
        kept = list(led.read(6))
        assert [(e.seq, e.at, e.data["i"]) for e in kept] == [(6, 2.5, 3), (7, 2.5, 4)]
        assert next(led.read_batches(6, 6)).batch_id == "kept"
    # the generation it wrote was announced in the lock file first
    gen = (log / "LOCK").read_bytes()[PID_FIELD:PID_FIELD + GEN_FIELD]
    assert int.from_bytes(gen, "little") == 5


def test_a_second_compaction_carries_the_older_anchors(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with three_batches(log) as led:
        first_frames = list(led.read_digests())
        led.start_generation(4, {}, [], at=9.0)  # generation 5: its marker only
        led.append([Event("a.a", None, {"i": 9})])  # seq 6
        second = led.start_generation(6, {}, [], at=10.0)
        assert second.base == 7
        marker = next(led.read(7, 7))
        assert marker.data["old_base"] == 5 and marker.data["anchors_frames"] == 5
        for _f, last, digest in first_frames:  # the first generation's ends are still known
            assert led.anchor_digest(last) == digest


@pytest.mark.parametrize("error", [OSError(13, "Permission denied"), OSError("refused")],
                         ids=["errno", "plain"])
def test_an_empty_next_segment_that_cannot_be_removed_stops_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: OSError) -> None:
    """A segment with a whole header and no frame at head + 1 (a roll whose first frame
    failed) must go before a generation is written there; failing that, nothing moves."""
    import os

    from eventstore import LedgerIOError
    from eventstore.frame import encode_segment_header
    from eventstore.segments import segment_name

    log = tmp_path / "log"
    with three_batches(log) as led:
        digest = led.head_digest
    empty = log / segment_name(5)
    empty.write_bytes(encode_segment_header(5, digest, 4096))
    real = os.unlink

    def unlink(path: object, *a: object, **k: object) -> None:
        if Path(str(path)) == empty:
            raise error
        real(path, *a, **k)  # type: ignore[arg-type]

    with Ledger.open(log) as led:
        assert led.head == 4
        monkeypatch.setattr(os, "unlink", unlink)
        with pytest.raises(LedgerIOError) as info:
            led.start_generation(4, {}, [], at=1.0)
        monkeypatch.undo()
        reason = "Permission denied" if error.strerror else "refused"
        assert str(info.value) == f"cannot remove the empty segment {empty.name}: {reason}"
        assert empty.exists() and led.base == 1
        assert led.start_generation(4, {}, [], at=1.0).base == 5  # with the fault gone
    assert not empty.exists() or empty.read_bytes()[:8] == b"CTXLSEG\x00"


def test_read_digests_of_a_seq_range(tmp_path: Path) -> None:
    with three_batches(tmp_path / "log") as led:
        every = list(led.read_digests())
        assert [(f, la) for f, la, _d in every] == [(1, 2), (3, 3), (4, 4)]
        assert list(led.read_digests(1, 2)) == every[:1]
        assert list(led.read_digests(2, 3)) == every[:2]
        assert list(led.read_digests(3)) == every[1:] and list(led.read_digests(5)) == []


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), OSError("nope")],
                         ids=["errno", "plain"])
def test_a_generation_that_cannot_be_announced_is_not_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: OSError) -> None:
    from eventstore import LedgerIOError
    from eventstore.lock import WriterLock

    log = tmp_path / "log"
    with three_batches(log) as led:
        before = sorted(p.name for p in log.iterdir())

        def refuse(self: WriterLock, base: int) -> None:
            raise error

        monkeypatch.setattr(WriterLock, "set_generation", refuse)
        with pytest.raises(LedgerIOError) as info:
            led.start_generation(4, {}, [], at=1.0)
        reason = "No space left on device" if error.strerror else "nope"
        assert str(info.value) == f"cannot write {log / 'LOCK'}: {reason}"
        assert sorted(p.name for p in log.iterdir()) == before and led.base == 1


def test_a_handle_that_follows_a_new_generation_lets_go_of_the_old_segments(
        tmp_path: Path) -> None:
    """Point reads keep segments open; a handle that moves on to a newer generation (a
    compaction by another handle) closes them: no descriptor left on a removed file."""
    import os

    log = tmp_path / "log"
    with three_batches(log) as writer, Ledger.open(log) as reader:
        assert reader.read_raw(1) is not None  # holds the first segment open
        writer.start_generation(4, {}, [], at=9.0)
        assert reader.base == 5 and reader.read_raw(5) is not None
        fds = os.listdir("/proc/self/fd")
        held = []
        for fd in fds:
            try:
                held.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass
        assert not [h for h in held if h.endswith(" (deleted)") and str(log) in h]
