"""The thin shell around nats-py: a private event loop thread and blocking calls.

nats-py is asyncio-only and the log's API is blocking, so one connection runs
on its own loop in a daemon thread and each call here waits for one
coroutine. Every failure comes out as one of three exceptions: ``Transient``
(no answer, no responders, a leader election: worth retrying with the same
message), ``WrongLastSequence`` (another writer got there first, or a retry
of ours already landed) or ``LogUnavailableError``/``LedgerError`` for the
rest. Nothing here knows about frames or batches (``messages.py``, ``log.py``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import attrs

from ..errors import LedgerError, LogUnavailableError, StoreNotFoundError
from .messages import EXPECTED_LAST_SEQ, Incoming

try:
    import nats
    import nats.errors
    import nats.js.errors
    from nats.js import api
except ImportError as e:  # the optional extra is not installed
    raise LedgerError(
        "the jetstream backend needs nats-py: pip install 'ctxledger[jetstream]'"
    ) from e

T = TypeVar("T")

WRONG_LAST_SEQUENCE = 10071
"""JetStream's error code for a failed ``Nats-Expected-Last-Sequence`` check."""
STREAM_NOT_FOUND = 10059


class Transient(Exception):
    """No answer worth trusting yet (timeout, no responders, election): retry."""


class WrongLastSequence(Exception):
    """The stream's last sequence was not the one the publish expected."""


@attrs.frozen
class StreamState:
    """What ``STREAM.INFO`` says of a stream, in the terms the log uses."""

    name: str
    subjects: tuple[str, ...]
    replicas: int
    first_seq: int
    last_seq: int
    messages: int
    bytes: int
    leader: str | None
    peers: tuple[tuple[str, bool], ...]
    """Each replica other than the leader: (server name, current)."""


def _transient(e: BaseException) -> bool:
    if isinstance(e, (asyncio.TimeoutError, TimeoutError, nats.errors.TimeoutError,
                      nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError,
                      nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError,
                      nats.errors.StaleConnectionError, nats.errors.OutboundBufferLimitError)):
        return True
    if isinstance(e, nats.js.errors.APIError):
        # 503: no leader or not enough peers (an election); 408: the request timed out
        return e.code in (408, 503)
    return False


