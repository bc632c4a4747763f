"""The JetStream log backend: the file log's frames kept in a replicated NATS stream.

Every machine folds its views locally, as from the file log; only the log is
shared. Appends publish the frame (``messages.py``) with
``Nats-Expected-Last-Sequence`` set to the stream's last sequence as this
handle last saw it, which serialises writers on any number of machines with no
lock, and ``Nats-Msg-Id`` set to the batch id, which makes a retry inside the
stream's duplicate window idempotent. What has been read is kept in a
:class:`~eventstore.framechain.FrameChain`, so reads, point reads and digests
are the in-memory log's.

Failures (docs/architecture.md, "The JetStream backend"): a request that gets
no answer (timeout, no responders, an election) is retried with the same
message until ``failover_timeout``, then :class:`LogUnavailableError`. A
publish answered "wrong last sequence" means another writer came first or an
earlier try of this same publish landed (nats-server 2.9 says so instead of
acknowledging a duplicate): the handle reads the new messages, finds its own
attempt there or starts again on top of the new head.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from ..errors import (
    CorruptLogError,
    HeadMismatchError,
    InvalidEventError,
    LedgerClosedError,
    LedgerError,
    LogUnavailableError,
    StoreNotFoundError,
)
from ..event import Event, Receipt, encode_batch
from ..export import export_log
from ..frame import encode_frame_parts, encode_raw_rows, payload_prefix
from ..framechain import FrameChain
from ..records import Batch, RawBatch, StoredEvent
from ..verify import Problem, VerifyReport
from .client import Connection, StreamState, Transient, WrongLastSequence
from .messages import Assembler, Incoming, MessageError, Outgoing, messages_for

DEFAULT_FAILOVER_TIMEOUT = 15.0
"""Seconds an append or read keeps retrying through an election or a lost server."""
SMALL_GAP = 8
"""At most this many new messages are read one by one; more go through a consumer."""


T = TypeVar("T")


def with_retries(fn: Callable[[], T], stream: str, timeout: float,
                 deadline: float | None = None, *, writing: bool = False) -> T:
    """``fn()``, again after each :class:`Transient` until ``deadline`` (monotonic; by
    default ``timeout`` from now), then :class:`LogUnavailableError`."""
    end = time.monotonic() + timeout if deadline is None else deadline
    pause = 0.05
    while True:
        try:
            return fn()
        except Transient as e:
            if time.monotonic() + pause > end:
                raise LogUnavailableError(
                    f"jetstream stream {stream!r} gave no answer in {timeout:g}s ({e})"
                    + ("; nothing was acknowledged" if writing else "")
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def subject_prefix(subjects: tuple[str, ...], stream: str) -> str:
    """The ``X`` of a stream whose one subject is ``X.>`` (what this backend creates)."""
    if len(subjects) != 1 or not subjects[0].endswith(".>"):
        raise LedgerError(
            f"jetstream stream {stream!r} has subjects {list(subjects)}; a ctxledger "
            "stream has exactly one, of the form <prefix>.>"
        )
    return subjects[0][:-2]


class Follower:
    """What one pass over the stream has folded: its frames and where it stopped.

    ``attempts`` maps each batch's ``Ctx-Attempt`` to its receipt, which is how
    a writer recognises its own publish after an answer went missing.
    """

    def __init__(self, conn: Connection, stream: str, prefix: str, timeout: float) -> None:
        self.conn, self.stream, self.prefix, self.timeout = conn, stream, prefix, timeout
        self.chain = FrameChain(stream)
        self.assembler = Assembler()
        self.stream_last = 0
        self.attempts: dict[str, Receipt] = {}

    def sync(self, deadline: float | None = None) -> None:
        """Read what writers appended since the last look (one round trip if nothing)."""
        state = with_retries(lambda: self.conn.stream_state(self.stream), self.stream,
                             self.timeout, deadline)
        self.catch_up(state, deadline)

    def catch_up(self, state: StreamState, deadline: float | None = None) -> None:
        """Read messages up to ``state.last_seq``; a stream with a hole fails closed."""
        last, first = state.last_seq, state.first_seq
        if last < self.stream_last:
            raise CorruptLogError(self.where(last + 1), 0, "the stream went back (deleted "
                                  f"and made again?): it ends at {last}, this handle read "
                                  f"{self.stream_last}")
        if last == self.stream_last:
            return
        start = self.stream_last + 1
        if first > start:  # (all of them, when first is past last: a purged stream)
            raise CorruptLogError(self.where(start), 0, f"the stream no longer holds messages "
                                  f"{start}..{first - 1} (purged or expired)")
        if last >= first and state.messages != last - first + 1:
            raise CorruptLogError(self.where(first), 0, f"the stream holds {state.messages} "
                                  f"messages between {first} and {last}: some were deleted")
        if last - start < SMALL_GAP:
            for seq in range(start, last + 1):
                m = with_retries(lambda s=seq: self.conn.get(self.stream, s),  # type: ignore[misc]
                                 self.stream, self.timeout, deadline)
                if m is None:
                    raise CorruptLogError(self.where(seq), 0, "stream message missing")
                self.ingest(m)
            return
        end = time.monotonic() + self.timeout if deadline is None else deadline
        while self.stream_last < last:
            before = self.stream_last
            try:  # a consumer lost with its server (an election) is made again
                for m in self.conn.fetch(self.stream, f"{self.prefix}.>",
                                         self.stream_last + 1, last):
                    if m.stream_seq != self.stream_last + 1:
                        raise CorruptLogError(self.where(self.stream_last + 1), 0,
                                              "stream message missing")
                    self.ingest(m)
            except Transient as e:
                if deadline is None and self.stream_last > before:
                    end = time.monotonic() + self.timeout  # it moved: a long read goes on
                if time.monotonic() > end:
                    raise LogUnavailableError(
                        f"jetstream stream {self.stream!r}: read stopped at message "
                        f"{self.stream_last} of {last} ({e})") from None
                time.sleep(0.1)

    def where(self, stream_seq: int) -> str:
        """What errors name where the file log names a segment: the stream's message."""
        return f"{self.stream} message {stream_seq}"

    def ingest(self, m: Incoming) -> None:
        try:
            done = self.assembler.feed(m)
        except MessageError as e:
            raise CorruptLogError(self.where(e.stream_seq), 0, e.reason) from None
        if done is not None:
            size = self.chain.size
            try:
                self.attempts[done.attempt] = self.chain.add_checked(done.frame)
            except CorruptLogError as e:  # offsets counted in the frame, not the stream
                raise CorruptLogError(self.where(done.stream_seq), e.offset - size,
                                      e.reason) from None
        self.stream_last = m.stream_seq


