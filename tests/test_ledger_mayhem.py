"""Mayhem: kill -9, many writers at once, injected I/O faults, damaged bytes, lock holders.

Children are ``sys.executable`` subprocesses. Nothing here asserts timing:
delays only decide *where* a child dies, never what a test expects.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faults import all_events, child, content_size, oserror, short_then, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import (
    CorruptLogError,
    Event,
    Ledger,
    LedgerIOError,
    LockTimeout,
    WriterPoisonedError,
    _osio,
)
from eventstore.frame import SEGMENT_HEADER_SIZE, content_end, header_roll_bytes, iter_frames
from eventstore.segments import PREALLOC_BYTES
from eventstore.verify import verify_log

# --- (a) kill -9 at random moments ---------------------------------------------------------

KILL_WRITER = """
    import json, sys
    from eventstore import Event, Ledger
    log, rnd, seg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    led = Ledger.open(log, segment_bytes=seg)          # sync="always"
    print("ready", flush=True)
    n = 0
    while True:
        size = 1 + n % 3
        evs = [Event("mayhem.kill", f"r{rnd}",
                     {"r": rnd, "n": n, "j": j, "pad": "x" * ((n * 7 + j * 13) % 300)})
               for j in range(size)]
        r = led.append(evs)
        print(json.dumps([rnd, n, r.first_seq, r.last_seq]), flush=True)
        n += 1
"""


def kill_data(rnd: int, n: int, j: int) -> dict[str, Any]:
    return {"r": rnd, "n": n, "j": j, "pad": "x" * ((n * 7 + j * 13) % 300)}


def test_kill_9_never_loses_an_acknowledged_append(tmp_path: Path) -> None:
    log = tmp_path / "log"
    rng = random.Random(20261130)
    acked: dict[int, tuple[int, int, int]] = {}  # seq -> (round, n, j)
    for rnd in range(25):
        p = child(KILL_WRITER, log, rnd, 5000, stdout=subprocess.PIPE)
        assert p.stdout is not None
        assert p.stdout.readline() == "ready\n"
        # die somewhere: before the first append, mid-write, mid-sync, mid-roll...
        try:
            p.wait(timeout=rng.choice([0.0, 0.001, 0.005, 0.02, 0.05, 0.1]) * rng.random())
        except subprocess.TimeoutExpired:
            pass
        p.send_signal(signal.SIGKILL)
        out = p.stdout.read()
        p.wait()
        p.stdout.close()
        assert p.returncode == -signal.SIGKILL
        for line in out.splitlines(keepends=True):
            if not line.endswith("\n"):
                break  # the line being printed when it died: not acknowledged
            r, n, first, last = json.loads(line)
            for j, seq in enumerate(range(first, last + 1)):
                assert seq not in acked
                acked[seq] = (r, n, j)

        events = all_events(log)  # a reader after every crash: prefix of whole batches
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        by_seq = {e.seq: e for e in events}
        for seq, (r, n, j) in acked.items():
            assert seq in by_seq, f"acknowledged seq {seq} lost after round {rnd}"
            assert by_seq[seq].data == kill_data(r, n, j) and by_seq[seq].key == f"r{r}"
        # an unacknowledged batch may survive (written, then killed before the print),
        # but never a duplicate and never anything a writer did not write
        seen = set()
        for e in events:
            ident = (e.data["r"], e.data["n"], e.data["j"])
            assert ident not in seen and e.data == kill_data(*ident)
            seen.add(ident)

    with Ledger.open(log, segment_bytes=5000) as led:
        r = led.append([Event("mayhem.after", None, {})])
        assert r.first_seq == len(events) + 1
        rep = led.verify()
        assert rep.ok, rep.problems
        assert rep.events == r.last_seq
    assert len(acked) > 0


# --- (b) several writer processes at once -----------------------------------------------------

CONCURRENT_WRITER = """
    import json, sys
    from eventstore import Event, Ledger
    log, w, count, seg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    out = []
    with Ledger.open(log, segment_bytes=seg, lock_timeout=120) as led:
        print("ready", flush=True)
        sys.stdin.readline()                            # start together
        for i in range(count):
            evs = [Event("mayhem.concurrent", f"w{w}",
                         {"w": w, "i": i, "j": j, "pad": "c" * (i % 50)})
                   for j in range(1 + i % 2)]
            bid = f"w{w}-{i}"
            r = led.append(evs, batch_id=bid)
            assert not r.duplicate
            if i % 20 == 0:             # an idempotent retry, maybe after others wrote
                again = led.append(evs, batch_id=bid)
                assert again.duplicate and again.first_seq == r.first_seq, (again, r)
            out.append([i, r.first_seq, r.last_seq])
    print(json.dumps(out), flush=True)
