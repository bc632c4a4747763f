"""Mutants that survived the suite under mutmut (``.ci/mutate``; docs/reliability.md,
"Mutation testing"), each killed here by a deterministic test: exact boundaries with a
fixed clock and pinned examples, not a random test's luck.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import blake3
import pytest

from eventstore import (
    CorruptLogError,
    Event,
    GenerationChangedError,
    HeadMismatchError,
    ImportRefusedError,
    InvalidEventError,
    Ledger,
    LedgerClosedError,
    LedgerError,
    LedgerIOError,
    LockTimeout,
    MemoryLog,
    NotOwnerError,
    Problem,
    StoreNotFoundError,
    UnsupportedFormatError,
    VerifyReport,
)
from eventstore.event import MAX_DATA_DEPTH, encode_batch
from eventstore.frame import (
    FRAME_HEADER_SIZE,
    FRAME_MAGIC,
    GENESIS_DIGEST,
    SEGMENT_HEADER_SIZE,
    FrameError,
    content_end,
    decode_rows_at,
    encode_frame_parts,
    encode_payload,
    iter_frames,
    payload_prefix,
    read_frame_header,
)
from eventstore.framechain import FrameChain
from eventstore.generation import anchor_digest
from eventstore.lock import WriterLock
from eventstore.salvage import scan as salvage_scan
from projections import AmbiguousKeyError, ContextStore, StoreConfig, UnknownKeyError
from projections.cache import CacheState, find_key, find_key_plain
from projections.checkpoints import CheckpointDir
from projections.compaction import compact
from projections.recall import BOOSTS, RecallDoc, RecallIndex
from projections.recall.match import path_level, sym_level

# --- FrameChain.add_checked: frames that come from elsewhere (the JetStream log) ----


def _source(ats: list[float], batch_ids: list[str | None]) -> MemoryLog:
    times = iter(ats)
    log = MemoryLog(clock=lambda: next(times))
    for i, bid in enumerate(batch_ids):
        log.append([Event("x.y", f"k{i}", {"i": i}), Event("x.z", "k", {"n": i})], batch_id=bid)
    return log


def _frame(prev: bytes, first: int, at: float, batch_id: str | None = None) -> bytes:
    rows, count = encode_batch([Event("x.y", "k", {"n": 1})], batch_id)
    return encode_frame_parts(prev, first, count, (payload_prefix(at, batch_id), rows))[0]


def test_add_checked_takes_the_next_frames_exactly_as_their_writer_recorded_them() -> None:
    src = _source([10.0, 10.0, 12.5], ["b0", None, "b2"])  # equal times: not backwards
    chain = src._chain
    copy = FrameChain("copy")
    receipts = [copy.add_checked(f) for f in chain.frames]
    assert [(r.first_seq, r.last_seq, r.at, r.batch_id) for r in receipts] == [
        (1, 2, 10.0, "b0"), (3, 4, 10.0, None), (5, 6, 12.5, "b2")]
    assert copy.head == 6 and copy.last_at == 12.5 and copy.head_digest == chain.head_digest
    assert copy.firsts == [1, 3, 5] and copy.digests == chain.digests
    assert copy.offsets == chain.offsets and copy.size == sum(map(len, chain.frames))
    assert sorted(copy.receipts) == ["b0", "b2"]
    assert [e.key for e in src.read()] == [
        e.key for b in copy.batches(0, 3, None) for e in b.events]


@pytest.mark.parametrize("case", ["skips one", "repeats one", "trailing byte", "two frames",
                                  "cut short", "flipped payload bit", "not chained", "empty"])
def test_add_checked_refuses_a_frame_that_is_not_the_next_one_and_records_nothing(
    case: str,
) -> None:
    f = _source([1.0, 2.0, 3.0], [None, None, None])._chain.frames
    copy = FrameChain("copy")
    copy.add_checked(f[0])
    bad = {
        "skips one": f[2],
        "repeats one": f[0],
        "trailing byte": f[1] + b"\0",
        "two frames": f[1] + f[2],
        "cut short": f[1][:-1],
        "flipped payload bit": f[1][:FRAME_HEADER_SIZE] + bytes([f[1][FRAME_HEADER_SIZE] ^ 1])
        + f[1][FRAME_HEADER_SIZE + 1:],
        "not chained": _frame(bytes(32), 3, 5.0),
        "empty": b"",
    }[case]
    with pytest.raises(CorruptLogError) as e:
        copy.add_checked(bad)
    assert e.value.segment.name == "copy" and e.value.reason == {
        "two frames": "frame does not fill its message", "empty": "frame does not fill its message",
        "skips one": "frame starts at seq 5, expected 3",
        "repeats one": "frame starts at seq 1, expected 3",
        "not chained": "checksum mismatch (payload or chain)",
        "flipped payload bit": "checksum mismatch (payload or chain)",
    }.get(case, e.value.reason)
    # where it would have started; a trailing byte: where that byte would be
    assert e.value.offset == len(f[0]) + (len(f[1]) if case == "trailing byte" else 0)
    assert (copy.head, copy.size, len(copy.frames), copy.last_at) == (2, len(f[0]), 1, 1.0)
    copy.add_checked(f[1])  # the real next frame is still taken
    assert copy.head == 4


def test_add_checked_refuses_a_batch_time_before_the_last_but_takes_an_equal_one() -> None:
    copy = FrameChain("copy")
    copy.add_checked(_frame(bytes(32), 1, 7.0))
    with pytest.raises(CorruptLogError) as e:
        copy.add_checked(_frame(copy.head_digest, 2, 6.999))
    assert e.value.reason == "batch time goes backwards"
    assert e.value.offset == copy.size and copy.head == 1
    r = copy.add_checked(_frame(copy.head_digest, 2, 7.0, "same-time"))
    assert (r.first_seq, r.last_seq, r.at, r.batch_id) == (2, 2, 7.0, "same-time")
    assert copy.receipts == {"same-time": r}


def test_add_checked_refuses_a_payload_writers_do_not_write() -> None:
    rows, count = encode_batch([Event("x.y", "k", {"n": 1})], None)
    odd = b"\x84\xfa" + bytes(4) + b"\xf6"  # ``at`` as a float32: a decoder could, writers don't
    frame = encode_frame_parts(bytes(32), 1, count, (odd, rows))[0]
    copy = FrameChain("copy")
    with pytest.raises(CorruptLogError) as e:
        copy.add_checked(frame)
    assert e.value.reason == "payload is not the shape writers write"
    assert e.value.offset == 0 and copy.head == 0 and copy.frames == []


def test_a_memory_log_verifies_as_a_log_without_segments_and_names_a_damaged_frame() -> None:
    log = _source([1.0, 2.0, 3.0], [None, None, None])
    assert log.verify() == VerifyReport(True, 6, 3, 6, 0, ())
    chain = log._chain
    f = chain.frames[1]
    chain.frames[1] = f[:-9] + bytes([f[-9] ^ 1]) + f[-8:]  # the payload's last byte
    assert log.verify() == VerifyReport(False, 6, 3, 6, 0, (
        Problem("memory", chain.offsets[1], "checksum mismatch (payload or chain)"),))


# --- salvage: where the scan picks up again after a damaged frame header --------------


def _one_segment_log(tmp_path: Path) -> tuple[Path, bytes, list[int]]:
    """Six one-event frames in one segment, each payload holding the frame magic
    (``CTXF``) as text: a scan for the next frame meets it before the real one."""
    with Ledger.open(tmp_path / "log") as led:
        for i in range(6):
            led.append([Event("x.y", f"k{i}", {"text": "CTXF" * 2, "i": i})])
    seg = next((tmp_path / "log").glob("*.seg"))
    data = seg.read_bytes()
    data = data[: content_end(data, SEGMENT_HEADER_SIZE)]
    offs, off = [], SEGMENT_HEADER_SIZE
    while off < len(data):
        offs.append(off)
        off = read_frame_header(data, off).end
    assert len(offs) == 6 and data.count(FRAME_MAGIC) > 6
    return seg, data, offs


def _scan(seg: Path, data: bytes) -> tuple[list[list[int]], list[int], bool]:
    out = salvage_scan([(seg, data)], 1, GENESIS_DIGEST)
    return out.lost, [b.first_seq for b in out.batches], out.torn_tail


def test_salvage_resumes_at_the_very_next_frame_after_a_damaged_header(tmp_path: Path) -> None:
    seg, data, offs = _one_segment_log(tmp_path)
    bad = bytearray(data)
    bad[offs[1] + 10] ^= 0x5A  # frame 2's header: its crc fails, its digest is unknown
    # the magic inside frame 2's own payload is no frame; frame 3 is the next one, kept
    # in the scan but unverifiable (the digest it chains to is gone); 4-6 check out
    assert _scan(seg, bytes(bad)) == ([[2, 3]], [1, 4, 5, 6], False)


def test_salvage_finds_a_frame_one_byte_past_the_damage(tmp_path: Path) -> None:
    seg, data, offs = _one_segment_log(tmp_path)
    shifted = data[: offs[1]] + b"\x00" + data[offs[1]:]  # one stray byte before frame 2
    # frame 2 starts one byte on and claims exactly the seq expected: it is the resume
    # point (lost only because the scan lost its chain), frame 3 checks out against it
    assert _scan(seg, shifted) == ([[2, 2]], [1, 3, 4, 5, 6], False)


# --- cache: key prefixes at the edges of their range, and expiry at the edge ----------


def _put(key: str) -> Event:
    return Event("cache.put", key, {"packet": {"target": "t"}, "bytes": 1})


def _cache_put(state: CacheState, key: str, seq: int, at: float) -> None:
    state.apply(attrs.evolve(_put(key), seq=seq, at=at))


def test_keys_with_prefix_takes_the_first_and_last_key_of_its_range() -> None:
    # base: the lowest and highest keys under abcdef01 and their neighbours outside it;
    # delta: the same under abcdef03 (a prefix is 8 to 64 hex digits)
    lo1, hi1 = "abcdef01" + "0" * 56, "abcdef01" + "f" * 56
    lo3, hi3 = "abcdef03" + "0" * 56, "abcdef03" + "f" * 56
    below, above = "abcdef00" + "f" * 56, "abcdef04" + "0" * 56
    state = CacheState()
    for seq, k in enumerate([below, lo1, hi1, "abcdef02" + "0" * 56], 1):
        _cache_put(state, k, seq, 10.0)
    half = CacheState.from_bytes(state.to_bytes())
    for seq, k in enumerate([lo3, hi3, above], 5):
        _cache_put(half, k, seq, 20.0)
    assert half.keys_with_prefix("abcdef01", None) == [lo1, hi1]
    assert half.keys_with_prefix("abcdef03", None) == [lo3, hi3]
    for k in (lo1, hi1, lo3, hi3):  # a whole key: the range is that key alone
        assert half.keys_with_prefix(k, None) == [k]


def test_keys_with_prefix_expires_an_entry_exactly_at_live_after() -> None:
    base_key, delta_key = "abcdef01" + "1" * 56, "abcdef01" + "2" * 56
    state = CacheState()
    _cache_put(state, base_key, 1, 10.0)
    half = CacheState.from_bytes(state.to_bytes())
    _cache_put(half, delta_key, 2, 20.0)
    assert half.keys_with_prefix("abcdef01", 9.999) == [base_key, delta_key]
    assert half.keys_with_prefix("abcdef01", 10.0) == [delta_key]  # created == live_after
    assert half.keys_with_prefix("abcdef01", 19.999) == [delta_key]
    assert half.keys_with_prefix("abcdef01", 20.0) == []


# --- checkpoints: the sweep of temp files dead writers left ----------------------------


def test_a_checkpoint_write_sweeps_dead_writers_temp_files_only(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its pid names no process now
    live = subprocess.Popen([sys.executable, "-c",  # SIGHUP at its default (nohup ignores it)
                             "import signal, time; signal.signal(signal.SIGHUP, signal.SIG_DFL);"
                             " print(flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    live.stdout.readline()  # type: ignore[union-attr]  # its handler is set
    try:
        d = tmp_path / "checkpoints"
        d.mkdir()
        names = {w: f"cache.ckpt.{w}.0badf00d.tmp" for w in (dead.pid, live.pid, os.getpid())}
        names["odd"] = "cache.ckpt.x12.0badf00d.tmp"  # no pid: nobody's, swept
        other = d / f"tasks.ckpt.{dead.pid}.0badf00d.tmp"  # another view's: not this sweep's
        for n in [*names.values(), other.name]:
            (d / n).write_bytes(b"partial")
        CheckpointDir(d, readonly=False).write("cache", 1, 0, bytes(32), b"body")
        left = sorted(p.name for p in d.iterdir())
        assert left == sorted(["cache.ckpt", names[live.pid], names[os.getpid()], other.name])
    finally:
        live.terminate()
        # asked whether it lives (signal 0), never signalled: it dies of our SIGTERM (a
        # signal sent before would be pending, and a lower-numbered one is taken first)
        assert live.wait() == -signal.SIGTERM


def test_the_sweep_keeps_a_temp_file_of_a_process_it_may_not_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def kill(pid: int, sig: int) -> None:  # another user's process, as a non-root user sees it
        raise PermissionError(1, "Operation not permitted")

    d = tmp_path / "checkpoints"
    d.mkdir()
    (d / "cache.ckpt.1.0badf00d.tmp").write_bytes(b"partial")
    monkeypatch.setattr(os, "kill", kill)
    CheckpointDir(d, readonly=False).write("cache", 1, 0, bytes(32), b"body")
    assert sorted(p.name for p in d.iterdir()) == ["cache.ckpt", "cache.ckpt.1.0badf00d.tmp"]


# --- the cache's plain key search (the oracle find_key is tested against) -------------


def test_find_key_looks_only_at_the_first_n_keys_of_its_buffer() -> None:
    keys = [bytes([i]) * 32 for i in (1, 2, 3)]
    buf = memoryview(b"".join(keys))
    for find in (find_key, find_key_plain):
        assert [find(buf, 3, k) for k in keys] == [0, 1, 2]
        assert find(buf, 2, keys[2]) == -1  # past n: not a key of this base
        assert find(buf, 3, bytes(32)) == -1 and find(buf, 0, keys[0]) == -1


def _near(k: bytes) -> list[bytes]:
    """Keys just beside ``k``: its last byte one up and one down."""
    return [k[:31] + bytes([(k[31] + d) % 256]) for d in (1, 255)]


def test_find_key_finds_every_key_of_big_spread_skewed_and_clustered_sets() -> None:
    """The interpolation runs only past 16 keys (the property test's lists are short
    under mutmut): every key of sets of hundreds to thousands, spread as digests are,
    skewed towards zero, or sharing their first 8 bytes, is found where the plain
    search finds it, and a key beside each is not found."""
    spread = sorted(blake3.blake3(b"%d" % i).digest() for i in range(1500))
    cluster = [b"\x80" * 8 + blake3.blake3(b"c%d" % i).digest()[:24] for i in range(300)]
    skewed = [bytes(6) + i.to_bytes(2, "big") + bytes(24) for i in range(1, 400)]
    sets = [spread, sorted(spread[:700] + cluster), skewed, sorted(set(spread[::5] + skewed)),
            spread[:17]]
    for keys in sets:
        buf, present = memoryview(b"".join(keys)), set(keys)
        for n in (len(keys), len(keys) - 3):  # and a base of only the first n keys
            got = [find_key(buf, n, k) for k in keys]
            assert got == [*range(n), *([-1] * (len(keys) - n))]
            for probe in [bytes(32), b"\xff" * 32, *(x for k in keys for x in _near(k))]:
                if probe not in present:
                    assert find_key(buf, n, probe) == -1


# --- the JSON shapes `verify --json` and `salvage --json` print (docs/operations.md) ---


def test_verify_and_salvage_reports_keep_their_json_keys(tmp_path: Path) -> None:
    seg, data, offs = _one_segment_log(tmp_path)
    bad = bytearray(seg.read_bytes())
    bad[offs[1] + 10] ^= 0x5A
    seg.write_bytes(bytes(bad))
    with Ledger.open(tmp_path / "log") as led:
        report = led.verify()
        problem = report.problems[0]
        assert problem.to_json() == {"segment": seg.name, "offset": offs[1],
                                     "error": problem.error}
        assert report.to_json() == {  # every key of `verify --json`, docs/cli.md
            "ok": False, "events": report.events, "frames": report.frames,
            "head_seq": report.head_seq, "segments": 1, "base_seq": 1, "stale_segments": 0,
            "problems": [problem.to_json()]}
        rep = led.salvage().to_json()
    assert rep == {"salvaged": True, "lost": [[2, 3]], "lost_events": 2, "kept_events": 4,
                   "damaged_segments": [seg.name], "quarantined": [f"{seg.name}.damaged"],
                   "new_base_seq": 7, "new_head_seq": 11}  # a marker at 7, the 4 kept after


# --- errors: what each says and carries (the CLI prints the message as it is) ---------


@pytest.mark.parametrize("make, args, attrs, message", [
    (CorruptLogError, ("/l/1.seg", 64, "bad frame header",),
     {"segment": Path("/l/1.seg"), "offset": 64, "reason": "bad frame header"},
     "1.seg: corrupt log at byte 64 (bad frame header); run `ctxledger verify` for a report"),
    (UnsupportedFormatError, ("/l/1.seg", 9, 3,), {"segment": Path("/l/1.seg"), "version": 9},
     "1.seg: log format version 9 is newer than this ctxledger understands (<= 3); "
     "upgrade ctxledger"),
    (LockTimeout, ("/l/LOCK", 42, 2.25,), {"lock_path": Path("/l/LOCK"), "holder_pid": 42,
                                        "waited": 2.25},
     "log is locked by process 42 (/l/LOCK); gave up after 2.2s"),
    (LockTimeout, ("/l/LOCK", None, 1.0,), {"holder_pid": None},
     "log is locked by another process (/l/LOCK); gave up after 1.0s"),
    (HeadMismatchError, (3, 5,), {"expected": 3, "actual": 5},
     "expected log head 3, but it is 5; nothing written"),
    (GenerationChangedError, ("/l/7.seg",), {"segment": Path("/l/7.seg")},
     "7.seg was removed while it was read: the log moved to a new generation "
     "(ctxledger compact or salvage); run the command again"),
    (ImportRefusedError, (12, "bad json",), {"line": 12, "reason": "bad json"},
     "line 12: bad json; nothing was imported"),
    (NotOwnerError, ("/s", 1001, 1002,), {"path": Path("/s"), "owner_uid": 1001, "euid": 1002},
     "/s belongs to uid 1001, not to this user (uid 1002); ctxledger does not write to a "
     "store another user owns (its owner controls what you would read back): run as that "
     "user, or chown the store"),
    (StoreNotFoundError, ("/s",), {"path": Path("/s")},
     "no ctxledger store at /s (run `ctxledger init` first)"),
])
def test_errors_say_what_to_do_and_carry_their_fields(
    make: type[LedgerError], args: tuple[object, ...], attrs: dict[str, object], message: str
) -> None:
    err = make(*args)  # made here, not at collection: the test then runs the code it checks
    assert isinstance(err, LedgerError) and str(err) == message
    assert {k: getattr(err, k) for k in attrs} == attrs


# --- anchors of a compacted log: only seqs below the base are looked up ---------------


def test_anchor_digest_reads_the_anchors_file_only_for_seqs_below_the_base(
    tmp_path: Path,
) -> None:
    with Ledger.open(tmp_path / "plain") as led:  # never compacted: base 1, no anchors
        led.append([Event("x.y", "a", {})])
        assert led.base == 1 and led.anchor_digest(0) is None and led.anchor_digest(1) is None
    log = tmp_path / "log"
    with Ledger.open(log) as led:
        for i in range(3):
            led.append([_put(f"{i:064x}")])
        led.append([Event("cache.evicted", f"{0:064x}", {"reason": "manual_prune"})])
        digests = [led.digest_at(s) for s in range(1, 5)]
        assert compact(led).compacted
        base = led.base
        assert base == 5 and [led.anchor_digest(s) for s in range(1, 5)] == digests
        anchors = next(log.glob("*anchors*"))
        assert anchor_digest(anchors.read_bytes(), base) is None  # past every entry
        anchors.write_bytes(anchors.read_bytes()[:-1] + b"\x00")  # damaged
        assert led.anchor_digest(base) is None and led.anchor_digest(base + 1) is None
        with pytest.raises(CorruptLogError) as e:
            led.anchor_digest(base - 1)
        assert e.value.offset == 0 and e.value.segment == anchors
        assert e.value.reason == "anchors file does not match ledger.compacted"


def test_a_lock_file_without_a_pid_names_no_holder(tmp_path: Path) -> None:
    path = tmp_path / "LOCK"
    path.write_bytes(b"not-a-pid".ljust(32, b"\0"))
    lock = WriterLock(path, timeout=0.0)
    try:
        assert lock.holder_pid() is None
        path.write_bytes(b"4242".ljust(23) + b"\n" + bytes(8))
        assert lock.holder_pid() == 4242
    finally:
        lock.close()


# --- frames: iter_frames checks digests unless told not to; payload errors say why ----


def test_iter_frames_checks_the_chain_digest_by_default() -> None:
    frame = _frame(GENESIS_DIGEST, 1, 1.0)
    assert [f.first_seq for f in iter_frames(frame, 0, GENESIS_DIGEST, 1)] == [1]
    with pytest.raises(FrameError, match="checksum mismatch"):
        list(iter_frames(frame, 0, b"\x01" * 32, 1))  # chained to another digest
    assert [f.first_seq for f in iter_frames(frame, 0, b"\x01" * 32, 1, check=False)] == [1]


def test_a_payload_that_is_not_cbor_says_so() -> None:
    with pytest.raises(ValueError, match="^event data cannot be encoded as CBOR: "):
        encode_payload(1.0, None, [["x.y", "k", {"f": object()}]])


# --- checkpoints: a mapped file rewritten in place is found behind a removed one -------


def test_changed_in_place_looks_past_a_mapped_file_that_was_removed(tmp_path: Path) -> None:
    d = tmp_path / "checkpoints"
    ckd = CheckpointDir(d, readonly=False, mapped=True)
    for name in ("alpha", "beta", "gamma"):
        ckd.write(name, 1, 0, bytes(32), b"body of " + name.encode())
        assert len(list(ckd.load(name, []))) == 1  # mapped
    assert ckd.changed_in_place() == []
    (d / "alpha.ckpt").unlink()  # gone: the mapping keeps the old file, nothing to report
    for name in ("beta", "gamma"):
        with open(d / f"{name}.ckpt", "r+b") as f:  # rewritten in place (not by ctxledger)
            f.seek(0, os.SEEK_END)
            f.write(b"more")
    assert ckd.changed_in_place() == ["beta.ckpt", "gamma.ckpt"]
    with pytest.raises(LedgerError) as e:
        ckd.check_unchanged()
    assert str(e.value) == (
        f"checkpoint beta.ckpt, gamma.ckpt in {d} was rewritten in place while in use "
        "(ctxledger only replaces checkpoints by rename): nothing was served; "
        "run the command again")


# --- store: a whole key expires exactly ttl after its put, like a prefix ---------------


def test_resolve_key_expires_a_whole_key_and_a_prefix_exactly_ttl_after_the_put(
    tmp_path: Path,
) -> None:
    now = [1000.0]
    ttl = 100.0
    k1, k2 = "abcdef01" + "1" * 56, "abcdef01" + "2" * 56  # the view takes a put's key as given
    with MemoryLog(clock=lambda: now[0]) as log, ContextStore.open(
        tmp_path, log=log, clock=lambda: now[0], config=StoreConfig(ttl_seconds=ttl)
    ) as store:
        log.append([_put(k1), _put(k2)])  # at 1000.0
        now[0] = 1000.0 + ttl - 0.001  # just before the edge: both live
        assert store.resolve_key(k1) == k1 and store.resolve_key(k2[:12]) == k2
        with pytest.raises(AmbiguousKeyError) as e:
            store.resolve_key("ABCDEF01")
        assert (e.value.prefix, e.value.candidates) == ("abcdef01", [k1, k2])
        now[0] = 1000.0 + ttl  # at the edge: expired, whole key and prefix alike
        for want in (k1, k2[:12], "abcdef01"):
            with pytest.raises(UnknownKeyError):
                store.resolve_key(want)


# --- recall: structured matching levels and the live filter of path aliases -----------


@pytest.mark.parametrize("v, w, partial, level", [
    ("authservice", "authservice", False, 3),
    ("authservice.login", "login", False, 3),  # the last qualified component
    ("authservice#login", "login", True, 3),
    ("a.b", "", True, 0),  # an empty word matches nothing
    ("authservice", "service", False, 0),  # ends with it, not at a separator
    ("authservice", "service", True, 1),  # contains it
    ("login.handler", "log", True, 2),  # a prefix of the first component
    ("auth.service.x", "service", True, 2),  # a prefix of a later component
    ("login.xlogin", "login", True, 2),  # the first occurrence starts a component
    ("a.b", "x", True, 0),
    ("xlog.logy.zlog", "log", True, 2),  # the second of three occurrences starts one
    ("x...", "..", True, 2),  # an occurrence one byte after the first
])
def test_sym_level(v: str, w: str, partial: bool, level: int) -> None:
    assert sym_level(v, w, partial) == level


@pytest.mark.parametrize("v, cw, level", [
    ("src/auth.rs", "src/auth.rs", 2),
    ("a/src/auth.rs", "src/auth.rs", 2),  # a suffix at a separator
    ("xsrc/auth.rs", "src/auth.rs", 0),
    ("b/auth.rs", "src/auth.rs", 0),
    ("a/b/c.rs", "c.rs", 1),  # the basename
    ("a/b/c.rs", "b/c.rs", 2),
    ("src/auth.rs", "lib.rs", 0),
])
def test_path_level(v: str, cw: str, level: int) -> None:
    assert path_level(v, cw) == level


def _rdoc(key: str, created: float = 1.0, paths: tuple[str, ...] = (),
          syms: tuple[str, ...] = ()) -> RecallDoc:
    return RecallDoc(key, "t", created, "zz", paths, syms, (), (), (), (), 100)


def _score(ix: RecallIndex, query: str, key: str, live_after: float | None = None) -> float:
    return next(h.score for h in ix.search(query, now=10.0, live_after=live_after)
                if h.cache_key == key)


def test_path_boosts_exact_and_alias_and_an_alias_must_name_one_live_path() -> None:
    ix = RecallIndex.build([_rdoc("a", 5.0, paths=("src/auth.rs",)),
                            _rdoc("b", 3.0, paths=("lib/other.rs",))])
    # the boost alone: against the same words where the path does not match
    assert _score(ix, "src/auth.rs", "a") - _score(ix, "x/src/auth.rs", "a") == pytest.approx(
        BOOSTS["path_exact"])
    assert _score(ix, "auth.rs", "a") - _score(ix, "y/auth.rs", "a") == pytest.approx(
        BOOSTS["path_alias"])
    two = RecallIndex.build([_rdoc("a", 5.0, paths=("src/auth.rs",)),
                             _rdoc("c", 3.0, paths=("lib/auth.rs",))])
    no_alias = _score(two, "y/auth.rs", "a")
    assert _score(two, "auth.rs", "a") == pytest.approx(no_alias)  # two paths: no alias
    assert [h.matched_paths for h in two.search("auth.rs", now=10.0)] == [(), ()]
    assert ix.search("auth.rs", now=10.0)[0].matched_paths == ("src/auth.rs",)  # one: named
    # c expired: one live path left, an alias again; created == live_after is live
    assert _score(two, "auth.rs", "a", live_after=3.0) == pytest.approx(no_alias)
    assert _score(two, "auth.rs", "a", live_after=math.nextafter(3.0, 4.0)) == pytest.approx(
        _score(two, "y/auth.rs", "a", live_after=4.0) + BOOSTS["path_alias"])


def test_a_path_like_word_matches_symbols_partly_only_when_no_path_matched() -> None:
    ix = RecallIndex.build([_rdoc("a", syms=("config.rs_loader",)), _rdoc("b")])
    assert "symbol_match" in ix.search("config.rs", now=10.0)[0].match_reasons
    ix = RecallIndex.build([_rdoc("a", syms=("config.rs_loader",)),
                            _rdoc("c", paths=("src/config.rs",))])
    hits = {h.cache_key: h for h in ix.search("config.rs", now=10.0)}
    assert "path_match" in hits["c"].match_reasons
    assert "symbol_match" not in hits["a"].match_reasons


def test_filters_combine_as_an_intersection() -> None:
    def d(key: str, target: str, paths: tuple[str, ...], syms: tuple[str, ...],
          ptypes: tuple[str, ...]) -> RecallDoc:
        return RecallDoc(key, target, 1.0, "word", paths, syms, (), (), ptypes, (), 100)

    docs = [d("all", "t", ("src/a.rs",), ("Auth.login",), ("coverage",)),
            d("no-path", "t", ("src/b.rs",), ("Auth.login",), ("coverage",)),
            d("no-sym", "t", ("src/a.rs",), ("Other",), ("coverage",)),
            d("no-type", "t", ("src/a.rs",), ("Auth.login",), ("refactor",)),
            d("no-target", "u", ("src/a.rs",), ("Auth.login",), ("coverage",)),
            d("extra", "t", ("src/a.rs", "src/c.rs"), ("Auth.login",), ("coverage",))]
    ix = RecallIndex.build(docs)
    hits = ix.search("word", now=10.0, limit=10, target="t", packet_types=["coverage"],
                     path_filters=["src/a.rs"], symbol_filters=["login"])
    assert sorted(h.cache_key for h in hits) == ["all", "extra"]
    hits = ix.search("word", now=10.0, limit=10, path_filters=["src/a.rs"],
                     symbol_filters=["auth.login"])
    assert sorted(h.cache_key for h in hits) == ["all", "extra", "no-target", "no-type"]
    # each hit names what the filters matched (a basename filter names the path too)
    for pf in ("src/a.rs", "a.rs"):
        hit = ix.search("word", now=10.0, path_filters=[pf], symbol_filters=["login"])[0]
        assert (hit.matched_paths, hit.matched_symbols) == (("src/a.rs",), ("Auth.login",))


@pytest.mark.parametrize("n", [10, 40])  # narrowed as a list, and as arrays
def test_a_symbol_filter_narrows_many_trigram_candidates(n: int) -> None:
    # more than 8 symbols hold both trigrams of "foobar"; two hold the word itself
    syms = [f"foo_bar_{i}" for i in range(n)] + ["foobar_x", "xfoobar"]
    ix = RecallIndex.build([_rdoc(s, syms=(s,)) for s in syms])
    hits = ix.search("zz", now=10.0, limit=20, symbol_filters=["foobar"])
    assert sorted(h.cache_key for h in hits) == ["foobar_x", "xfoobar"]


def test_decode_rows_at_takes_a_non_empty_range_inside_the_batch() -> None:
    rows, count = encode_batch([Event("x.y", f"k{i}", {"i": i}) for i in range(3)], None)
    payload = payload_prefix(1.0, None) + rows
    assert [r[1] for r in decode_rows_at(payload, 0, 3) or []] == ["k0", "k1", "k2"]
    assert [r[1] for r in decode_rows_at(payload, 2, 3) or []] == ["k2"]
    for lo, hi in ((1, 1), (2, 1), (-1, 1), (0, 4)):  # empty, reversed, outside: not this shape
        assert decode_rows_at(payload, lo, hi) is None


@pytest.mark.parametrize("n", [3, 200])
def test_recall_leaves_out_the_one_expired_entry(n: int) -> None:
    """Exactly one entry of the base expired (the first), one a structured match reaches
    as well as the text: the live filter still applies to it."""
    ix = RecallIndex.build([RecallDoc(f"k{i:03d}", "t", float(i), "common word", ("src/a.rs",),
                                      ("Auth.login",), (), (), (), (), 100) for i in range(n)])
    want = [f"k{i:03d}" for i in range(1, n)]
    for live_after in (0.5, 1.0):  # k000 expired; k001 live (created == live_after)
        for query in ("common", "src/a.rs", "auth.login", "common src/a.rs auth.login"):
            hits = ix.search(query, now=float(n), limit=n, live_after=live_after)
            assert sorted(h.cache_key for h in hits) == want, query
            assert sorted(k for k, _ in ix.rank(query, limit=n, live_after=live_after)) == want


def test_cache_select_filters_by_expiry_target_and_time() -> None:
    state = CacheState()
    for seq, (key, target, at) in enumerate([("a" * 64, "t", 10.0), ("b" * 64, "u", 20.0),
                                            ("c" * 64, "t", 30.0)], 1):
        state.apply(attrs.evolve(Event("cache.put", key, {"packet": {"target": target},
                                                         "bytes": 1}), seq=seq, at=at))

    def keys(**kw: Any) -> list[str]:
        return [r.cache_key[0] for r in state.select(**kw)]

    assert keys(live_after=None) == ["c", "b", "a"]  # newest first
    assert keys(live_after=10.0) == ["c", "b"]  # created == live_after: expired
    assert keys(live_after=None, target="t") == ["c", "a"]
    assert keys(live_after=None, since=20.0) == ["c", "b"]  # inclusive
    assert keys(live_after=None, until=20.0) == ["b", "a"]  # inclusive


def test_recall_leaves_out_a_removed_entry_when_nothing_expired() -> None:
    ix = RecallIndex.build([RecallDoc(f"k{i:03d}", "t", float(i), "common word", (), (), (),
                                      (), (), (), 100) for i in range(200)])
    ix.remove("k005")
    hits = ix.search("common", now=1000.0, limit=300)
    assert len(hits) == 199 and "k005" not in {h.cache_key for h in hits}


def test_data_nested_too_deep_is_refused_with_the_limit_named() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(MAX_DATA_DEPTH + 1):
        node["n"] = {}
        node = node["n"]
    with pytest.raises(InvalidEventError) as e:
        MemoryLog().append([Event("x.y", "k", deep)])
    assert str(e.value) == (
        f"event data nests deeper than {MAX_DATA_DEPTH} levels of maps and arrays")


def test_a_symbol_filter_narrows_by_three_trigram_lists() -> None:
    # "foobarbaz": trigrams foo, bar, baz; more than 8 candidates after each narrowing
    syms = [f"foo_bar_baz_{i:02d}" for i in range(12)] + ["foobarbaz_x", "xfoobarbaz"]
    ix = RecallIndex.build([_rdoc(s, syms=(s,)) for s in syms])
    hits = ix.search("zz", now=10.0, limit=20, symbol_filters=["foobarbaz"])
    assert sorted(h.cache_key for h in hits) == ["foobarbaz_x", "xfoobarbaz"]



def test_discard_removes_the_named_copy_of_a_checkpoint_only(tmp_path: Path) -> None:
    d = tmp_path / "checkpoints"
    ckd = CheckpointDir(d, readonly=False)
    ckd.write("cache", 1, 0, bytes(32), b"first")
    ckd.write("cache", 1, 0, bytes(32), b"second")  # the first becomes the backup
    assert sorted(p.name for p in d.iterdir()) == ["cache.ckpt", "cache.ckpt.bak"]
    ckd.discard("cache", "primary")
    assert sorted(p.name for p in d.iterdir()) == ["cache.ckpt.bak"]
    ckd.discard("cache", "primary")  # gone already: nothing to do
    ckd.discard("cache", "backup")
    assert list(d.iterdir()) == []


# -- a later run's survivors (.ci/mutate over eventstore/ with working test maps) --------


def test_an_anchor_refusal_says_exactly_why() -> None:
    from eventstore.anchor import Anchor

    with pytest.raises(ValueError) as info:
        Anchor.parse("0:" + "ab" * 32)
    assert str(info.value) == ("seq 0 anchors nothing (every log has it): take an anchor "
                               "with `ctxledger log head` after the first append")
    # the seq ends at the first colon: a second one is part of the digest, not a seq
    with pytest.raises(ValueError) as info:
        Anchor.parse("5:" + "ab" * 31 + ":b")
    assert str(info.value) == repr("5:" + "ab" * 31 + ":b") + (
        " is not an anchor: DIGEST must be 64 hex digits")
    assert Anchor.parse(" 5:" + "AB" * 32 + "\n") == Anchor(5, bytes.fromhex("ab" * 32))


def test_a_head_that_moved_under_an_anchor_read_is_named() -> None:
    from eventstore.anchor import head_anchor

    class CutBack:
        head = 7

        def digest_at(self, seq: int) -> bytes | None:
            return None  # cut back below 7 between the two reads

    with pytest.raises(LedgerError) as info:
        head_anchor(CutBack())  # type: ignore[arg-type]
    assert str(info.value) == "the log changed under us at seq 7; run the command again"


def test_a_payload_error_keeps_its_offset_and_reason() -> None:
    from eventstore.frame import PayloadError

    e = PayloadError(17, "rows do not decode")
    assert (e.offset, e.reason, str(e)) == (17, "rows do not decode",
                                            "byte 17: rows do not decode")


def test_stored_bytes_that_are_not_cbor_say_so() -> None:
    from eventstore.records import StoredEvent

    with pytest.raises(ValueError) as info:
        StoredEvent(3, 1.0, b"\xff\xff").event()
    assert str(info.value).startswith("event bytes are not valid CBOR: ")
    with pytest.raises(ValueError, match=r"^event is not \[kind, key, data\]$"):
        StoredEvent(3, 1.0, b"\x80").event()  # an empty array


def test_a_ledger_names_its_directory_and_head(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "log") as led:
        led.append([Event("r.r", None, {}), Event("r.r", None, {})])
        assert repr(led) == f"Ledger({str(tmp_path / 'log')!r}, head=2)"


def test_segment_content_leaves_out_the_preallocated_zeros(tmp_path: Path) -> None:
    from eventstore.segments import segment_content

    seg = tmp_path / "x.seg"
    body = b"H" * SEGMENT_HEADER_SIZE + b"frame\x01"
    seg.write_bytes(body + bytes(4096))
    assert segment_content(seg) == body
    seg.write_bytes(body)
    assert segment_content(seg) == body
    seg.write_bytes(b"H" * SEGMENT_HEADER_SIZE + bytes(100))  # nothing but zeros after
    assert segment_content(seg) == b"H" * SEGMENT_HEADER_SIZE


def test_only_a_generation_markers_row_is_a_marker() -> None:
    from eventstore.frame import encode_row
    from eventstore.generation import is_marker

    def marker(kind: str) -> bool:
        return is_marker(encode_row([kind, None, {"lost": []}]))

    assert marker("ledger.compacted") and marker("ledger.salvaged")
    assert not marker("ledger.compacte") and not marker("ledger.other")
    assert not marker("x.ledger.compacted") and not marker("a.b")
    assert not marker("ledger." + "x" * 40)  # a long kind: its text starts a byte later


def test_reload_forgets_the_old_generation_before_it_loads_the_new(tmp_path: Path) -> None:
    """What ``Tip.reload`` resets is what a log with no segment leaves in place: a handle
    that reloads into an empty directory knows nothing of what it saw before."""
    from eventstore.tip import Tip
    from eventstore.window import BatchWindow

    log = tmp_path / "log"
    with Ledger.open(log) as led:
        led.append([Event("t.t", None, {})])
    tip = Tip(log, BatchWindow(log, 16), 1 << 20)
    tip.load()
    assert tip.head == 1 and tip.path is not None and tip.last_at > 0
    tip.torn, tip.torn_seg, tip.end_stable = (5, "x"), log / "y.seg", False
    for p in log.glob("*.seg"):
        p.unlink()
    new_generations: list[int] = []
    tip.on_new_generation = lambda: new_generations.append(1)
    tip.reload()
    assert (tip.path, tip.base, tip.head, tip.digest) == (None, 0, 0, GENESIS_DIGEST)
    assert (tip.torn, tip.torn_seg, tip.last_at) == (None, None, 0.0)
    assert (tip.end, tip.end_stable, tip.fd, new_generations) == (0, True, -1, [1])


def test_a_symbol_filter_whose_candidates_lie_past_every_value_of_the_next_list() -> None:
    """The rarest trigram's list (an array: more than 24 candidates) holds symbols
    numbered after every symbol of the next list: each lookup lands past that list's
    end and must stay inside it."""
    syms = ([f"xdefx{i:02d}" for i in range(40)] + ["abcdef"]
            + [f"abcx{i:02d}" for i in range(30)])
    ix = RecallIndex.build([_rdoc(s, syms=(s,)) for s in syms])
    hits = ix.search("zz", now=10.0, limit=50, symbol_filters=["abcdef"])
    assert [h.cache_key for h in hits] == ["abcdef"]
    assert ix.search("zz", now=10.0, limit=50, symbol_filters=["abcxdef"]) == []


def test_a_doc_matched_exactly_names_no_path_that_is_only_an_ambiguous_alias() -> None:
    """``x.py`` equals a's first path and is the basename of two more (a's second, b's):
    a is boosted for the exact path, and its hit names that path only, not the other
    one whose basename matched (an alias naming more than one live path counts not)."""
    ix = RecallIndex.build([_rdoc("a", 5.0, paths=("x.py", "src/x.py")),
                            _rdoc("b", 3.0, paths=("lib/x.py",))])
    hits = {h.cache_key: h.matched_paths for h in ix.search("x.py", now=10.0)}
    assert hits == {"a": ("x.py",), "b": ()}


def test_every_kind_of_nesting_counts_to_the_same_depth_limit() -> None:
    """Tuples, tags and the keys of a mapping are levels as maps and lists are: the
    deepest data each may hold, and one level more refused with the limit named."""
    import cbor2

    def fits(data: dict[str, Any]) -> bool:
        try:
            MemoryLog().append([Event("x.y", None, data)])
        except InvalidEventError as e:
            assert str(e) == (
                f"event data nests deeper than {MAX_DATA_DEPTH} levels of maps and arrays")
            return False
        return True

    def nest(k: int, wrap: Any) -> Any:
        x: Any = 0
        for _ in range(k):
            x = wrap(x)
        return x

    wraps = {  # inside {"v": ...}, which is the first level
        "list": lambda x: [x], "dict": lambda x: {"n": x}, "tuple": lambda x: (x,),
        "tag": lambda x: cbor2.CBORTag(4000, x),
    }
    for name, wrap in wraps.items():
        assert fits({"v": nest(MAX_DATA_DEPTH - 1, wrap)}), name
        assert not fits({"v": nest(MAX_DATA_DEPTH, wrap)}), name
    # maps under a tuple (data that is not plain is walked by the other walker)
    assert fits({"v": (nest(MAX_DATA_DEPTH - 2, lambda x: {"n": x}),)})
    assert not fits({"v": (nest(MAX_DATA_DEPTH - 1, lambda x: {"n": x}),)})
    # a key of a map is a level below the map, as its value is
    assert fits({"v": {nest(MAX_DATA_DEPTH - 2, lambda x: (x,)): 0}})
    assert not fits({"v": {nest(MAX_DATA_DEPTH - 1, lambda x: (x,)): 0}})
    # and so is the key of a map the other walker reaches (a map inside a tuple)
    assert fits({"v": ({nest(MAX_DATA_DEPTH - 3, lambda x: (x,)): 0},)})
    assert not fits({"v": ({nest(MAX_DATA_DEPTH - 2, lambda x: (x,)): 0},)})


def test_a_memory_log_says_it_is_closed_and_keeps_its_clock() -> None:
    log = MemoryLog(clock=lambda: 0.25)
    assert log.append([Event("x.y", None, {})]).at == 0.25  # a new log's time starts at 0
    log.close()
    with pytest.raises(LedgerError) as info:
        log.append([Event("x.y", None, {})])
    assert str(info.value) == "log is closed"


@pytest.mark.parametrize("pad,size", [(70, None), (71, 101), (87, 117)])
def test_a_batch_over_the_frame_limit_with_its_time_and_id_is_refused_by_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pad: int, size: int | None) -> None:
    """Rows that fit while the whole payload (time and id in front) does not: refused,
    every backend, with the payload's size (the limit made small to reach it here)."""
    import eventstore.frame as frame_mod

    monkeypatch.setattr(frame_mod, "MAX_PAYLOAD", 100)
    for log in (MemoryLog(), Ledger.open(tmp_path / "log")):
        if size is None:
            assert log.append([Event("x.y", None, {"pad": "x" * pad})]).last_seq == 1
            log.close()
            continue
        with pytest.raises(InvalidEventError) as info:
            log.append([Event("x.y", None, {"pad": "x" * pad})])
        assert str(info.value) == f"batch payload of {size} bytes exceeds the 100-byte frame limit"
        assert log.head == 0
        log.close()