class JetStreamLog:
    """A log backend over one JetStream stream; thread-safe, one connection.

    ``prefix`` names the subjects of a stream this creates (``<prefix>.>``); an
    existing stream's own subjects win, so machines whose project ids differ
    still share it. ``create=False`` (read-only opens) refuses a missing
    stream with :class:`~eventstore.errors.StoreNotFoundError`.
    """

    def __init__(
        self,
        servers: list[str],
        stream: str,
        *,
        prefix: str = "ctx",
        replicas: int = 1,
        create: bool = True,
        clock: Callable[[], float] = time.time,
        failover_timeout: float = DEFAULT_FAILOVER_TIMEOUT,
        connect_timeout: float = 5.0,
        request_timeout: float = 2.0,
    ) -> None:
        if not servers:
            raise LedgerError("jetstream backend needs at least one server URL")
        self.stream = stream
        self.replicas = replicas
        self.failover_timeout = failover_timeout
        self._clock = clock
        self._mutex = threading.RLock()
        self._closed = False
        self.created = False
        """True when this open made the stream (``ctxledger init`` says so)."""
        self._conn = Connection(servers, connect_timeout=connect_timeout,
                                request_timeout=request_timeout)
        try:
            state = self._open_stream(prefix, create)
            self.prefix = subject_prefix(state.subjects, stream)
            self.servers = list(servers)
            self._f = Follower(self._conn, stream, self.prefix, failover_timeout)
            self._stale = True  # read at first use: a damaged stream still opens, for verify
        except BaseException:
            self._conn.close()
            raise

    def _open_stream(self, prefix: str, create: bool) -> StreamState:
        try:
            return self._retry(lambda: self._conn.stream_state(self.stream))
        except StoreNotFoundError:
            if not create:
                raise
        self._retry(lambda: self._conn.create_stream(self.stream, [f"{prefix}.>"],
                                                     self.replicas))
        self.created = True
        return self._retry(lambda: self._conn.stream_state(self.stream))

    def _retry(self, fn: Callable[[], T], deadline: float | None = None) -> T:
        return with_retries(fn, self.stream, self.failover_timeout, deadline)

    def _look(self, deadline: float | None = None) -> None:
        """Read what the stream gained since this handle last looked (call locked)."""
        self._f.sync(deadline)
        self._stale = False

    # --- the seam -----------------------------------------------------------------------

    @property
    def head(self) -> int:
        with self._mutex:
            self._check_open()
            self._look()
            return self._f.chain.head

    @property
    def head_digest(self) -> bytes:
        with self._mutex:
            self._check_open()
            self._look()
            return self._f.chain.head_digest

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosedError("log is closed")

    def append(
        self,
        events: Iterable[Event],
        *,
        expected_head: int | None = None,
        batch_id: str | None = None,
    ) -> Receipt:
        rows, count = encode_batch(events, batch_id)

        def frame(first: int, prev: bytes, last_at: float) -> bytes:
            at = max(float(self._clock()), last_at)
            return encode_frame_parts(prev, first, count, (payload_prefix(at, batch_id), rows))[0]

        return self._commit(frame, count, batch_id, expected_head, batch_id)

    def append_raw(self, batch: RawBatch) -> Receipt:
        """Write a batch another log holds, as it is there: the same seqs, ``at``,
        batch id and event bytes, hence the same chain digest (``log mirror``). It
        must be the next batch: it starts at ``head + 1``, else :class:`LedgerError`.
        Its batch id is not looked up (a file log may hold one twice, further apart than
        its window), so its message id is the batch id and the seq it starts at."""
        rows = encode_raw_rows(list(batch.rows))

        def frame(first: int, prev: bytes, last_at: float) -> bytes:
            if first != batch.first_seq or batch.at < last_at:
                raise LedgerError(
                    f"jetstream stream {self.stream!r} is at seq {first - 1}: a batch from "
                    f"seq {batch.first_seq} does not follow it")
            return encode_frame_parts(prev, first, len(batch.rows),
                                      (payload_prefix(batch.at, batch.batch_id), rows))[0]

        return self._commit(frame, len(batch.rows), batch.batch_id, batch.first_seq - 1,
                            None, f"@{batch.first_seq}")

    def _commit(self, frame_at: Callable[[int, bytes, float], bytes], count: int,
                batch_id: str | None, expected_head: int | None, retry_id: str | None,
                id_suffix: str = "") -> Receipt:
        """Publish the frame ``frame_at(first seq, previous digest, last at)`` makes on top
        of the stream, again on top of whatever another writer put there first.
        ``retry_id``: the batch id that makes this a retry when the log has it."""
        attempt = secrets.token_hex(12)
        with self._mutex:
            self._check_open()
            chain = self._f.chain
            deadline = time.monotonic() + self.failover_timeout
            if self._stale:
                self._look(deadline)
            looked = False
            while True:
                mine = self._f.attempts.get(attempt)
                if mine is not None:
                    return mine
                if time.monotonic() > deadline:
                    raise LogUnavailableError(
                        f"jetstream stream {self.stream!r}: no publish went through in "
                        f"{self.failover_timeout:g}s; nothing was acknowledged")
                if retry_id is not None and retry_id in chain.receipts:
                    r = chain.receipts[retry_id]
                    return Receipt(r.first_seq, r.last_seq, r.at, retry_id, duplicate=True)
                if expected_head is not None and expected_head != chain.head:
                    if not looked:  # this handle may be behind: look before refusing
                        looked = True
                        self._look(deadline)
                        continue
                    raise HeadMismatchError(expected_head, chain.head)
                first = chain.head + 1
                try:
                    out = messages_for(frame_at(first, chain.head_digest, chain.last_at),
                                       msg_id=(batch_id or attempt) + id_suffix,
                                       attempt=attempt,
                                       first=first, last=first + count - 1,
                                       max_payload=self._conn.max_payload)
                except ValueError as e:
                    raise InvalidEventError(str(e)) from None
                try:
                    self._publish_all(out, deadline)
                    return self._f.attempts[attempt]
                except WrongLastSequence:
                    # someone (maybe an earlier try of ours) came first: look, then loop
                    self._look(deadline)
                    looked = True

    def _publish_all(self, out: list[Outgoing], deadline: float) -> None:
        """Publish ``out`` in order on top of the stream as last seen, ingesting each.

        A chunked batch's chunks go out pipelined (each with the expected sequence
        it will have), so a big batch costs one round trip, not one per chunk. Its
        commit goes out alone, and only once every chunk is acknowledged right
        after the one before: a chunk that landed behind another writer's message
        (the ones before it were refused) is an orphan readers skip, and no commit
        ever follows such a run. On any failure, what landed is read back and the
        caller starts again."""
        *chunks, last = out
        base = self._f.stream_last
        if chunks:
            results = self._conn.publish_pipelined(
                [(f"{self.prefix}.{o.kind}", o.body, o.headers, base + i)
                 for i, o in enumerate(chunks)])
            if any(r is None or r[1] or r[0] != base + i + 1 for i, r in enumerate(results)):
                raise WrongLastSequence(f"a chunk of {len(chunks)} did not land in its place")
            for o, r in zip(chunks, results, strict=True):
                assert r is not None
                self._f.ingest(Incoming(r[0], o.kind, o.headers, o.body))
        expected = self._f.stream_last
        subject = f"{self.prefix}.{last.kind}"
        seq, duplicate = with_retries(
            lambda: self._conn.publish(subject, last.body, last.headers, expected),
            self.stream, self.failover_timeout, deadline, writing=True)
        if duplicate or seq != expected + 1:
            # the server had this message id already (an earlier try inside the
            # duplicate window, ours or another process's): read what is there
            raise WrongLastSequence(f"duplicate of message {seq}")
        self._f.ingest(Incoming(seq, last.kind, last.headers, last.body))

    def read(self, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Event]:
        lo = max(1, from_seq)
        for batch in self.read_batches(lo, to_seq):
            for e in batch.events:
                if e.seq >= lo and (to_seq is None or e.seq <= to_seq):
                    yield e

    def read_batches(self, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Batch]:
        with self._mutex:
            self._check_open()
            self._look()
            span = self._f.chain.span(from_seq, to_seq)
        if span is not None:
            yield from self._f.chain.batches(*span, to_seq)

    def read_raw_batches(self, from_seq: int = 1, to_seq: int | None = None
                         ) -> Iterator[RawBatch]:
        """Whole batches as :meth:`read_batches` gives them, each event as its stored bytes."""
        with self._mutex:
            self._check_open()
            self._look()
            span = self._f.chain.span(from_seq, to_seq)
        if span is not None:
            yield from self._f.chain.raw_batches(*span, to_seq)

    def export_lines(
        self, from_seq: int = 1, to_seq: int | None = None, kind: str | None = None
    ) -> Iterator[str]:
        """The log as JSON Lines (``export.py``): byte for byte what the file log
        holding the same batches exports."""
        return export_log(self.read_raw_batches(from_seq, to_seq), self._prev_digest,
                          from_seq=from_seq, to_seq=to_seq, kind=kind)

    def _prev_digest(self, first_seq: int) -> bytes | None:
        with self._mutex:
            return self._f.chain.digest_at(first_seq - 1)

    def read_raw(self, seq: int) -> StoredEvent | None:
        with self._mutex:
            self._check_open()
            if self._stale or seq > self._f.chain.head:
                self._look()
            return self._f.chain.raw(seq)

    def digest_at(self, seq: int) -> bytes | None:
        with self._mutex:
            self._check_open()
            if self._stale or seq > self._f.chain.head:
                self._look()
            return self._f.chain.digest_at(seq)

    def verify(self) -> VerifyReport:
        """Read the whole stream again from the servers and check every frame."""
        with self._mutex:
            self._check_open()
            state = self._retry(lambda: self._conn.stream_state(self.stream))
            fresh = Follower(self._conn, self.stream, self.prefix, self.failover_timeout)
            problems: list[Problem] = []
            try:
                fresh.catch_up(state)
            except CorruptLogError as e:
                problems.append(Problem(e.segment.name, e.offset, e.reason))
            chain = fresh.chain
            n = len(chain.frames)
        problems += chain.problems(n)
        return VerifyReport(not problems, chain.head, n, chain.head, 0, tuple(problems))

    def stream_state(self) -> StreamState:
        """The stream's state as its servers report it now (for ``storage``)."""
        with self._mutex:
            self._check_open()
            state = self._retry(lambda: self._conn.stream_state(self.stream))
            return state

    def close(self) -> None:
        with self._mutex:
            if self._closed:
                return
            self._closed = True
        self._conn.close()

    def __enter__(self) -> JetStreamLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"JetStreamLog(stream={self.stream!r}, head={self._f.chain.head})"
