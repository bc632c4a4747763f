"""The JetStream backend side by side with the file log: appends, full reads, freshness.

    python3 benchmarks/bench_jetstream.py [--events 20000] [--trials 60] [--write]

Starts its own nats-server nodes on 127.0.0.1 (``tests/natscluster.py``: one
node for R1, three for R3) and times, through the public API:

* appends with sync acks: ``log.append`` of one event, and of 100 events, each
  call waiting for its acknowledgement (file log: ``sync="always"``);
* one big batch (``--events`` events of ~1 KB, chunked into pipelined
  messages on JetStream) and ``store.put_many`` of 2,000 packets in one batch;
* a full read from a fresh handle: ``sum(1 for _ in log.read())``;
* freshness: a ``store.put`` on one process, ``store.recall`` of its unique
  word polled on another process; p50/p95 from the put's start to the first hit
  (the put's own time included: the append is visible before ``put`` returns).

``--write`` puts the table into docs/benchmarks.md ("JetStream backend").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from natscluster import NatsCluster  # noqa: E402

from benchmarks.docsection import loadavg, write_section  # noqa: E402
from eventstore import Event, Ledger, LogBackend  # noqa: E402
from eventstore.jetstream import JetStreamLog  # noqa: E402
from projections import ContextStore  # noqa: E402
from projections.corpus import stdlib_packets  # noqa: E402

_n = iter(range(10**6))


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))]


class Backend:
    """One column of the table: how to open a fresh log and a store over it."""

    def __init__(self, name: str, urls: list[str] | None, replicas: int, tmp: Path) -> None:
        self.name, self.urls, self.replicas, self.tmp = name, urls, replicas, tmp

    def fresh(self) -> tuple[Callable[[], LogBackend], dict[str, Any]]:
        """An opener of one new, empty log (call it again for a second handle), and the
        ContextStore.open keywords for a store over it."""
        i = next(_n)
        if self.urls is None:
            d = self.tmp / f"file{i}"
            return (lambda: Ledger.open(d / "log")), {"root": d}
        stream = f"B{os.getpid()}_{i}"
        root = self.tmp / f"js{i}"
        root.mkdir()
        (root / ".ctxledger").mkdir()
        (root / ".ctxledger" / "config.toml").write_text(
            f'[storage]\nbackend = "jetstream"\nservers = {json.dumps(self.urls)}\n'
            f'stream = "{stream}"\nreplicas = {self.replicas}\n')
        urls = self.urls

        def opener() -> LogBackend:
            return JetStreamLog(urls, stream, prefix=f"ctx.{stream}", replicas=self.replicas)

        return opener, {"root": root}


def rate_appends(b: Backend, n: int, size: int) -> tuple[float, float]:
    """Events/s and p50 ms per call of ``n`` appends of ``size`` events, each acked."""
    opener, _ = b.fresh()
    lat: list[float] = []
    with opener() as log:
        evs = [Event("bench.ev", None, {"i": i, "pad": "x" * 200}) for i in range(size)]
        t0 = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            log.append(evs)
            lat.append((time.perf_counter() - t) * 1e3)
        dt = time.perf_counter() - t0
    return n * size / dt, statistics.median(lat)


def big_batch(b: Backend, n: int) -> tuple[float, float]:
    """Events/s of one append of ``n`` ~1 KB events, then of a full read from a new handle."""
    opener, _ = b.fresh()
    evs = [Event("bench.big", None, {"i": i, "pad": "y" * 1000}) for i in range(n)]
    with opener() as log:
        t = time.perf_counter()
        for k in range(0, n, 5000):
            log.append(evs[k:k + 5000])
        w = n / (time.perf_counter() - t)
    t = time.perf_counter()
    with opener() as log:
        got = sum(1 for _ in log.read())
    r = got / (time.perf_counter() - t)
    assert got == n
    return w, r


def put_many(b: Backend, n: int) -> float:
    """Packets/s of ``store.put_many`` of ``n`` packets in one batch."""
    _, kw = b.fresh()
    packets = list(stdlib_packets(n, seed=1))
    with ContextStore.open(**kw) as store:
        t = time.perf_counter()
        store.put_many(packets)
        return n / (time.perf_counter() - t)


POLLER = r"""
import sys, time, json
sys.path.insert(0, sys.argv[1])
from projections import ContextStore
with ContextStore.open(sys.argv[2], readonly=True) as store:
    print("ready", flush=True)
    for line in sys.stdin:
        word = line.strip()
        while not any(word in h.summary for h in store.recall(word, limit=3)):
            pass
        print(json.dumps(time.time()), flush=True)
