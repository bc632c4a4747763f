"""What the recency term costs recall: ``store.recall`` with ``[recall] recency_weight``
0 (the default: the engine's answer as it is) vs 0.25 (Packet28's weight: every query
re-ranked exactly, up to ``MAX_RERANK`` candidates), side by side in one run.

Run from the repository root (no install needed)::

    python3 benchmarks/bench_rerank.py                 # 50k packets
    python3 benchmarks/bench_rerank.py --packets 200000 --write-docs

Packets: ``projections.corpus.stdlib_packets(n, seed=0)`` put with ``put_many`` in
batches of 1,000 into one store (file log) in a temporary directory (no memory
fields, one put time per batch). Queries: bench_recall's seeded mix
(``make_queries``, ``--queries`` per class). Per query, each weight answers
three times after one warm-up (the store's config is swapped between them, so
both read the same open store: the same machine state); the mean of the three
is the query's time. Reported: p50/p95 over all queries per weight, the
per-class median ratio, and how many answers were flagged ``rerank_bounded``.
Not part of the test suite or CI.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import bench_recall  # noqa: E402
from docsection import cpu_model, loadavg, log, write_section  # noqa: E402

from projections import ContextStore  # noqa: E402
from projections.corpus import stdlib_packets  # noqa: E402
from projections.packet import cache_key_of, canonical_bytes  # noqa: E402
from projections.recall import RecallDoc  # noqa: E402

WEIGHTS = (0.0, 0.25)
ENGINE_KW = ("target", "task_id", "scope")


def run(packets: int, per_class: int, workdir: str | None) -> dict[str, Any]:
    pk = list(stdlib_packets(packets, seed=0))
    root = Path(tempfile.mkdtemp(prefix="bench-rerank-", dir=workdir))
    try:
        log(f"ingest {packets:,}")
        with ContextStore.open(root) as st:
            for i in range(0, len(pk), 1000):
                st.put_many(pk[i : i + 1000])
        docs = [RecallDoc.from_packet(cache_key_of(canonical_bytes(p)), p, 0.0, 1) for p in pk]
        queries = bench_recall.make_queries(docs, per_class, 7)
        times: dict[float, list[float]] = {w: [] for w in WEIGHTS}
        bounded = dict.fromkeys(WEIGHTS, 0)
        load_before = loadavg()
        with ContextStore.open(root) as st:
            base = st.config
            for q in queries:
                kw = {k: q[k] for k in ENGINE_KW if k in q}
                for w in WEIGHTS:
                    st.config = attrs.evolve(base, recall_recency_weight=w)
                    hits = st.recall(q["query"], limit=8, **kw)  # warm-up
                    bounded[w] += any("rerank_bounded" in h.match_reasons for h in hits)
                    t0 = time.perf_counter()
                    for _ in range(3):
                        st.recall(q["query"], limit=8, **kw)
                    times[w].append((time.perf_counter() - t0) / 3 * 1e3)
        classes: dict[str, list[float]] = {}
        for q, a, b in zip(queries, times[0.0], times[0.25], strict=True):
            classes.setdefault(q["cls"], []).append(b / a)
        return {"packets": packets, "queries": len(queries), "times": times,
                "bounded": bounded, "classes": classes, "load": (load_before, loadavg())}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * p))]


def report(r: dict[str, Any], command: str) -> str:
    t = r["times"]
    lines = [
        f"Command: `{command}`",
        "",
        f"Machine: {cpu_model()}, Python {sys.version.split()[0]}; load "
        f"{r['load'][0]:.2f} before, {r['load'][1]:.2f} after.",
        "",
        f"{r['packets']:,} packets (no memory fields), {r['queries']} queries "
        "(bench_recall's mix), `store.recall(q, limit=8)`, each weight three times per "
        "query in turn on one open store.",
        "",
        "| recency_weight | p50 (ms) | p95 (ms) | answers flagged `rerank_bounded` |",
        "|---|---:|---:|---:|",
    ]
    for w in WEIGHTS:
        lines.append(f"| {w} | {statistics.median(t[w]):.2f} | {pct(t[w], 0.95):.2f} | "
                     f"{r['bounded'][w]} |")
    lines += ["", "Per query class, median of (0.25 time / 0 time):", "",
              "| class | ratio |", "|---|---:|"]
    for cls, ratios in r["classes"].items():
        lines.append(f"| {cls} | {statistics.median(ratios):.2f}x |")
    return "\n".join(lines) + "\n\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packets", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=10, help="queries per class")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    r = run(args.packets, args.queries, args.workdir)
    command = "python3 benchmarks/bench_rerank.py --packets " \
              f"{args.packets} --queries {args.queries}" + (" --write-docs" if args.write_docs
                                                            else "")
    text = report(r, command)
    print(text)
    if args.write_docs:
        write_section("rerank", "Recency re-rank cost: benchmarks/bench_rerank.py", text)


if __name__ == "__main__":
    main()
