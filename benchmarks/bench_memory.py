"""Memory scoring (issue 13): recall quality and latency through ``store.recall``, before/after.

    python3 benchmarks/bench_memory.py [--sizes 50000] [--queries 40]

bench_recall.py's packets (no memory fields) and seeded query set, put through
``ContextStore.put`` into an in-memory log whose clock gives each packet its
put time. Two corpora: ``same-age`` (every packet put within seconds) and
``spread`` (each packet put at a random age, 0 to 30 days, independent of the
queries). For each, one store answers every query twice per round: "before"
with ``[recall] recency_weight = 0`` (no packet has a tier, so nothing adjusts:
recall takes the engine's answer as it is, the code path before issue 13) and
"after" with the defaults (tier bonus 0.5, penalty 0.25, recency 0.25): the
exact re-rank. NDCG@10 with each query's source packet as the one right
answer (bench_recall's measure); p50 latency of ``store.recall(limit=10)``,
median of three rounds per query.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.bench_recall import make_docs, make_queries, quality  # noqa: E402
from eventstore import MemoryLog  # noqa: E402
from projections import ContextStore  # noqa: E402
from projections.config import StoreConfig  # noqa: E402
from projections.corpus import stdlib_packets  # noqa: E402

DAY = 86_400.0
T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def run(size: int, nq: int, ages: str, seed: int) -> dict[str, Any]:
    packets = list(stdlib_packets(size, seed=seed))
    docs = make_docs(packets, seed)
    queries = make_queries(docs, nq, seed)
    rng = random.Random(seed)
    age = [0.0] * size if ages == "same-age" else [rng.random() * 30 * DAY for _ in packets]
    order = sorted(range(size), key=lambda i: -age[i])  # the log's time never goes back
    clock = Clock()
    cfg = StoreConfig(ttl_seconds=365 * DAY, sync="none")
    store_key: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp, MemoryLog(clock=clock) as log, \
            ContextStore.open(Path(tmp), log=log, clock=clock, config=cfg,
                              home=Path(tmp) / "home") as st:
        for lo in range(0, size, 1000):
            batch = order[lo : lo + 1000]
            for i in batch:  # one put per packet: each has its own time
                clock.t = T0 - age[i]
                store_key[docs[i].cache_key] = st.put(packets[i]).cache_key
        clock.t = T0
        configs = {"before": attrs.evolve(cfg, recall_recency_weight=0.0), "after": cfg}
        lat: dict[str, list[list[float]]] = {k: [[] for _ in queries] for k in configs}
        answers: dict[str, list[list[str]]] = {k: [] for k in configs}
        st.recall("warm up", limit=10)
        for rnd in range(3):
            for name, c in configs.items():
                st.config = c
                for qi, q in enumerate(queries):
                    kw = {k: v for k, v in q.items() if k not in ("cls", "query", "source")}
                    t = time.perf_counter()
                    hits = st.recall(q["query"], limit=10, **kw)
                    lat[name][qi].append(time.perf_counter() - t)
                    if rnd == 0:
                        answers[name].append([h.cache_key for h in hits])
    out: dict[str, Any] = {"size": size, "ages": ages, "queries": len(queries)}
    for name in configs:
        qual = [quality(a, store_key.get(q["source"]) if q["source"] else None)
                for a, q in zip(answers[name], queries, strict=True)]
        scored = [x[0] for x in qual if x is not None]
        p50 = statistics.median(statistics.median(x) for x in lat[name])
        out[name] = {"ndcg10": statistics.fmean(scored), "p50_ms": p50 * 1000}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="50000")
    ap.add_argument("--queries", type=int, default=40, help="queries per class")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    print("| packets | ages | queries | NDCG@10 before | NDCG@10 after | p50 before (ms) "
          "| p50 after (ms) |")
    print("|---|---|---|---|---|---|---|")
    for size in (int(s) for s in a.sizes.split(",")):
        for ages in ("same-age", "spread"):
            r = run(size, a.queries, ages, a.seed)
            print(f"| {size} | {ages} | {r['queries']} | {r['before']['ndcg10']:.4f} | "
                  f"{r['after']['ndcg10']:.4f} | {r['before']['p50_ms']:.2f} | "
                  f"{r['after']['p50_ms']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