"""


def test_concurrent_writer_processes_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    log = tmp_path / "log"
    writers, count = 4, 200
    procs = [
        child(CONCURRENT_WRITER, log, w, count, 5000, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for w in range(writers)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.close()
    receipts: dict[int, list[list[int]]] = {}
    for w, p in enumerate(procs):
        assert p.stdout is not None
        out = p.stdout.read()
        p.stdout.close()
        assert p.wait(timeout=300) == 0
        receipts[w] = json.loads(out)

    events = all_events(log)
    total = sum(1 + i % 2 for i in range(count)) * writers
    assert [e.seq for e in events] == list(range(1, total + 1))
    by_seq = {e.seq: e for e in events}
    for w, rs in receipts.items():
        assert [i for i, _f, _l in rs] == list(range(count))
        for i, first, last in rs:
            assert last - first + 1 == 1 + i % 2
            for j, seq in enumerate(range(first, last + 1)):
                assert by_seq[seq].data == {"w": w, "i": i, "j": j, "pad": "c" * (i % 50)}
    assert len(list(log.glob("*.seg"))) > 3  # the writers rolled segments under each other
    with Ledger.open(log) as led:
        rep = led.verify()
        assert rep.ok and rep.events == total and rep.frames == writers * count


# --- (c) injected I/O faults ------------------------------------------------------------------


def ev(i: int, pad: int = 10) -> Event:
    return Event("fault.test", None, {"i": i, "pad": "f" * pad})


def check_reopened(log: Path, acked: list[int]) -> None:
    """The log reopens with exactly the acknowledged events, takes an append, verifies."""
    assert [e.data["i"] for e in all_events(log)] == acked
    assert [e.seq for e in all_events(log)] == list(range(1, len(acked) + 1))
    with Ledger.open(log, segment_bytes=4096) as led:
        assert led.append([ev(-1)]).first_seq == len(acked) + 1
        rep = led.verify()
        assert rep.ok, rep.problems


@pytest.mark.parametrize(
    ("target", "fault"),
    [
        pytest.param("pwrite", lambda: oserror(errno.EIO), id="write-EIO"),
        pytest.param("pwrite", lambda: oserror(errno.ENOSPC), id="write-ENOSPC"),
        pytest.param("pwrite", lambda: short_then(errno.ENOSPC), id="short-write-then-ENOSPC"),
        pytest.param("pwrite", lambda: short_then(errno.EIO), id="short-write-then-EIO"),
    ],
)
def test_failing_write_acknowledges_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, fault: Any
) -> None:
    log = tmp_path / "log"
    led = Ledger.open(log)
    for i in range(3):
        led.append([ev(i)])
    seg = next(log.glob("*.seg"))
    size = content_size(seg)
    monkeypatch.setattr(_osio, target, fault())
    with pytest.raises(LedgerIOError) as info:
        led.append([ev(99, pad=500)])
    assert not isinstance(info.value, WriterPoisonedError)
    monkeypatch.undo()
    assert seg.stat().st_size == size  # the partial frame (and the zeros past it) cut
    assert led.head == 3
    assert led.append([ev(3)]).first_seq == 4  # a failed write does not poison the handle
    led.close()
    check_reopened(log, [0, 1, 2, 3])


def test_failed_sync_poisons_the_handle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "log"
    led = Ledger.open(log)
    led.append([ev(0)])
    led.append([ev(1)])
    seg = next(log.glob("*.seg"))
    size = content_size(seg)
    monkeypatch.setattr(_osio, "fdatasync", oserror(errno.EIO))  # what an append syncs with
    with pytest.raises(LedgerIOError) as info:
        led.append([ev(99)])
    assert "fsync" in str(info.value)
    monkeypatch.undo()
    assert seg.stat().st_size == size  # the frame that was never durable is cut
    # fsyncgate: never retry and trust; this handle refuses until the log is reopened
    with pytest.raises(WriterPoisonedError) as poisoned:
        led.append([ev(100)])
    assert str(poisoned.value) == "an earlier fsync failed; reopen the log before appending again"
    assert led.head == 2
    with Ledger.open(log, readonly=True) as ro:
        assert ro.head == 2
    led.close()
    check_reopened(log, [0, 1])


@pytest.mark.parametrize("c_pad", [10, 200, 2], ids=["same-size", "larger", "smaller"])
def test_a_frame_seen_before_its_failed_sync_is_forgotten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, c_pad: int
) -> None:
    """Handle ``a`` looks at the log between b's write and b's failing fsync, so
    it sees a frame that b then cuts; c writes the next frame where it was. ``a``
    must not chain to the vanished frame, nor cut c's acknowledged frame."""
    log = tmp_path / "log"
    a, b = Ledger.open(log), Ledger.open(log)
    b.append([ev(0)])
    real, seen = _osio.fdatasync, []

    def peek_then_fail(fd: int) -> None:
        if not seen:
            seen.append(a.head)  # a reader in the window between write and sync
            raise OSError(errno.EIO, "EIO")
        real(fd)

    monkeypatch.setattr(_osio, "fdatasync", peek_then_fail)
    with pytest.raises(LedgerIOError):
        b.append([ev(9, pad=10)])  # the same size as c's frame with c_pad=10
    monkeypatch.undo()
    assert seen == [2]  # a saw the frame that was never acknowledged
    with Ledger.open(log) as c:
        assert c.append([ev(1, pad=c_pad)]).first_seq == 2
    assert a.append([ev(2)]).first_seq == 3
    assert a.head == 3
    assert [e.data["i"] for e in a.read()] == [0, 1, 2]
    a.close()
    b.close()
    check_reopened(log, [0, 1, 2])


def fill_to_roll(led: Ledger, log: Path, acked: list[int]) -> None:
    """Append until the next append must create a new segment."""
    i = len(acked)
    while True:
        segs = sorted(log.glob("*.seg"))
        if segs and content_size(segs[-1]) >= 4096:
            return
        led.append([ev(i, pad=200)])
        acked.append(i)
        i += 1