def test_flush_syncs_what_was_left_unsynced_once_and_fails_closed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sync="none"``: a flush syncs the active segment and the segments rolled past
    (one that vanished meanwhile passed over), then nothing until the next append; a
    sync that fails poisons the handle, in its own words."""
    import errno

    from eventstore import LedgerIOError, WriterPoisonedError, _osio

    log = tmp_path / "log"
    synced: list[int] = []
    real = _osio.fdatasync

    def counting(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(_osio, "fdatasync", counting)
    with Ledger.open(log, sync="none", segment_bytes=4096) as led:
        while len(list(log.glob("*.seg"))) < 3:
            led.append([Event("f.f", None, {"pad": "x" * 500})])
        assert synced == []
        first = sorted(log.glob("*.seg"))[0]
        first.rename(tmp_path / "moved.seg")  # as if a compaction had taken it
        led.flush()
        assert len(synced) == 2  # the second segment and the active one
        led.flush()
        assert len(synced) == 2  # nothing appended since: nothing to sync
        led.append([Event("f.f", None, {})])
        led.flush()
        assert len(synced) == 3
        led.append([Event("f.f", None, {})])

        def failing(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(_osio, "fdatasync", failing)
        with pytest.raises(LedgerIOError) as info:
            led.flush()
        assert str(info.value) == "flush failed: Input/output error"
        monkeypatch.setattr(_osio, "fdatasync", counting)
        with pytest.raises(WriterPoisonedError) as poisoned:
            led.append([Event("f.f", None, {})])
        assert str(poisoned.value) == "an fsync failed; reopen the log before appending again"
        led.flush()  # a poisoned handle's flush does nothing
        assert len(synced) == 3


def test_an_eviction_whose_data_is_not_a_map_is_passed_over() -> None:
    """A crafted log can hold any CBOR as an event's data: a fold reads it as malformed
    rather than failing on it."""
    from projections.cache import parse_evict

    key = "ab" * 32
    assert parse_evict(Event("cache.evicted", key, {"reason": "ttl"})) == (
        bytes.fromhex(key), "ttl")
    for data in ([1, 2], "reason", None, {"reason": 3}):
        assert parse_evict(Event("cache.evicted", key, data)) is None  # type: ignore[arg-type]
    assert parse_evict(Event("cache.evicted", "zz" * 32, {"reason": "ttl"})) is None


def test_read_frame_header_past_the_end_of_its_buffer() -> None:
    """Nothing to walk at ``off`` (at or past the end): the frame's header is incomplete
    there, by the bytes that are left."""
    for buf, off, left in ((b"", 0, 0), (b"12345", 5, 0), (b"x" * 10, 3, 7)):
        with pytest.raises(FrameError) as info:
            read_frame_header(buf, off)
        assert (info.value.offset, info.value.reason) == (
            off, f"incomplete frame header ({left} bytes)")


def test_the_seal_of_a_replaced_segment(tmp_path: Path) -> None:
    """open_for_seal: a write descriptor, or -1 when there is nothing to open; the seal:
    ``CTXG`` and the new base (u64, little-endian) at the offset given, nothing for -1."""
    from eventstore.generation import SEAL_MAGIC, open_for_seal, seal_segment

    seg = tmp_path / "old.seg"
    seg.write_bytes(b"." * 40)
    assert open_for_seal(None) == -1 and open_for_seal(tmp_path / "gone.seg") == -1
    fd = open_for_seal(seg)
    assert fd >= 0
    try:
        seal_segment(fd, 16, 0x0102030405)
        seal_segment(-1, 0, 7)  # nothing to write through: nothing happens
    finally:
        os.close(fd)
    assert seg.read_bytes() == (b"." * 16 + SEAL_MAGIC + (0x0102030405).to_bytes(8, "little")
                                + b"." * 12)


def test_an_anchors_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    from eventstore import LedgerIOError
    from eventstore.generation import anchors_name, read_anchors

    assert read_anchors(tmp_path, 5) == b""  # none: a generation without older anchors
    (tmp_path / anchors_name(5)).mkdir()
    with pytest.raises(LedgerIOError) as info:
        read_anchors(tmp_path, 5)
    assert str(info.value) == f"cannot read {tmp_path / anchors_name(5)}: Is a directory"


def test_refold_indexes_in_bulk_and_reports_progress(tmp_path: Path) -> None:
    """A refold hands back states ready to serve: the recall view's documents indexed
    during the fold (what a rebuild times), and the fold's progress heard."""
    with ContextStore.open(tmp_path) as st:
        st.put_many([{"target": "t", "summary": f"entry {i}"} for i in range(5)])
        heard: list[int] = []
        fresh, n = st.runner.refold(["recall", "cache"], progress=heard.append)
        assert n == st.ledger.head and sum(heard) > 0
        assert fresh["recall"]._pending == {}  # type: ignore[attr-defined]
        assert len(fresh["recall"].index) == 5  # type: ignore[attr-defined]