"""


def freshness(b: Backend, trials: int) -> list[float]:
    """ms from ``put`` returning on this process to ``recall`` finding it on another."""
    _, kw = b.fresh()
    root = kw["root"]
    with ContextStore.open(root) as store:
        store.put({"target": "bench", "summary": "warm up entry"})
        proc = subprocess.Popen([sys.executable, "-c", POLLER, ROOT, str(root)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        out: list[float] = []
        for i in range(trials):
            # one token, in no other entry: letters only (digits would split it)
            word = "fresh" + "".join(chr(97 + int(c, 16)) for c in f"{os.getpid():x}{i:04x}")
            proc.stdin.write(word + "\n")
            proc.stdin.flush()
            time.sleep(0.02)  # the poller is now looking for it
            start = time.time()  # (the append is visible before put returns: count from here)
            store.put({"target": "bench", "summary": f"entry {word}", "i": i})
            seen = json.loads(proc.stdout.readline())
            out.append((seen - start) * 1e3)
        proc.stdin.close()
        proc.wait(30)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-js-"))
    one = NatsCluster(tmp / "r1", size=1)
    three = NatsCluster(tmp / "r3", size=3)
    one.start()
    three.start()
    load = loadavg()
    try:
        cols = [Backend("file log", None, 1, tmp), Backend("JetStream R1", one.urls, 1, tmp),
                Backend("JetStream R3", three.urls, 3, tmp)]
        rows: dict[str, list[str]] = {}
        for b in cols:
            r1, l1 = rate_appends(b, 300, 1)
            r100, l100 = rate_appends(b, 200, 100)
            w, r = big_batch(b, args.events)
            pm = put_many(b, 2000)
            fr = freshness(b, args.trials)
            rows[b.name] = [f"{r1:,.0f} ({l1:.2f} ms)", f"{r100:,.0f} ({l100:.2f} ms)",
                            f"{w:,.0f}", f"{pm:,.0f}", f"{r:,.0f}",
                            f"{pct(fr, 0.5):.1f} / {pct(fr, 0.95):.1f}"]
            print(b.name, rows[b.name], flush=True)
    finally:
        one.stop()
        three.stop()
    heads = ["append 1 event, events/s (p50 per call)", "append 100 events, events/s (p50)",
             f"{args.events:,} events in batches of 5,000, events/s",
             "store.put_many 2,000 packets, packets/s", "full read, new handle, events/s",
             "put start -> recall hit on another process, p50 / p95 ms"]
    lines = [f"`python benchmarks/bench_jetstream.py --events {args.events} --trials "
             f"{args.trials}`; nats-server {server_version()} on 127.0.0.1 (R3: three "
             f"nodes on this machine); 1-min load {load:.2f} before, {loadavg():.2f} after.",
             "", "| | " + " | ".join(rows) + " |", "|---|" + "---:|" * len(rows)]
    for i, h in enumerate(heads):
        lines.append(f"| {h} | " + " | ".join(rows[n][i] for n in rows) + " |")
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section("jetstream", "JetStream backend", text + "\n")


def server_version() -> str:
    from natscluster import nats_binary

    binary = nats_binary() or "nats-server"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    return out.strip().split()[-1] if out.strip() else "?"


if __name__ == "__main__":
    main()
