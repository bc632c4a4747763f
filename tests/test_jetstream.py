"""The JetStream backend against a real 3-node cluster (``tests/natscluster.py``).

``TestJetStreamLog`` is the shared contract; the rest is what only this
backend has: several handles (machines) on one stream, chunked batches, the
race between writers, retries that find their own earlier publish, and
damaged or foreign messages failing closed.
"""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from eventstore import CorruptLogError, Event, HeadMismatchError, LedgerError, StoreNotFoundError
from eventstore.frame import GENESIS_DIGEST

nats = pytest.importorskip("nats", reason="nats-py is not installed (pip install '.[test]')")

from test_ledger_contract import LedgerContract, ev  # noqa: E402

from eventstore.jetstream.client import Connection  # noqa: E402
from eventstore.jetstream.log import JetStreamLog  # noqa: E402
from eventstore.jetstream.messages import ATTEMPT, CHUNK  # noqa: E402

_names = itertools.count()


def stream_name() -> str:
    return f"T{os.getpid()}_{next(_names)}"


class JetStreamFixture:
    """Opens logs on fresh R3 streams of the session's cluster."""

    urls: list[str]

    @pytest.fixture(autouse=True)
    def _cluster(self, nats_cluster: Any) -> None:
        self.urls = list(nats_cluster.urls)

    def open(self, stream: str, **kw: Any) -> JetStreamLog:
        kw.setdefault("replicas", len(self.urls))
        kw.setdefault("prefix", f"ctx.{stream}")
        kw.setdefault("failover_timeout", 20.0)
        return JetStreamLog(self.urls, stream, **kw)


class TestJetStreamLog(JetStreamFixture, LedgerContract):
    def make_log(self, tmp_path: Path) -> JetStreamLog:
        return self.open(stream_name())