def test_a_checkpoint_that_cannot_be_discarded_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from eventstore import LedgerIOError

    d = tmp_path / "checkpoints"
    ckd = CheckpointDir(d, readonly=False)
    ckd.write("cache", 1, 0, bytes(32), b"first")

    def refuse(self: Path, missing_ok: bool = False) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "unlink", refuse)
    with pytest.raises(LedgerIOError) as info:
        ckd.discard("cache", "primary")
    assert str(info.value) == "cannot remove checkpoint cache primary: Permission denied"
    monkeypatch.undo()
    CheckpointDir(d, readonly=True).discard("cache", "primary")  # read-only: leaves it
    assert (d / "cache.ckpt").exists()


# --- the cache listing's filters apply together (CacheState._matching) ----------------


def _listing_state() -> CacheState:
    """Entries 1-8 made at 10 x i; the even ones of target a, the odd ones of b."""
    state = CacheState()
    for i in range(1, 9):
        state.apply(Event("cache.put", f"{i:064x}", {"packet": {"target": "ab"[i % 2]},
                                                      "bytes": 10}, seq=i, at=10.0 * i))
    return state


def _listed(state: CacheState, **kw: Any) -> list[int]:
    refs, total = state.select_page(0, 100, **{"live_after": None, **kw})
    assert total == len(refs)
    return [int(r.cache_key, 16) for r in refs]


