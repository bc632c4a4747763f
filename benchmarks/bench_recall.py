"""Recall benchmark: ctxledger's RecallIndex side by side with SQLite FTS5, bm25s and tantivy.

    python3 benchmarks/bench_recall.py [--sizes 5000,50000,200000] [--queries 40] [--write-docs]

Same packets (projections.corpus.stdlib_packets), same token streams (every
engine indexes the whitespace-joined output of ctxledger's tokenizer, so
identifier splitting is identical), same seeded queries.  Reports p50/p95 per
query class, build rate, memory while serving (RSS delta of a fresh process
that opens the stored index and runs the query set), cold open + one query
(process start to printed answer, library level), bytes on disk, and
NDCG@10 / Recall@10 with each query's source packet as the one right answer.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import blake3  # noqa: E402

from projections.corpus import stdlib_packets  # noqa: E402
from projections.recall import RecallDoc, RecallIndex, tokenize  # noqa: E402

T0 = 1_700_000_000.0
CLASSES = ["rare", "common", "phrase", "path", "basename", "test", "filtered", "task",
           "unknown", "every-doc"]
COMMON = ["return", "value", "string", "file", "object", "error", "list", "name", "data",
          "default", "type", "module", "function", "set", "get"]


def cache_key(p: dict[str, Any]) -> str:
    return blake3.blake3(json.dumps(p, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def make_docs(packets: list[dict[str, Any]], seed: int) -> list[RecallDoc]:
    rng = random.Random(seed)
    out = []
    for i, p in enumerate(packets):
        body = json.dumps(p, separators=(",", ":"))
        out.append(RecallDoc.from_packet(cache_key(p), p, T0 + i + rng.random() * 0.5,
                                         len(body)))
    return out


def make_queries(docs: list[RecallDoc], n: int, seed: int) -> list[dict[str, Any]]:
    """Seeded queries: {cls, query, kwargs, source (cache_key or None)}."""
    rng = random.Random(seed)
    qs: list[dict[str, Any]] = []

    def pick() -> RecallDoc:
        return docs[rng.randrange(len(docs))]

    def phrase(d: RecallDoc) -> str | None:
        words = [w for w in (d.summary + " " + " ".join(d.payload_text[2:3])).split()
                 if any(c.isalnum() for c in w)]
        if len(words) < 3:
            return None
        k = rng.randint(3, min(5, len(words)))
        s = rng.randrange(len(words) - k + 1)
        return " ".join(words[s : s + k])

    for cls in CLASSES:
        made = 0
        tries = 0
        while made < n and tries < n * 50:
            tries += 1
            d = pick()
            q: dict[str, Any] | None = None
            if cls == "rare":
                name = d.symbols[0].rsplit(".", 1)[-1] if d.symbols else ""
                if len(name) >= 8 and ("_" in name or any(c.isupper() for c in name[1:])):
                    q = dict(query=name, source=d.cache_key)
            elif cls == "common":
                q = dict(query=" ".join(rng.sample(COMMON, rng.randint(1, 2))), source=None)
            elif cls == "phrase":
                ph = phrase(d)
                if ph:
                    q = dict(query=ph, source=d.cache_key)
            elif cls == "path":
                q = dict(query=d.paths[0], source=d.cache_key)
            elif cls == "basename":
                q = dict(query=d.paths[0].rsplit("/", 1)[-1], source=d.cache_key)
            elif cls == "test":
                real = [t for t in d.tests if "::" in t]
                if real:
                    q = dict(query=real[0].rsplit("::", 1)[-1], source=d.cache_key)
            elif cls == "filtered":
                ph = phrase(d)
                if ph:
                    q = dict(query=ph, source=d.cache_key, target=d.target)
            elif cls == "task":
                ph = phrase(d)
                if ph and d.task_ids:
                    q = dict(query=ph, source=d.cache_key, task_id=d.task_ids[0],
                             scope="task-first")
            elif cls == "unknown":
                q = dict(query=f"zq{rng.randrange(10**6)}xv", source=None)
            elif cls == "every-doc":
                q = dict(query="stdlib", source=None)
            if q is not None:
                q["cls"] = cls
                qs.append(q)
                made += 1
    return qs


QUERY_SRC = r'''
def q_tokens(q):
    return list(dict.fromkeys(tokenize(q)))


def fts_query(con, q):
    toks = q_tokens(q["query"])
    if not toks:
        return []
    match = " OR ".join(f'"{t}"' for t in toks)
    sql = ("SELECT meta.cache_key, meta.summary FROM fts JOIN meta ON meta.id = fts.rowid "
           "WHERE fts MATCH ?")
    args: list[Any] = [match]
    if "target" in q:
        sql += " AND meta.target = ?"
        args.append(q["target"])
    if "task_id" in q:
        sql += " ORDER BY (instr(meta.tasks, ?) > 0) DESC, bm25(fts) LIMIT 10"
        args.append(" " + q["task_id"] + " ")
    else:
        sql += " ORDER BY bm25(fts) LIMIT 10"
    return [r[0] for r in con.execute(sql, args)]


def tantivy_query(index, searcher, q):
    toks = q_tokens(q["query"])
    if not toks:
        return []
    query = index.parse_query(" ".join(f'"{t}"' for t in toks), ["body"])
    res = searcher.search(query, 10)
    return [searcher.doc(addr)["key"][0] for _, addr in res.hits]


'''
exec(QUERY_SRC, globals())


# ---------------------------------------------------------------- engines
class Ctx:
    name = "ctxledger"

    def build(self, docs: list[RecallDoc], path: str) -> None:
        self.idx = RecallIndex.build(docs)
        with open(path, "wb") as f:
            f.write(self.idx.to_bytes())
        self.path = path

    def search(self, q: dict[str, Any]) -> list[str]:
        kw = {k: q[k] for k in ("target", "task_id", "scope") if k in q}
        hits = self.idx.search(q["query"], limit=10, live_after=T0 - 1.0, now=T0 + 10**6, **kw)
        return [h.cache_key for h in hits]


class Fts5:
    name = "sqlite-fts5"

    def build(self, docs: list[RecallDoc], path: str) -> None:
        con = sqlite3.connect(path)
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        con.execute("CREATE VIRTUAL TABLE fts USING fts5(body, tokenize="
                    "\"unicode61 remove_diacritics 0 tokenchars '_'\")")
        con.execute("CREATE TABLE meta (id INTEGER PRIMARY KEY, cache_key TEXT, target TEXT, "
                    "created REAL, summary TEXT, tasks TEXT)")
        con.executemany("INSERT INTO fts(rowid, body) VALUES (?, ?)",
                        ((i + 1, " ".join(tokenize("\n".join(d.texts()))))
                         for i, d in enumerate(docs)))
        con.executemany("INSERT INTO meta VALUES (?, ?, ?, ?, ?, ?)",
                        ((i + 1, d.cache_key, d.target, d.created_at, d.summary,
                          " " + " ".join(d.task_ids) + " ") for i, d in enumerate(docs)))
        con.execute("CREATE INDEX meta_target ON meta(target)")
        con.commit()
        self.con = con

    def search(self, q: dict[str, Any]) -> list[str]:
        return fts_query(self.con, q)  # noqa: F821 (defined by QUERY_SRC)


class Bm25s:
    name = "bm25s"

    def build(self, docs: list[RecallDoc], path: str) -> None:
        import bm25s
        self.keys = [d.cache_key for d in docs]
        corpus = [tokenize("\n".join(d.texts())) or ["\u2400"] for d in docs]
        self.model = bm25s.BM25(method="atire", idf_method="lucene", k1=1.5, b=0.75)
        self.model.index(corpus, show_progress=False)
        self.vocab = self.model.vocab_dict
        self.model.save(path)
        with open(os.path.join(path, "keys.json"), "w") as f:
            json.dump(self.keys, f)

    def search(self, q: dict[str, Any]) -> list[str]:
        toks = [t for t in q_tokens(q["query"]) if t in self.vocab]  # noqa: F821
        if not toks:
            return []
        res, _ = self.model.retrieve([toks], k=min(10, len(self.keys)), show_progress=False,
                                     n_threads=1)
        return [self.keys[int(i)] for i in res[0]]


class Tantivy:
    name = "tantivy"

    def build(self, docs: list[RecallDoc], path: str) -> None:
        import tantivy
        sb = tantivy.SchemaBuilder()
        sb.add_text_field("body", stored=False, tokenizer_name="whitespace")
        sb.add_text_field("key", stored=True, tokenizer_name="raw")
        schema = sb.build()
        os.makedirs(path, exist_ok=True)
        index = tantivy.Index(schema, path=path)
        w = index.writer(heap_size=256_000_000, num_threads=1)
        for d in docs:
            w.add_document(tantivy.Document(body=" ".join(tokenize("\n".join(d.texts()))),
                                            key=d.cache_key))
        w.commit()
        w.wait_merging_threads()
        index.reload()
        self.index = index
        self.searcher = index.searcher()

    def search(self, q: dict[str, Any]) -> list[str]:
        return tantivy_query(self.index, self.searcher, q)  # noqa: F821


# ---------------------------------------------------------------- worker (fresh process)
WORKER = r"""
import json, os, sys, time
t0 = time.perf_counter()
engine, path, qfile, mode = sys.argv[1:5]
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
sys.path.insert(0, os.environ["BENCH_ROOT"])
qs = json.load(open(qfile))
if mode == "serve":
    import numpy, sqlite3
    if engine == "bm25s": import bm25s
    if engine == "tantivy": import tantivy
    if engine == "ctxledger": import projections.recall
