"""How a batch becomes stream messages and back: pure, no network.

A batch is the file log's frame (``frame.py``), unchanged. When it fits in one
message (``max_payload``) it is one message on ``<prefix>.batch``; otherwise it
is cut into chunks on ``<prefix>.chunk`` followed by one commit message on
``<prefix>.commit``. Every message of one attempt at a batch carries the same
random ``Ctx-Attempt``; chunks carry ``Ctx-Chunk: i/n``. The writer publishes
them with consecutive expected stream sequences, so the chunks of a batch are
adjacent and end right before their commit. A reader keeps chunks aside until
their commit arrives and drops chunks no commit follows (a writer that died
mid-batch, or lost the race for the next sequence): readers never see an
uncommitted batch. ``docs/format.md`` ("JetStream messages") says the same.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

#: Header names (NATS headers are case-sensitive in what a client hands back).
MSG_ID = "Nats-Msg-Id"
EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
ATTEMPT = "Ctx-Attempt"
CHUNK = "Ctx-Chunk"
SEQS = "Ctx-Seqs"

BATCH, PART, COMMIT = "batch", "chunk", "commit"
"""The last token of each message's subject."""

HEADER_ROOM = 512
"""Bytes of a message kept for its subject and headers when cutting chunks."""


@attrs.frozen
class Outgoing:
    """One message to publish: subject suffix, headers (expected sequence added later), body."""

    kind: str
    headers: dict[str, str]
    body: bytes


def messages_for(
    frame: bytes, *, msg_id: str, attempt: str, first: int, last: int, max_payload: int
) -> list[Outgoing]:
    """The messages that carry ``frame``: one, or chunks then a commit."""
    seqs = f"{first}-{last}"
    room = max_payload - HEADER_ROOM
    if room <= 0:
        raise ValueError(f"server max_payload {max_payload} is too small for any batch")
    if len(frame) <= room:
        return [Outgoing(BATCH, {MSG_ID: msg_id, ATTEMPT: attempt, SEQS: seqs}, frame)]
    parts = [frame[i:i + room] for i in range(0, len(frame), room)]
    n = len(parts)
    out = [Outgoing(PART, {ATTEMPT: attempt, CHUNK: f"{i}/{n}"}, p) for i, p in enumerate(parts)]
    out.append(Outgoing(COMMIT, {MSG_ID: msg_id, ATTEMPT: attempt, SEQS: seqs,
                                 CHUNK: f"{n}/{n}"}, b""))
    return out


@attrs.frozen
class Incoming:
    """One stored message as a reader sees it."""

    stream_seq: int
    kind: str
    headers: dict[str, str]
    body: bytes


@attrs.frozen
class Assembled:
    """A committed batch's frame, the stream sequence of its last message, and its ids."""

    frame: bytes
    stream_seq: int
    msg_id: str
    attempt: str


class MessageError(ValueError):
    """A stored message that no writer of this format writes (``stream_seq`` says where)."""

    def __init__(self, stream_seq: int, reason: str) -> None:
        super().__init__(f"stream message {stream_seq}: {reason}")
        self.stream_seq = stream_seq
        self.reason = reason


def _chunk_index(m: Incoming) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in m.headers[CHUNK].split("/"))
    except (KeyError, ValueError):
        raise MessageError(m.stream_seq, "chunk without a valid Ctx-Chunk header") from None
    if not 0 <= i <= n or n < 1:
        raise MessageError(m.stream_seq, f"chunk header {m.headers[CHUNK]!r} out of range")
    return i, n


class Assembler:
    """Folds stored messages, in stream order, into committed batches.

    State is only the chunks of the attempt in progress, so it can resume after
    any message: feed it each message once, in order.
    """

    def __init__(self) -> None:
        # (_attempt "" and any other _total or _parts, here or in _reset, are equivalent
        # mutants: a message's attempt is never empty, and _total and _parts are read
        # only for a chunk of the attempt in progress, which set them)
        self._attempt: str | None = None
        self._parts: list[bytes] = []
        self._total = 0

    def feed(self, m: Incoming) -> Assembled | None:
        """The batch ``m`` completes, or None (a chunk kept aside, or an orphan dropped)."""
        attempt = m.headers.get(ATTEMPT)
        if not attempt:
            raise MessageError(m.stream_seq, "message without a Ctx-Attempt header")
        if m.kind == BATCH:
            self._reset()
            return Assembled(m.body, m.stream_seq, m.headers.get(MSG_ID, ""), attempt)
        if m.kind == PART:
            i, n = _chunk_index(m)
            if i == 0:
                self._attempt, self._parts, self._total = attempt, [m.body], n
            elif attempt == self._attempt and i == len(self._parts) and n == self._total:
                self._parts.append(m.body)
            else:
                self._reset()  # an orphan: the rest of an attempt whose start we dropped
            return None
        if m.kind == COMMIT:
            i, n = _chunk_index(m)
            if attempt != self._attempt or len(self._parts) != n or i != n:
                self._reset()
                raise MessageError(m.stream_seq, "commit without its chunks right before it")
            frame = b"".join(self._parts)
            self._reset()
            return Assembled(frame, m.stream_seq, m.headers.get(MSG_ID, ""), attempt)
        raise MessageError(m.stream_seq, f"unknown message subject token {m.kind!r}")

    def _reset(self) -> None:
        self._attempt, self._parts, self._total = None, [], 0


def assemble(messages: Iterator[Incoming]) -> Iterator[Assembled]:
    """Every committed batch in ``messages`` (one pass, in stream order)."""
    a = Assembler()
    for m in messages:
        done = a.feed(m)
        if done is not None:
            yield done