def test_the_listing_applies_every_filter_together() -> None:
    state = _listing_state()
    assert _listed(state) == [8, 7, 6, 5, 4, 3, 2, 1]
    assert _listed(state, live_after=45.0, since=20.0) == [8, 7, 6, 5]
    assert _listed(state, live_after=15.0, until=40.0) == [4, 3, 2]
    assert _listed(state, target="a", since=50.0) == [8, 6]
    assert _listed(state, target="b", live_after=35.0, until=70.0) == [7, 5]
    assert _listed(state, target="nope") == []
    # an unknown target with entries to leave out: nothing, not an index error
    assert _listed(state, target="nope", exclude={f"{2:064x}"}) == []
    assert _listed(state, target="a", exclude={f"{2:064x}"}) == [8, 6, 4]


def test_a_cache_checkpoint_cut_short_or_overlong_is_refused_by_name() -> None:
    data = _listing_state().to_bytes()
    assert CacheState.from_bytes(data).snapshot() == _listing_state().snapshot()
    with pytest.raises(ValueError, match="^cache checkpoint is shorter than its columns$"):
        CacheState.from_bytes(data[:-1])
    with pytest.raises(ValueError, match="^cache checkpoint has trailing bytes$"):
        CacheState.from_bytes(data + b"\0")


