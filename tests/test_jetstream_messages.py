"""The pure half of the JetStream backend: a batch as messages, and messages back.

No server here: ``messages_for`` and the ``Assembler`` are bytes in, bytes out
(format.md §13), so every shape of stream a writer, a crash or a race can
leave is checked directly.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from eventstore.jetstream.messages import (
    ATTEMPT,
    BATCH,
    CHUNK,
    COMMIT,
    HEADER_ROOM,
    MSG_ID,
    PART,
    SEQS,
    Assembler,
    Incoming,
    MessageError,
    Outgoing,
    assemble,
    messages_for,
)


def stored(out: Iterable[Outgoing], start: int = 1) -> list[Incoming]:
    """``out`` as a stream holds it from sequence ``start``."""
    return [Incoming(start + i, o.kind, dict(o.headers), o.body) for i, o in enumerate(out)]


@given(frame=st.binary(min_size=1, max_size=5000), room=st.integers(1, 3000))
@example(frame=b"x" * 100, room=100)  # exactly one message's room: not chunked
@example(frame=b"x" * 101, room=100)  # one byte over: two chunks
@example(frame=b"x" * 200, room=100)  # chunks that fill their room exactly
def test_any_frame_comes_back_whole(frame: bytes, room: int) -> None:
    out = messages_for(frame, msg_id="b1", attempt="a1", first=5, last=9,
                       max_payload=room + HEADER_ROOM)
    assert all(len(o.body) <= room for o in out)
    if len(frame) <= room:
        assert [o.kind for o in out] == [BATCH]
        assert out[0].headers == {MSG_ID: "b1", ATTEMPT: "a1", SEQS: "5-9"}
    else:
        n = -(-len(frame) // room)
        assert [o.kind for o in out] == [PART] * n + [COMMIT]
        assert [o.headers[CHUNK] for o in out] == [f"{i}/{n}" for i in range(n + 1)]
        assert out[-1].body == b"" and out[-1].headers[MSG_ID] == "b1"
        assert MSG_ID not in out[0].headers  # only the commit carries the batch id
    (done,) = assemble(iter(stored(out, 7)))
    assert (done.frame, done.stream_seq, done.msg_id, done.attempt) == (
        frame, 7 + len(out) - 1, "b1", "a1")


def test_a_server_too_small_for_any_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="too small"):
        messages_for(b"x", msg_id="b", attempt="a", first=1, last=1, max_payload=HEADER_ROOM)


def chunked(frame: bytes, attempt: str, room: int = 4) -> list[Outgoing]:
    return messages_for(frame, msg_id=f"id-{attempt}", attempt=attempt, first=1, last=1,
                        max_payload=room + HEADER_ROOM)


@given(cut=st.integers(1, 3), others=st.lists(st.binary(min_size=1, max_size=4), max_size=3))
def test_orphan_chunks_are_dropped_and_what_follows_is_read(cut: int, others: list[bytes]
                                                            ) -> None:
    """A writer that died (or lost the race) after ``cut`` chunks: its chunks are
    skipped, whatever comes next (a whole batch, another attempt's chunks)."""
    dead = chunked(b"0123456789ab", "dead")[:cut]  # 3 chunks and a commit in full
    after = [o for i, f in enumerate(others) for o in chunked(f + b"....", f"live{i}")]
    after += [Outgoing(BATCH, {MSG_ID: "w", ATTEMPT: "whole"}, b"w")]
    got = list(assemble(iter(stored(dead + after))))
    assert [g.attempt for g in got] == [f"live{i}" for i in range(len(others))] + ["whole"]
    assert [g.frame for g in got][:-1] == [f + b"...." for f in others]


def test_a_retried_attempt_starting_again_is_read_once() -> None:
    """The same attempt publishes its chunks again after a failure: chunk 0 starts
    afresh, and only the complete run before its commit counts."""
    first = chunked(b"abcdefghij", "a1")
    msgs = first[:2] + first  # two chunks landed, then the whole batch again
    (done,) = assemble(iter(stored(msgs)))
    assert done.frame == b"abcdefghij"


@pytest.mark.parametrize("broken", [
    "commit alone", "commit after a gap", "commit of another attempt", "commit count wrong",
])
def test_a_commit_without_its_chunks_fails_closed(broken: str) -> None:
    msgs = chunked(b"abcdefghij", "a1")  # 3 chunks and a commit
    if broken == "commit alone":
        msgs = msgs[-1:]
    elif broken == "commit after a gap":
        msgs = msgs[:1] + msgs[2:]
    elif broken == "commit of another attempt":
        msgs[-1] = Outgoing(COMMIT, {**msgs[-1].headers, ATTEMPT: "other"}, b"")
    else:
        msgs[-1] = Outgoing(COMMIT, {**msgs[-1].headers, CHUNK: "4/4"}, b"")
    a = Assembler()
    with pytest.raises(MessageError) as info:
        for m in stored(msgs):
            a.feed(m)
    assert info.value.stream_seq == len(msgs)
    assert info.value.reason == "commit without its chunks right before it"


@pytest.mark.parametrize("kind,headers,why", [
    (BATCH, {}, "message without a Ctx-Attempt header"),
    (PART, {ATTEMPT: "a"}, "chunk without a valid Ctx-Chunk header"),
    (PART, {ATTEMPT: "a", CHUNK: "x/2"}, "chunk without a valid Ctx-Chunk header"),
    (PART, {ATTEMPT: "a", CHUNK: "3/2"}, "chunk header '3/2' out of range"),
    (PART, {ATTEMPT: "a", CHUNK: "0/0"}, "chunk header '0/0' out of range"),
    (PART, {ATTEMPT: "a", CHUNK: "-1/2"}, "chunk header '-1/2' out of range"),
    ("weird", {ATTEMPT: "a"}, "unknown message subject token 'weird'"),
])
def test_messages_no_writer_writes_fail_closed(kind: str, headers: dict[str, str], why: str
                                               ) -> None:
    with pytest.raises(MessageError) as info:
        Assembler().feed(Incoming(42, kind, headers, b"x"))
    e = info.value
    assert (e.stream_seq, e.reason, str(e)) == (42, why, f"stream message 42: {why}")


def test_a_batch_in_one_chunk_and_batches_without_an_id() -> None:
    """One chunk and its commit (``0/1``, ``1/1``) is a batch; a batch or commit with no
    Ctx-Msg-Id header has the empty id."""
    a = Assembler()
    assert a.feed(Incoming(1, PART, {ATTEMPT: "a", CHUNK: "0/1"}, b"whole")) is None
    done = a.feed(Incoming(2, COMMIT, {ATTEMPT: "a", CHUNK: "1/1"}, b""))
    assert done is not None
    assert (done.frame, done.stream_seq, done.msg_id, done.attempt) == (b"whole", 2, "", "a")
    single = a.feed(Incoming(3, BATCH, {ATTEMPT: "b"}, b"one"))
    assert single is not None
    assert (single.frame, single.stream_seq, single.msg_id, single.attempt) == (
        b"one", 3, "", "b")


def test_a_fresh_assembler_drops_a_later_chunk_and_refuses_a_commit() -> None:
    assert Assembler().feed(Incoming(5, PART, {ATTEMPT: "a", CHUNK: "1/2"}, b"x")) is None
    with pytest.raises(MessageError) as info:
        Assembler().feed(Incoming(6, COMMIT, {ATTEMPT: "a", CHUNK: "2/2"}, b""))
    assert info.value.reason == "commit without its chunks right before it"


def test_chunks_out_of_order_are_orphans() -> None:
    msgs = chunked(b"abcdefghij", "a1")
    swapped = [msgs[0], msgs[2], msgs[1], msgs[3]]
    a = Assembler()
    results = [a.feed(m) for m in stored(swapped[:3])]
    assert results == [None, None, None]
    with pytest.raises(MessageError):
        a.feed(stored(swapped)[3])


def test_assembler_state_is_only_the_attempt_in_progress() -> None:
    """Feeding a stream in two halves to one Assembler is feeding it whole."""
    msgs = list(itertools.chain(chunked(b"abcdefghij", "a"), chunked(b"klmnop", "b")))
    a = Assembler()
    done = [d for m in stored(msgs) if (d := a.feed(m)) is not None]
    assert [d.frame for d in done] == [b"abcdefghij", b"klmnop"]