@pytest.mark.parametrize(
    ("target", "fault"),
    [
        pytest.param("pwrite", lambda: oserror(errno.ENOSPC), id="header-write-ENOSPC"),
        pytest.param("fsync", lambda: oserror(errno.EIO), id="segment-fsync-EIO"),
        pytest.param("replace", lambda: oserror(errno.EIO), id="rename-EIO"),
    ],
)
def test_fault_while_rolling_a_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, fault: Any
) -> None:
    log = tmp_path / "log"
    acked: list[int] = []
    led = Ledger.open(log, segment_bytes=4096)
    fill_to_roll(led, log, acked)
    n_segs = len(list(log.glob("*.seg")))
    monkeypatch.setattr(_osio, target, fault())
    with pytest.raises(LedgerIOError):
        led.append([ev(99)])
    monkeypatch.undo()
    assert len(list(log.glob("*.seg"))) == n_segs
    assert not list(log.glob("*.tmp"))
    assert led.head == len(acked)
    led.append([ev(len(acked))])
    acked.append(len(acked))
    assert len(list(log.glob("*.seg"))) == n_segs + 1
    led.close()
    check_reopened(log, acked)


def test_failed_write_and_failed_undo_poison_then_reopen_repairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log"
    led = Ledger.open(log)
    led.append([ev(0)])
    monkeypatch.setattr(_osio, "pwrite", short_then(errno.EIO))
    monkeypatch.setattr(_osio, "ftruncate", oserror(errno.EIO))
    with pytest.raises(LedgerIOError):
        led.append([ev(99, pad=400)])
    monkeypatch.undo()
    with pytest.raises(WriterPoisonedError):
        led.append([ev(1)])
    led.close()
    # the half frame is still on disk: a torn tail that readers ignore
    assert [e.data["i"] for e in all_events(log)] == [0]
    check_reopened(log, [0])


def test_failing_lock_file_write_releases_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log"
    with Ledger.open(log) as led:
        led.append([ev(0)])
    (log / "LOCK").write_bytes(b"999999".ljust(23) + b"\n")  # an earlier holder's pid
    a = Ledger.open(log)
    b = Ledger.open(log, lock_timeout=0.5)
    monkeypatch.setattr(os, "pwrite", oserror(errno.EIO))  # the lock's own pid write
    with pytest.raises(LedgerIOError):
        a.append([ev(1)])
    monkeypatch.undo()
    assert b.append([ev(1)]).first_seq == 2  # a did not keep the lock
    assert a.append([ev(2)]).first_seq == 3
    a.close()
    b.close()
    check_reopened(log, [0, 1, 2])


FAULTS = {
    "ok": None,
    "write-EIO": ("pwrite", lambda: oserror(errno.EIO)),
    "short-ENOSPC": ("pwrite", lambda: short_then(errno.ENOSPC)),
    "datasync-EIO": ("fdatasync", lambda: oserror(errno.EIO)),
    "fsync-EIO": ("fsync", lambda: oserror(errno.EIO)),
    "truncate-EIO": ("ftruncate", lambda: oserror(errno.EIO)),
}


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plan=st.lists(
        st.tuples(
            st.sampled_from(sorted(FAULTS)), st.sampled_from(sorted(FAULTS)), st.integers(0, 600)
        ),
        min_size=1,
        max_size=30,
    )
)
def test_random_fault_schedule_keeps_exactly_the_acknowledged(
    tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[str, str, int]]
) -> None:
    log = tmp_path_factory.mktemp("faults") / "log"
    acked: list[int] = []
    led = Ledger.open(log, segment_bytes=4096)
    mp = pytest.MonkeyPatch()
    try:
        for i, (f1, f2, pad) in enumerate(plan):
            for name in {f1, f2}:
                if FAULTS[name] is not None:
                    target, make = FAULTS[name]
                    mp.setattr(_osio, target, make())
            try:
                led.append([ev(i, pad)])
            except WriterPoisonedError:
                mp.undo()
                led.close()
                led = Ledger.open(log, segment_bytes=4096)  # reopening is the way back
            except LedgerIOError:
                pass
            else:
                acked.append(i)
            finally:
                mp.undo()
        # a handle whose sync failed refuses appends; it was replaced above when seen
    finally:
        mp.undo()
        led.close()
    unacked_survivors = [e.data["i"] for e in all_events(log) if e.data["i"] not in acked]
    # with both the sync and the truncate that undoes it failing, a frame the caller was
    # told failed can remain; that is the only way an unacknowledged append may survive
    for i in unacked_survivors:
        names = set(plan[i][:2])
        assert "truncate-EIO" in names and names & {"datasync-EIO", "fsync-EIO"}, (i, plan[i])
    survivors = [e.data["i"] for e in all_events(log)]
    assert [i for i in survivors if i in acked] == acked
    check_reopened(log, survivors)


# --- (d) damaged bytes -------------------------------------------------------------------------


def frames_of(seg: Path) -> list[Any]:
    raw = seg.read_bytes()
    raw = raw[: content_end(raw, SEGMENT_HEADER_SIZE)]
    base = int(seg.name[:20])
    from eventstore.frame import decode_segment_header

    return list(iter_frames(raw, SEGMENT_HEADER_SIZE, decode_segment_header(raw).prev_digest, base))