def test_an_entry_of_a_store_without_files_has_no_freshness(tmp_path: Path) -> None:
    """Freshness is checked only against a files root: without one it is None (not
    checked), never an empty answer."""
    with ContextStore.open(tmp_path) as store:
        store.files_root = None  # as when the project root is no directory on disk
        key = store.put({"target": "t", "summary": "s"}).cache_key
        entry = store.get(key)
        assert entry is not None and entry.freshness is None


def test_read_bytes_from_an_offset_and_its_error(tmp_path: Path) -> None:
    from eventstore.segments import read_bytes

    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    assert read_bytes(p) == b"0123456789" and read_bytes(p, 4) == b"456789"
    with pytest.raises(LedgerIOError) as err:
        read_bytes(tmp_path / "missing")
    assert str(err.value) == f"cannot read {tmp_path / 'missing'}: No such file or directory"


def test_a_target_number_the_cache_view_does_not_hold_is_named() -> None:
    state = _listing_state()
    assert [state._target(i) for i in range(len(state.targets))] == state.targets
    for tid in (len(state.targets), -1):
        with pytest.raises(LedgerError, match=(
                f"^the cache view names target #{tid}, which it does not hold: its "
                r"checkpoint is damaged or forged; run `ctxledger rebuild`$")):
            state._target(tid)


