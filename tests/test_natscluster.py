"""The JetStream test cluster itself (tests/natscluster.py) against the real nats-server.

These pin down what the JetStream backend (issue 17) relies on: an R3 stream survives
the loss of its leader after an election, refuses writes without quorum, and keeps
every acknowledged message exactly once across kills and restarts; plus what this
server version answers to a retried publish that carries ``Nats-Msg-Id`` together
with ``Nats-Expected-Last-Sequence``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from natscluster import NatsCluster, connect, run


def _names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"T_{tag}", f"t.{tag}"


def add_stream(cluster: NatsCluster, name: str, subject: str, replicas: int) -> None:
    async def go() -> None:
        async with connect(cluster.live_urls()) as nc:
            await nc.jetstream(timeout=5.0).add_stream(
                name=name, subjects=[subject], num_replicas=replicas
            )

    run(go)


def publish(
    cluster: NatsCluster, subject: str, payload: bytes, headers: dict[str, str] | None = None,
    timeout: float = 1.0,
) -> Any:
    """One publish on a short-lived connection to any live node; raises on no ack."""

    async def go() -> Any:
        async with connect(cluster.live_urls(), timeout=timeout) as nc:
            return await nc.jetstream(timeout=timeout).publish(
                subject, payload, timeout=timeout, headers=headers
            )

    return run(go)


def publish_until(
    cluster: NatsCluster, subject: str, payload: bytes, msg_id: str, deadline: float
) -> tuple[Any, list[str]]:
    """Retry one publish (same Nats-Msg-Id) until acked or the deadline; (ack, failures)."""
    failures: list[str] = []
    while True:
        try:
            return publish(cluster, subject, payload, {"Nats-Msg-Id": msg_id}), failures
        except Exception as exc:  # noqa: BLE001 - election in progress: retried
            failures.append(type(exc).__name__)
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def read_all(cluster: NatsCluster, stream: str) -> list[tuple[int, str | None, bytes]]:
    """Every message of ``stream`` as (stream seq, Nats-Msg-Id, payload)."""

    async def go() -> list[tuple[int, str | None, bytes]]:
        async with connect(cluster.live_urls()) as nc:
            js = nc.jetstream(timeout=5.0)
            state = (await js.stream_info(stream)).state
            out = []
            for seq in range(state.first_seq, state.last_seq + 1):
                msg = await js.get_msg(stream, seq)
                out.append((seq, (msg.headers or {}).get("Nats-Msg-Id"), msg.data or b""))
            return out

    return run(go)


def test_cluster_answers_on_every_url(nats_cluster: NatsCluster) -> None:
    assert len(nats_cluster.urls) == 3 and nats_cluster.names == ["n0", "n1", "n2"]
    for url in nats_cluster.urls:

        async def ping(url: str = url) -> int:
            async with connect(url) as nc:
                await nc.flush(timeout=2)
                return nc.connected_server_version.major

        assert run(ping) == 2
    # every node sees the whole cluster over its routes
    for i in range(3):
        assert nats_cluster.alive(i) and nats_cluster.pid(i)


def test_r3_stream_accepts_publishes(nats_cluster: NatsCluster) -> None:
    stream, subject = _names()
    add_stream(nats_cluster, stream, subject, 3)
    seqs = [publish(nats_cluster, subject, b"m%d" % k, timeout=5.0).seq for k in range(20)]
    assert seqs == list(range(1, 21))
    leader = nats_cluster.wait_for_leader(stream)
    assert leader in (0, 1, 2)
    assert [p for _, _, p in read_all(nats_cluster, stream)] == [b"m%d" % k for k in range(20)]


def test_single_node_r1(nats_single: NatsCluster) -> None:
    stream, subject = _names()
    add_stream(nats_single, stream, subject, 1)
    assert publish(nats_single, subject, b"x").seq == 1
    assert nats_single.wait_for_leader(stream) == 0


def test_kill_leader_a_new_leader_takes_over(nats_cluster_fresh: NatsCluster) -> None:
    """Kill the leader right after it received an append whose ack is lost; the retry
    (same Nats-Msg-Id and Nats-Expected-Last-Sequence) succeeds once a new leader is
    elected, and the append is in the stream exactly once."""
    c = nats_cluster_fresh
    stream, subject = _names()
    add_stream(c, stream, subject, 3)
    for k in range(10):
        publish_until(c, subject, b"%d" % k, f"id{k}", time.monotonic() + 10)
    old = c.wait_for_leader(stream)
    headers = {"Nats-Msg-Id": "id10", "Nats-Expected-Last-Sequence": "10"}

    async def blind() -> None:  # the append reaches the leader, its ack goes nowhere
        async with connect(c.urls[old]) as nc:
            await nc.publish(subject, b"10", reply="_INBOX.nobody", headers=headers)
            await nc.flush(timeout=2)

    run(blind)
    c.kill(old)
    t0 = time.monotonic()
    failures: list[str] = []
    while True:
        try:
            ack = publish(c, subject, b"10", headers)
            break
        except Exception as exc:  # noqa: BLE001 - election in progress: retried
            failures.append(f"{type(exc).__name__}: {exc}")
            if time.monotonic() > t0 + 20:
                raise
        time.sleep(0.05)
    took = time.monotonic() - t0
    new = c.wait_for_leader(stream, exclude=old)
    print(f"leader {c.names[old]} killed: the retry was acked after {took:.2f} s "
          f"({len(failures)} failed attempts: {sorted(set(failures))}); "
          f"new leader {c.names[new]}; ack seq={ack.seq} duplicate={ack.duplicate}")
    assert new != old
    # 2.9.10: the blind append was stored before the kill, and the retry gets a
    # duplicate ack (not "wrong last sequence"); were it lost, the retry stores it
    assert ack.seq == 11
    assert not any("wrong last sequence" in f for f in failures)
    msgs = read_all(c, stream)
    assert [mid for _, mid, _ in msgs] == [f"id{k}" for k in range(11)]


def _refused(c: NatsCluster, subject: str, msg_id: str) -> str:
    """A publish without quorum: no ack within the timeout. The failure's class name."""
    t0 = time.monotonic()
    with pytest.raises(Exception) as info:  # noqa: B017 - any failure to ack
        publish(c, subject, msg_id.encode(), {"Nats-Msg-Id": msg_id}, timeout=1.0)
    name = type(info.value).__name__
    print(f"no quorum: publish {msg_id} failed after {time.monotonic() - t0:.2f} s with {name}")
    return name


