"""One behavioural contract for every log backend, and the file backend's own checks.

``LedgerContract`` is not collected by itself (its name does not start with
``Test``); a backend is done when a ``Test<Backend>(LedgerContract)`` subclass
passes. The contract uses only what :class:`LogBackend` offers. What only the
file backend has (reopening, several handles, read-only opens, sync modes,
the batch-id window, segment files and their bytes) is checked in the
``TestFile*`` classes.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import blake3
import cbor2
import pytest
import strategies as S
from hypothesis import HealthCheck, given, settings

from eventstore import (
    Batch,
    CorruptLogError,
    Event,
    HeadMismatchError,
    InvalidEventError,
    Ledger,
    LedgerClosedError,
    LedgerError,
    LogBackend,
    MemoryLog,
    StoredEvent,
    StoreNotFoundError,
    UnsupportedFormatError,
)
from eventstore.event import MAX_DATA_DEPTH
from eventstore.frame import (
    GENESIS_DIGEST,
    MAX_READ_VERSION,
    SEGMENT_HEADER_SIZE,
    encode_frame,
    iter_frames,
    payload_prefix,
)


def ev(i: int, kind: str = "test.event", key: str | None = None, **extra: Any) -> Event:
    return Event(kind, key, {"i": i, **extra})


def nested(depth: int, wrap: Any, inner: Any = None) -> Any:
    """``depth`` levels: ``wrap`` applied ``depth - 1`` times around ``inner`` (default {})."""
    x = {} if inner is None else inner
    for _ in range(depth - 1):
        x = wrap(x)
    return x


def frozenset_of(x: Any) -> frozenset[Any]:
    return frozenset([x])


class LedgerContract:
    """Behaviour every backend must show. Subclasses say how to open a log."""

    def make_log(self, tmp_path: Path) -> Any:
        """A fresh, empty log (``tmp_path`` is the test's own directory, if one is needed)."""
        raise NotImplementedError

    def state(self, log: Any, tmp_path: Path) -> Any:
        """Everything the log holds, for "nothing was written" checks."""
        return (log.head, log.head_digest, list(log.read()), list(log.read_batches()))

    # --- seqs, read, head -------------------------------------------------------------

    def test_is_a_log_backend(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path) as log:
            assert isinstance(log, LogBackend)

    def test_empty_log(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path) as log:
            assert log.head == 0
            assert log.head_digest == GENESIS_DIGEST
            assert list(log.read()) == [] and list(log.read_batches()) == []
            assert log.digest_at(0) == GENESIS_DIGEST
            assert log.verify().ok

    def test_append_assigns_gapless_seqs_from_one(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path) as log:
            r1 = log.append([ev(1)])
            r2 = log.append([ev(2), ev(3), ev(4)])
            r3 = log.append([ev(5)])
            assert (r1.first_seq, r1.last_seq) == (1, 1)
            assert (r2.first_seq, r2.last_seq) == (2, 4)
            assert (r3.first_seq, r3.last_seq) == (5, 5)
            assert not (r1.duplicate or r2.duplicate or r3.duplicate)
            assert log.head == 5
            got = list(log.read())
            assert [e.seq for e in got] == [1, 2, 3, 4, 5]
            assert [e.data["i"] for e in got] == [1, 2, 3, 4, 5]
            # ``at`` is assigned by the log, per batch, and never goes backwards
            assert got[1].at == got[2].at == got[3].at == r2.at
            assert all(e.at > 0 for e in got)
            assert r1.at <= r2.at <= r3.at

    def test_read_returns_exact_events(self, tmp_path: Path) -> None:
        data = {
            "s": "x",
            "n": -3,
            "f": 1.5,
            "b": b"\x00\xff",
            "l": [1, [2]],
            "d": {"k": None},
            "t": True,
        }
        with self.make_log(tmp_path) as log:
            log.append([Event("task.created", "t1", data), Event("task.note")])
            a, b = list(log.read())
            assert (a.kind, a.key, a.data) == ("task.created", "t1", data)
            assert (b.kind, b.key, b.data) == ("task.note", None, {})

    def test_events_read_back_are_ordinary_events(self, tmp_path: Path) -> None:
        """Readers may build events without ``__init__`` (for speed): they must be the same."""
        with self.make_log(tmp_path) as log:
            r = log.append([Event("task.note", "k", {"n": [1]}), Event("task.note")])
            a, b = list(log.read())
            assert a == Event("task.note", "k", {"n": [1]}, seq=1, at=r.at)
            assert b == Event("task.note", None, {}, seq=2, at=r.at)
            assert repr(a) == repr(Event("task.note", "k", {"n": [1]}, seq=1, at=r.at))
            assert type(a) is Event and attrs.asdict(b)["seq"] == 2
            with pytest.raises(attrs.exceptions.FrozenInstanceError):
                a.kind = "other"  # type: ignore[misc]
            assert attrs.evolve(a, key="k2").key == "k2"
            (batch,) = log.read_batches()
            assert batch.events == (a, b) and all(type(e) is Event for e in batch.events)

    def test_unknown_kinds_are_just_data(self, tmp_path: Path) -> None:
        """The log gives no kind a meaning: one no projection knows reads back unchanged."""
        e = Event("someday.maybe-v2", "k", {"x": [1, {"y": None}]})
        with self.make_log(tmp_path) as log:
            r = log.append([e])
            assert list(log.read()) == [attrs.evolve(e, seq=1, at=r.at)]
            assert [b.events for b in log.read_batches()] == [(attrs.evolve(e, seq=1, at=r.at),)]

    def test_read_range(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path) as log:
            log.append([ev(1), ev(2), ev(3)])
            log.append([ev(4)])
            log.append([ev(5), ev(6)])
            assert [e.seq for e in log.read(from_seq=2, to_seq=5)] == [2, 3, 4, 5]
            assert [e.seq for e in log.read(from_seq=3, to_seq=3)] == [3]
            assert [e.seq for e in log.read(from_seq=5)] == [5, 6]
            assert [e.seq for e in log.read(to_seq=1)] == [1]
            assert [e.seq for e in log.read(from_seq=0)] == [1, 2, 3, 4, 5, 6]
            assert list(log.read(from_seq=7)) == []
            assert list(log.read(from_seq=5, to_seq=4)) == []

    # --- batches: the record type -------------------------------------------------------

    def test_read_batches_yields_whole_batches(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path) as log:
            log.append([ev(1), ev(2)])
            log.append([ev(3)])
            log.append([ev(4), ev(5), ev(6)])
            spans = [(b.first_seq, b.last_seq) for b in log.read_batches(from_seq=2)]
            assert spans == [(1, 2), (3, 3), (4, 6)]
            assert [(b.first_seq, b.last_seq) for b in log.read_batches(2, 3)] == [(1, 2), (3, 3)]
            assert [b.first_seq for b in log.read_batches(5, 5)] == [4]
            assert [b.first_seq for b in log.read_batches(0)] == [1, 3, 4]
            assert list(log.read_batches(7)) == [] and list(log.read_batches(3, 2)) == []

    def test_batches_are_records(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path) as log:
            r1 = log.append([ev(1), ev(2, key="k")], batch_id="first")
            r2 = log.append([ev(3)])
            b1, b2 = log.read_batches()
            assert type(b1) is Batch
            assert (b1.first_seq, b1.last_seq, b1.at, b1.batch_id) == (1, 2, r1.at, "first")
            assert (b2.first_seq, b2.last_seq, b2.at, b2.batch_id) == (3, 3, r2.at, None)
            assert isinstance(b1.events, tuple)
            assert [(e.seq, e.at, e.key) for e in b1.events] == [(1, r1.at, None), (2, r1.at, "k")]
            assert list(b1.events) + list(b2.events) == list(log.read())
            with pytest.raises(attrs.exceptions.FrozenInstanceError):
                b1.at = 0.0  # type: ignore[misc]

    def test_batch_is_atomic_and_one_at(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path) as log:
            r = log.append([ev(i) for i in range(50)])
            assert (r.first_seq, r.last_seq) == (1, 50)
            (batch,) = log.read_batches()
            assert len(batch.events) == 50 and batch.last_seq == 50
            assert {e.at for e in batch.events} == {r.at}

    def test_any_batches_round_trip(self, tmp_path: Path) -> None:
        """Any batches read back as written; one log for every example (a backend whose
        logs are costly to make, a replicated stream say, pays for one), each example
        reading what it appended past the head it found."""
        with self.make_log(tmp_path) as log:

            @settings(max_examples=15, deadline=None,  # every backend runs these
                      suppress_health_check=[HealthCheck.differing_executors])
            @given(batches=S.batch_lists)
            def check(batches: list[list[Event]]) -> None:
                start = log.head
                for b in batches:
                    log.append(b)
                want = [r for b in batches for r in S.as_rows(b)]
                got = list(log.read(start + 1))
                assert [(e.kind, e.key, e.data) for e in got] == want
                assert [e.seq for e in got] == list(range(start + 1, start + len(want) + 1))
                assert [len(b.events) for b in log.read_batches(start + 1)] == [
                    len(b) for b in batches]

            check()

    # --- optimistic concurrency and idempotent retries ------------------------------------

    def test_expected_head(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path) as log:
            assert log.append([ev(1)], expected_head=0).first_seq == 1
            assert log.append([ev(2)], expected_head=1).first_seq == 2
            before = self.state(log, tmp_path)
            with pytest.raises(HeadMismatchError) as info:
                log.append([ev(3)], expected_head=1)
            assert (info.value.expected, info.value.actual) == (1, 2)
            assert "expected log head 1" in str(info.value)
            assert self.state(log, tmp_path) == before
            assert [e.data["i"] for e in log.read()] == [1, 2]

    def test_batch_id_retry_returns_original_receipt(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path) as log:
            r1 = log.append([ev(1), ev(2)], batch_id="b-1")
            log.append([ev(3)])
            before = self.state(log, tmp_path)
            r2 = log.append([ev(9), ev(9), ev(9)], batch_id="b-1")
            assert r2.duplicate and not r1.duplicate
            assert (r2.first_seq, r2.last_seq, r2.at, r2.batch_id) == (
                r1.first_seq,
                r1.last_seq,
                r1.at,
                "b-1",
            )
            assert self.state(log, tmp_path) == before  # a retry writes nothing
            # a retry wins over a stale expected_head: it is the same append
            r3 = log.append([ev(1), ev(2)], batch_id="b-1", expected_head=0)
            assert r3.duplicate and r3.first_seq == 1
            r4 = log.append([ev(4)], batch_id="b-2")
            assert r4.first_seq == 4 and not r4.duplicate and r4.batch_id == "b-2"

    # --- invalid input: rejected before any byte is written --------------------------------

    @pytest.mark.parametrize(
        "bad",
        [
            pytest.param(lambda: [Event("")], id="empty-kind"),
            pytest.param(lambda: [Event("a..b")], id="bad-kind"),
            pytest.param(lambda: [Event("has space")], id="kind-with-space"),
            pytest.param(lambda: [Event(5)], id="kind-not-str"),  # type: ignore[arg-type]
            pytest.param(lambda: [Event(["k"])], id="kind-unhashable"),  # type: ignore[arg-type]
            pytest.param(lambda: [Event("k", 7)], id="key-not-str"),  # type: ignore[arg-type]
            pytest.param(lambda: [Event("k", None, [1, 2])], id="data-list"),  # type: ignore[arg-type]
            pytest.param(lambda: [Event("k", None, "x")], id="data-str"),  # type: ignore[arg-type]
            pytest.param(lambda: [Event("k", None, {"x": object()})], id="data-not-cbor"),
            pytest.param(lambda: [ev(1), Event("k", None, {"f": lambda: 1})], id="second-not-cbor"),
            pytest.param(lambda: [], id="empty-batch"),
            pytest.param(lambda: [{"kind": "k"}], id="not-an-event"),
        ],
    )
    def test_invalid_events_rejected_before_writing(self, tmp_path: Path, bad: Any) -> None:
        with self.make_log(tmp_path) as log:
            log.append([ev(1)])
            before = self.state(log, tmp_path)
            with pytest.raises(InvalidEventError):
                log.append(bad())
            assert self.state(log, tmp_path) == before
            assert log.append([ev(2)]).first_seq == 2

    def test_bad_kinds_rejected(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path) as log:

            @settings(max_examples=20, deadline=None,  # every backend runs these
                      suppress_health_check=[HealthCheck.differing_executors])
            @given(kind=S.bad_kinds)
            def check(kind: str) -> None:
                with pytest.raises(InvalidEventError):
                    log.append([Event(kind)])
                assert log.head == 0

            check()

    def test_bad_batch_id_rejected(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path) as log:
            for bad in ["", "x" * 201, 5]:
                with pytest.raises(InvalidEventError):
                    log.append([ev(1)], batch_id=bad)
            assert log.head == 0

    @pytest.mark.parametrize(
        "data",
        [
            pytest.param(lambda: nested(MAX_DATA_DEPTH + 1, lambda x: {"a": x}), id="maps-201"),
            pytest.param(lambda: {"l": nested(MAX_DATA_DEPTH, lambda x: [x])}, id="lists-201"),
            pytest.param(lambda: {"t": nested(300, lambda x: (x,))}, id="tuples-300"),
            pytest.param(lambda: nested(5000, lambda x: {"a": x}), id="maps-5000"),
            pytest.param(lambda: {"t": cbor2.CBORTag(1, "not a time")}, id="tag-fails-decoding"),
            # the decoder counts each set as two levels: 199 of them pass the walk only
            pytest.param(lambda: {"s": nested(200, frozenset_of, 1)}, id="sets-199"),
        ],
    )
    def test_data_readers_could_not_decode_is_refused(self, tmp_path: Path, data: Any) -> None:
        """Regression: data nested ~400 levels deep was encoded and written, but cbor2
        refuses to decode it, which bricked the log for every reader."""
        with self.make_log(tmp_path) as log:
            log.append([ev(1)])
            before = self.state(log, tmp_path)
            with pytest.raises(InvalidEventError):
                log.append([ev(2), Event("deep.data", None, data())])
            assert self.state(log, tmp_path) == before
            assert [e.data["i"] for e in log.read()] == [1]

    def test_data_at_the_depth_limit_round_trips(self, tmp_path: Path) -> None:
        deepest = nested(MAX_DATA_DEPTH, lambda x: {"a": x})
        mixed = {"l": nested(MAX_DATA_DEPTH - 1, lambda x: [x, {"k": 1}])}
        exotic = {"t": (1, (2,)), "s": frozenset({3}), "tag": cbor2.CBORTag(4000, [1])}
        with self.make_log(tmp_path) as log:
            log.append([Event("deep.data", None, deepest), Event("deep.data", None, mixed)])
            log.append([Event("odd.data", None, exotic)])
            a, b, c = list(log.read())
            assert a.data == deepest and b.data == mixed
            # as cbor2 decodes them: tuples come back as lists, a tag's array as a tuple
            assert c.data == {"t": [1, [2]], "s": {3}, "tag": cbor2.CBORTag(4000, (1,))}

    # --- digests ------------------------------------------------------------------------

    def test_digest_at(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path) as log:
            assert log.digest_at(0) == GENESIS_DIGEST and log.digest_at(1) is None
            log.append([ev(1)])
            d1 = log.head_digest
            log.append([ev(2), ev(3)])
            d3 = log.head_digest
            log.append([ev(4)])
            d4 = log.head_digest
            assert len({GENESIS_DIGEST, d1, d3, d4}) == 4
            assert all(len(d) == 32 for d in (d1, d3, d4))
            assert log.digest_at(0) == GENESIS_DIGEST
            assert log.digest_at(1) == d1
            assert log.digest_at(2) is None  # inside a batch
            assert log.digest_at(3) == d3
            assert log.digest_at(4) == d4 == log.head_digest
            assert log.digest_at(5) is None  # past head
            assert log.digest_at(-1) is None

    def test_digest_at_the_head_of_a_growing_log(self, tmp_path: Path) -> None:
        """What a checkpoint records as its watermark, the log confirms later."""
        with self.make_log(tmp_path) as log:
            marks = []
            for i in range(30):
                log.append([ev(i) for _ in range(1 + i % 4)])
                marks.append((log.head, log.head_digest))
                assert log.digest_at(log.head) == log.head_digest
            assert all(log.digest_at(seq) == digest for seq, digest in marks)
            ends = {b.last_seq for b in log.read_batches()}
            assert ends == {seq for seq, _d in marks}
            assert all(log.digest_at(s) is None for s in range(1, log.head) if s not in ends)

    def test_same_events_same_chain_only_with_same_history(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path / "a") as a, self.make_log(tmp_path / "b") as b:
            a.append([ev(1)])
            b.append([ev(2)])
            a.append([ev(3)])
            b.append([ev(3)])
            assert a.digest_at(2) != b.digest_at(2)

    # --- point reads --------------------------------------------------------------------

    def test_read_raw_matches_read(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path) as log:
            assert log.read_raw(1) is None
            log.append([ev(1, key="a"), Event("odd.kind", None, {"t": (1, 2)})])
            log.append([ev(3)])
            for e in log.read():
                raw = log.read_raw(e.seq)
                assert type(raw) is StoredEvent
                assert (raw.seq, raw.at) == (e.seq, e.at)
                assert raw.event() == e
                # the event's own bytes, exactly as written inside its batch
                assert raw.row == cbor2.dumps([e.kind, e.key, e.data])
            for seq in (0, -1, 4, 10**6):
                assert log.read_raw(seq) is None

    def test_raw_batches_of_a_seq_range(self, tmp_path: Path) -> None:
        """Raw and decoded, the batches overlapping ``[from_seq, to_seq]``, whole; none
        for an empty range (even when one batch holds seqs on both sides of it)."""
        with self.make_log(tmp_path) as log:
            log.append([ev(1)])
            log.append([ev(2), ev(3), ev(4)])
            log.append([ev(5)])

            def firsts(*args: Any) -> list[tuple[int, int]]:
                raw = [(b.first_seq, len(b.rows)) for b in log.read_raw_batches(*args)]
                decoded = [(b.first_seq, len(b.events)) for b in log.read_batches(*args)]
                assert raw == decoded
                return raw

            assert firsts() == [(1, 1), (2, 3), (5, 1)]
            assert firsts(1, 1) == [(1, 1)] and firsts(2, 2) == [(2, 3)]
            assert firsts(3, 3) == [(2, 3)] and firsts(3, 4) == [(2, 3)]
            assert firsts(4, 5) == [(2, 3), (5, 1)] and firsts(3) == [(2, 3), (5, 1)]
            assert firsts(3, 2) == [] and firsts(6) == [] and firsts(0, 0) == []

    def test_read_raw_inside_a_big_batch(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path) as log:
            log.append([ev(0)])
            log.append([ev(i, pad="x" * (i % 50)) for i in range(1, 2001)])
            log.append([ev(2001)])
            events = {e.seq: e for e in log.read()}
            for seq in (2, 3, 1000, 1234, 2000, 2001, 2002):
                raw = log.read_raw(seq)
                assert raw is not None and raw.event() == events[seq]
                assert len(raw.row) < 100  # one event's bytes, not its batch's
            assert log.read_raw(2003) is None

    # --- verify, lifecycle, threads -------------------------------------------------------

    def test_verify_report(self, tmp_path: Path) -> None:
        with self.make_log(tmp_path) as log:
            empty = log.verify()
            assert (empty.ok, empty.events, empty.frames, empty.head_seq, empty.problems) == (
                True,
                0,
                0,
                0,
                (),
            )
            log.append([ev(1), ev(2)])
            log.append([ev(3)])
            rep = log.verify()
            assert (rep.ok, rep.events, rep.frames, rep.head_seq, rep.problems) == (
                True,
                3,
                2,
                3,
                (),
            )
            js = rep.to_json()
            assert {"ok", "events", "frames", "head_seq", "problems"} <= set(js)
            assert js["ok"] is True and js["problems"] == []

    def closed_ops(self, log: Any) -> list[Any]:
        """Every protocol call, to check each refuses a closed log."""
        return [
            lambda: log.head,
            lambda: log.head_digest,
            lambda: log.append([ev(2)]),
            lambda: list(log.read()),
            lambda: list(log.read_batches()),
            lambda: log.digest_at(1),
            log.verify,
            lambda: log.read_raw(1),
        ]

    def test_export_is_the_file_logs_byte_for_byte(self, tmp_path: Path) -> None:
        """The same batches at the same times export the same JSON Lines from every
        backend (what lets ``log mirror`` and ``log import`` move a log between them)."""
        batches: list[tuple[list[Event], str | None]] = [
            ([ev(1)], None),
            ([ev(2, key="k"), Event("odd.data", None, {"t": (1, (2,)), "b": b"\x00"})], "b-1"),
            ([ev(i, pad="p" * (i % 5)) for i in range(40)], None),
        ]
        with self.make_log(tmp_path) as log:
            ats = iter([log.append(b, batch_id=bid).at for b, bid in batches])
            with Ledger.open(tmp_path / "file-log", clock=lambda: next(ats)) as led:
                for b, bid in batches:
                    led.append(b, batch_id=bid)
                assert list(log.export_lines()) == list(led.export_lines())
                assert list(log.export_lines(3, 10, "test.event")) == list(
                    led.export_lines(3, 10, "test.event"))
                assert [(b.first_seq, b.at, b.batch_id, b.rows) for b in log.read_raw_batches(2)] \
                    == [(b.first_seq, b.at, b.batch_id, b.rows) for b in led.read_raw_batches(2)]

    def test_closed_handle(self, tmp_path: Path) -> None:
        log = self.make_log(tmp_path)
        log.append([ev(1)])
        log.close()
        log.close()  # idempotent
        for op in self.closed_ops(log):
            with pytest.raises(LedgerClosedError):
                op()

    def test_readers_see_only_whole_batches(self, tmp_path: Path) -> None:
        """A reader racing a writer on the same log never sees part of a batch."""
        size, n_batches = 7, 150
        with self.make_log(tmp_path) as log:
            log.append([Event("batch.part", "-1", {"b": -1, "j": j}) for j in range(size)])
            write_racing(
                lambda b: log.append(
                    [Event("batch.part", str(b), {"b": b, "j": j}) for j in range(size)]
                ),
                n_batches,
                lambda: check_whole_batches(log, size),
            )
            assert log.head == size * (n_batches + 1)


def write_racing(append: Any, n_batches: int, check: Any) -> None:
    """Run ``append(b)`` for each batch on a thread while ``check()`` runs here, repeatedly."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for b in range(n_batches):
                append(b)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            stop.set()

    t = threading.Thread(target=write)
    t.start()
    checks = 0
    while not stop.is_set() or checks < 3:
        check()
        checks += 1
    t.join()
    assert not errors


def check_whole_batches(log: Any, size: int) -> None:
    assert log.head % size == 0
    got = list(log.read())
    assert len(got) % size == 0
    for i in range(0, len(got), size):
        group = got[i : i + size]
        assert [e.data["j"] for e in group] == list(range(size))
        assert len({e.data["b"] for e in group}) == 1
    for batch in log.read_batches():
        assert len(batch.events) == size and (batch.first_seq - 1) % size == 0


# --- the in-memory backend ------------------------------------------------------------------


class TestMemoryLog(LedgerContract):
    def make_log(self, tmp_path: Path) -> MemoryLog:
        return MemoryLog()

    def test_clock_and_at_never_going_backwards(self) -> None:
        times = iter([5.0, 3.0, 7.0, 7.0])
        with MemoryLog(clock=lambda: next(times)) as log:
            ats = [log.append([ev(i)]).at for i in range(4)]
            assert ats == [5.0, 5.0, 7.0, 7.0]
            assert [e.at for e in log.read()] == ats

    def test_batch_ids_are_never_forgotten(self) -> None:
        with MemoryLog() as log:
            first = log.append([ev(0)], batch_id="old")
            for i in range(50):
                log.append([ev(i)], batch_id=f"b{i}")
            again = log.append([ev(0)], batch_id="old")
            assert again.duplicate and again.first_seq == first.first_seq

    def test_damaged_bytes_fail_closed_but_point_reads_only_check_structure(self) -> None:
        """A changed byte in a stored batch: reads and verify refuse it, naming where;
        a point read (structure only) returns it, which is why its callers
        authenticate what they get."""
        with MemoryLog() as log:
            log.append([ev(1)])
            log.append([Event("k", None, {"v": "aaaa"})])
            log.append([ev(3)])
            frame = log._chain.frames[1]
            log._chain.frames[1] = frame.replace(b"aaaa", b"aaab")
            where = log._chain.offsets[1]
            assert [e.seq for e in log.read(1, 1)] == [1]
            with pytest.raises(CorruptLogError) as info:
                list(log.read())
            assert (str(info.value.segment), info.value.offset) == ("memory", where)
            with pytest.raises(CorruptLogError):
                list(log.read_batches(2))
            rep = log.verify()
            assert not rep.ok and [(p.segment, p.offset) for p in rep.problems] == [
                ("memory", where)
            ]
            raw = log.read_raw(2)
            assert raw is not None and raw.event().data == {"v": "aaab"}
            log._chain.frames[1] = frame[:20] + b"\xff" + frame[21:]  # the header's seqs
            with pytest.raises(CorruptLogError):
                log.read_raw(2)


def test_memory_log_and_file_ledger_chain_alike(tmp_path: Path) -> None:
    """Same batches, same ``at`` values: the same chain digests, events and records."""
    batches: list[tuple[list[Event], str | None]] = [
        ([ev(1)], None),
        ([ev(2, key="k"), Event("odd.data", None, {"t": (1, (2,)), "b": b"\x00"})], "bid-1"),
        ([ev(i, pad="p" * (i % 7)) for i in range(500)], None),
        ([Event("x")], "bid-2"),
    ]
    with Ledger.open(tmp_path / "log") as led:
        receipts = [led.append(b, batch_id=bid) for b, bid in batches]
        ats: Iterator[float] = iter([r.at for r in receipts])
        with MemoryLog(clock=lambda: next(ats)) as mem:
            assert [mem.append(b, batch_id=bid) for b, bid in batches] == receipts
            assert mem.head_digest == led.head_digest
            for r in receipts:
                assert mem.digest_at(r.last_seq) == led.digest_at(r.last_seq) is not None
            assert list(mem.read_batches()) == list(led.read_batches())
            assert list(mem.read(3, 300)) == list(led.read(3, 300))


# --- the file backend -------------------------------------------------------------------------


class FileLog:
    """How the file-backend tests open a log: the directory ``tmp_path / "log"``."""

    def make_ledger(self, tmp_path: Path, **options: Any) -> Ledger:
        return Ledger.open(tmp_path / "log", **options)

    def snapshot(self, tmp_path: Path) -> dict[str, bytes]:
        """Every file under ``tmp_path`` (name -> bytes): "nothing was written"."""
        return {
            str(p.relative_to(tmp_path)): p.read_bytes()
            for p in sorted(tmp_path.rglob("*"))
            if p.is_file()
        }


class TestFileLedger(FileLog, LedgerContract):
    def make_log(self, tmp_path: Path) -> Ledger:
        return self.make_ledger(tmp_path)

    def state(self, log: Any, tmp_path: Path) -> Any:
        return (super().state(log, tmp_path), self.snapshot(tmp_path))


class TestFileHandles(FileLog):
    """Reopening, several handles and processes on one directory, read-only opens."""

    def test_reopen_keeps_everything(self, tmp_path: Path) -> None:
        with self.make_ledger(tmp_path) as led:
            led.append([ev(1, key="a")])
            led.append([ev(2), ev(3)])
            before = list(led.read())
            digest = led.head_digest
        with self.make_ledger(tmp_path) as led:
            assert led.head == 3
            assert list(led.read()) == before
            assert led.head_digest == digest
            assert led.append([ev(4)]).first_seq == 4
        with self.make_ledger(tmp_path, readonly=True) as ro:
            assert [e.seq for e in ro.read()] == [1, 2, 3, 4]
            assert ro.digest_at(4) is not None and ro.digest_at(3) == digest

    @settings(
        max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(batches=S.batch_lists)
    def test_any_batches_round_trip_through_a_reopen(
        self, tmp_path_factory: pytest.TempPathFactory, batches: list[list[Event]]
    ) -> None:
        tmp = tmp_path_factory.mktemp("rt")
        with self.make_ledger(tmp, sync="none") as led:
            for b in batches:
                led.append(b)
        with self.make_ledger(tmp, readonly=True) as led:
            want = [r for b in batches for r in S.as_rows(b)]
            assert [(e.kind, e.key, e.data) for e in led.read()] == want
            assert [e.seq for e in led.read()] == list(range(1, len(want) + 1))

    def test_second_handle_sees_appends(self, tmp_path: Path) -> None:
        with self.make_ledger(tmp_path) as a, self.make_ledger(tmp_path) as b:
            a.append([ev(1)])
            assert b.head == 1
            assert b.append([ev(2)]).first_seq == 2
            assert a.head == 2
            assert a.append([ev(3)]).first_seq == 3
            assert [e.data["i"] for e in b.read()] == [1, 2, 3]

    def test_expected_head_sees_other_handles(self, tmp_path: Path) -> None:
        with self.make_ledger(tmp_path) as a, self.make_ledger(tmp_path) as b:
            h = a.head
            b.append([ev(1)])
            with pytest.raises(HeadMismatchError):
                a.append([ev(2)], expected_head=h)
            assert a.head == 1 and len(list(a.read())) == 1

    def test_batch_id_retry_after_reopen(self, tmp_path: Path) -> None:
        with self.make_ledger(tmp_path) as led:
            r1 = led.append([ev(1)], batch_id="once")
            led.append([ev(2)])
        with self.make_ledger(tmp_path) as led:
            r2 = led.append([ev(1)], batch_id="once")
            assert r2.duplicate
            assert (r2.first_seq, r2.last_seq, r2.at) == (r1.first_seq, r1.last_seq, r1.at)
            assert led.head == 2

    def test_batch_id_retry_across_two_handles(self, tmp_path: Path) -> None:
        with self.make_ledger(tmp_path) as a, self.make_ledger(tmp_path) as b:
            # b loads its id index before a commits, and must still notice a's batch
            assert not b.append([ev(0)], batch_id="b-first").duplicate
            ra = a.append([ev(1)], batch_id="shared")
            rb = b.append([ev(1)], batch_id="shared")
            assert rb.duplicate and (rb.first_seq, rb.at) == (ra.first_seq, ra.at)
            # and the other way round, with a's index loaded lazily
            rb2 = b.append([ev(2)], batch_id="other")
            ra2 = a.append([ev(2)], batch_id="other")
            assert ra2.duplicate and ra2.first_seq == rb2.first_seq
            assert a.head == b.head == 3

    @pytest.mark.parametrize("later", [0, 1, 2, 3, 4])
    def test_batch_id_window_counts_frames_for_every_handle(
        self, tmp_path: Path, later: int
    ) -> None:
        """Regression: a reopened handle recognised an id among the last batch_window
        *frames*, a long-lived one among the last batch_window *ids*. Both now keep the
        last batch_window frames (batches), ids or not, whoever wrote them."""
        window = 3

        def retried(led: Any) -> bool:
            return bool(led.append([ev(9)], batch_id="x").duplicate)

        with self.make_ledger(tmp_path / "a", batch_window=window) as live:
            assert not live.append([ev(0)], batch_id="x").duplicate
            with self.make_ledger(tmp_path / "a") as other:  # frames by another writer count
                for k in range(later):
                    other.append([ev(k)], batch_id=f"other-{k}" if k % 2 else None)
            live_says = retried(live)
        with self.make_ledger(tmp_path / "b") as w:
            w.append([ev(0)], batch_id="x")
            for k in range(later):
                w.append([ev(k)], batch_id=f"other-{k}" if k % 2 else None)
        with self.make_ledger(tmp_path / "b", batch_window=window) as reopened:
            reopened_says = retried(reopened)
        assert live_says == reopened_says == (later < window)

    def test_batch_id_window_moves_on(self, tmp_path: Path) -> None:
        with self.make_ledger(tmp_path, batch_window=2) as led:
            for k in range(6):
                led.append([ev(k)], batch_id=f"b{k}")
                assert led.append([ev(k)], batch_id=f"b{k}").duplicate
                if k >= 2:
                    assert not led.append([ev(k)], batch_id=f"b{k - 2}").duplicate
                    assert led.append([ev(k)], batch_id=f"b{k - 2}").duplicate

    def test_data_at_the_depth_limit_reads_back_after_a_reopen(self, tmp_path: Path) -> None:
        deepest = nested(MAX_DATA_DEPTH, lambda x: {"a": x})
        with self.make_ledger(tmp_path) as led:
            led.append([Event("deep.data", None, deepest)])
        with self.make_ledger(tmp_path, readonly=True) as ro:
            assert [e.data for e in ro.read()] == [deepest]

    def test_readonly_open_of_missing_store(self, tmp_path: Path) -> None:
        with pytest.raises(StoreNotFoundError):
            self.make_ledger(tmp_path / "nowhere", readonly=True)
        assert not (tmp_path / "nowhere").exists()

    def test_readonly_refuses_appends(self, tmp_path: Path) -> None:
        with self.make_ledger(tmp_path) as led:
            led.append([ev(1)])
        with self.make_ledger(tmp_path, readonly=True) as ro:
            before = self.snapshot(tmp_path)
            with pytest.raises(LedgerError):
                ro.append([ev(2)])
            assert ro.head == 1
            assert self.snapshot(tmp_path) == before

    def test_readers_see_only_whole_batches_of_another_handle(self, tmp_path: Path) -> None:
        """A reader handle racing a writer handle never sees part of a batch."""
        size, n_batches = 7, 150
        with self.make_ledger(tmp_path, sync="none") as r:
            r.append([Event("batch.part", "-1", {"b": -1, "j": j}) for j in range(size)])
            with self.make_ledger(tmp_path, sync="none") as w:
                write_racing(
                    lambda b: w.append(
                        [
                            Event("batch.part", str(b), {"b": b, "j": j, "pad": "p" * 300})
                            for j in range(size)
                        ]
                    ),
                    n_batches,
                    lambda: check_whole_batches(r, size),
                )
            assert r.head == size * (n_batches + 1)


class TestFileSegments(FileLog):
    """Segment files and their bytes: rolls, torn tails, damage, stray files, indexes."""


    def test_segments_roll_and_reads_cross_them(self, tmp_path: Path) -> None:
        with self.make_ledger(tmp_path, segment_bytes=4096, sync="none") as led:
            for i in range(120):
                led.append([ev(i, pad="x" * 80), ev(i, pad="y" * 20)])
            segs = sorted((tmp_path / "log").glob("*.seg"))
            assert len(segs) >= 4
            assert [p.name for p in segs] == sorted(p.name for p in segs)
            assert segs[0].name == f"{1:020d}.seg"
            got = list(led.read())
            assert [e.seq for e in got] == list(range(1, 241))
            # a read starting and ending inside later segments
            mid = int(segs[2].name[:20])
            assert [e.seq for e in led.read(mid - 1, mid + 1)] == [mid - 1, mid, mid + 1]
            rep = led.verify()
            assert rep.ok and rep.segments == len(segs) and rep.events == 240 and rep.frames == 120
        with self.make_ledger(tmp_path, readonly=True) as ro:
            assert ro.head == 240 and [e.seq for e in ro.read(200)] == list(range(200, 241))

    def test_segment_size_not_a_multiple_of_1024(self, tmp_path: Path) -> None:
        """Regression: the creator of a segment sealed it at ``segment_bytes`` while
        every other handle sealed at the whole KiB in the header, so two writers
        disagreed where a segment ends and wrote the same seqs twice."""
        with (
            self.make_ledger(tmp_path, segment_bytes=5000, sync="none") as a,
            self.make_ledger(tmp_path, segment_bytes=5000, sync="none") as b,
        ):
            for i in range(200):
                (a if i % 2 else b).append([ev(i, pad="x" * 50)])
            assert [e.data["i"] for e in a.read()] == list(range(200))
            assert a.verify().ok

    def test_head_and_read_see_other_writers_rolls(self, tmp_path: Path) -> None:
        with self.make_ledger(tmp_path, segment_bytes=4096, sync="none") as a:
            a.append([ev(0)])
            with self.make_ledger(tmp_path, readonly=True) as ro:
                assert ro.head == 1
                for i in range(1, 100):
                    a.append([ev(i, pad="z" * 100)])
                assert len(list((tmp_path / "log").glob("*.seg"))) > 2
                assert ro.head == 100
                assert [e.data["i"] for e in ro.read()] == list(range(100))

    def test_newer_format_version_is_refused(self, tmp_path: Path) -> None:
        with self.make_ledger(tmp_path) as led:
            led.append([ev(1)])
        seg = next((tmp_path / "log").glob("*.seg"))
        data = bytearray(seg.read_bytes())
        struct.pack_into("<H", data, 8, MAX_READ_VERSION + 1)
        data[56:64] = blake3.blake3(bytes(data[:56])).digest()[:8]  # a well-formed header
        seg.write_bytes(bytes(data))
        for readonly in (True, False):
            led = self.make_ledger(tmp_path, readonly=readonly)
            ops = (lambda h: h.head, lambda h: list(h.read()), lambda h: h.append([ev(2)]))
            for op in ops:
                with pytest.raises(UnsupportedFormatError) as info:
                    op(led)
                assert str(info.value) == (
                    f"{seg.name}: log format version {MAX_READ_VERSION + 1} is newer than "
                    f"this ctxledger understands (<= {MAX_READ_VERSION}); upgrade ctxledger")
            rep = led.verify()
            assert not rep.ok and rep.problems[0].segment == seg.name
            led.close()
        assert seg.read_bytes() == bytes(data)

    @pytest.mark.parametrize(
        "damage",
        [
            pytest.param(lambda raw: raw[:30], id="cut-inside-header"),
            pytest.param(lambda raw: b"", id="empty-file"),
            pytest.param(lambda raw: bytes(SEGMENT_HEADER_SIZE), id="zero-header"),
            pytest.param(lambda raw: bytes(4096), id="zero-filled"),
            # no frame follows a zero header: torn, however non-zero the byte after it
            pytest.param(lambda raw: bytes(SEGMENT_HEADER_SIZE) + b"\xff" + bytes(63),
                         id="zero-header-then-junk"),
        ],
    )
    def test_torn_new_segment_is_ignored_then_moved_aside(
        self, tmp_path: Path, damage: Any
    ) -> None:
        """Regression: a last segment whose header is incomplete or all zeros and which
        holds no frame (a power cut while it was created, sync="none") made the log
        fail closed for good. It is a torn tail: readers ignore it, a writer moves it
        to quarantine/ and carries on."""
        log = tmp_path / "log"
        with self.make_ledger(tmp_path, segment_bytes=4096, sync="none") as led:
            head = 0
            while head < 40 or sorted(log.glob("*.seg"))[-1].stat().st_size < 4096:
                head = led.append([ev(head, pad="x" * 100)]).last_seq
        # the segment the next append would create, torn as a power cut can leave it
        torn = log / f"{head + 1:020d}.seg"
        torn.write_bytes(damage(b"x" * 64))
        before = self.snapshot(tmp_path)
        for readonly in (True, False):
            with self.make_ledger(tmp_path, readonly=readonly) as led:
                assert led.head == head
                assert [e.data["i"] for e in led.read()] == list(range(head))
                assert [e.seq for e in led.read(head - 1)] == [head - 1, head]
                assert led.digest_at(head) == led.head_digest
                rep = led.verify()
                assert not rep.ok and rep.head_seq == head
                assert [(p.segment, p.offset) for p in rep.problems] == [(torn.name, 0)]
                assert "torn new segment" in rep.problems[0].error
        assert self.snapshot(tmp_path) == before  # readers (and idle writers) change nothing
        with self.make_ledger(tmp_path, segment_bytes=4096) as led:
            assert led.append([ev(head)]).first_seq == head + 1
            assert [e.data["i"] for e in led.read()] == list(range(head + 1))
            assert led.verify().ok
        moved = log / "quarantine" / f"{torn.name}.header.torn"
        assert moved.read_bytes() == before[f"log/{torn.name}"]
        assert torn.read_bytes()[:8] == b"CTXLSEG\x00"  # a real segment took its name

    def test_torn_new_segment_after_a_short_segment(self, tmp_path: Path) -> None:
        """A power cut can also cost the frames at the end of the segment before the torn
        one: the writer sets the torn segment aside and continues the one before."""
        log = tmp_path / "log"
        with self.make_ledger(tmp_path, segment_bytes=4096, sync="none") as led:
            led.append([ev(0)])
        (log / f"{5:020d}.seg").write_bytes(b"")  # as if seqs 2..4 had been lost
        with self.make_ledger(tmp_path, readonly=True) as ro:
            assert ro.head == 1 and [e.seq for e in ro.read()] == [1]
        with self.make_ledger(tmp_path) as led:
            assert led.append([ev(1)]).first_seq == 2
            assert [p.name for p in sorted(log.glob("*.seg"))] == [f"{1:020d}.seg"]
            assert led.verify().ok

    def test_only_segment_torn_is_an_empty_log(self, tmp_path: Path) -> None:
        log = tmp_path / "log"
        log.mkdir()
        (log / f"{1:020d}.seg").write_bytes(bytes(10))
        with self.make_ledger(tmp_path, readonly=True) as ro:
            assert ro.head == 0 and list(ro.read()) == [] and not ro.verify().ok
        with self.make_ledger(tmp_path) as led:
            assert led.append([ev(1)]).first_seq == 1
            assert led.verify().ok and led.head == 1

    @pytest.mark.parametrize(
        "damage",
        [
            pytest.param("zero-header-then-frames", id="zero-header-then-frames"),
            pytest.param("valid-header-wrong-base", id="valid-header-wrong-base"),
            pytest.param("garbage-header", id="garbage-header"),
        ],
    )
    def test_damaged_last_segment_header_stays_corrupt(self, tmp_path: Path, damage: str) -> None:
        """Only a header that a power cut can leave (short, or zeros with no frame after
        it) is torn; a valid-looking but wrong header, or frames behind a zeroed header,
        fail closed."""
        log = tmp_path / "log"
        with self.make_ledger(tmp_path, segment_bytes=4096, sync="none") as led:
            for i in range(60):
                led.append([ev(i, pad="x" * 100)])
        last = sorted(log.glob("*.seg"))[-1]
        raw = bytearray(last.read_bytes())
        assert len(raw) > SEGMENT_HEADER_SIZE + 64
        if damage == "zero-header-then-frames":
            raw[:SEGMENT_HEADER_SIZE] = bytes(SEGMENT_HEADER_SIZE)
        elif damage == "valid-header-wrong-base":
            struct.pack_into("<Q", raw, 16, int(last.name[:20]) + 1)
            raw[56:64] = blake3.blake3(bytes(raw[:56])).digest()[:8]
        else:
            raw[:SEGMENT_HEADER_SIZE] = b"\x5a" * SEGMENT_HEADER_SIZE
        last.write_bytes(bytes(raw))
        before = self.snapshot(tmp_path)
        for readonly in (True, False):
            with self.make_ledger(tmp_path, readonly=readonly) as led:
                with pytest.raises(CorruptLogError) as info:
                    list(led.read())
                assert info.value.segment.name == last.name and info.value.offset == 0
                with pytest.raises(LedgerError):
                    led.append([ev(99)])
                assert not led.verify().ok
        assert self.snapshot(tmp_path) == before

    def test_torn_tail_is_ignored_then_cut_by_a_writer(self, tmp_path: Path) -> None:
        with self.make_ledger(tmp_path) as led:
            for i in range(3):
                led.append([ev(i)])
        seg = next((tmp_path / "log").glob("*.seg"))
        whole = seg.read_bytes()
        seg.write_bytes(whole[:-10])  # the last frame lost its last 10 bytes
        torn = self.snapshot(tmp_path)
        with self.make_ledger(tmp_path, readonly=True) as ro:
            assert ro.head == 2
            assert [e.data["i"] for e in ro.read()] == [0, 1]
            rep = ro.verify()
            assert not rep.ok and "torn" in rep.problems[0].error
        with self.make_ledger(tmp_path) as led:  # a writer that only reads changes nothing
            assert led.head == 2 and len(list(led.read())) == 2
        assert self.snapshot(tmp_path) == torn
        with self.make_ledger(tmp_path) as led:
            assert led.append([ev(9)]).first_seq == 3
            assert [e.data["i"] for e in led.read()] == [0, 1, 9]
            assert led.verify().ok
        # the cut bytes were moved aside, not deleted
        assert any((tmp_path / "log" / "quarantine").iterdir())

    def test_torn_tail_cut_by_another_writer_before_a_roll(self, tmp_path: Path) -> None:
        """Regression: a handle that had seen a torn tail kept believing in it after
        another writer cut it, never moved to that writer's new segment, and
        "rolled" by replacing it -- losing the other writer's acknowledged batch."""
        log = tmp_path / "log"
        with self.make_ledger(tmp_path, segment_bytes=4096, sync="none") as w:
            while (
                not list(log.glob("*.seg")) or sorted(log.glob("*.seg"))[-1].stat().st_size < 4096
            ):
                w.append([ev(0, pad="x" * 100)])
        seg = sorted(log.glob("*.seg"))[-1]
        with open(seg, "ab") as f:
            f.write(b"\x01" * 30)  # a torn tail in a full segment
        with (
            self.make_ledger(tmp_path, segment_bytes=4096) as a,
            self.make_ledger(tmp_path, segment_bytes=4096) as b,
        ):
            head = a.head  # a sees the torn tail
            rb = b.append([Event("b.acked")])  # b cuts it and rolls
            ra = a.append([Event("a.acked")])
            assert (rb.first_seq, ra.first_seq) == (head + 1, head + 2)
            assert [e.kind for e in a.read(head + 1)] == ["b.acked", "a.acked"]
            assert a.verify().ok

    def test_empty_segment_file_list_is_empty_log(self, tmp_path: Path) -> None:
        (tmp_path / "log").mkdir()
        with self.make_ledger(tmp_path, readonly=True) as ro:
            assert ro.head == 0 and list(ro.read()) == [] and ro.verify().ok

    def test_segment_header_only(self, tmp_path: Path) -> None:
        with self.make_ledger(tmp_path, segment_bytes=4096, sync="none") as led:
            for i in range(40):
                led.append([ev(i, pad="x" * 100)])
        last = sorted((tmp_path / "log").glob("*.seg"))[-1]
        base = int(last.name[:20])
        last.write_bytes(last.read_bytes()[:SEGMENT_HEADER_SIZE])
        with self.make_ledger(tmp_path) as led:
            assert led.head == base - 1
            assert led.verify().ok
            assert led.append([ev(1000)]).first_seq == base

    # --- regressions: a frame readers cannot decode, header version 0, stray temp files ---

    @pytest.mark.parametrize("shape", ["whole-payload", "events-only"])
    def test_log_holding_an_undecodable_frame_opens_and_reports(
        self, tmp_path: Path, shape: str
    ) -> None:
        """Regression: a checksummed frame whose payload cbor2 refuses (written before
        append refused such data) made every Ledger.open raise a bare ValueError. It is
        now a CorruptLogError naming segment and byte offset, and verify reports it."""
        log = tmp_path / "log"
        with self.make_ledger(tmp_path) as led:
            led.append([ev(1)])
            led.append([ev(2)])
            digest = led.head_digest
        end = (log / f"{1:020d}.seg").stat().st_size  # closing trimmed any preallocated zeros
        deep = nested(450, lambda x: [x], [])
        payload = (
            cbor2.dumps(deep)
            if shape == "whole-payload"
            else payload_prefix(1.0, None) + cbor2.dumps([["k", None, {"d": deep}]])
        )
        frame, _ = encode_frame(digest, 3, 1, payload)
        with open(log / f"{1:020d}.seg", "ab") as f:
            f.write(frame)
        before = self.snapshot(tmp_path)
        for readonly in (True, False):
            led = self.make_ledger(tmp_path, readonly=readonly)  # never a bare ValueError
            with pytest.raises(CorruptLogError) as info:
                list(led.read())
            assert (info.value.segment.name, info.value.offset) == (f"{1:020d}.seg", end)
            rep = led.verify()
            assert not rep.ok and (rep.problems[0].segment, rep.problems[0].offset) == (
                f"{1:020d}.seg",
                end,
            )
            if shape == "whole-payload":  # opening needs the last frame's ``at``
                with pytest.raises(CorruptLogError):
                    _ = led.head
            led.close()
        assert self.snapshot(tmp_path) == before

    def test_segment_header_version_0_is_corrupt(self, tmp_path: Path) -> None:
        """Regression: version 0 (which never existed) was accepted."""
        with self.make_ledger(tmp_path) as led:
            led.append([ev(1)])
        seg = next((tmp_path / "log").glob("*.seg"))
        data = bytearray(seg.read_bytes())
        struct.pack_into("<H", data, 8, 0)
        data[56:64] = blake3.blake3(bytes(data[:56])).digest()[:8]
        seg.write_bytes(bytes(data))
        for readonly in (True, False):
            with self.make_ledger(tmp_path, readonly=readonly) as led:
                for op in (lambda: led.head, lambda: list(led.read())):
                    with pytest.raises(CorruptLogError) as info:
                        op()
                    assert not isinstance(info.value, UnsupportedFormatError)
                    assert "version 0" in str(info.value) and info.value.offset == 0
                rep = led.verify()
                assert not rep.ok and "version 0" in rep.problems[0].error
        assert seg.read_bytes() == bytes(data)

    def test_stray_segment_temp_files_are_removed_by_a_writer(self, tmp_path: Path) -> None:
        """Regression: a writer killed while creating a segment left ``<base>.seg.tmp``
        behind for good. It never holds data (a segment appears only by rename): the
        next writer removes it, under the lock. Readers leave it alone."""
        log = tmp_path / "log"
        with self.make_ledger(tmp_path) as led:
            led.append([ev(1)])
        stray = [log / f"{2:020d}.seg.tmp", log / f"{99:020d}.seg.tmp"]
        for p in stray:
            p.write_bytes(b"CTXLSEG\x00 half a header")
        other = log / "notes.seg.tmp"  # not a name ctxledger makes: not ours to remove
        other.write_bytes(b"x")
        with self.make_ledger(tmp_path, readonly=True) as ro:
            assert ro.head == 1 and ro.verify().ok
        with self.make_ledger(tmp_path) as led:
            assert led.head == 1
            assert all(p.exists() for p in stray)  # only an append (under the lock) sweeps
            led.append([ev(2)])
            assert not any(p.exists() for p in stray) and other.exists()
            assert [e.data["i"] for e in led.read()] == [1, 2]

    # --- reads by seq through the frame index ---------------------------------------------

    def test_reads_by_seq_match_a_full_read(self, tmp_path: Path) -> None:
        """Every ``read(s, t)``, ``read_batches(s)`` and ``digest_at(s)`` agrees with a
        full read, whichever way the frame index is built (cold, warm, extended)."""
        digests = {0: GENESIS_DIGEST}
        with self.make_ledger(tmp_path, segment_bytes=64 * 1024, sync="none") as led:
            for i in range(700):
                r = led.append([ev(i, pad="p" * (i % 90)) for _ in range(1 + i % 3)])
                digests[r.last_seq] = led.head_digest
            head = led.head
        assert len(list((tmp_path / "log").glob("*.seg"))) >= 3
        with self.make_ledger(tmp_path, readonly=True) as ro:
            everything = [(e.seq, e.data, e.at) for e in ro.read()]
            batches = list(ro.read_batches())
        assert [s for s, _d, _a in everything] == list(range(1, head + 1))
        for cold in (True, False):
            ro = self.make_ledger(tmp_path, readonly=True)
            for s in list(range(1, head + 1, 7)) + [head]:
                if cold:
                    ro.close()
                    ro = self.make_ledger(tmp_path, readonly=True)
                got = [(e.seq, e.data, e.at) for e in ro.read(s, s + 4)]
                assert got == everything[s - 1 : s + 4]
                assert ro.digest_at(s) == digests.get(s)
                firsts = [b.first_seq for b in ro.read_batches(s)]
                assert firsts == [b.first_seq for b in batches if b.last_seq >= s]
            assert [e.seq for e in ro.read(head - 3)] == list(range(head - 3, head + 1))
            ro.close()

    def test_index_follows_a_growing_segment(self, tmp_path: Path) -> None:
        with self.make_ledger(tmp_path, sync="none") as w, self.make_ledger(
            tmp_path, readonly=True
        ) as ro:
            for i in range(200):
                w.append([ev(i, pad="q" * 200)])
                if i % 9 == 0:
                    assert [e.data["i"] for e in ro.read(i + 1, i + 1)] == [i]
                    assert ro.digest_at(i + 1) == w.head_digest
            assert [e.data["i"] for e in ro.read(150)] == list(range(149, 200))

    def test_a_stale_index_is_never_trusted(self, tmp_path: Path) -> None:
        """A frame an index walked can be cut again (its writer's fsync failed) and
        others written in its place: reads through the index notice and reread."""
        log = tmp_path / "log"
        with self.make_ledger(tmp_path, sync="none") as w:
            for i in range(300):
                w.append([ev(i, pad="s" * 150)])
        seg = next(log.glob("*.seg"))
        raw = seg.read_bytes()
        with self.make_ledger(tmp_path, readonly=True) as ro:
            assert [e.data["i"] for e in ro.read(250, 250)] == [249]  # indexes the segment
            # cut back to seq 100 and write different batches in its place
            frames = list(iter_frames(raw, SEGMENT_HEADER_SIZE, GENESIS_DIGEST, 1))
            seg.write_bytes(raw[: frames[99].end])
            with self.make_ledger(tmp_path, sync="none") as w:
                for i in range(200):
                    w.append([ev(1000 + i, pad="t" * (300 + i % 7))])  # grows past the old end
                want = [(e.seq, e.data) for e in w.read()]
                digest = w.digest_at(250)
            for s in (99, 100, 101, 180, 250, 299, 300):
                assert [(e.seq, e.data) for e in ro.read(s, s)] == want[s - 1 : s]
            assert ro.digest_at(250) == digest
            assert [(e.seq, e.data) for e in ro.read(240)] == want[239:]


def test_the_clock_stamps_batches_and_never_runs_backwards(tmp_path: Path) -> None:
    """``clock`` moves time for tests without sleeping; ``at`` stays monotonic anyway."""
    now = [1000.0]
    with Ledger.open(tmp_path, sync="none", clock=lambda: now[0]) as led:
        assert led.append([ev(1)]).at == 1000.0
        now[0] = 999.0  # a clock stepped back
        assert led.append([ev(2)]).at == 1000.0
        led.clock = lambda: 2000.0  # replaced while open
        assert led.append([ev(3)]).at == 2000.0
    with Ledger.open(tmp_path, sync="none", clock=lambda: 5.0) as led:  # reopened: still 2000
        assert led.append([ev(4)]).at == 2000.0
        assert [e.at for e in led.read()] == [1000.0, 1000.0, 2000.0, 2000.0]
    # an empty log takes its clock's time for the first batch, however early (the
    # epoch too: nothing came before it)
    with Ledger.open(tmp_path / "early", sync="none", clock=lambda: 0.25) as led:
        assert led.append([ev(1)]).at == 0.25
