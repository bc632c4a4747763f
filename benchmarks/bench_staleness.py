"""What freshness costs: recall with the staleness check on vs off, and put_many with and
without fingerprinting, side by side in one run (issue 13).

Run from the repository root (no install needed)::

    python3 benchmarks/bench_staleness.py                       # 200k packets
    python3 benchmarks/bench_staleness.py --packets 5000 --queries 5   # a quick look
    python3 benchmarks/bench_staleness.py --write-docs           # also rewrite our docs section

Packets: ``projections.corpus.stdlib_packets(n, seed=0)``; their ``paths`` name
stdlib files (``Lib/json/decoder.py``...). Two stores in fresh temporary
directories under ``--workdir``, fed the same packets in ``put_many`` batches
of 1,000:

* **on** -- every distinct path the packets name exists under the root as a
  real small file (``--file-bytes`` bytes each; many packets share a file, as
  packets about one module do), so each put fingerprints its files and each
  recall hit is checked (a ``stat`` per file, no re-hash: nothing changed);
* **off** -- the same packets under a root holding none of those files: no
  ``cache.files`` events, so each hit is ``unknown`` without a single stat.

**put_many** -- wall time of the puts (open and close outside the clock), as
packets/s. **recall** -- each store reopened (``ContextStore.open(root)``, one
warm-up query), then ``store.recall(q, limit=8, **kwargs)`` (the public path)
over bench_recall's seeded query mix (``make_queries``, ``--queries`` per
class); ``--reps`` rounds, in each both stores answer every query in turn
(interleaved: the same machine state for both); the median per query over the
rounds, then p50/p95 over all queries. Goal: the check adds at most 20% to p50.

Nothing in the product is disabled or tuned; the harness only runs
``gc.collect()`` before its timed blocks. Not part of the test suite or CI.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
for _p in (str(REPO), str(BENCH)):  # run from a checkout without installing
    if _p not in sys.path:
        sys.path.insert(0, _p)

import bench_recall  # noqa: E402  (a sibling module: the seeded query mix)
from docsection import cpu_model, loadavg, log, write_section  # noqa: E402

from projections import ContextStore  # noqa: E402
from projections.corpus import stdlib_packets  # noqa: E402
from projections.packet import cache_key_of, canonical_bytes  # noqa: E402
from projections.recall import RecallDoc  # noqa: E402

BATCH = 1000


def make_files(root: Path, packets: list[dict[str, Any]], size: int) -> int:
    """Every distinct path the packets name, as a ``size``-byte file under ``root``."""
    paths = {p for pkt in packets for p in pkt.get("paths", ()) if isinstance(p, str)}
    for i, rel in enumerate(sorted(paths)):
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes((f"# {rel} {i}\n".encode() * (size // 8 + 1))[:size])
    return len(paths)


def ingest(root: Path, packets: list[dict[str, Any]]) -> float:
    """Seconds spent in ``put_many`` (1,000-packet batches)."""
    with ContextStore.open(root) as store:
        gc.collect()
        start = time.perf_counter()
        for i in range(0, len(packets), BATCH):
            store.put_many(packets[i : i + BATCH])
        return time.perf_counter() - start


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run(n: int, nq: int, reps: int, file_bytes: int, workdir: str | None) -> dict[str, Any]:
    log(f"packets: {n}")
    packets = list(stdlib_packets(n, seed=0))
    docs = [RecallDoc.from_packet(cache_key_of(canonical_bytes(p)), p, 0.0, 0) for p in packets]
    queries = [{"query": q["query"],
                "kwargs": {k: q[k] for k in ("target", "task_id", "scope") if k in q}}
               for q in bench_recall.make_queries(docs, nq, seed=0)]
    out: dict[str, Any] = {"packets": n, "queries": len(queries)}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        roots = {"on": Path(tmp) / "on", "off": Path(tmp) / "off"}
        for r in roots.values():
            r.mkdir()
        out["files"] = make_files(roots["on"], packets, file_bytes)
        for name, root in roots.items():
            log(f"ingest {name}")
            secs = ingest(root, packets)
            out[f"put_{name}"] = n / secs
        stores = {k: ContextStore.open(r, readonly=True) for k, r in roots.items()}
        try:
            for store in stores.values():
                store.recall(queries[0]["query"], limit=8, **queries[0]["kwargs"])
            states = {
                k: {h.freshness.state for q in queries[:20]
                    for h in s.recall(q["query"], limit=8, **q["kwargs"]) if h.freshness}
                for k, s in stores.items()
            }
            out["states"] = states
            times: dict[str, list[list[float]]] = {k: [[] for _ in queries] for k in stores}
            for rep in range(reps):
                log(f"recall round {rep + 1}/{reps}")
                gc.collect()
                for i, q in enumerate(queries):
                    for k, s in stores.items():
                        t0 = time.perf_counter()
                        s.recall(q["query"], limit=8, **q["kwargs"])
                        times[k][i].append(time.perf_counter() - t0)
            for k in stores:
                med = [statistics.median(t) * 1000 for t in times[k]]
                out[f"p50_{k}"], out[f"p95_{k}"] = pct(med, 0.5), pct(med, 0.95)
        finally:
            for s in stores.values():
                s.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def section(r: dict[str, Any], meta: dict[str, Any]) -> str:
    added = (r["p50_on"] / r["p50_off"] - 1) * 100
    return (
        f"Command: `{meta['command']}`\n\n"
        f"Machine: {meta['cpu']}, {meta['cpus']} cores, Python {meta['python']}; load "
        f"{meta['load_before']:.2f} before, {meta['load_after']:.2f} after; {meta['date']}.\n\n"
        f"{r['packets']:,} packets naming {r['files']:,} distinct files "
        f"({meta['file_bytes']} bytes each); {r['queries']} queries x {meta['reps']} rounds, "
        "interleaved.\n\n"
        "| | staleness check on | off (no fingerprints) | on / off |\n"
        "|---|---:|---:|---:|\n"
        f"| recall p50 (ms) | {r['p50_on']:.2f} | {r['p50_off']:.2f} | "
        f"{r['p50_on'] / r['p50_off']:.2f} |\n"
        f"| recall p95 (ms) | {r['p95_on']:.2f} | {r['p95_off']:.2f} | "
        f"{r['p95_on'] / r['p95_off']:.2f} |\n"
        f"| put_many (packets/s, 1,000 per batch) | {r['put_on']:,.0f} | {r['put_off']:,.0f} | "
        f"{r['put_on'] / r['put_off']:.2f} |\n\n"
        f"Freshness states seen (first 20 queries): on {sorted(r['states']['on'])}, "
        f"off {sorted(r['states']['off'])}. The check adds {added:.1f}% to recall p50 "
        f"(goal: at most 20%): {'met' if added <= 20 else 'NOT met'}.\n\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--packets", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=30, help="queries per class")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--file-bytes", type=int, default=512)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args(argv)
    meta: dict[str, Any] = {
        "command": "python3 benchmarks/bench_staleness.py " + " ".join(argv or sys.argv[1:]),
        "cpu": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "load_before": loadavg(), "reps": args.reps, "file_bytes": args.file_bytes,
        "date": time.strftime("%Y-%m-%d"),
    }
    r = run(args.packets, args.queries, args.reps, args.file_bytes, args.workdir)
    meta["load_after"] = loadavg()
    text = section(r, meta)
    print(text)
    if args.write_docs:
        write_section("staleness", "Freshness checks: benchmarks/bench_staleness.py", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
