"""A real NATS JetStream cluster on 127.0.0.1 for the tests (issue 17).

``NatsCluster`` starts ``size`` ``nats-server`` processes (Debian's package, v2.9.10
here) as one JetStream cluster: every node gets free ports (found by binding port 0),
its own directory under ``base_dir`` (config file ``nN/nats.conf``, JetStream store
``nN/store``, log ``nN/server.log``: the server's stdout and stderr), and routes to
every other node. ``start`` returns once a stream with ``num_replicas=size`` has
acknowledged a publish, i.e. the meta leader is elected and a replicated stream can
reach quorum; the probe stream is then deleted.

Nodes are stopped by pid only (``kill``, ``stop``), never by name. Every node is also
killed at interpreter exit (``atexit``) and, on Linux, when the process that started
it dies (``PR_SET_PDEATHSIG``), so a failed or interrupted test run leaves no servers
behind.

The probes are small synchronous wrappers around ``nats-py`` (asyncio): each call runs
its own event loop with a short-lived connection, and every wait retries until a
deadline (no sleep-only waits). Nothing here imports pytest.

Usage::

    cluster = NatsCluster(tmp_dir)          # 3 nodes
    cluster.start()
    cluster.urls                            # ["nats://127.0.0.1:PORT", ...]
    leader = cluster.wait_for_leader("S")   # index of the node leading stream S
    cluster.kill(leader)                    # SIGKILL by pid, waits for the exit
    cluster.restart(leader)                 # same ports, same store dir
    cluster.stop()                          # idempotent
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

_CANDIDATES = ("/usr/sbin/nats-server", "/usr/bin/nats-server")
_LOG_TAIL = 40  # lines of a node's log quoted when it fails


def nats_binary() -> str | None:
    """The ``nats-server`` binary: on PATH, else Debian's /usr/sbin or /usr/bin; None if absent."""
    found = shutil.which("nats-server")
    if found:
        return found
    for candidate in _CANDIDATES:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (all sockets held open until all are bound)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    """Run one coroutine on a fresh event loop (the probes are sync helpers)."""

    async def main() -> T:
        return await coro_fn()

    return asyncio.run(main())


async def _quiet(_exc: Exception) -> None:  # nats-py prints every error otherwise
    return None


@contextlib.asynccontextmanager
async def connect(url: str | list[str], timeout: float = 2.0) -> AsyncIterator[Any]:
    """A short-lived nats-py connection that does not reconnect (closed on exit)."""
    import nats

    servers = [url] if isinstance(url, str) else list(url)
    nc = await nats.connect(
        servers=servers,
        connect_timeout=max(1, round(timeout)),
        allow_reconnect=False,
        max_reconnect_attempts=0,
        reconnect_time_wait=0.05,  # else a refused first attempt costs nats-py's 2 s wait
        error_cb=_quiet,
        disconnected_cb=None,
    )
    try:
        yield nc
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), timeout)


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


_LIVE: weakref.WeakSet[NatsCluster] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for cluster in list(_LIVE):
        with contextlib.suppress(Exception):
            cluster.stop()


class NatsClusterError(RuntimeError):
    """A node did not start or the cluster did not become ready in time."""


