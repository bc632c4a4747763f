"""What each ranking shortcut earns on the public recall path: store.recall with it off.

    python3 benchmarks/bench_strategies.py [--size 200000] [--queries 20] [--rounds 5]

One store (``put_many`` of ``projections.corpus.stdlib_packets``), the seeded query
mix of ``benchmarks/bench_recall.py``; every round runs the whole mix once per
variant (the order rotating by round), a variant being the engine with one
threshold of ``projections.recall.constants`` set so that its strategy never
runs (answers are the same: every strategy is exact; ``tests/test_recall_oracle.py``).
Reported: p50/p95 of ``store.recall`` per query class, ms, and the ratio to all on.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import bench_recall as br  # noqa: E402
from benchmarks.docsection import loadavg  # noqa: E402
from eventstore import Ledger  # noqa: E402
from projections import ContextStore  # noqa: E402
from projections.corpus import stdlib_packets  # noqa: E402
from projections.recall import constants  # noqa: E402

VARIANTS: dict[str, dict[str, int]] = {
    "all on": {},
    "no tiny (plain Python)": dict(TINY=-1),
    "no direct (narrow filters)": dict(DIRECT_MAX=-1),
    "no pair": dict(PAIR_MIN=10**9, MULTI_MAX=0),
    "no multi": dict(MULTI_MAX=0),
    "no walk (impact order)": dict(WALK_MAX=0),
    "no batch (MaxScore)": dict(BATCH=0),
    "no dense probe": dict(DENSE_PROBE=10**9),
}


def fixed_clock() -> float:
    """The store's and its log's clock: every entry live, whenever the run happens."""
    return 1.8e9


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    packets = list(itertools.islice(stdlib_packets(args.size, seed=0), args.size))
    queries = br.make_queries(br.make_docs(packets, 0), args.queries, args.size)
    root = tempfile.mkdtemp(prefix="bench-strat-")
    store = ContextStore.open(root, clock=fixed_clock,
                           log=Ledger.open(os.path.join(root, "log"), clock=fixed_clock))
    store.put_many(packets)
    store.close()
    del packets
    store = ContextStore.open(root, clock=fixed_clock,
                           log=Ledger.open(os.path.join(root, "log"), clock=fixed_clock))
    kws = [{k: q[k] for k in ("target", "task_id", "scope") if k in q} for q in queries]
    store.recall(queries[0]["query"], **kws[0])
    defaults = {k: getattr(constants, k) for v in VARIANTS.values() for k in v}
    samples: dict[str, list[list[float]]] = {v: [[] for _ in queries] for v in VARIANTS}
    load = loadavg()
    names = list(VARIANTS)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            for k, v in defaults.items():
                setattr(constants, k, VARIANTS[name].get(k, v))
            gc.collect()
            for i, (q, kw) in enumerate(zip(queries, kws, strict=True)):
                t = time.perf_counter()
                store.recall(q["query"], limit=8, **kw)
                samples[name][i].append((time.perf_counter() - t) * 1e3)
    for k, v in defaults.items():
        setattr(constants, k, v)
    med = {n: [statistics.median(x) for x in s] for n, s in samples.items()}
    classes = [q["cls"] for q in queries]
    print(f"{args.size:,} packets, {len(queries)} queries, {args.rounds} rounds; "
          f"1-min load {load:.2f} before, {loadavg():.2f} after. store.recall p50 ms "
          "(ratio to all on):\n")
    cols = list(dict.fromkeys(classes)) + ["all"]
    print("| variant | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    base: dict[str, float] = {}
    for name in VARIANTS:
        cells = []
        for c in cols:
            xs = [m for m, x in zip(med[name], classes, strict=True) if c in ("all", x)]
            p = pct(xs, 0.5)
            base.setdefault(c, p)
            cells.append(f"{p:.3f}" + ("" if name == "all on" else f" ({p / base[c]:.2f})"))
        print(f"| {name} | " + " | ".join(cells) + " |")
    store.close()


if __name__ == "__main__":
    main()