base = rss()
if engine != "ctxledger":
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "_tok", os.environ["BENCH_ROOT"] + "/projections/recall/tokenize.py")
    _tok = importlib.util.module_from_spec(spec); spec.loader.exec_module(_tok)
    tokenize = _tok.tokenize
    exec(os.environ["BENCH_QUERY_SRC"])
if engine == "ctxledger":
    from projections.recall import RecallIndex
    import mmap
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    # the store's checkpoint MAC covers these bytes, so the index skips its own checksum
    idx = RecallIndex.from_bytes(mm, verify=False)
    run = lambda q: [h.to_json() for h in idx.search(q["query"], limit=10)]
elif engine == "sqlite-fts5":
    import sqlite3
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    run = lambda q: fts_query(con, q)
elif engine == "bm25s":
    import bm25s
    m = bm25s.BM25.load(path)
    keys = json.load(open(os.path.join(path, "keys.json")))
    def run(q):
        t = [x for x in dict.fromkeys(tokenize(q["query"])) if x in m.vocab_dict]
        if not t: return []
        r, _ = m.retrieve([t], k=10, show_progress=False, n_threads=1)
        return [keys[int(i)] for i in r[0]]
elif engine == "tantivy":
    import tantivy
    index = tantivy.Index.open(path)
    s = index.searcher()
    run = lambda q: tantivy_query(index, s, q)