def test_damage_inside_the_active_segment_is_named_where_it_is(tmp_path: Path) -> None:
    """A writer opening a log whose last segment holds a bad frame with whole frames
    after it: media damage, named by segment, offset and reason (a torn tail would be
    cut; this must not be)."""
    seg, data, offs = _one_segment_log(tmp_path)
    bad = bytearray(data)
    bad[offs[1] + 2] ^= 0x5A  # the frame magic of frame 2
    seg.write_bytes(bytes(bad))
    with pytest.raises(CorruptLogError) as err:
        with Ledger.open(tmp_path / "log") as led:
            led.append([Event("x.x", None, {})])
    assert (err.value.segment, err.value.offset, err.value.reason) == (
        seg, offs[1], "bad frame header")
    assert seg.read_bytes() == bytes(bad)


def test_data_of_a_type_cbor_cannot_encode_is_refused_by_name(tmp_path: Path) -> None:
    """The refusal names the type (``frame._encode_other``), and nothing is written."""
    with Ledger.open(tmp_path / "log") as led:
        with pytest.raises(InvalidEventError) as info:
            led.append([Event("a.a", None, {"x": object()})])
        assert str(info.value) == ("event data cannot be encoded as CBOR: "
                                   "cannot serialize type object")
        assert led.head == 0