def assert_fails_closed(log: Path, seg: Path, offset: int, *, append_raises: bool = True) -> None:
    before = snapshot(log)
    for readonly in (True, False):
        with Ledger.open(log, readonly=readonly, segment_bytes=4096) as led:
            for op in (lambda: list(led.read()), lambda: list(led.read_batches(from_seq=1))):
                with pytest.raises(CorruptLogError) as info:
                    op()
                assert info.value.segment.name == seg.name and info.value.offset == offset
                assert seg.name in str(info.value) and f"byte {offset}" in str(info.value)
            if not readonly:
                if append_raises:
                    with pytest.raises(CorruptLogError) as info:
                        led.append([ev(1000)])
                    assert info.value.segment.name == seg.name and info.value.offset == offset
                    with pytest.raises(CorruptLogError):  # and stays closed
                        led.append([ev(1001)])
                else:
                    try:
                        led.append([ev(1000)])
                    except CorruptLogError:
                        pass
            rep = led.verify()
            assert not rep.ok
            assert (rep.problems[0].segment, rep.problems[0].offset) == (seg.name, offset)
            assert "media corruption" in rep.problems[0].error
    after = snapshot(log)
    assert after[seg.name] == before[seg.name]  # no command modified the damaged file
    if append_raises:
        assert after == before


def test_mid_log_corruption_in_the_last_segment(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with Ledger.open(log) as led:
        for i in range(6):
            led.append([ev(i, pad=40)])
    seg = next(log.glob("*.seg"))
    frames = frames_of(seg)
    raw = bytearray(seg.read_bytes())
    bad = frames[2]
    raw[bad.offset + 70 : bad.offset + 74] = (
        b"\xde\xad\xbe\xef"  # payload bytes, valid frames follow
    )
    seg.write_bytes(bytes(raw))
    assert_fails_closed(log, seg, bad.offset)


def test_mid_log_corruption_garbage_between_frames(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with Ledger.open(log) as led:
        for i in range(4):
            led.append([ev(i)])
    seg = next(log.glob("*.seg"))
    off = frames_of(seg)[1].end
    raw = seg.read_bytes()
    seg.write_bytes(raw[:off] + b"\x00garbage\xff" * 3 + raw[off:])
    assert_fails_closed(log, seg, off)


def test_mid_log_corruption_in_a_sealed_segment(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with Ledger.open(log, segment_bytes=4096) as led:
        for i in range(80):
            led.append([ev(i, pad=100)])
    segs = sorted(log.glob("*.seg"))
    assert len(segs) >= 3
    seg = segs[1]
    bad = frames_of(seg)[-1]  # even the last frame of a sealed segment is not a torn tail
    raw = bytearray(seg.read_bytes())
    raw[bad.offset + 60] ^= 0x10
    seg.write_bytes(bytes(raw))
    # appends go to the last segment, which is intact (see the report: not refused today)
    assert_fails_closed(log, seg, bad.offset, append_raises=False)


def test_a_handle_open_before_the_damage_fails_closed_too(tmp_path: Path) -> None:
    log = tmp_path / "log"
    led = Ledger.open(log)
    for i in range(4):
        led.append([ev(i)])
    seg = next(log.glob("*.seg"))
    f = frames_of(seg)[1]
    raw = bytearray(seg.read_bytes())
    raw[f.offset + 57] ^= 1
    seg.write_bytes(bytes(raw))
    damaged = seg.read_bytes()
    with pytest.raises(CorruptLogError):
        list(led.read())
    # this handle created the segment and never re-walks it; what it just read decides
    with pytest.raises(CorruptLogError):
        led.append([ev(9)])
    with pytest.raises(CorruptLogError):
        _ = led.head
    led.close()
    with Ledger.open(log) as again:
        with pytest.raises(CorruptLogError):
            again.append([ev(9)])
    assert seg.read_bytes() == damaged


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda raw, f: raw[: f.end - 1], id="missing-last-byte"),
        pytest.param(lambda raw, f: raw[: f.offset + 20], id="torn-header"),
        pytest.param(
            lambda raw, f: (
                raw[: f.offset + 60] + bytes([raw[f.offset + 60] ^ 4]) + raw[f.offset + 61 :]
            ),
            id="corrupt-final-frame",
        ),
        pytest.param(lambda raw, f: raw + b"CTXF" + os.urandom(40), id="junk-with-magic"),
    ],
)
def test_torn_final_frame_ignored_by_readers_cut_only_by_a_writer(
    tmp_path: Path, damage: Any
) -> None:
    log = tmp_path / "log"
    with Ledger.open(log) as led:
        for i in range(4):
            led.append([ev(i)])
    seg = next(log.glob("*.seg"))
    last = frames_of(seg)[-1]
    raw = seg.read_bytes()
    seg.write_bytes(damage(raw, last))
    torn = snapshot(tmp_path)
    keep = 4 if len(seg.read_bytes()) > len(raw) else 3
    with Ledger.open(log, readonly=True) as ro:  # a reader never changes files
        assert ro.head == keep
        assert [e.data["i"] for e in ro.read()] == list(range(keep))
        assert ro.digest_at(keep) is not None
        assert not ro.verify().ok
    with Ledger.open(log) as led:  # nor does a writer that has not appended
        assert led.head == keep and len(list(led.read())) == keep
    assert snapshot(tmp_path) == torn
    with Ledger.open(log) as led:
        assert led.append([ev(keep)]).first_seq == keep + 1
        rep = led.verify()
        assert rep.ok, rep.problems
    assert [e.data["i"] for e in all_events(log)] == list(range(keep + 1))


@pytest.mark.parametrize("new_segment", [b"", b"\0" * 64 + b"\0" * 100, None],
                         ids=["empty", "zeros", "sound"])