class NatsCluster:
    """``size`` nats-server nodes with JetStream, clustered over routes on 127.0.0.1."""

    CLUSTER_NAME = "ctxtest"

    def __init__(self, base_dir: Path, size: int = 3, binary: str | None = None) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.base_dir = Path(base_dir)
        self.size = size
        self.binary = binary or nats_binary()
        if self.binary is None:
            raise NatsClusterError("nats-server not found (PATH, /usr/sbin, /usr/bin)")
        self.names: list[str] = [f"n{i}" for i in range(size)]
        self.urls: list[str] = []
        self.client_ports: list[int] = []
        self.cluster_ports: list[int] = []
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * size
        self._logs: list[Any] = [None] * size
        self._started = False

    # -- paths ---------------------------------------------------------------------

    def node_dir(self, i: int) -> Path:
        return self.base_dir / self.names[i]

    def config_path(self, i: int) -> Path:
        return self.node_dir(i) / "nats.conf"

    def log_path(self, i: int) -> Path:
        return self.node_dir(i) / "server.log"

    def store_dir(self, i: int) -> Path:
        return self.node_dir(i) / "store"

    def log_tail(self, i: int, lines: int = _LOG_TAIL) -> str:
        try:
            text = self.log_path(i).read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    # -- lifecycle -----------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Start every node and wait until an R``size`` stream acknowledges a publish.

        Free ports are found by binding port 0 and released before the servers bind
        them; if another process takes one in between ("address already in use" in a
        node's log), the cluster is started again on fresh ports (3 attempts).
        """
        if self._started:
            raise NatsClusterError("cluster already started")
        self._started = True
        _LIVE.add(self)
        deadline = time.monotonic() + timeout
        for attempt in range(3):
            try:
                self._start_once(deadline)
                return
            except NatsClusterError:
                stolen = any(
                    "address already in use" in self.log_tail(i).lower()
                    for i in range(self.size)
                )
                self.stop()
                _LIVE.add(self)
                if not stolen or attempt == 2:
                    raise
                for i in range(self.size):
                    self.log_path(i).rename(self.log_path(i).with_suffix(f".{attempt}.log"))
            except BaseException:
                self.stop()
                raise

    def _start_once(self, deadline: float) -> None:
        ports = free_ports(2 * self.size)
        self.client_ports = ports[: self.size]
        self.cluster_ports = ports[self.size :]
        self.urls = [f"nats://127.0.0.1:{p}" for p in self.client_ports]
        for i in range(self.size):
            self.store_dir(i).mkdir(parents=True, exist_ok=True)
            self.config_path(i).write_text(self._config(i))
        for i in range(self.size):
            self._spawn(i)
        for i in range(self.size):
            self._wait_answers(i, deadline)
        self._wait_replicated_publish(deadline)

    def _config(self, i: int) -> str:
        routes = ",\n    ".join(
            f"nats-route://127.0.0.1:{p}" for j, p in enumerate(self.cluster_ports) if j != i
        )
        cluster = ""
        if self.size > 1:
            cluster = (
                "cluster {\n"
                f"  name: {self.CLUSTER_NAME}\n"
                f"  listen: 127.0.0.1:{self.cluster_ports[i]}\n"
                f"  routes: [\n    {routes}\n  ]\n"
                "}\n"
            )
        return (
            f"# node {self.names[i]} of a {self.size}-node test cluster (tests/natscluster.py)\n"
            f"server_name: {self.names[i]}\n"
            f"listen: 127.0.0.1:{self.client_ports[i]}\n"
            "jetstream {\n"
            f"  store_dir: {json.dumps(str(self.store_dir(i)))}\n"
            "  max_memory_store: 64MB\n"
            "  max_file_store: 1GB\n"
            "}\n" + cluster
        )

    def _spawn(self, i: int) -> None:
        log = open(self.log_path(i), "ab")  # noqa: SIM115 - kept open while the node runs
        self._logs[i] = log
        kwargs: dict[str, Any] = {}
        if sys.platform.startswith("linux"):
            kwargs["preexec_fn"] = _set_pdeathsig
        self.procs[i] = subprocess.Popen(
            [str(self.binary), "-c", str(self.config_path(i))],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.node_dir(i),
            **kwargs,
        )

    def alive(self, i: int) -> bool:
        proc = self.procs[i]
        return proc is not None and proc.poll() is None

    def pid(self, i: int) -> int | None:
        proc = self.procs[i]
        return proc.pid if proc is not None and proc.poll() is None else None

    def _fail(self, i: int, what: str) -> NatsClusterError:
        proc = self.procs[i]
        rc = proc.poll() if proc is not None else None
        state = f"exited with {rc}" if rc is not None else "running"
        return NatsClusterError(
            f"nats-server node {self.names[i]} ({self.urls[i]}, {state}): {what}; "
            f"log {self.log_path(i)}, config {self.config_path(i)}; last lines:\n"
            f"{self.log_tail(i)}"
        )

    def _wait_answers(self, i: int, deadline: float) -> None:
        """Until node i accepts a client connection and answers a PING (flush)."""
        last: Exception | None = None
        while True:
            if not self.alive(i):
                raise self._fail(i, "did not start")
            try:
                run(lambda: self._ping(self.urls[i]))
                return
            except Exception as exc:  # noqa: BLE001 - retried until the deadline
                last = exc
            if time.monotonic() > deadline:
                raise self._fail(i, f"does not answer clients ({last!r})")
            time.sleep(0.05)

    @staticmethod
    async def _ping(url: str) -> None:
        async with connect(url, timeout=1.0) as nc:
            await nc.flush(timeout=1)

    def _wait_replicated_publish(self, deadline: float) -> None:
        """Until a probe stream with num_replicas=size acknowledges a publish; then delete it."""
        name = f"PROBE_{uuid.uuid4().hex[:12]}"
        subject = f"probe.{name}"
        state = {"created": False}
        last: Exception | None = None

        async def attempt() -> None:
            async with connect(self.live_urls(), timeout=1.0) as nc:
                js = nc.jetstream(timeout=2.0)
                if not state["created"]:
                    await js.add_stream(name=name, subjects=[subject], num_replicas=self.size)
                    state["created"] = True
                await js.publish(subject, b"probe", timeout=2.0)

        while True:
            for i in range(self.size):
                if not self.alive(i):
                    raise self._fail(i, "exited while the cluster formed")
            try:
                run(attempt)
                break
            except Exception as exc:  # noqa: BLE001 - not ready yet: no meta leader / quorum
                last = exc
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {self.log_path(i)}\n{self.log_tail(i, 15)}"
                                  for i in range(self.size))
                raise NatsClusterError(
                    f"JetStream cluster of {self.size} not ready: an R{self.size} stream did "
                    f"not acknowledge a publish ({last!r}); logs:\n{tails}"
                )
            time.sleep(0.1)

        async def delete() -> None:
            async with connect(self.live_urls(), timeout=1.0) as nc:
                await nc.jetstream(timeout=5.0).delete_stream(name)

        with contextlib.suppress(Exception):  # a leftover probe stream is harmless
            run(delete)

    def kill(self, i: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to node i's pid and wait for it to exit (SIGKILL after 10 s)."""
        proc = self.procs[i]
        if proc is None or proc.poll() is not None:
            self._close_log(i)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10.0)
        self._close_log(i)

    def _close_log(self, i: int) -> None:
        log = self._logs[i]
        self._logs[i] = None
        if log is not None:
            with contextlib.suppress(OSError):
                log.close()

    def restart(self, i: int, timeout: float = 30.0) -> None:
        """Start node i again (same ports, config and store dir); wait until it answers.

        "Answers" means it accepts a client connection; whether it has caught up with
        its streams is for ``wait_for_leader`` / the caller's own retries to see.
        """
        if self.alive(i):
            raise NatsClusterError(f"node {self.names[i]} is running; kill it first")
        self._spawn(i)
        self._wait_answers(i, time.monotonic() + timeout)

    def restart_dead(self, timeout: float = 30.0) -> list[int]:
        """Restart every node that is not running (to restore a shared cluster)."""
        dead = [i for i in range(self.size) if not self.alive(i)]
        for i in dead:
            self.restart(i, timeout)
        return dead

    def stop(self) -> None:
        """Stop every node by pid (SIGTERM, then SIGKILL); idempotent."""
        for i in range(self.size):
            with contextlib.suppress(Exception):
                self.kill(i, signal.SIGTERM)
        _LIVE.discard(self)

    def __enter__(self) -> NatsCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- probes --------------------------------------------------------------------

    def live_urls(self) -> list[str]:
        return [u for i, u in enumerate(self.urls) if self.alive(i)]

    def stream_leader(self, stream: str) -> int | None:
        """Index of the node leading ``stream`` (STREAM.INFO's cluster.leader), else None.

        None also when no live node answers in time, or when the answer names a node
        that is not running (a stale view during an election).
        """

        si = self._stream_info(stream)
        if si is None:
            return None
        leader = si.cluster.leader if si.cluster is not None else None
        if leader is None and self.size == 1:
            return 0 if self.alive(0) else None
        if leader not in self.names:
            return None
        idx = self.names.index(leader)
        return idx if self.alive(idx) else None

    def _stream_info(self, stream: str) -> Any:
        """STREAM.INFO from any live node, or None (no node up, or none answered in time:
        no leader to answer)."""

        async def info() -> Any:
            async with connect(self.live_urls(), timeout=1.0) as nc:
                return await nc.jetstream(timeout=1.0).stream_info(stream)

        if not self.live_urls():
            return None
        try:
            return run(info)
        except Exception:  # noqa: BLE001 - no leader to answer, or no node up
            return None

    def quorum(self, stream: str) -> bool:
        """True when ``stream`` has a live leader and a majority of its replicas
        (leader included) are online and current: a write can be acknowledged now.

        A node that kept leading while its peers were down reports itself leader at
        once after they restart, before they caught up; this waits for the catch-up."""

        if self.stream_leader(stream) is None:
            return False
        si = self._stream_info(stream)
        if si is None:
            return False
        peers = (si.cluster.replicas or []) if si.cluster is not None else []
        current = 1 + sum(1 for p in peers if p.current and not p.offline)
        return current > (1 + len(peers)) // 2

    def wait_for_quorum(self, stream: str, timeout: float = 30.0) -> None:
        """Poll :meth:`quorum` until it holds, else :class:`NatsClusterError`."""
        deadline = time.monotonic() + timeout
        while not self.quorum(stream):
            if time.monotonic() > deadline:
                raise NatsClusterError(f"stream {stream!r} has no quorum after {timeout:.1f} s")
            time.sleep(0.1)

    def wait_for_leader(
        self, stream: str, timeout: float = 15.0, exclude: int | None = None
    ) -> int:
        """Poll ``stream_leader`` until a live node (other than ``exclude``) leads ``stream``."""
        deadline = time.monotonic() + timeout
        while True:
            leader = self.stream_leader(stream)
            if leader is not None and leader != exclude:
                return leader
            if time.monotonic() > deadline:
                raise NatsClusterError(
                    f"stream {stream!r} has no leader after {timeout:.1f} s "
                    f"(nodes up: {[self.names[i] for i in range(self.size) if self.alive(i)]})"
                )
            time.sleep(0.1)
