"""The public library API end to end, side by side with SQLite in the same run (issue 8).

Run from the repository root (no install needed)::

    python3 benchmarks/bench_public.py                          # 5k, 50k, 200k packets
    python3 benchmarks/bench_public.py --sizes 2000 --queries 5 --reps 1   # a quick look
    python3 benchmarks/bench_public.py --write-docs              # also rewrite our docs section

What users call, timed from outside: ``projections.ContextStore``. Packets:
``projections.corpus.stdlib_packets(n, seed=0)`` (the first n; a prefix of the
largest size's packets). For every size and every ingest style, each in a fresh
temporary directory under ``--workdir`` (removed afterwards):

* **ingest** -- wall time of ``ContextStore.open(root)`` + all puts + ``close()``
  (close writes the checkpoints): one ``put_many`` of everything ("one"),
  ``put_many`` of 1,000-packet batches ("batch1000"), one ``put`` per packet
  ("single"; skipped above 20,000 packets). The SQLite contender, in the same
  run and interleaved with ours (one repetition of every contender in turn):
  ``packets(key TEXT PRIMARY KEY, body TEXT)`` with the packet as JSON plus an
  FTS5 table of the same indexed text (``"\\n".join(RecallDoc.from_packet(...).texts())``,
  with the target and task ids as UNINDEXED columns for the filtered and
  task-scoped queries), ``journal_mode=WAL``, ``synchronous=FULL``, the same
  transactions as ours (like for like: what one ``put_many`` or ``put``
  acknowledges durably is one transaction: all rows in one for "one", 1,000-row
  transactions for "batch1000", one per packet for "single"), open + inserts +
  close; the key (``cache_key_of(canonical_bytes(p))``, as ours), the JSON and
  the text are computed inside the clock, as our store does. Info row: the same with keys and
  texts computed before the clock starts.
  Medians over ``--reps`` repetitions.
* **recall** -- each style's store opened afresh (``ContextStore.open(root)``,
  one warm-up query; that first call is reported too), then
  ``store.recall(q, limit=8, target=..., task_id=..., scope=...)`` over the
  seeded query mix of ``benchmarks/bench_recall.py`` (``make_queries``,
  ``--queries`` per class), next to SQLite FTS5 on the contender's database:
  ``SELECT rowid, snippet(fts, 0, '[', ']', '...', 16) FROM fts WHERE fts MATCH ?
  ORDER BY bm25(fts) LIMIT 8`` (``AND target = ?`` for *filtered*,
  ``ORDER BY instr(tasks, ?) = 0, bm25(fts)`` for *task*), the MATCH built as
  bench_recall builds it (``fts_tokens``: an OR of quoted unicode61 tokens), then
  those rows' keys fetched from ``packets``. Info column: the same with the
  tokens joined by AND (FTS5's default for bare words: only rows holding every
  term are ranked, a different and much smaller answer set). ``--reps`` rounds; in each, every
  engine answers the whole query set in turn; the median per query over the
  rounds, then p50/p95 per class and over all queries.
* **get** -- in the same fresh-open stores: ``store.get(key)`` over 1,000 seeded
  random keys (median per key over ``--reps`` rounds; p50/p95 over the keys);
  peer: ``SELECT body FROM packets WHERE key = ?`` + ``json.loads``.
* **rebuild** -- ``store.rebuild()`` on the batch1000 store (3 times up to 50k
  packets, once above): events/s from the dict it returns and from wall time.

Goals (issue 8), judged at the largest size for every ingest style: recall p50 and
p95 (over all queries) <= FTS5+snippet; get p50 <= 50 us; ingest >= 0.5 x the
SQLite contender; rebuild >= 60k events/s (the figure ``rebuild()`` returns).

Nothing in the product is disabled or tuned; the harness only runs ``gc.collect()``
before its timed blocks. Not part of the test suite or CI; numbers from a shared
machine are noisy (the 1-minute load average before and after is printed).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
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

CLASSES: list[str] = bench_recall.CLASSES
# defined by bench_recall's exec of QUERY_SRC, hence the lookup by name
fts_tokens: Callable[[str], list[str]] = vars(bench_recall)["fts_tokens"]

SEED = 0
LIMIT = 8
BATCH = 1_000
SINGLE_MAX = 20_000
GET_KEYS = 1_000
STYLES = ("one", "batch1000", "single")
GOAL_GET_US = 50.0
GOAL_INGEST_RATIO = 0.5
GOAL_REBUILD = 60_000

FTS_SELECT = "SELECT rowid, snippet(fts, 0, '[', ']', '...', 16) FROM fts WHERE fts MATCH ?"
FTS_SQL = FTS_SELECT + " ORDER BY bm25(fts) LIMIT 8"
FTS_SQL_TARGET = FTS_SELECT + " AND target = ? ORDER BY bm25(fts) LIMIT 8"
FTS_SQL_TASK = FTS_SELECT + " ORDER BY instr(tasks, ?) = 0, bm25(fts) LIMIT 8"

Packet = dict[str, Any]
Row = tuple[str, str, str, str, str]  # key, JSON body, indexed text, target, " task ids "


def pct(xs: Iterable[float], p: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]


# --- ingest: ctxledger --------------------------------------------------------------


def ctx_ingest(root: str, packets: list[Packet], style: str) -> tuple[float, list[str]]:
    """Seconds for open + puts + close, and the cache keys the puts returned."""
    gc.collect()
    t = time.perf_counter()
    store = ContextStore.open(root)
    if style == "one":
        results = store.put_many(packets)
    elif style == "batch1000":
        results = []
        for i in range(0, len(packets), BATCH):
            results.extend(store.put_many(packets[i : i + BATCH]))
    else:
        results = [store.put(p) for p in packets]
    store.close()
    secs = time.perf_counter() - t
    return secs, [r.cache_key for r in results]


# --- ingest: the SQLite contender ---------------------------------------------------


def sqlite_row(p: Packet) -> Row:
    key = cache_key_of(canonical_bytes(p))
    doc = RecallDoc.from_packet(key, p, 0.0, 0)
    return (key, json.dumps(p), "\n".join(doc.texts()), doc.target,
            " " + " ".join(doc.task_ids) + " ")


def sqlite_create(path: str) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)  # transactions spelled out below
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE packets(key TEXT PRIMARY KEY, body TEXT)")
    con.execute("CREATE VIRTUAL TABLE fts USING fts5(text, target UNINDEXED, tasks UNINDEXED)")
    return con


def sqlite_insert(con: sqlite3.Connection, first_rowid: int, rows: list[Row]) -> None:
    """One transaction: the packets rows and their FTS rows, sharing rowids."""
    con.execute("BEGIN")
    con.executemany("INSERT INTO packets(rowid, key, body) VALUES (?, ?, ?)",
                    [(first_rowid + i, r[0], r[1]) for i, r in enumerate(rows)])
    con.executemany("INSERT INTO fts(rowid, text, target, tasks) VALUES (?, ?, ?, ?)",
                    [(first_rowid + i, r[2], r[3], r[4]) for i, r in enumerate(rows)])
    con.execute("COMMIT")


#: The contender's transaction size for each ingest style: like for like, each
#: acknowledged put (or put_many) is one durable transaction.
TXN_ROWS = {"one": 0, "batch1000": BATCH, "single": 1}


def sqlite_ingest(path: str, packets: list[Packet], txn: int = BATCH) -> float:
    """Seconds for open + keys, JSON and texts + ``txn``-row transactions (0: one) + close."""
    gc.collect()
    t = time.perf_counter()
    con = sqlite_create(path)
    step = txn or len(packets)
    for i in range(0, len(packets), step):
        sqlite_insert(con, i + 1, [sqlite_row(p) for p in packets[i : i + step]])
    con.close()
    return time.perf_counter() - t


def sqlite_ingest_precomputed(path: str, rows: list[Row]) -> float:
    """The same, with keys, JSON and texts computed before the clock starts."""
    gc.collect()
    t = time.perf_counter()
    con = sqlite_create(path)
    for i in range(0, len(rows), BATCH):
        sqlite_insert(con, i + 1, rows[i : i + BATCH])
    con.close()
    return time.perf_counter() - t


def run_ingest(packets: list[Packet], styles: list[str], reps: int,
               workdir: str) -> tuple[dict[str, list[float]], dict[str, str], list[str]]:
    """Every contender once per repetition, in turn; the last repetition's stores are kept.

    Returns the seconds per contender, the kept directory per contender, and the keys.
    """
    contenders = [f"sqlite-{s}" for s in styles]
    times: dict[str, list[float]] = {
        s: [] for s in [*styles, *contenders, "sqlite-pre"]
    }
    kept: dict[str, str] = {}
    keys: list[str] = []
    pre = [sqlite_row(p) for p in packets]
    for rep in range(reps):
        last = rep == reps - 1
        for style in styles:
            d = tempfile.mkdtemp(prefix=f"pub_{style}_", dir=workdir)
            secs, keys = ctx_ingest(d, packets, style)
            times[style].append(secs)
            keep_or_remove(kept, style, d, last)
        for name in (*contenders, "sqlite-pre"):
            d = tempfile.mkdtemp(prefix=f"pub_{name}_", dir=workdir)
            db = os.path.join(d, "contender.db")
            secs = (sqlite_ingest(db, packets, TXN_ROWS[name[7:]]) if name != "sqlite-pre"
                    else sqlite_ingest_precomputed(db, pre))
            times[name].append(secs)
            keep_or_remove(kept, "sqlite" if name == "sqlite-batch1000" else name, d,
                           last and name == "sqlite-batch1000")
        log(f"    rep {rep + 1}/{reps}: " + ", ".join(
            f"{k} {v[-1]:.2f}s" for k, v in times.items()))
    return times, kept, keys


def keep_or_remove(kept: dict[str, str], name: str, d: str, keep: bool) -> None:
    if keep:
        kept[name] = d
    else:
        shutil.rmtree(d, ignore_errors=True)


# --- recall and get -----------------------------------------------------------------


def ctx_recaller(store: ContextStore) -> Callable[[dict[str, Any]], Any]:
    def run(q: dict[str, Any]) -> Any:
        return store.recall(q["query"], limit=LIMIT, **q["kwargs"])

    return run


def fts_recaller(con: sqlite3.Connection, op: str = "OR") -> Callable[[dict[str, Any]], Any]:
    """FTS5 top 8 with snippets; ``op``: how the tokens combine ("OR": ranked retrieval
    over every term, as ours; "AND": FTS5's default for bare words, far fewer rows)."""
    def run(q: dict[str, Any]) -> Any:
        toks = fts_tokens(q["query"])
        if not toks:
            return []
        match = f" {op} ".join(f'"{t}"' for t in toks)
        kw = q["kwargs"]
        if "target" in kw:
            rows = con.execute(FTS_SQL_TARGET, (match, kw["target"])).fetchall()
        elif "task_id" in kw:
            rows = con.execute(FTS_SQL_TASK, (match, " " + kw["task_id"] + " ")).fetchall()
        else:
            rows = con.execute(FTS_SQL, (match,)).fetchall()
        if not rows:
            return []
        ids = [r[0] for r in rows]
        sql = f"SELECT rowid, key FROM packets WHERE rowid IN ({','.join('?' * len(ids))})"
        keys = dict(con.execute(sql, ids).fetchall())
        return [(keys[r], snip) for r, snip in rows]

    return run


def ctx_getter(store: ContextStore) -> Callable[[str], Any]:
    return store.get


def sqlite_getter(con: sqlite3.Connection) -> Callable[[str], Any]:
    def run(key: str) -> Any:
        row = con.execute("SELECT body FROM packets WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0])

    return run


def time_rounds(engines: dict[str, Callable[[Any], Any]], args: list[Any],
                reps: int) -> dict[str, list[float]]:
    """Per engine, per argument: the median seconds over ``reps`` rounds (a block per engine)."""
    samples: dict[str, list[list[float]]] = {n: [[] for _ in args] for n in engines}
    clock = time.perf_counter
    for _ in range(reps):
        for name, fn in engines.items():
            gc.collect()
            cell = samples[name]
            for i, a in enumerate(args):
                t = clock()
                fn(a)
                cell[i].append(clock() - t)
    return {n: [statistics.median(x) for x in s] for n, s in samples.items()}


def make_query_mix(packets: list[Packet], nq: int, size: int) -> list[dict[str, Any]]:
    docs = bench_recall.make_docs(packets, SEED)
    qs = bench_recall.make_queries(docs, nq, SEED + size)
    return [{"cls": q["cls"], "query": q["query"],
             "kwargs": {k: q[k] for k in ("target", "task_id", "scope") if k in q}}
            for q in qs]


def recall_stats(lat: list[float], queries: list[dict[str, Any]]) -> dict[str, Any]:
    by: dict[str, list[float]] = {c: [] for c in CLASSES}
    for q, s in zip(queries, lat, strict=True):
        by[q["cls"]].append(s * 1e3)
    allms = [s * 1e3 for s in lat]
    return {"p50": pct(allms, 0.5), "p95": pct(allms, 0.95),
            "class": {c: (pct(v, 0.5), pct(v, 0.95), len(v)) for c, v in by.items()}}


def open_stores(kept: dict[str, str], styles: list[str],
                warm: dict[str, Any]) -> tuple[dict[str, ContextStore], dict[str, float]]:
    """Each style's store opened afresh, with one warm-up recall (timed: open + first query)."""
    stores: dict[str, ContextStore] = {}
    first: dict[str, float] = {}
    for style in styles:
        gc.collect()
        t = time.perf_counter()
        store = ContextStore.open(kept[style])
        ctx_recaller(store)(warm)
        first[style] = (time.perf_counter() - t) * 1e3
        stores[style] = store
    return stores, first


def run_reads(kept: dict[str, str], styles: list[str], queries: list[dict[str, Any]],
              keys: list[str], reps: int, size: int) -> dict[str, Any]:
    warm = {"query": "stdlib", "kwargs": {}}
    stores, first = open_stores(kept, styles, warm)
    con = sqlite3.connect(os.path.join(kept["sqlite"], "contender.db"))
    try:
        fts_recaller(con)(warm)
        recallers: dict[str, Callable[[Any], Any]] = {s: ctx_recaller(stores[s]) for s in styles}
        recallers["fts5"] = fts_recaller(con)
        recallers["fts5-and"] = fts_recaller(con, "AND")
        lat = time_rounds(recallers, queries, reps)
        sample = random.Random(SEED + size).sample(keys, min(GET_KEYS, len(keys)))
        getters: dict[str, Callable[[Any], Any]] = {s: ctx_getter(stores[s]) for s in styles}
        getters["sqlite"] = sqlite_getter(con)
        for name, fn in getters.items():  # every key is there, in every store
            assert fn(sample[0]) is not None, name
        gets = time_rounds(getters, sample, reps)
        rebuild = run_rebuild(stores["batch1000"], size) if "batch1000" in stores else None
    finally:
        con.close()
        for store in stores.values():
            store.close()
    return {
        "first_ms": first,
        "recall": {n: recall_stats(v, queries) for n, v in lat.items()},
        "get": {n: {"p50": pct(v, 0.5) * 1e6, "p95": pct(v, 0.95) * 1e6}
                for n, v in gets.items()},
        "get_keys": len(sample),
        "rebuild": rebuild,
    }


def run_rebuild(store: ContextStore, size: int) -> dict[str, Any]:
    runs = 3 if size <= 50_000 else 1
    reported: list[float] = []
    wall: list[float] = []
    events = 0
    for _ in range(runs):
        gc.collect()
        t = time.perf_counter()
        res = store.rebuild()
        secs = time.perf_counter() - t
        events = res["events"]
        reported.append(float(res["events_per_second"] or 0))
        wall.append(events / secs)
    return {"runs": runs, "events": events, "reported": statistics.median(reported),
            "wall": statistics.median(wall)}


# --- one size -----------------------------------------------------------------------


def run_size(all_packets: list[Packet], size: int, nq: int, reps: int,
             workdir: str) -> dict[str, Any]:
    packets = all_packets[:size]
    styles = [s for s in STYLES if s != "single" or size <= SINGLE_MAX]
    queries = make_query_mix(packets, nq, size)
    out: dict[str, Any] = {"size": size, "styles": styles, "queries": len(queries),
                           "load_before": loadavg()}
    log(f"  {size:,} packets: ingest ({', '.join(styles)}, sqlite) x{reps}")
    times, kept, keys = run_ingest(packets, styles, reps, workdir)
    try:
        out["ingest"] = {n: statistics.median(v) for n, v in times.items()}
        log(f"  {size:,} packets: recall ({len(queries)} queries), get, rebuild")
        out.update(run_reads(kept, styles, queries, keys, reps, size))
    finally:
        for d in kept.values():
            shutil.rmtree(d, ignore_errors=True)
    out["load_after"] = loadavg()
    return out


# --- rendering ----------------------------------------------------------------------


def f_ms(x: float) -> str:
    return "n/a" if x != x else f"{x:.3f}"


def render_ingest(r: dict[str, Any]) -> list[str]:
    n, ing = r["size"], r["ingest"]
    base = n / ing["sqlite-batch1000"]
    lines = ["| ingest (open + puts + close) | median s | packets/s | SQLite, same "
             "transactions: packets/s | ratio |", "|---|---:|---:|---:|---:|"]
    labels = {"one": "ctxledger: one `put_many` of all",
              "batch1000": "ctxledger: `put_many` of 1,000 each",
              "single": "ctxledger: one `put` per packet"}
    for style in STYLES:
        if style not in ing:
            lines.append(f"| {labels[style]} | skipped (n > {SINGLE_MAX:,}) | | |")
            continue
        rate = n / ing[style]
        peer = n / ing[f"sqlite-{style}"]
        lines.append(f"| {labels[style]} | {ing[style]:.3f} | {rate:,.0f} | "
                     f"{peer:,.0f} | {rate / peer:.2f} x |")
    pre = n / ing["sqlite-pre"]
    lines.append(f"| info: SQLite, 1,000-row transactions, keys, JSON and texts precomputed | "
                 f"{ing['sqlite-pre']:.3f} | {pre:,.0f} | {base:,.0f} | {pre / base:.2f} x |")
    return lines


def render_recall(r: dict[str, Any]) -> list[str]:
    rec = r["recall"]
    names = [*r["styles"], "fts5", "fts5-and"]
    head = [f"ctxledger ({s})" for s in r["styles"]] + [
        "FTS5+snippet", "info: FTS5+snippet, AND of the terms"]
    lines = ["| recall, p50 / p95 ms | queries | " + " | ".join(head) + " |",
             "|---|---:|" + "---:|" * len(names)]
    for c in CLASSES:
        cnt = rec["fts5"]["class"][c][2]
        cells = [f"{f_ms(rec[n]['class'][c][0])} / {f_ms(rec[n]['class'][c][1])}"
                 for n in names]
        lines.append(f"| {c} | {cnt} | " + " | ".join(cells) + " |")
    cells = [f"**{f_ms(rec[n]['p50'])} / {f_ms(rec[n]['p95'])}**" for n in names]
    lines.append(f"| **all** | {r['queries']} | " + " | ".join(cells) + " |")
    f = rec["fts5"]
    cells = [f"{rec[s]['p50'] / f['p50']:.2f} / {rec[s]['p95'] / f['p95']:.2f}"
             for s in r["styles"]]
    lines.append("| ratio ctxledger / FTS5 (all) | | " + " | ".join(cells) + " | | |")
    fa = rec["fts5-and"]
    cells = [f"{rec[s]['p50'] / fa['p50']:.2f} / {rec[s]['p95'] / fa['p95']:.2f}"
             for s in r["styles"]]
    lines.append("| info: ratio ctxledger / FTS5 AND (all) | | " + " | ".join(cells) + " | | |")
    cells = [f"{r['first_ms'][s]:.1f}" for s in r["styles"]]
    lines.append("| info: fresh open + first recall, ms | | " + " | ".join(cells) + " | | |")
    return lines


def render_get(r: dict[str, Any]) -> list[str]:
    g = r["get"]
    lines = [f"| get ({r['get_keys']:,} random keys) | p50 us | p95 us |", "|---|---:|---:|"]
    for s in r["styles"]:
        lines.append(f"| ctxledger `store.get` ({s}) | {g[s]['p50']:.1f} | {g[s]['p95']:.1f} |")
    lines.append(f"| SQLite `SELECT body ... WHERE key = ?` + `json.loads` | "
                 f"{g['sqlite']['p50']:.1f} | {g['sqlite']['p95']:.1f} |")
    return lines


def render_rebuild(r: dict[str, Any]) -> list[str]:
    b = r["rebuild"]
    if b is None:
        return []
    return ["| rebuild (batch1000 store) | runs | events | events/s (returned) | "
            "events/s (wall) |", "|---|---:|---:|---:|---:|",
            f"| `store.rebuild()` | {b['runs']} | {b['events']:,} | {b['reported']:,.0f} | "
            f"{b['wall']:,.0f} |"]


def goals(r: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """(goal, style, value, met) at one size; met is None for a skipped style."""
    ing, rec, g = r["ingest"], r["recall"], r["get"]
    f = rec["fts5"]
    out: list[tuple[str, str, str, bool | None]] = []
    for s in STYLES:
        if s not in r["styles"]:
            out.append(("every goal", s, f"skipped (n > {SINGLE_MAX:,})", None))
            continue
        slow = [c for c in CLASSES if rec[s]["class"][c][0] > rec["fts5"]["class"][c][0]]
        note = f" (p50 above FTS5 in: {', '.join(slow)})" if slow else ""
        out += [
            ("recall p50 <= FTS5+snippet p50", s,
             f"{rec[s]['p50']:.3f} vs {f['p50']:.3f} ms{note}", rec[s]["p50"] <= f["p50"]),
            ("recall p95 <= FTS5+snippet p95", s,
             f"{rec[s]['p95']:.3f} vs {f['p95']:.3f} ms", rec[s]["p95"] <= f["p95"]),
            (f"get p50 <= {GOAL_GET_US:.0f} us", s, f"{g[s]['p50']:.1f} us",
             g[s]["p50"] <= GOAL_GET_US),
            (f"ingest >= {GOAL_INGEST_RATIO} x SQLite contender", s,
             f"{ing[f'sqlite-{s}'] / ing[s]:.2f} x",
             ing[f"sqlite-{s}"] / ing[s] >= GOAL_INGEST_RATIO),
        ]
    b = r["rebuild"]
    if b is not None:
        out.append((f"rebuild >= {GOAL_REBUILD:,} events/s", "batch1000",
                    f"{b['reported']:,.0f}/s (wall {b['wall']:,.0f}/s)",
                    b["reported"] >= GOAL_REBUILD))
    return out


def render_goals(r: dict[str, Any]) -> list[str]:
    lines = [f"Goals of issue 8 at {r['size']:,} packets (the largest size of this run):", "",
             "| goal | ingest style | value | result |", "|---|---|---|:---:|"]
    for goal, style, value, met in goals(r):
        res = "n/a" if met is None else ("PASS" if met else "**FAIL**")
        lines.append(f"| {goal} | {style} | {value} | {res} |")
    return lines


def render(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"Run on {meta['date']} with `{meta['command']}` ({meta['reps']} repetitions, "
        f"{meta['nq']} queries per class; medians).",
        "",
        f"Machine: {meta['cpus']} cores ({meta['cpu']}), {meta['os']}; Python {meta['python']}, "
        f"SQLite {sqlite3.sqlite_version}. 1-min load average {meta['load_before']:.2f} before, "
        f"{meta['load_after']:.2f} after the run; the machine may be shared, so compare the "
        "ratios measured in this run, not absolute figures across runs.",
        "",
        "What is timed (the module docstring of `benchmarks/bench_public.py` has the details): "
        "ingest = `ContextStore.open` + puts + `close()` (which writes the checkpoints) in a "
        "fresh directory, against a durable SQLite table of the packets as JSON plus an FTS5 "
        "table of the same indexed text (WAL, `synchronous=FULL`, the same transactions as "
        "ours: one for all, 1,000 rows, or one per packet; "
        "key and text computed inside the clock as ours are); recall = `store.recall(q, "
        "limit=8, ...)` on each store opened afresh, against FTS5 `MATCH` + `bm25` + "
        "`snippet` + the rows' keys, top 8, on bench_recall's seeded query mix; get = "
        "`store.get(key)` over 1,000 random keys; rebuild = `store.rebuild()` on the "
        "batch1000 store (its returned rate covers the fold and the recall index's bulk "
        "build; the wall rate adds writing the checkpoints).",
        "",
    ]
    for r in results:
        lines += [f"### {r['size']:,} packets (1-min load average {r['load_before']:.2f} before, "
                  f"{r['load_after']:.2f} after)", ""]
        for part in (render_ingest, render_recall, render_get, render_rebuild):
            block = part(r)
            if block:
                lines += [*block, ""]
    lines += [*render_goals(max(results, key=lambda x: x["size"])), ""]
    return "\n".join(lines)


# --- main ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--sizes", default="5000,50000,200000", help="comma-separated")
    ap.add_argument("--queries", type=int, default=30, help="queries per class")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (ingest) and rounds")
    ap.add_argument("--write-docs", action="store_true", help="rewrite our docs section")
    ap.add_argument("--workdir", default=None, help="parent of the temporary stores")
    args = ap.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    argv_text = sys.argv[1:] if argv is None else argv
    meta: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python3 benchmarks/bench_public.py", *argv_text]),
        "reps": args.reps, "nq": args.queries, "cpus": os.cpu_count(), "cpu": cpu_model(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(), "load_before": loadavg(),
    }
    t = time.perf_counter()
    packets = list(stdlib_packets(max(sizes), seed=SEED))
    log(f"corpus: {len(packets):,} packets in {time.perf_counter() - t:.1f}s")
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench_public_", dir=args.workdir)
    try:
        results = [run_size(packets, s, args.queries, args.reps, work) for s in sizes]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    meta["load_after"] = loadavg()
    section = render(results, meta)
    print(section)
    if args.write_docs:
        write_section("public", "The public API: benchmarks/bench_public.py", section)
        log("wrote docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