def test_a_torn_tail_before_a_torn_new_segment_ends_the_log(
        tmp_path: Path, new_segment: bytes | None) -> None:
    """A writer that died just after creating its next segment (the new file empty or
    all zeros) may leave the segment before it with a torn last frame: that segment
    is the log's end, so the read ends at its last whole frame. The same bytes
    before a sound segment are damage in the middle of the log."""
    log = tmp_path / "log"
    with Ledger.open(log, segment_bytes=4096) as led:
        for i in range(80):
            led.append([ev(i, pad=100)])
    segs = sorted(log.glob("*.seg"))[:3]
    for extra in sorted(log.glob("*.seg"))[3:]:
        extra.unlink()
    last = frames_of(segs[1])[-1]
    segs[1].write_bytes(segs[1].read_bytes()[: last.end - 1])
    if new_segment is not None:
        segs[2].write_bytes(new_segment)
    with Ledger.open(log, readonly=True) as ro:
        if new_segment is None:
            with pytest.raises(CorruptLogError) as err:
                list(ro.read())
            assert (err.value.segment, err.value.offset) == (segs[1], last.offset)
        else:
            assert [e.seq for e in ro.read()] == list(range(1, last.first_seq))


def test_a_torn_new_segment_after_the_first_leaves_the_first_the_last(tmp_path: Path) -> None:
    """Two segments, the second a torn new one: a handle opens on the first (its head,
    its frames), and its first append sets the torn one aside and rolls anew. Were
    the segment before a torn one torn too, that is damage: the handle fails closed."""
    log = tmp_path / "log"
    with Ledger.open(log, segment_bytes=4096) as led:
        while len(list(log.glob("*.seg"))) < 2:
            led.append([ev(led.head, pad=100)])
    first, second = sorted(log.glob("*.seg"))
    keep = frames_of(first)[-1].first_seq + frames_of(first)[-1].count - 1
    second.write_bytes(bytes(100))
    with Ledger.open(log, readonly=True) as ro:
        assert ro._tip.path == first  # taken at the open, not left to the first look
        assert ro.head == keep and [e.seq for e in ro.read()] == list(range(1, keep + 1))
    with Ledger.open(log, segment_bytes=4096) as led:
        assert led.append([ev(keep, pad=100)]).first_seq == keep + 1
    assert [e.data["i"] for e in all_events(log)] == list(range(keep + 1))
    # both torn: the one before the last may not be a torn new segment
    log2 = tmp_path / "log2"
    shutil.copytree(log, log2)
    segs = sorted(log2.glob("*.seg"))
    segs[-2].write_bytes(bytes(100))
    segs[-1].write_bytes(bytes(100))
    with Ledger.open(log2, readonly=True) as ro:
        assert isinstance(ro._tip.fault, CorruptLogError)  # found at the open
        with pytest.raises(CorruptLogError) as err:
            _ = ro.head
    assert err.value.segment == segs[-2]


# --- (d2) preallocated zeros past the last frame (format.md §7) -------------------------------


def test_zeros_past_the_last_frame_are_free_space(tmp_path: Path) -> None:
    """Zeros after the last frame (a writer's preallocation, or a power cut that left a
    file longer than its data) are no data: not a torn tail, and the next frame goes there."""
    log = tmp_path / "log"
    with Ledger.open(log) as led:
        for i in range(4):
            led.append([ev(i)])
    seg = next(log.glob("*.seg"))
    raw = seg.read_bytes()
    seg.write_bytes(raw + bytes(8192))
    with Ledger.open(log, readonly=True) as ro:
        assert ro.head == 4 and [e.data["i"] for e in ro.read()] == [0, 1, 2, 3]
        rep = ro.verify()
        assert rep.ok, rep.problems
    with Ledger.open(log) as led:
        assert led.append([ev(4)]).first_seq == 5
        assert seg.stat().st_size == len(raw) + 8192  # written over the zeros, in place
    assert [e.data["i"] for e in all_events(log)] == [0, 1, 2, 3, 4]
    assert verify_log(log).ok


def test_a_durable_writer_preallocates_and_close_trims(tmp_path: Path) -> None:
    log = tmp_path / "log"
    led = Ledger.open(log)
    led.append([ev(0)])
    seg = next(log.glob("*.seg"))
    assert seg.stat().st_size == content_size(seg)  # a one-shot writer allocates nothing
    for i in range(1, 5):
        led.append([ev(i)])
    assert seg.stat().st_size > content_size(seg) + 64 * 1024
    reader = Ledger.open(log, readonly=True)
    assert reader.head == 5
    led.append([ev(5)])
    assert reader.head == 6 and [e.data["i"] for e in reader.read(from_seq=6)] == [5]
    reader.close()
    led.close()
    assert seg.stat().st_size == content_size(seg)
    check_reopened(log, [0, 1, 2, 3, 4, 5])


def test_a_writer_that_dies_with_preallocated_zeros_leaves_a_sound_log(tmp_path: Path) -> None:
    log = tmp_path / "log"
    led = Ledger.open(log)
    for i in range(5):
        led.append([ev(i)])
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    for f in log.iterdir():  # the files as a kill -9 now would leave them
        (crashed / f.name).write_bytes(f.read_bytes())
    led.close()
    seg = next(crashed.glob("*.seg"))
    assert seg.stat().st_size > content_size(seg)
    assert verify_log(crashed).ok
    check_reopened(crashed, [0, 1, 2, 3, 4])


