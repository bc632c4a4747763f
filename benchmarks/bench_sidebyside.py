"""Recall before and after a change, in one run: same answers, and the speed of each.

    python3 benchmarks/bench_sidebyside.py --old /path/to/old/tree [--sizes 50000,200000]
        [--queries 20] [--rounds 5] [--repeat 5] [--pairs 3] [--build-rounds 4]
        [--classes C1,C2] [--answers-only] [--write-docs]

Build rate: ``--build-rounds`` build-only processes per tree, one at a time, the
order alternating (each the best of 3 ``RecallIndex.build`` of the same packets;
the median of those). Then two worker processes, one per tree (``PYTHONPATH`` =
that tree), each build the same index and the same store
(``ContextStore.put_many`` of the same packets in a temporary directory,
reopened), then answer the seeded query mix of
``benchmarks/bench_recall.py`` (``make_queries`` plus ``narrow_queries``, this
tree's, for both). Answers: every query's
``RecallIndex.rank`` pairs (scores as ``repr``), ``RecallIndex.search`` hits
and ``store.recall`` hits as JSON (the stores and their logs run on one fixed
clock, so that ``created_at_unix`` and ``age_secs`` agree), compared byte for byte. Timing:
``--rounds`` rounds; in each, every query runs on the old and the new worker
back to back (the order alternating by query and round), timed inside the
worker: one untimed call (it warms the caches the other worker used), then
``--repeat`` timed calls, their median. A single timed call of a sub-millisecond
query scattered 10-25% between runs; the median per query over the rounds.
A worker keeps one memory layout for its life, and two processes of one tree
differed by up to a fifth on a class of small queries: ``--pairs`` fresh pairs
of workers, one after the other, the median per query over the pairs, then
p50/p95 per class; each pair's own p50 ratio is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = r'''
import gc, importlib.util, itertools, json, os, sys, tempfile, time
sys.path.insert(0, os.environ["TREE"])
from benchmarks import bench_recall as br
from eventstore import Ledger
from projections import ContextStore
from projections.corpus import stdlib_packets
from projections.recall import RecallDoc, RecallIndex


def fixed_clock():  # both stores (and their logs) on one clock: the same created_at, ages
    return 1.8e9


size, nq = int(sys.argv[1]), int(sys.argv[2])
packets = list(itertools.islice(stdlib_packets(size, seed=0), size))
# the query mix and the build timing of this tree's bench_recall for both workers (an
# older tree may lack a class); only its functions run, over this worker's engine
spec = importlib.util.spec_from_file_location(
    "_mix", os.path.join(os.environ["MIX"], "benchmarks", "bench_recall.py"))
mix = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mix)
meta = br.entry_meta(packets, 0)
if sys.argv[3] == "build":  # a build-only process: best of 3 builds, then exit
    print(json.dumps(mix.build_rate(packets, meta)), flush=True)
    sys.exit(0)
docs = br.make_docs(packets, 0)
queries = mix.make_queries(docs, nq, size) + mix.narrow_queries(docs, nq, size)
idx = RecallIndex.build(docs)
root = tempfile.mkdtemp(prefix="sbs-", dir=os.environ.get("WORKDIR"))
store = ContextStore.open(root, clock=fixed_clock,
                           log=Ledger.open(os.path.join(root, "log"), clock=fixed_clock))
store.put_many(packets)
store.close()
store = ContextStore.open(root, clock=fixed_clock,
                           log=Ledger.open(os.path.join(root, "log"), clock=fixed_clock))
del packets, docs, meta
gc.collect()

def kw(q):
    return {k: q[k] for k in ("target", "task_id", "scope") if k in q}

def rank(q):
    return idx.rank(q["query"], limit=br.K, live_after=br.T0 - 1.0, **kw(q))

def search(q):
    return idx.search(q["query"], limit=br.K, live_after=br.T0 - 1.0, now=br.T0 + 1e6, **kw(q))

def recall(q):
    return store.recall(q["query"], limit=8, **kw(q))

def hit_json(h):
    return h.to_json()

calls = {"rank": rank, "search": search, "recall": recall}
recall(queries[0])  # warm-up (the store's first query opens its views)
print(json.dumps({"classes": [q["cls"] for q in queries]}), flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "answers":
        out = {"rank": [[(k, repr(s)) for k, s in rank(q)] for q in queries],
               "search": [[hit_json(h) for h in search(q)] for q in queries],
               "recall": [[hit_json(h) for h in recall(q)] for q in queries],
               "queries": queries}
        print(json.dumps(out, sort_keys=True), flush=True)
    elif cmd[0] == "gc":
        gc.collect()
        print("{}", flush=True)
    else:  # "<call> <i> <n>": one query, run once untimed (caches warm again after
        # the other worker ran), then n times timed one by one: their median
        fn, q, n = calls[cmd[0]], queries[int(cmd[1])], int(cmd[2])
        fn(q)
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            fn(q)
            ts.append(time.perf_counter() - t)
        print(json.dumps(sorted(ts)[n // 2]), flush=True)
store.close()
import shutil; shutil.rmtree(root, ignore_errors=True)
'''


class Worker:
    def __init__(self, tree: str, size: int, nq: int) -> None:
        env = dict(os.environ, TREE=tree, PYTHONPATH=tree, MIX=ROOT)
        # one hash seed for both: set and dict orders alike in old and new
        env["PYTHONHASHSEED"] = "0"
        self.p = subprocess.Popen([sys.executable, "-c", WORKER, str(size), str(nq), "serve"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=env, cwd=tree)
        self.hello = json.loads(self.ask(None))

    def ask(self, cmd: str | None) -> str:
        assert self.p.stdin is not None and self.p.stdout is not None
        if cmd is not None:
            self.p.stdin.write(cmd + "\n")
            self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit(f"worker died ({cmd})")
        return line

    def close(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.close()
        self.p.wait()


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))] if s else float("nan")


def diff_answers(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    for call in ("rank", "search", "recall"):
        for q, a, b in zip(old["queries"], old[call], new[call], strict=True):
            if json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True):
                out.append(f"{call} {q['cls']} {q['query']!r}: old {a!r}\n    new {b!r}")
    return out


def build_rate(tree: str, size: int, nq: int) -> float:
    """Packets per second of ``RecallIndex.build`` (best of 3) in a fresh process."""
    env = dict(os.environ, TREE=tree, PYTHONPATH=tree, MIX=ROOT)
    out = subprocess.run([sys.executable, "-c", WORKER, str(size), str(nq), "build"],
                         capture_output=True, text=True, env=env, cwd=tree, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def time_pair(wo: Worker, wn: Worker, call: str, rounds: int, repeat: int,
              which: list[int]) -> dict[str, list[float]]:
    """Per query of ``which`` (indices), the median over ``rounds`` of each worker's
    time (ms)."""
    # paired per query: each query runs on old and new back to back (the order
    # alternating), so drift over the run hits both alike
    samples: dict[str, list[list[float]]] = {"old": [], "new": []}
    for r in range(rounds):
        wo.ask("gc")
        wn.ask("gc")
        lat: dict[str, list[float]] = {"old": [], "new": []}
        for i in which:
            pair = [("old", wo), ("new", wn)] if (r + i) % 2 == 0 else [("new", wn), ("old", wo)]
            for name, w in pair:
                lat[name].append(json.loads(w.ask(f"{call} {i} {repeat}")))
        for name in samples:
            samples[name].append(lat[name])
    return {n_: [statistics.median(x) * 1e3 for x in zip(*s, strict=True)]
            for n_, s in samples.items()}


def class_table(classes: list[str], med: dict[str, list[float]]
                ) -> dict[str, dict[str, tuple[float, float]]]:
    """p50/p95 per class (and ``all``) of per-query times."""
    table = {}
    for c in list(dict.fromkeys(classes)) + ["all"]:
        sel = [i for i, x in enumerate(classes) if c in ("all", x)]
        table[c] = {n: (pct([m[i] for i in sel], 0.5), pct([m[i] for i in sel], 0.95))
                    for n, m in med.items()}
    return table


def run_size(old: str, new: str, size: int, nq: int, rounds: int, answers_only: bool,
             build_rounds: int, repeat: int, pairs: int, only: set[str]) -> dict[str, Any]:
    # build rates first, each in a process of its own with nothing else alive, the
    # order alternating (a build next to the other tree's resident worker ran slower)
    rates: dict[str, list[float]] = {"old": [], "new": []}
    for r in range(build_rounds):
        for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
            rates[name].append(build_rate(old if name == "old" else new, size, nq))
    res: dict[str, Any] = {"size": size, "pairs": pairs, "diffs": [],
                           "build": (statistics.median(rates["old"]) if rates["old"] else 0.0,
                                     statistics.median(rates["new"]) if rates["new"] else 0.0)}
    # per call, per pair: per-query medians over the rounds. A worker keeps its memory
    # layout for its whole life, and twenty sub-millisecond queries of one class feel
    # it; fresh pairs sample fresh layouts, and the median over pairs smooths them.
    per_pair: dict[str, list[dict[str, list[float]]]] = {"rank": [], "recall": []}
    classes: list[str] = []
    for p in range(pairs):
        # start order alternating by pair: the first-started worker is not always old
        if p % 2 == 0:
            wo = Worker(old, size, nq)
            wn = Worker(new, size, nq)
        else:
            wn = Worker(new, size, nq)
            wo = Worker(old, size, nq)
        # the timed queries: every one, or those of the --classes asked for
        classes = [c for c in wo.hello["classes"] if not only or c in only]
        which = [i for i, c in enumerate(wo.hello["classes"]) if not only or c in only]
        a_old, a_new = json.loads(wo.ask("answers")), json.loads(wn.ask("answers"))
        if a_old["queries"] != a_new["queries"]:
            raise SystemExit("the two trees made different query sets")
        if p == 0:  # the answers are deterministic: one pair checks them
            res["diffs"] = diff_answers(a_old, a_new)
        if not answers_only:
            for call in per_pair:
                per_pair[call].append(time_pair(wo, wn, call, rounds, repeat, which))
        wo.close()
        wn.close()
        if answers_only:
            break
    res["queries"] = len(classes)
    if not answers_only:
        for call, runs in per_pair.items():
            med = {n: [statistics.median(r[n][i] for r in runs) for i in range(len(classes))]
                   for n in ("old", "new")}
            res[call] = class_table(classes, med)
            # each pair's own p50 ratio per class: how far one pair alone would stray
            res[call + "_pair_ratios"] = {
                c: [t[c]["new"][0] / t[c]["old"][0]
                    for t in (class_table(classes, r) for r in runs)]
                for c in res[call]}
    return res


def render(results: list[dict[str, Any]], argv: list[str]) -> str:
    lines = ["Reproduce: `flock /work/bench.lock python3 benchmarks/bench_sidebyside.py "
             + " ".join(argv) + "`. Old = main before the change, new = this tree; ms per "
             "query: per round, the median of --repeat timed calls after a warm one, each query on "
             "old and new back to back; the median over the rounds in each of --pairs fresh "
             "pairs of worker processes, the median over the pairs, then p50/p95 per "
             "class; ratio = new / old; \"pairs\": the p50 ratio each pair alone gave.", ""]
    for r in results:
        bo, bn = r["build"]
        build = (f"Build: old {bo:,.0f}/s, new {bn:,.0f}/s (ratio {bn / bo:.2f})."
                 if bo else "Build: not timed (--build-rounds 0).")
        lines.append(f"### {r['size']:,} packets ({r['queries']} queries, "
                     f"{r['pairs']} worker pair{'s' if r['pairs'] != 1 else ''})")
        lines.append("")
        lines.append(f"Answers (rank, search, store.recall): "
                     f"{'identical' if not r['diffs'] else str(len(r['diffs'])) + ' differ'}. "
                     + build)
        lines.append("")
        for call, title in (("rank", "`RecallIndex.rank`"), ("recall", "`store.recall`")):
            if call not in r:
                continue
            lines.append(f"| {title} class | old p50 | new p50 | ratio | old p95 | new p95 | "
                         "ratio | pairs (p50 ratio) |")
            lines.append("|---|---:|---:|---:|---:|---:|---:|---|")
            for c, v in r[call].items():
                (o5, o95), (n5, n95) = v["old"], v["new"]
                each = " ".join(f"{x:.2f}" for x in r[call + "_pair_ratios"][c])
                lines.append(f"| {c} | {o5:.3f} | {n5:.3f} | {n5 / o5:.2f} | {o95:.3f} | "
                             f"{n95:.3f} | {n95 / o95:.2f} | {each} |")
            lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True, help="the tree to compare with (e.g. main)")
    ap.add_argument("--new", default=ROOT)
    ap.add_argument("--sizes", default="50000,200000")
    ap.add_argument("--queries", type=int, default=20, help="queries per class")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--build-rounds", type=int, default=4,
                    help="build-only processes per tree (median of their best-of-3 rates)")
    ap.add_argument("--repeat", type=int, default=5,
                    help="timed calls of a query per turn (their median; one warm call first)")
    ap.add_argument("--pairs", type=int, default=3,
                    help="fresh old/new worker pairs per size (the median over them)")
    ap.add_argument("--classes", default="",
                    help="time only these query classes (comma-separated; answers: all)")
    ap.add_argument("--answers-only", action="store_true")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        r = run_size(args.old, args.new, size, args.queries, args.rounds, args.answers_only,
                     0 if args.answers_only else args.build_rounds, args.repeat, args.pairs,
                     {c for c in args.classes.split(",") if c})
        for d in r["diffs"]:
            print(d, file=sys.stderr)
        results.append(r)
    text = render(results, sys.argv[1:])
    print(text)
    if args.write_docs:
        sys.path.insert(0, ROOT)
        from benchmarks.docsection import write_section
        write_section("sidebyside-recall", "Recall, readable (issue 10): old and new side by "
                      "side (benchmarks/bench_sidebyside.py)", text)
    if any(r["diffs"] for r in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