class Connection:
    """One NATS connection on a private loop; every method blocks until done."""

    def __init__(self, servers: list[str], *, connect_timeout: float, request_timeout: float,
                 name: str = "ctxledger") -> None:
        self.servers = list(servers)
        self.request_timeout = request_timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="ctxledger-nats")
        self._thread.start()
        try:
            self._nc = self._run(nats.connect(
                servers=self.servers, name=name, connect_timeout=connect_timeout,
                allow_reconnect=True, max_reconnect_attempts=2, reconnect_time_wait=0.25,
                error_cb=self._quiet, disconnected_cb=self._noop, reconnected_cb=self._noop,
                closed_cb=self._noop,
            ), connect_timeout * max(1, len(self.servers)) + 5)
        except BaseException as e:
            self._stop_loop()
            raise LogUnavailableError(
                f"cannot connect to NATS at {', '.join(self.servers)}: {_describe(e)}"
            ) from e
        # the first connect tries each server a few times and gives up (a wrong URL is
        # an error now); once connected, a lost server is reconnected to for ever, so
        # a long-lived handle outlives an outage (nats-py reads this option each time)
        self._nc.options["max_reconnect_attempts"] = -1
        self._js = self._nc.jetstream(timeout=request_timeout)
        self.max_payload: int = int(self._nc.max_payload)

    @staticmethod
    async def _quiet(_e: Exception) -> None:
        """nats-py logs connection errors itself; reconnects are handled, say nothing."""

    @staticmethod
    async def _noop() -> None:
        return None

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one request; a failure worth retrying comes out as :class:`Transient`."""
        try:
            return self._run(coro, self.request_timeout * 4 + 1)
        except WrongLastSequence:
            raise
        except nats.js.errors.APIError as e:
            if e.err_code == WRONG_LAST_SEQUENCE:
                raise WrongLastSequence(e.description) from None
            if e.err_code == STREAM_NOT_FOUND or e.code == 404:
                raise
            if _transient(e):
                raise Transient(_describe(e)) from None
            raise LedgerError(f"jetstream: {_describe(e)}") from e
        except BaseException as e:
            if _transient(e):
                raise Transient(_describe(e)) from None
            raise

    # --- stream management ------------------------------------------------------------

    def stream_state(self, stream: str) -> StreamState:
        """The stream's state; :class:`StoreNotFoundError` when it does not exist."""
        try:
            info = self.call(self._js.stream_info(stream))
        except nats.js.errors.NotFoundError:
            raise StoreNotFoundError(f"jetstream stream {stream}") from None
        except nats.js.errors.APIError as e:
            if e.code == 404 or e.err_code == STREAM_NOT_FOUND:
                raise StoreNotFoundError(f"jetstream stream {stream}") from None
            raise LedgerError(f"jetstream stream {stream!r}: {_describe(e)}") from None
        cl = info.cluster
        peers = tuple((str(p.name), bool(p.current)) for p in (cl.replicas or [])) if cl else ()
        return StreamState(
            name=stream,
            subjects=tuple(info.config.subjects or ()),
            replicas=int(info.config.num_replicas or 1),
            first_seq=int(info.state.first_seq),
            last_seq=int(info.state.last_seq),
            messages=int(info.state.messages),
            bytes=int(info.state.bytes),
            leader=cl.leader if cl else None,
            peers=peers,
        )

    def create_stream(self, stream: str, subjects: list[str], replicas: int,
                      duplicate_window: float = 120.0) -> None:
        """Create the stream (file storage, nothing ever expires or is discarded); a
        publish's message id is remembered for ``duplicate_window`` seconds."""
        cfg = api.StreamConfig(
            name=stream, subjects=subjects, num_replicas=replicas,
            storage=api.StorageType.FILE, retention=api.RetentionPolicy.LIMITS,
            discard=api.DiscardPolicy.NEW, allow_direct=True, duplicate_window=duplicate_window,
        )
        try:
            self.call(self._js.add_stream(cfg))
        except (LedgerError, nats.js.errors.APIError) as e:
            why = _describe(e) if isinstance(e, nats.js.errors.APIError) else str(e)
            raise LedgerError(f"jetstream: cannot create stream {stream!r} on subjects "
                              f"{', '.join(subjects)}: {why}") from None

    def delete_stream(self, stream: str) -> None:
        self.call(self._js.delete_stream(stream))

    # --- messages -----------------------------------------------------------------------

    def publish(self, subject: str, body: bytes, headers: dict[str, str],
                expected_last: int) -> tuple[int, bool]:
        """Publish with an expected last sequence: (stream seq, duplicate)."""
        hdrs = dict(headers)
        hdrs[EXPECTED_LAST_SEQ] = str(expected_last)
        ack = self.call(self._js.publish(subject, body, headers=hdrs,
                                         timeout=self.request_timeout))
        return int(ack.seq), bool(ack.duplicate)

    def publish_pipelined(self, msgs: list[tuple[str, bytes, dict[str, str], int]]
                          ) -> list[tuple[int, bool] | None]:
        """Publish every ``(subject, body, headers, expected last seq)`` without waiting
        for each answer in turn: one round trip for all. Each result is ``(stream
        seq, duplicate)``, or None where that publish failed in any way."""
        async def one(subject: str, body: bytes, headers: dict[str, str],
                      expected: int) -> tuple[int, bool]:
            ack = await self._js.publish(subject, body, timeout=self.request_timeout,
                                         headers={**headers, EXPECTED_LAST_SEQ: str(expected)})
            return int(ack.seq), bool(ack.duplicate)

        async def run() -> list[Any]:
            return await asyncio.gather(*(one(*m) for m in msgs), return_exceptions=True)

        try:
            results = self._run(run(), self.request_timeout * 4 + 1)
        except BaseException as e:
            if _transient(e):
                return [None] * len(msgs)
            raise
        return [r if isinstance(r, tuple) else None for r in results]

    def get(self, stream: str, seq: int) -> Incoming | None:
        """The message at ``seq`` (None when the stream has none there)."""
        try:
            m = self.call(self._js.get_msg(stream, seq=seq))
        except nats.js.errors.NotFoundError:
            return None
        except nats.js.errors.APIError as e:
            if e.code == 404:
                return None
            raise LedgerError(f"jetstream: {_describe(e)}") from e
        return _incoming(int(m.seq or seq), m.subject or "", m.headers, m.data)

    def fetch(self, stream: str, subject: str, start: int, last: int,
              batch: int = 512) -> Iterator[Incoming]:
        """Messages ``start..last`` in order, through a short-lived pull consumer
        (one round trip per ``batch`` messages, where a get costs one each)."""
        cfg = api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start,
            ack_policy=api.AckPolicy.NONE, inactive_threshold=30.0, mem_storage=True,
            num_replicas=1,
        )
        sub = self.call(self._js.pull_subscribe(subject, durable=None, stream=stream,
                                                config=cfg))
        try:
            seq = start - 1
            while seq < last:
                want = min(batch, last - seq)
                msgs = self.call(sub.fetch(want, timeout=self.request_timeout))
                for m in msgs:
                    md = m.metadata
                    seq = int(md.sequence.stream)
                    yield _incoming(seq, m.subject, m.headers, m.data)
                    if seq >= last:
                        break
        finally:
            try:
                self.call(sub.unsubscribe())
            except Exception:  # noqa: BLE001 - the consumer expires on its own
                pass

    def close(self) -> None:
        try:
            self._run(self._nc.close(), 10)
        except BaseException:  # noqa: BLE001 - closing is best effort
            pass
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()


def _incoming(seq: int, subject: str, headers: dict[str, str] | None,
              data: bytes | None) -> Incoming:
    kind = subject.rsplit(".", 1)[-1]
    return Incoming(seq, kind, dict(headers or {}), bytes(data or b""))


def _describe(e: BaseException) -> str:
    if isinstance(e, nats.js.errors.APIError):
        return f"{e.description or 'error'} (code {e.code}, err_code {e.err_code})"
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__