def test_quorum_loss_refuses_then_restart_keeps_every_ack_once(
    nats_cluster_fresh: NatsCluster,
) -> None:
    c = nats_cluster_fresh
    stream, subject = _names()
    add_stream(c, stream, subject, 3)
    acked: list[str] = []
    unacked: list[str] = []

    def append(msg_id: str) -> None:
        t0 = time.monotonic()
        publish_until(c, subject, msg_id.encode(), msg_id, t0 + 20)
        acked.append(msg_id)
        print(f"{msg_id} acked after {time.monotonic() - t0:.2f} s")

    for k in range(5):
        append(f"id{k}")
    leader = c.wait_for_leader(stream)
    followers = [i for i in range(3) if i != leader]

    # 1. both followers down: the leader is alive but cannot commit -> no ack (timeout)
    for i in followers:
        c.kill(i)
    _refused(c, subject, "lost1")
    unacked.append("lost1")
    for i in followers:
        c.restart(i)
    append("id5")

    # 2. the leader and a follower down: the survivor does not lead -> no ack
    leader = c.wait_for_leader(stream)
    victims = [leader, next(i for i in range(3) if i != leader)]
    for i in victims:
        c.kill(i)
    _refused(c, subject, "lost2")
    unacked.append("lost2")
    for i in victims:
        c.restart(i)
    append("id6")

    ids = [mid for _, mid, _ in read_all(c, stream)]
    print(f"stream holds {ids}")
    for mid in acked:
        assert ids.count(mid) == 1, (mid, ids)
    # a publish that was never acknowledged may still be stored (a leader without
    # quorum had proposed it, and committed it once the followers were back): at
    # most once, in order
    for mid in unacked:
        assert ids.count(mid) <= 1, (mid, ids)
    assert [m for m in ids if m in acked] == acked
    assert set(ids) <= set(acked) | set(unacked)