class TestJetStreamHandles(JetStreamFixture):
    """Several handles on one stream: what several machines sharing a project see."""

    def test_second_handle_sees_appends_and_chains_alike(self) -> None:
        s = stream_name()
        with self.open(s) as a, self.open(s, create=False) as b:
            assert b.head == 0 and b.head_digest == GENESIS_DIGEST
            r = a.append([ev(1), ev(2)], batch_id="x")
            assert b.head == 2 and b.head_digest == a.head_digest
            assert [e.data["i"] for e in b.read()] == [1, 2]
            b.append([ev(3)])
            assert a.head == 3 and a.digest_at(3) == b.digest_at(3) is not None
            again = b.append([ev(9)], batch_id="x")
            assert again.duplicate and (again.first_seq, again.last_seq) == (r.first_seq, 2)

    def test_missing_stream_is_not_created_by_a_read_only_open(self) -> None:
        with pytest.raises(StoreNotFoundError):
            self.open(stream_name(), create=False)

    def test_expected_head_sees_other_handles(self) -> None:
        s = stream_name()
        with self.open(s) as a, self.open(s) as b:
            a.append([ev(1)])
            b.append([ev(2)], expected_head=1)
            with pytest.raises(HeadMismatchError) as info:
                a.append([ev(3)], expected_head=1)
            assert (info.value.expected, info.value.actual) == (1, 2)

    def test_writers_on_two_handles_interleave_whole_batches(self) -> None:
        """Two writers race for every next sequence; each batch lands once, whole."""
        s, n, size = stream_name(), 40, 3
        with self.open(s) as a, self.open(s) as b:
            errors: list[BaseException] = []

            def write(log: JetStreamLog, who: str) -> None:
                try:
                    for i in range(n):
                        log.append([Event("w.part", who, {"i": i, "j": j}) for j in range(size)],
                                   batch_id=f"{who}-{i}")
                except BaseException as e:  # pragma: no cover - reported below
                    errors.append(e)

            threads = [threading.Thread(target=write, args=(log, w))
                       for log, w in ((a, "a"), (b, "b"))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors
            batches = list(a.read_batches())
            assert len(batches) == 2 * n and a.head == 2 * n * size
            seen = [(bt.events[0].key, bt.events[0].data["i"]) for bt in batches]
            assert sorted(seen) == sorted((w, i) for w in "ab" for i in range(n))
            for who in "ab":  # each writer's own batches stay in its order
                assert [i for w, i in seen if w == who] == list(range(n))
            assert a.verify().ok and b.head_digest == a.head_digest

    def test_a_batch_bigger_than_a_message_is_chunked_and_reads_back(self) -> None:
        s = stream_name()
        with self.open(s) as a:
            blob = "z" * 200_000
            big = [Event("big.part", None, {"i": i, "blob": blob}) for i in range(12)]
            r = a.append(big, batch_id="big")
            assert (r.first_seq, r.last_seq) == (1, 12)
            a.append([ev(13)])
            st = a.stream_state()
            assert st.messages > 3  # chunks, a commit and one whole batch
            with self.open(s, create=False) as b:
                assert [e.data["i"] for e in b.read(1, 12)] == list(range(12))
                assert b.read_raw(7) is not None and b.digest_at(12) == a.digest_at(12)
                assert b.append(big, batch_id="big").duplicate


class TestJetStreamRaces(JetStreamFixture):
    """Chunked batches racing other writers: the commit is sent only after its chunks
    are in place, so a lost race leaves orphans, never a commit without chunks."""

    def test_a_chunked_append_from_a_stale_handle(self) -> None:
        s = stream_name()
        with self.open(s) as a, self.open(s) as b:
            a.append([ev(1)])
            assert b.head == 1
            a.append([ev(2)])  # b is now one message behind
            big = [Event("big.part", None, {"i": i, "blob": "z" * 200_000}) for i in range(12)]
            r = b.append(big)
            assert (r.first_seq, r.last_seq) == (3, 14)
            with self.open(s, create=False) as fresh:
                assert fresh.head == 14 and fresh.verify().ok
                assert [e.data["i"] for e in fresh.read(3)] == list(range(12))

    def test_chunked_and_small_writers_race(self) -> None:
        s = stream_name()
        big = [Event("big.part", None, {"i": i, "blob": "y" * 150_000}) for i in range(10)]
        with self.open(s) as a, self.open(s) as b:
            errors: list[BaseException] = []

            def write(log: JetStreamLog, batch: list[Event], who: str, n: int) -> None:
                try:
                    for i in range(n):
                        log.append(batch, batch_id=f"{who}{i}")
                except BaseException as e:  # pragma: no cover - reported below
                    errors.append(e)

            threads = [threading.Thread(target=write, args=(a, big, "big", 6)),
                       threading.Thread(target=write, args=(b, [ev(0)], "small", 40))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors
            ids = [bt.batch_id for bt in a.read_batches()]
            assert sorted(ids) == sorted([f"big{i}" for i in range(6)]
                                         + [f"small{i}" for i in range(40)])
            assert a.head == 6 * 10 + 40 and a.verify().ok


class TestJetStreamDamage(JetStreamFixture):
    """Messages no writer of this format writes fail closed, naming the stream message."""

    def raw(self) -> Connection:
        return Connection(self.urls, connect_timeout=5.0, request_timeout=5.0)

    def test_orphan_chunks_are_skipped(self) -> None:
        """Chunks with no commit after them (a writer that died mid-batch) are not a batch."""
        s = stream_name()
        with self.open(s) as a:
            a.append([ev(1)])
            conn = self.raw()
            try:
                conn.publish(f"{a.prefix}.chunk", b"partial", {ATTEMPT: "dead", CHUNK: "0/3"}, 1)
            finally:
                conn.close()
            with self.open(s, create=False) as b:
                assert b.head == 1
                b.append([ev(2)])
            assert a.head == 2 and [e.data["i"] for e in a.read()] == [1, 2]
            assert a.verify().ok

    @pytest.mark.parametrize("body,headers", [
        (b"not a frame", {ATTEMPT: "x"}),
        (b"no attempt header", {}),
    ])
    def test_a_foreign_message_fails_closed(self, body: bytes, headers: dict[str, str]) -> None:
        s = stream_name()
        with self.open(s) as a:
            a.append([ev(1)])
            conn = self.raw()
            try:
                conn.publish(f"{a.prefix}.batch", body, headers, 1)
            finally:
                conn.close()
            with pytest.raises(CorruptLogError) as info:
                a.head  # noqa: B018 - the property reads the stream
            assert f"{s} message 2" in str(info.value)
            with self.open(s, create=False) as b:  # it opens, so that verify can report
                with pytest.raises(CorruptLogError):
                    list(b.read())
                with pytest.raises(CorruptLogError):
                    b.append([ev(2)])
                rep = b.verify()
                assert not rep.ok and rep.problems[0].segment == f"{s} message 2"

    def test_verify_reports_a_foreign_message(self) -> None:
        s = stream_name()
        with self.open(s) as a:
            a.append([ev(1)])
            conn = self.raw()
            try:
                conn.publish(f"{a.prefix}.weird", b"", {ATTEMPT: "x"}, 1)
            finally:
                conn.close()
            rep = a.verify()
            assert not rep.ok and rep.problems[0].segment == f"{s} message 2"

    @pytest.mark.parametrize("keep", [0, 1])
    def test_a_purged_stream_fails_closed(self, keep: int) -> None:
        """Messages gone from the front of the stream (a purge, limits set by hand) are
        a log with a hole: reads refuse it rather than fold what is left."""
        from natscluster import connect, run

        s = stream_name()
        with self.open(s) as a:
            for i in range(3):
                a.append([ev(i)])

            async def purge() -> None:
                async with connect(self.urls) as nc:
                    await nc.jetstream().purge_stream(s, keep=keep)

            run(purge)
            with self.open(s, create=False) as b, \
                    pytest.raises(CorruptLogError, match="no longer holds"):
                b.head  # noqa: B018 - the property reads the stream
            assert a.head == 3  # what this handle read stays, and its chain checks out

    def test_a_deleted_message_fails_closed(self) -> None:
        """A message deleted by hand (the last one, or one inside): the count of
        messages the stream holds gives it away before any read waits for it."""
        from natscluster import connect, run

        s = stream_name()
        with self.open(s) as a:
            for i in range(12):
                a.append([ev(i)])

            async def delete(seq: int) -> None:
                async with connect(self.urls) as nc:
                    await nc.jetstream().delete_msg(s, seq)

            run(lambda: delete(12))
            with self.open(s, create=False) as b, \
                    pytest.raises(CorruptLogError, match="some were deleted"):
                b.head  # noqa: B018 - the property reads the stream

    def test_a_stream_made_again_is_refused_by_an_old_handle(self) -> None:
        s = stream_name()
        with self.open(s) as a:
            a.append([ev(1)])
            a.append([ev(2)])
            conn = self.raw()
            try:
                conn.delete_stream(s)
            finally:
                conn.close()
            with self.open(s) as b:
                b.append([ev(9)])
            with pytest.raises(CorruptLogError, match="went back"):
                a.head  # noqa: B018 - the property reads the stream

    def test_a_stream_of_another_shape_is_refused(self) -> None:
        s = stream_name()
        conn = self.raw()
        try:
            conn.create_stream(s, [f"{s}.a", f"{s}.b"], 1)
        finally:
            conn.close()
        with pytest.raises(LedgerError, match="exactly one"):
            self.open(s)