def test_close_trims_zeros_a_dead_writer_left_in_the_segment_it_followed(
        tmp_path: Path) -> None:
    """A durable writer that preallocated, then followed another writer into the next
    segment (only read there), trims on close the zeros a dead writer left past the last
    frame: it opens the segment for writing to cut them."""
    log = tmp_path / "log"
    a = Ledger.open(log, segment_bytes=4096)
    for i in range(2):
        a.append([ev(i, pad=200)])  # the second append preallocates
    with Ledger.open(log, segment_bytes=4096, sync="none") as b:
        while len(list(log.glob("*.seg"))) < 2:
            b.append([ev(b.head, pad=200)])
        b.append([ev(b.head, pad=200)])
        head = b.head
    assert a.head == head
    seg = sorted(log.glob("*.seg"))[-1]
    size = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(bytes(8192))  # as a writer killed after preallocating leaves them
    assert a.head == head
    a.close()
    assert seg.stat().st_size == content_size(seg) == size


def test_sealed_segments_hold_no_preallocated_zeros(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with Ledger.open(log, segment_bytes=4096) as led:
        for i in range(60):
            led.append([ev(i, pad=200)])
        segs = sorted(log.glob("*.seg"))
        assert len(segs) > 3
        assert all(s.stat().st_size == content_size(s) for s in segs[:-1])
    check_reopened(log, list(range(60)))


@pytest.mark.parametrize("segment_bytes", [64 << 20, 700 * 1024])
def test_preallocation_runs_ahead_in_whole_pages_up_to_the_roll_point(
    tmp_path: Path, segment_bytes: int
) -> None:
    """From a handle's second append on, a frame that needs room grows the file to
    PREALLOC_BYTES past its end, in whole 4 KiB pages, capped at the roll point but
    never short of the frame; frames that fit in the zeros leave the size alone, and
    the sealed segment keeps none of them."""
    log = tmp_path / "log"
    roll_at = header_roll_bytes(segment_bytes)
    with Ledger.open(log, segment_bytes=segment_bytes) as led:
        led.append([ev(0)])
        seg = next(log.glob("*.seg"))
        size = seg.stat().st_size
        assert size == content_size(seg)  # a one-shot writer allocates nothing
        grew = 0
        for i in range(1, 30):
            led.append([ev(i, pad=90_000)])
            if len(list(log.glob("*.seg"))) > 1:  # sealed: cut to its frames
                assert seg.stat().st_size == content_size(seg)
                break
            end = content_size(seg)
            if end > size:
                size = -(-max(end, min(end + PREALLOC_BYTES, roll_at)) // 4096) * 4096
                grew += 1
            assert seg.stat().st_size == size, i
        assert grew >= 2


def test_a_writer_that_finds_zeros_ahead_fills_them_before_it_grows_the_file(
    tmp_path: Path,
) -> None:
    """Zeros another handle preallocated (it died before trimming them): a new writer
    learns the file's size and fills them without growing it, up to a frame that ends
    exactly at the file's end; only the frame after that grows the file."""
    from eventstore.event import encode_batch
    from eventstore.frame import encode_frame, payload_prefix

    def frame_len(event: Event) -> int:  # the same for every seq, time and chain
        rows, count = encode_batch([event], None)
        return len(encode_frame(bytes(32), 1, count, payload_prefix(0.0, None) + rows)[0])

    log, crashed = tmp_path / "log", tmp_path / "crashed"
    led = Ledger.open(log)
    for i in range(3):
        led.append([ev(i)])
    crashed.mkdir()
    for f in log.iterdir():  # the files as a kill -9 now would leave them
        (crashed / f.name).write_bytes(f.read_bytes())
    led.close()
    seg = next(crashed.glob("*.seg"))
    size = seg.stat().st_size
    with Ledger.open(crashed) as led:
        led.append([ev(3, pad=1000)])  # a one-shot append: no look at the size
        assert seg.stat().st_size == size
        # the handle's first look at the size, by a frame that ends exactly there
        room = size - content_size(seg)
        pad = 1000 + room - frame_len(ev(4, pad=1000))
        pad -= frame_len(ev(4, pad=pad)) - room  # a longer string has a longer CBOR head
        assert frame_len(ev(4, pad=pad)) == room
        led.append([ev(4, pad=pad)])
        assert content_size(seg) == size == seg.stat().st_size  # full to the last byte
        led.append([ev(5)])
        end = content_size(seg)
        assert seg.stat().st_size == -(-(end + PREALLOC_BYTES) // 4096) * 4096
    check_reopened(crashed, list(range(6)))


def test_failing_preallocation_acknowledges_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log"
    led = Ledger.open(log)
    led.append([ev(0)])
    led.append([ev(1)])
    seg = next(log.glob("*.seg"))
    size = content_size(seg)
    monkeypatch.setattr(_osio, "pwrite", oserror(errno.ENOSPC))  # the zeros, before the frame
    with pytest.raises(LedgerIOError) as info:
        led.append([ev(99, pad=400_000)])  # past the zeros already allocated
    assert str(info.value) == f"append failed preallocating {seg}: {os.strerror(errno.ENOSPC)}"
    monkeypatch.undo()
    assert seg.stat().st_size == size
    assert led.head == 2
    assert led.append([ev(2)]).first_seq == 3
    led.close()
    check_reopened(log, [0, 1, 2])


def test_a_version_1_segment_reads_and_is_never_preallocated(tmp_path: Path) -> None:
    """Logs written before format version 2 read as before; a writer keeps their last
    segment free of zeros, so the older ctxledger that wrote it can still read it."""
    import blake3

    log = tmp_path / "log"
    with Ledger.open(log) as led:
        led.append([ev(0)])
    seg = next(log.glob("*.seg"))
    raw = bytearray(seg.read_bytes())
    raw[8:10] = (1).to_bytes(2, "little")
    raw[56:64] = blake3.blake3(bytes(raw[:56])).digest()[:8]
    seg.write_bytes(bytes(raw))
    led = Ledger.open(log)
    for i in range(1, 6):
        led.append([ev(i)])
    assert seg.stat().st_size == content_size(seg)
    led.close()
    check_reopened(log, list(range(6)))


# --- (e) the writer lock names its holder ---------------------------------------------------------

LOCK_HOLDER = """
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.pwrite(fd, str(os.getpid()).encode().ljust(23) + b"\\n", 0)   # as eventstore/lock.py does
    print("locked", flush=True)
    sys.stdin.readline()                                              # hold until told
"""


def test_lock_timeout_names_the_holder(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with Ledger.open(log) as led:
        led.append([ev(0)])
    holder = child(LOCK_HOLDER, log / "LOCK", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        seg = next(log.glob("*.seg"))
        before = seg.read_bytes()
        with Ledger.open(log, lock_timeout=0.2) as led:
            with pytest.raises(LockTimeout) as info:
                led.append([ev(1)])
            assert info.value.holder_pid == holder.pid
            assert str(holder.pid) in str(info.value)
            assert seg.read_bytes() == before
            assert led.head == 1  # readers take no lock
            assert holder.stdin is not None
            holder.stdin.write("release\n")
            holder.stdin.close()
            assert holder.wait(timeout=60) == 0
            assert led.append([ev(1)]).first_seq == 2  # the same handle goes on
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


# --- (f) syncs that must happen, in the order they must happen ---------------------------------


def fd_name(fd: int) -> str:
    return os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))


class SyncSpy:
    """Records every sync and truncate the ledger asks for: ``(op, file name, segments)``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, log: Path) -> None:
        self.log, self.calls = log, []  # type: ignore[var-annotated]
        for op in ("fsync", "fdatasync", "ftruncate"):
            real = getattr(_osio, op)
            monkeypatch.setattr(_osio, op, self._wrap(op, real))

    def _wrap(self, op: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(fd: int, *args: Any) -> Any:
            segs = sorted(p.name for p in self.log.glob("*.seg"))
            self.calls.append((op, fd_name(fd), segs))
            return real(fd, *args)

        return call


needs_proc_fd = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")


@needs_proc_fd
def test_batch_mode_syncs_a_segment_before_sealing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: with sync="batch" a roll sealed the segment without syncing the
    frames written to it since the last sync; they relied on the OS's writeback."""
    log = tmp_path / "log"
    led = Ledger.open(log, sync="batch", sync_interval=3600, segment_bytes=4096)
    led.append([ev(0)])
    led.flush()
    spy = SyncSpy(monkeypatch, log)
    first = f"{1:020d}.seg"
    while len(list(log.glob("*.seg"))) < 2:
        led.append([ev(1, pad=300)])
    syncs = [(op, name, segs) for op, name, segs in spy.calls if op == "fdatasync"]
    assert syncs and syncs[0][1] == first
    assert syncs[0][2] == [first]  # synced before the next segment existed
    head = led.head
    led.close()
    monkeypatch.undo()
    check_reopened(log, [0] + [1] * (head - 1))


@needs_proc_fd
def test_batch_mode_syncs_before_following_another_writers_roll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log"
    b = Ledger.open(log, sync="batch", sync_interval=3600, segment_bytes=4096)
    b.append([ev(0)])
    b.flush()
    b.append([ev(1)])  # unsynced, in segment 1
    spy = SyncSpy(monkeypatch, log)
    with Ledger.open(log, segment_bytes=4096, sync="none") as a:
        while len(list(log.glob("*.seg"))) < 2:
            a.append([ev(2, pad=300)])
    spy.calls.clear()
    b.append([ev(3)])  # b follows a into segment 2: segment 1 must be synced first
    assert [(op, name) for op, name, _ in spy.calls][:1] == [("fdatasync", f"{1:020d}.seg")]
    b.close()


def test_failed_sync_before_a_roll_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log"
    acked: list[int] = []
    led = Ledger.open(log, sync="batch", sync_interval=3600, segment_bytes=4096)
    fill_to_roll(led, log, acked)
    monkeypatch.setattr(_osio, "fdatasync", oserror(errno.EIO))
    with pytest.raises(LedgerIOError):
        led.append([ev(99)])
    monkeypatch.undo()
    assert len(list(log.glob("*.seg"))) == 1
    with pytest.raises(WriterPoisonedError):
        led.append([ev(100)])
    led.close()
    check_reopened(log, acked)


@needs_proc_fd
def test_flush_in_none_mode_covers_segments_left_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log"
    led = Ledger.open(log, sync="none", segment_bytes=4096)
    acked: list[int] = []
    fill_to_roll(led, log, acked)
    led.append([ev(len(acked))])  # rolls; no sync in "none" mode
    spy = SyncSpy(monkeypatch, log)
    led.flush()
    assert {name for op, name, _ in spy.calls if op == "fdatasync"} == {
        f"{1:020d}.seg",
        sorted(log.glob("*.seg"))[-1].name,
    }
    led.close()


@needs_proc_fd
def test_torn_tail_copy_is_durable_before_the_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the quarantined copy of a torn tail was written but not synced
    before the segment was truncated, so a power cut could lose both."""
    log = tmp_path / "log"
    with Ledger.open(log) as led:
        led.append([ev(0)])
    seg = next(log.glob("*.seg"))
    with open(seg, "ab") as f:
        f.write(b"half a frame")
    spy = SyncSpy(monkeypatch, log)
    for sync in ("none", "always"):  # the copy is synced whatever the sync mode
        spy.calls.clear()
        with Ledger.open(log, sync=sync) as led:  # type: ignore[arg-type]
            led.append([ev(1)])
        ops = [(op, name) for op, name, _ in spy.calls]
        cut = ops.index(("ftruncate", seg.name))
        copy = [n for n in os.listdir(log / "quarantine") if n.endswith(".torn")]
        assert ("fsync", sorted(copy)[-1]) in ops[:cut]  # the copy
        assert ("fsync", "quarantine") in ops[:cut]  # and its directory entry
        with open(seg, "ab") as f:
            f.write(b"another half frame")
    monkeypatch.undo()
    check_reopened(log, [0, 1, 1])


def test_torn_tail_copies_never_overwrite_each_other(tmp_path: Path) -> None:
    """Regression: a second torn tail at the same offset overwrote the first copy."""
    log = tmp_path / "log"
    with Ledger.open(log) as led:
        led.append([ev(0)])
    seg = next(log.glob("*.seg"))
    end = seg.stat().st_size
    junk = [b"first torn tail", b"second one", b"and a third"]
    for j in junk:
        with open(seg, "ab") as f:
            f.write(j)
        with Ledger.open(log) as led:
            led.append([ev(1)])
        with open(seg, "r+b") as f:  # cut the appended frame again: same torn offset next time
            f.truncate(end)
    q = log / "quarantine"
    names = sorted(os.listdir(q))
    assert names == sorted(
        [f"{seg.name}.{end}.torn", f"{seg.name}.{end}.1.torn", f"{seg.name}.{end}.2.torn"]
    )
    assert sorted((q / n).read_bytes() for n in names) == sorted(junk)


def test_failed_copy_of_a_torn_tail_cuts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log"
    with Ledger.open(log) as led:
        led.append([ev(0)])
    seg = next(log.glob("*.seg"))
    with open(seg, "ab") as f:
        f.write(b"torn bytes")
    damaged = seg.read_bytes()
    led = Ledger.open(log)
    monkeypatch.setattr(_osio, "fsync", oserror(errno.EIO))
    with pytest.raises(LedgerIOError):
        led.append([ev(1)])
    monkeypatch.undo()
    assert seg.read_bytes() == damaged  # not cut
    assert not [p for p in (log / "quarantine").iterdir()]  # no half copy left
    assert led.append([ev(1)]).first_seq == 2  # nothing was acknowledged; try again
    led.close()
    check_reopened(log, [0, 1])


def test_a_torn_tail_that_starts_with_zeros_still_goes_to_quarantine(tmp_path: Path) -> None:
    """Zeros at a handle's end usually mean free space; not once it saw a torn tail there."""
    with Ledger.open(tmp_path, sync="none") as led:
        led.append([Event("a.b", None, {"n": 1})])
    seg = sorted(tmp_path.glob("*.seg"))[-1]
    with open(seg, "ab") as f:
        f.write(b"\0\0\0\0\x01")
    with Ledger.open(tmp_path, sync="none") as led:
        assert led.append([Event("a.b", None, {"n": 2})]).first_seq == 2
        assert [e.data["n"] for e in led.read()] == [1, 2]
        assert led.verify().ok
    assert [p.read_bytes() for p in (tmp_path / "quarantine").iterdir()] == [b"\0\0\0\0\x01"]


@needs_proc_fd
@pytest.mark.parametrize("sync", ["none", "batch", "always"])
def test_a_torn_tail_cut_is_synced_unless_sync_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync: str
) -> None:
    """The cut segment itself is fsynced right after the cut in every mode but "none"; a
    tail of zeros only (preallocated space) is cut without a copy."""
    log = tmp_path / "log"
    with Ledger.open(log) as led:
        led.append([ev(0)])
    seg = next(log.glob("*.seg"))
    end = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(b"half a frame")
    spy = SyncSpy(monkeypatch, log)
    with Ledger.open(log, sync=sync) as led:  # type: ignore[arg-type]
        led.append([ev(1)])
    ops = [(op, name) for op, name, _ in spy.calls]
    cut = ops.index(("ftruncate", seg.name))
    assert (ops[cut + 1:cut + 2] == [("fsync", seg.name)]) == (sync != "none")
    assert (log / "quarantine" / f"{seg.name}.{end}.torn").read_bytes() == b"half a frame"
    monkeypatch.undo()
    check_reopened(log, [0, 1])


def test_a_torn_tail_of_any_bytes_is_copied_and_a_failed_cut_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log"
    with Ledger.open(log) as led:
        led.append([ev(0)])
    seg = next(log.glob("*.seg"))
    end = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(b"\x01" * 12)
    monkeypatch.setattr(_osio, "ftruncate", oserror(errno.EIO))
    with Ledger.open(log) as led:
        with pytest.raises(LedgerIOError) as info:
            led.append([ev(1)])
        assert str(info.value) == f"cannot repair torn tail of {seg}: Input/output error"
    monkeypatch.undo()
    assert (log / "quarantine" / f"{seg.name}.{end}.torn").read_bytes() == b"\x01" * 12
    check_reopened(log, [0])
