"""The JetStream backend when servers die: a leader mid-append, a follower, a quorum.

Every test has a 3-node cluster of its own (``nats_cluster_fresh``) and kills
nodes with SIGKILL. What must hold throughout: every acknowledged batch is in
the log exactly once, seqs stay gapless, the chain verifies, and a store's
views equal a fresh fold of the log; without a quorum an append fails with
``LogUnavailableError`` and acknowledges nothing.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from eventstore import Event, LogUnavailableError

nats = pytest.importorskip("nats", reason="nats-py is not installed (pip install '.[test]')")

from eventstore.jetstream.client import Connection, Transient, WrongLastSequence  # noqa: E402
from eventstore.jetstream.log import JetStreamLog  # noqa: E402
from projections import ContextStore  # noqa: E402

_names = itertools.count()


def open_log(cluster: Any, stream: str, **kw: Any) -> JetStreamLog:
    kw.setdefault("replicas", 3)
    kw.setdefault("failover_timeout", 20.0)
    return JetStreamLog(list(cluster.urls), stream, prefix=f"ctx.{stream}", **kw)


def new_stream() -> str:
    return f"F{os.getpid()}_{next(_names)}"


def ids_in(log: JetStreamLog) -> list[str]:
    return [b.batch_id for b in log.read_batches() if b.batch_id is not None]


def retry_until_acknowledged(log: JetStreamLog, events: list[Event], batch_id: str,
                             timeout: float = 30.0) -> Any:
    """Append as a caller told "nothing was acknowledged" does: the same batch id again
    until it is acknowledged. Every failure on the way must say nothing was kept."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return log.append(events, batch_id=batch_id)
        except LogUnavailableError as e:
            assert "nothing was acknowledged" in str(e)
            if time.monotonic() > deadline:
                raise


def check_log(log: JetStreamLog, acked: list[str]) -> None:
    """Every acknowledged batch once, seqs gapless, the chain sound."""
    ids = ids_in(log)
    assert len(ids) == len(set(ids)), "a batch is in the log twice"
    assert set(acked) <= set(ids), f"acknowledged batches missing: {set(acked) - set(ids)}"
    assert [e.seq for e in log.read()] == list(range(1, log.head + 1))
    assert log.verify().ok


def test_leader_killed_mid_appends(nats_cluster_fresh: Any) -> None:
    """A writer keeps appending while the stream's leader is killed: the appends in
    flight are retried through the election, none is lost or doubled."""
    cluster, s = nats_cluster_fresh, new_stream()
    with open_log(cluster, s) as log:
        log.append([Event("warm.up")])
        leader = cluster.wait_for_leader(s)
        acked: list[str] = []
        errors: list[BaseException] = []
        stop = threading.Event()

        def write() -> None:
            try:
                for i in itertools.count():
                    if stop.is_set() and i > 40:
                        return
                    bid = f"w-{i}"
                    log.append([Event("w.ev", str(i), {"i": i, "j": j}) for j in range(3)],
                               batch_id=bid)
                    acked.append(bid)
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        t = threading.Thread(target=write)
        t.start()
        while len(acked) < 20 and t.is_alive():
            time.sleep(0.01)
        cluster.kill(leader)
        stop.set()
        t.join(90)
        assert not t.is_alive() and not errors, errors
        assert len(acked) > 40
        assert cluster.wait_for_leader(s, exclude=leader) != leader
        check_log(log, acked)
        with open_log(cluster, s, create=False) as other:
            check_log(other, acked)
            assert other.head_digest == log.head_digest


def test_follower_killed_and_back(nats_cluster_fresh: Any) -> None:
    cluster, s = nats_cluster_fresh, new_stream()
    with open_log(cluster, s) as log:
        log.append([Event("a")], batch_id="a0")
        leader = cluster.wait_for_leader(s)
        follower = (leader + 1) % 3
        cluster.kill(follower)
        acked = ["a0"]
        for i in range(20):  # two of three still make a quorum: no pause at all
            log.append([Event("b", None, {"i": i})], batch_id=f"b{i}")
            acked.append(f"b{i}")
        cluster.restart(follower)
        for i in range(5):
            log.append([Event("c", None, {"i": i})], batch_id=f"c{i}")
            acked.append(f"c{i}")
        check_log(log, acked)