def test_retried_publish_with_msg_id_and_expected_last_sequence(
    nats_cluster: NatsCluster, nats_single: NatsCluster
) -> None:
    """What a retried publish carrying Nats-Msg-Id + Nats-Expected-Last-Sequence gets.

    Measured on Debian's nats-server 2.9.10, R1 and R3, inside the duplicate window:
    a duplicate ack (``duplicate=True``, the original's stream seq), not "wrong last
    sequence" -- also when other messages were appended in between and when the retry
    is pipelined right behind the original. The dedup check runs before the
    expected-sequence check. A backend must still handle error 10071 ("wrong last
    sequence") for a retry whose original was *not* stored, and when the id has left
    the duplicate window.
    """
    for cluster, replicas in ((nats_single, 1), (nats_cluster, 3)):
        stream, subject = _names()
        add_stream(cluster, stream, subject, replicas)

        def pub(msg_id: str, expected: int, cluster: NatsCluster = cluster,
                subject: str = subject) -> Any:
            return publish(cluster, subject, msg_id.encode(), timeout=5.0, headers={
                "Nats-Msg-Id": msg_id, "Nats-Expected-Last-Sequence": str(expected)})

        first = pub("a", 0)
        assert (first.seq, first.duplicate) == (1, None)
        again = pub("a", 0)  # the retry of the same append
        assert (again.seq, again.duplicate) == (1, True)
        assert pub("b", 1).seq == 2
        late = pub("a", 0)  # retried after another writer appended
        assert (late.seq, late.duplicate) == (1, True)

        async def pipelined(cluster: NatsCluster = cluster, subject: str = subject) -> list:
            async with connect(cluster.urls) as nc:
                js = nc.jetstream(timeout=5.0)
                h = {"Nats-Msg-Id": "c", "Nats-Expected-Last-Sequence": "2"}
                futs = [await js.publish_async(subject, b"c", headers=h) for _ in range(2)]
                return [await f for f in futs]

        acks = run(pipelined)
        assert [(a.seq, a.duplicate) for a in acks] == [(3, None), (3, True)]

        # a different id with a stale expectation: the "lost the race" answer
        from nats.js.errors import BadRequestError

        with pytest.raises(BadRequestError) as info:
            pub("d", 1)
        assert info.value.err_code == 10071 and "wrong last sequence" in str(info.value)
        assert [m for _, m, _ in read_all(cluster, stream)] == ["a", "b", "c"]


def test_retry_after_the_duplicate_window_gets_wrong_last_sequence(
    nats_cluster: NatsCluster, nats_single: NatsCluster
) -> None:
    """Once the id has left the stream's duplicate window, 2.9.10 forgets it: the retry
    with Nats-Msg-Id + Nats-Expected-Last-Sequence is refused with 10071 "wrong last
    sequence: N" although the append *is* stored (seq N) -- the backend must read the
    stream's last message and compare its id to tell this from a lost race. Without
    the expected sequence the same retry would store a second copy."""
    from nats.js.errors import BadRequestError

    for cluster, replicas in ((nats_single, 1), (nats_cluster, 3)):
        stream, subject = _names()

        async def scenario(cluster: NatsCluster = cluster, stream: str = stream,
                           subject: str = subject, replicas: int = replicas) -> tuple:
            async with connect(cluster.urls) as nc:
                js = nc.jetstream(timeout=5.0)
                await js.add_stream(name=stream, subjects=[subject], num_replicas=replicas,
                                    duplicate_window=0.2)
                h = {"Nats-Msg-Id": "a", "Nats-Expected-Last-Sequence": "0"}
                first = await js.publish(subject, b"a", headers=h)
                t0 = time.monotonic()
                dups = 0
                while True:  # duplicate acks until the server purges the id
                    try:
                        ack = await js.publish(subject, b"a", headers=h)
                    except BadRequestError as exc:
                        refused = exc
                        break
                    assert (ack.seq, ack.duplicate) == (1, True)
                    dups += 1
                    assert time.monotonic() - t0 < 10, "the id never left the window"
                    await asyncio.sleep(0.05)
                last = await js.get_last_msg(stream, subject)
                return first, refused, dups, time.monotonic() - t0, last

        first, refused, dups, took, last = run(scenario)
        print(f"R{replicas}: {dups} duplicate acks, then after {took:.2f} s: {refused}")
        assert first.seq == 1
        assert refused.err_code == 10071 and "wrong last sequence: 1" in str(refused)
        # the refused retry's append is there: the last message carries its id
        assert last.seq == 1 and (last.headers or {}).get("Nats-Msg-Id") == "a"
