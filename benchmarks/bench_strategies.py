"""What each ranking shortcut earns on the public recall path: store.recall with it off.

    python3 benchmarks/bench_strategies.py [--size 200000] [--queries 20] [--rounds 5]

One store (``put_many`` of ``projections.corpus.stdlib_packets``), the seeded query
mix of ``benchmarks/bench_recall.py``; after one unrecorded pass of every variant,
every round runs each query under every variant back to back (the order rotating),
a variant being the engine with one
threshold of ``projections.recall.constants`` set so that its strategy never
runs (answers are the same: every strategy is exact; ``tests/test_recall_oracle.py``).
Reported: p50 of ``store.recall`` per query class, ms, and the median over the
class's queries of each query's ratio to all on (paired, so drift cancels).
``--kernel`` times ``RecallIndex.rank`` over an in-memory index instead (info).
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
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import bench_recall as br  # noqa: E402
from benchmarks.docsection import loadavg  # noqa: E402
from eventstore import Ledger  # noqa: E402
from projections import ContextStore  # noqa: E402
from projections.corpus import stdlib_packets  # noqa: E402
from projections.recall import RecallIndex, constants  # noqa: E402

VARIANTS: dict[str, dict[str, int]] = {
    "all on": {},
    "no tiny (plain Python)": dict(TINY=-1),
    "no direct (narrow filters)": dict(DIRECT_MAX=-1),
    "no pair": dict(PAIR_MIN=10**9, MULTI_MAX=0),
    "no multi": dict(MULTI_MAX=0),
    "no walk (impact order)": dict(WALK_MAX=-1),
    "no batch (MaxScore)": dict(BATCH=0),
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
    ap.add_argument("--kernel", action="store_true",
                    help="time RecallIndex.rank over an index built in memory instead "
                         "(an info figure: the ranking alone, without the store around it)")
    args = ap.parse_args()
    packets = list(itertools.islice(stdlib_packets(args.size, seed=0), args.size))
    docs = br.make_docs(packets, 0)
    queries = (br.make_queries(docs, args.queries, args.size)
               + br.narrow_queries(docs, args.queries, args.size))
    del docs
    kws = [{k: q[k] for k in ("target", "task_id", "scope") if k in q} for q in queries]
    if args.kernel:
        idx = RecallIndex.build(br.make_docs(packets, 0))
        del packets

        def run(q: dict[str, Any], kw: dict[str, Any]) -> object:
            return idx.rank(q["query"], limit=8, live_after=br.T0 - 1.0, **kw)
    else:
        root = tempfile.mkdtemp(prefix="bench-strat-")
        store = ContextStore.open(root, clock=fixed_clock,
                                  log=Ledger.open(os.path.join(root, "log"), clock=fixed_clock))
        store.put_many(packets)
        store.close()
        del packets
        store = ContextStore.open(root, clock=fixed_clock,
                                  log=Ledger.open(os.path.join(root, "log"), clock=fixed_clock))

        def run(q: dict[str, Any], kw: dict[str, Any]) -> object:
            return store.recall(q["query"], limit=8, **kw)
    run(queries[0], kws[0])
    defaults = {k: getattr(constants, k) for v in VARIANTS.values() for k in v}
    samples: dict[str, list[list[float]]] = {v: [[] for _ in queries] for v in VARIANTS}
    names = list(VARIANTS)
    # one unrecorded pass of every variant first: structures a strategy builds on
    # first use (and the page cache) are then warm for all, not charged to whichever
    # variant happened to touch a term first
    for name in names:
        for k, v in defaults.items():
            setattr(constants, k, VARIANTS[name].get(k, v))
        for q, kw in zip(queries, kws, strict=True):
            run(q, kw)
    load = loadavg()
    # paired and interleaved: each query runs under every variant back to back (the
    # order rotating), so drift over the run (other processes, clock) hits all alike
    for r in range(args.rounds):
        gc.collect()
        for i, (q, kw) in enumerate(zip(queries, kws, strict=True)):
            k0 = (r + i) % len(names)
            for name in names[k0:] + names[:k0]:
                for k, v in defaults.items():
                    setattr(constants, k, VARIANTS[name].get(k, v))
                t = time.perf_counter()
                run(q, kw)
                samples[name][i].append((time.perf_counter() - t) * 1e3)
    for k, v in defaults.items():
        setattr(constants, k, v)
    med = {n: [statistics.median(x) for x in s] for n, s in samples.items()}
    classes = [q["cls"] for q in queries]
    print(f"{args.size:,} packets, {len(queries)} queries, {args.rounds} rounds; "
          f"1-min load {load:.2f} before, {loadavg():.2f} after. "
          f"{'RecallIndex.rank' if args.kernel else 'store.recall'} p50 ms "
          "(median over queries of the ratio to all on):\n")
    cols = list(dict.fromkeys(classes)) + ["all"]
    print("| variant | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for name in VARIANTS:
        cells = []
        for c in cols:
            idx = [i for i, x in enumerate(classes) if c in ("all", x)]
            p = pct([med[name][i] for i in idx], 0.5)
            ratio = statistics.median(med[name][i] / med["all on"][i] for i in idx)
            cells.append(f"{p:.3f}" + ("" if name == "all on" else f" ({ratio:.2f})"))
        print(f"| {name} | " + " | ".join(cells) + " |")
    if not args.kernel:
        store.close()


if __name__ == "__main__":
    main()