def test_quorum_lost_acknowledges_nothing_then_recovers(nats_cluster_fresh: Any,
                                                        tmp_path: Path) -> None:
    """Two of three nodes down: an append fails with a clear error within the
    failover timeout; after the restart the log has every acknowledged batch once
    and the failed one at most once (a retry with its batch id says which)."""
    cluster, s = nats_cluster_fresh, new_stream()
    with open_log(cluster, s, failover_timeout=4.0) as log:
        acked = []
        for i in range(5):
            log.append([Event("before", None, {"i": i})], batch_id=f"p{i}")
            acked.append(f"p{i}")
        leader = cluster.wait_for_leader(s)
        others = [i for i in range(3) if i != leader]
        for i in others:
            cluster.kill(i)
        t = time.monotonic()
        with pytest.raises(LogUnavailableError) as info:
            log.append([Event("during")], batch_id="lost")
        assert time.monotonic() - t < 4.0 + 10.0
        assert "nothing was acknowledged" in str(info.value)
        for i in others:
            cluster.restart(i)
        cluster.wait_for_quorum(s, timeout=30.0)
        again = retry_until_acknowledged(log, [Event("during")], "lost")  # retries settle it
        acked.append("lost")
        assert again.first_seq == 6
        log.append([Event("after")], batch_id="q")
        acked.append("q")
        check_log(log, acked)


def test_whole_cluster_restart_keeps_the_log(nats_cluster_fresh: Any, tmp_path: Path) -> None:
    """Views folded on one machine equal a fresh fold after every node restarted."""
    cluster, s = nats_cluster_fresh, new_stream()
    log = open_log(cluster, s)
    with ContextStore.open(tmp_path / "a", log=log) as store:
        for i in range(30):
            store.put({"target": "t", "summary": f"packet {i} about widgets", "i": i})
        keys = sorted(e.cache_key for e in store.list())
        hits = [(h.cache_key, h.score) for h in store.recall("widgets", limit=50)]
    log.close()
    for i in range(3):
        cluster.kill(i)
    for i in range(3):
        cluster.restart(i)
    cluster.wait_for_leader(s, timeout=30.0)
    with open_log(cluster, s, create=False) as log2, \
            ContextStore.open(tmp_path / "b", log=log2) as fresh:
        assert sorted(e.cache_key for e in fresh.list()) == keys and len(keys) == 30
        assert [(h.cache_key, h.score) for h in fresh.recall("widgets", limit=50)] == hits


def lose_first_answer(monkeypatch: pytest.MonkeyPatch, wait: float) -> list[str]:
    """Make the first publish land but its answer go missing (after ``wait`` s); the
    list returned says what the server answered each publish."""
    real = Connection.publish
    calls: list[str] = []

    def lossy(self: Connection, *a: Any, **kw: Any) -> tuple[int, bool]:
        try:
            out = real(self, *a, **kw)
        except WrongLastSequence:
            calls.append("wrong last sequence")
            raise
        calls.append(f"ack duplicate={out[1]}")
        if len(calls) == 1:
            time.sleep(wait)
            raise Transient("answer lost (test)")
        return out

    monkeypatch.setattr(Connection, "publish", lossy)
    return calls


def test_a_retry_after_a_lost_answer_finds_its_own_publish(
    nats_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The publish lands but its answer is lost: the retry (same message id, same
    expected sequence) is answered "wrong last sequence" by nats-server 2.9 (a
    newer server acknowledges a duplicate); either way the writer finds its own
    message and the batch is in the log once."""
    s = new_stream()
    with open_log(nats_cluster, s) as log:
        log.append([Event("first")])
        calls = lose_first_answer(monkeypatch, wait=0.0)
        r = log.append([Event("second")], batch_id="once")
        monkeypatch.undo()
        assert not r.duplicate and (r.first_seq, r.last_seq) == (2, 2)
        assert calls[0] == "ack duplicate=False" and len(calls) == 2
        assert calls[1] in ("wrong last sequence", "ack duplicate=True")
        assert ids_in(log) == ["once"] and log.head == 2
        assert log.append([Event("second")], batch_id="once").duplicate


def test_a_retry_past_the_duplicate_window_finds_its_own_publish(
    nats_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the stream's duplicate window, nats-server 2.9.10 answers a retried publish
    (same Nats-Msg-Id, same expected sequence) with "wrong last sequence" although the
    first try is stored (tests/test_natscluster.py shows the server doing it). The
    writer reads the stream, finds its own attempt and acknowledges it once."""
    s = new_stream()
    conn = Connection(list(nats_cluster.urls), connect_timeout=5.0, request_timeout=5.0)
    try:  # a stream whose duplicate window is short, made as ctxledger makes one
        conn.create_stream(s, [f"ctx.{s}.>"], 3, duplicate_window=0.2)
    finally:
        conn.close()
    with open_log(nats_cluster, s) as log:
        log.append([Event("first")])
        calls = lose_first_answer(monkeypatch, wait=0.5)  # the window passes meanwhile
        r = log.append([Event("second")], batch_id="once")
        monkeypatch.undo()
        assert calls == ["ack duplicate=False", "wrong last sequence"]
        assert not r.duplicate and (r.first_seq, r.last_seq) == (2, 2)
        assert ids_in(log) == ["once"] and log.head == 2
        check_log(log, ["once"])