def test_a_put_without_a_byte_count_counts_zero_and_one_whose_data_is_no_map_is_skipped(
) -> None:
    """``parse_put``: ``bytes`` is optional (0); data that is not a map (a log written by
    something else) is a malformed put, counted and skipped, never a crash."""
    st = CacheState()
    st.apply(Event("cache.put", "ab" * 32, {"packet": {"target": "t"}}, seq=1, at=1.0))
    st.apply(Event("cache.put", "cd" * 32, ["packet", {"target": "t"}], seq=2,  # type: ignore[arg-type]
                   at=2.0))
    snap = st.snapshot()
    assert snap["entries"] == {"ab" * 32: (1, 1.0, "t", 0)}
    assert (snap["seq"], snap["skipped_bad"]) == (2, 1)


def test_a_read_only_ledger_refuses_to_append_in_words(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "log") as led:
        led.append([Event("a.a")])
    with Ledger.open(tmp_path / "log", readonly=True) as led:
        with pytest.raises(LedgerError) as info:
            led.append([Event("a.a")])
        assert str(info.value) == "ledger was opened read-only" and led.head == 1


def test_a_write_that_makes_no_progress_is_an_error_not_a_loop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from eventstore import _osio

    monkeypatch.setattr(_osio, "pwrite", lambda fd, data, offset: 0)
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="^short write$"):
            _osio.write_all(fd, b"abc", 0)
    finally:
        os.close(fd)


def test_a_retried_batch_id_returns_the_first_receipt_with_its_id(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "log") as led:
        led.append([Event("a.a")])
        first = led.append([Event("a.a"), Event("a.a")], batch_id="b-1")
        led.append([Event("a.a")], batch_id="b-2")
        again = led.append([Event("a.a")], batch_id="b-1")
        assert again.duplicate and again.batch_id == "b-1"
        assert (again.first_seq, again.last_seq, again.at) == (
            first.first_seq, first.last_seq, first.at)
        assert led.head == 4


def test_a_handle_keeps_the_settings_it_was_opened_with_and_says_when_it_is_closed(
        tmp_path: Path) -> None:
    led = Ledger.open(tmp_path / "log", sync="batch", segment_bytes=8192, lock_timeout=1.5,
                      batch_window=7, sync_interval=2.5)
    assert (led.sync, led.segment_bytes, led.lock_timeout, led.batch_window,
            led.sync_interval, led.readonly) == ("batch", 8192, 1.5, 7, 2.5, False)
    led.close()
    with pytest.raises(LedgerClosedError) as err:
        _ = led.head
    assert str(err.value) == "ledger is closed"