if mode == "cold":
    out = run(qs[0])
    print(json.dumps(out)[:80])
    sys.exit(0)
for q in qs:
    run(q)
print(json.dumps({"rss_delta": rss() - base}))
"""


def worker(engine: str, path: str, qfile: str, mode: str) -> tuple[float, dict[str, Any]]:
    env = dict(os.environ, BENCH_ROOT=ROOT, BENCH_QUERY_SRC=QUERY_SRC)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", WORKER, engine, path, qfile, mode],
                         capture_output=True, text=True, env=env, check=True)
    dt = time.perf_counter() - t
    info = json.loads(out.stdout.strip().splitlines()[-1]) if mode == "serve" else {}
    return dt, info


def disk_bytes(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)
    return os.path.getsize(path)


# ---------------------------------------------------------------- run
def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


def quality(results: list[str], source: str | None) -> tuple[float, float] | None:
    if source is None:
        return None
    if source in results[:10]:
        r = results.index(source)
        return 1.0 / math.log2(r + 2), 1.0
    return 0.0, 0.0


def run_size(packets: list[dict[str, Any]], size: int, nq: int, seed: int,
             workdir: str) -> dict[str, Any]:
    docs = make_docs(packets[:size], seed)
    queries = make_queries(docs, nq, seed + size)
    qfile = os.path.join(workdir, f"q{size}.json")
    with open(qfile, "w") as f:
        json.dump(queries, f)
    engines: list[Any] = [Ctx(), Fts5()]
    notes: list[str] = []
    for cls_ in (Bm25s, Tantivy):
        try:
            __import__(cls_.name)
            engines.append(cls_())
        except ImportError:
            notes.append(f"{cls_.name} is not installed: not measured")
    out: dict[str, Any] = {"size": size, "engines": {}, "notes": notes,
                           "queries": len(queries)}
    py = []
    for _ in range(7):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        py.append((time.perf_counter() - t) * 1e3)
    out["python_start_ms"] = statistics.median(py)
    # ctxledger build rate from packets too (from_packet + build)
    t = time.perf_counter()
    RecallIndex.build(make_docs(packets[:size], seed))
    out["ctx_build_from_packets_per_s"] = size / (time.perf_counter() - t)
    for eng in engines:
        path = os.path.join(workdir, f"{eng.name}-{size}")
        t = time.perf_counter()
        eng.build(docs, path)
        build_s = time.perf_counter() - t
        for q in queries:  # warm up
            eng.search(q)
        lat: dict[str, list[float]] = {c: [] for c in CLASSES}
        qual: dict[str, list[tuple[float, float]]] = {c: [] for c in CLASSES}
        for q in queries:
            t = time.perf_counter()
            res = eng.search(q)
            lat[q["cls"]].append((time.perf_counter() - t) * 1e3)
            qq = quality(res, q.get("source"))
            if qq is not None:
                qual[q["cls"]].append(qq)
        if eng.name == "ctxledger":
            with open(path, "rb") as f:
                data = f.read()
            lt = []
            for verify in (False, True):
                t = time.perf_counter()
                RecallIndex.from_bytes(data, verify=verify)
                lt.append((time.perf_counter() - t) * 1e3)
            out["ctx_load_ms"] = lt
            del data
        colds = [worker(eng.name, path, qfile, "cold")[0] * 1e3 for _ in range(7)]
        _, serve = worker(eng.name, path, qfile, "serve")
        allq = [x for c in CLASSES for x in qual[c]]
        out["engines"][eng.name] = {
            "build_s": build_s,
            "build_per_s": size / build_s,
            "p50": {c: pct(v, 0.5) for c, v in lat.items()},
            "p95": {c: pct(v, 0.95) for c, v in lat.items()},
            "ndcg10": statistics.fmean(x[0] for x in allq) if allq else float("nan"),
            "recall10": statistics.fmean(x[1] for x in allq) if allq else float("nan"),
            "ndcg10_by_class": {c: statistics.fmean(x[0] for x in v) for c, v in qual.items()
                                if v},
            "cold_ms": statistics.median(colds),
            "serve_rss_mb": serve.get("rss_delta", 0) / 1e6,
            "disk_mb": disk_bytes(path) / 1e6,
        }
        print(f"  {size:>7} {eng.name:<12} build {size / build_s:9.0f}/s  cold "
              f"{statistics.median(colds):6.1f} ms  rss {serve.get('rss_delta', 0) / 1e6:6.1f} MB"
              f"  disk {disk_bytes(path) / 1e6:6.1f} MB", file=sys.stderr)
        del eng
    return out


def render(results: list[dict[str, Any]], argv: list[str]) -> str:
    lines = ["<!-- bench_recall:start -->", "## Recall (benchmarks/bench_recall.py)", "",
             f"Reproduce: `python3 benchmarks/bench_recall.py {' '.join(argv)}`".rstrip(), "",
             f"Machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}; shared with "
             "other jobs, so numbers are noisy (one run; latencies are per-class medians "
             "and 95th percentiles over the seeded queries of that class).", "",
             "Corpus: `projections.corpus.stdlib_packets` (one packet per stdlib function/"
             "class/method, cycled with seeded variation past one pass). Every engine indexes "
             "the same ctxledger token stream; queries are OR of the distinct query tokens. "
             "ctxledger runs with `live_after` set (the TTL path) and builds full RecallHit "
             "objects (snippet, matched paths/symbols); FTS5 fetches cache_key and summary; "
             "bm25s and tantivy return keys only. Filters (target, task-first) run in "
             "ctxledger and FTS5 (SQL); bm25s and tantivy run those queries unfiltered.", ""]
    for r in results:
        size = r["size"]
        engs = r["engines"]
        names = list(engs)
        lines.append(f"### {size:,} packets ({r['queries']} queries)")
        lines.append("")
        lines.append("| query class | " + " | ".join(f"{n} p50 / p95 ms" for n in names) + " |")
        lines.append("|---|" + "---|" * len(names))
        for c in CLASSES:
            cells = [f"{engs[n]['p50'][c]:.3f} / {engs[n]['p95'][c]:.3f}" for n in names]
            lines.append(f"| {c} | " + " | ".join(cells) + " |")
        lines.append("")
        lines.append("| | " + " | ".join(names) + " |")
        lines.append("|---|" + "---|" * len(names))
        rows = [
            ("index build (packets/s)", lambda e: f"{e['build_per_s']:,.0f}"),
            ("cold open + one query (ms, process start to answer)",
             lambda e: f"{e['cold_ms']:.1f}"),
            ("memory while serving (MB, RSS delta)", lambda e: f"{e['serve_rss_mb']:.1f}"),
            ("bytes on disk (MB)", lambda e: f"{e['disk_mb']:.1f}"),
            ("NDCG@10", lambda e: f"{e['ndcg10']:.3f}"),
            ("Recall@10", lambda e: f"{e['recall10']:.3f}"),
        ]
        for label, fn in rows:
            lines.append(f"| {label} | " + " | ".join(fn(engs[n]) for n in names) + " |")
        lines.append("")
        lines.append(f"Bare `python -c pass` start on this machine during the run: "
                     f"{r['python_start_ms']:.1f} ms (included in every cold figure).")
        if "ctx_load_ms" in r:
            lines.append(f"ctxledger `RecallIndex.from_bytes` in-process: "
                         f"{r['ctx_load_ms'][0]:.1f} ms without / {r['ctx_load_ms'][1]:.1f} ms "
                         f"with its own blake3 checksum (the cold figure maps the file and "
                         f"skips it: the store's checkpoint MAC covers the bytes).")
        lines.append(f"ctxledger build including `RecallDoc.from_packet`: "
                     f"{r['ctx_build_from_packets_per_s']:,.0f} packets/s.")
        for n in r["notes"]:
            lines.append(f"Note: {n}.")
        lines.append("")
    lines.append("<!-- bench_recall:end -->")
    return "\n".join(lines)


def write_docs(section: str) -> None:
    path = os.path.join(ROOT, "docs", "benchmarks.md")
    text = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    start, end = "<!-- bench_recall:start -->", "<!-- bench_recall:end -->"
    if start in text and end in text:
        a = text.index(start)
        b = text.index(end) + len(end)
        text = text[:a] + section + text[b:]
    else:
        if not text:
            text = "# Benchmarks\n\n"
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="5000,50000,200000")
    ap.add_argument("--queries", type=int, default=40, help="queries per class")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--json", help="also write raw results here")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",") if s]
    t = time.perf_counter()
    packets = list(stdlib_packets(max(sizes), seed=a.seed))
    print(f"corpus: {len(packets)} packets in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    results = []
    work = tempfile.mkdtemp(prefix="bench_recall_")
    try:
        for s in sizes:
            results.append(run_size(packets, s, a.queries, a.seed, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    argv = [x for x in sys.argv[1:]]
    section = render(results, argv)
    print(section)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if a.write_docs:
        write_docs(section)


if __name__ == "__main__":
    main()
