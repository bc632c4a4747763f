"""Tasks through the public API and the CLI, side by side with SQLite in the same run (issue 11).

Run from the repository root (no install needed for the library parts; the
cold-CLI rows run ``sys.executable -m cli``)::

    python3 benchmarks/bench_tasks.py                        # 10k tasks / 200k task events
    python3 benchmarks/bench_tasks.py --tasks 1000 --reps 3  # a quick look
    python3 benchmarks/bench_tasks.py --write-docs           # also rewrite our docs section

What is timed:

* **writes** -- ``--writes`` single task writes through ``store.tasks`` (create,
  start, notes, complete/fail: the mix an agent makes, each call one durable
  append, ``sync="always"``, the default), in a fresh store; against SQLite
  (WAL, ``synchronous=FULL``): per write one transaction that checks the
  task's state, inserts the event (JSON) and updates the task row -- what a
  SQLite task store would do. Writes/s over the whole run.
* **the big store** -- ``--tasks`` tasks of ``--events-per-task`` events each,
  written the way agents write them: one library call per event (here with
  ``sync="none"``, so that building 200k events takes seconds, not minutes;
  the SQLite twin with ``synchronous=OFF``). Its build rate is an info row.
* **reads, cold CLI** -- a new process per call (``python -m cli ...``, the
  console script's code), median of ``--reps``: ``task list --json`` (every
  task), ``task list`` (the human table), ``task list --state running --json``,
  ``task show ID --json``, ``task history ID --json``. Peer: a new
  ``python -c`` process that opens the SQLite database and prints the same
  rows as JSON.
* **reads, library** -- ``ContextStore.open`` + ``tasks.list()`` (cold, in
  process), then on the open store: ``tasks.list()``, ``tasks.get(id)``,
  ``tasks.history(id)`` (medians); peers: the same queries on an open SQLite
  connection.
* **rebuild** -- ``store.rebuild("tasks")`` (every task event refolded) and
  ``store.rebuild()`` (every view), events/s as ``rebuild()`` reports it.

Nothing in the product is tuned for the run. Not part of the test suite or
CI; numbers from a shared machine are noisy (the load average is printed).
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
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
for _p in (str(REPO), str(BENCH)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from docsection import cpu_model, loadavg, log, write_section  # noqa: E402

from projections import ContextStore  # noqa: E402
from projections.config import StoreConfig  # noqa: E402
from projections.tasks import NOTE_TYPES  # noqa: E402

SEED = 11


# --- the workload: one agent's task, event by event ----------------------------------------


def task_script(i: int, per_task: int) -> list[tuple[str, Any]]:
    """The calls one task gets: create, start, notes, then complete or fail."""
    calls: list[tuple[str, Any]] = [("create", (f"task {i}: fix module m{i % 97}", [f"l{i % 7}"])),
                                    ("start", None)]
    for j in range(max(0, per_task - 3)):
        typ = NOTE_TYPES[j % len(NOTE_TYPES)]
        data = ({"path": f"src/m{(i + j) % 97}.py"} if typ.startswith("file_")
                else {"text": f"{typ} {j} of task {i}", "n": j})
        calls.append(("note", (typ, data)))
    calls.append(("complete", {"ok": True}) if i % 3 else ("fail", "tests still red"))
    return calls


def ctx_run(store: ContextStore, i: int, per_task: int, ids: list[str]) -> int:
    n = 0
    tid = ""
    for op, arg in task_script(i, per_task):
        if op == "create":
            tid = store.tasks.create(arg[0], labels=arg[1]).id
            ids.append(tid)
        elif op == "start":
            store.tasks.start(tid)
        elif op == "note":
            store.tasks.note(tid, arg[0], arg[1])
        elif op == "complete":
            store.tasks.complete(tid, arg)
        else:
            store.tasks.fail(tid, arg)
        n += 1
    return n


SQL_SCHEMA = """
CREATE TABLE tasks(id TEXT PRIMARY KEY, title TEXT, state TEXT, labels TEXT, created_at REAL,
                   updated_at REAL, last_seq INTEGER, events INTEGER, notes TEXT, result TEXT,
                   reason TEXT);
CREATE TABLE events(seq INTEGER PRIMARY KEY, task_id TEXT, kind TEXT, at REAL, data TEXT);
CREATE INDEX events_task ON events(task_id, seq);
"""


def sql_open(path: str, sync: str) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(f"PRAGMA synchronous={sync}")
    return con


def sql_run(con: sqlite3.Connection, i: int, per_task: int, ids: list[str]) -> int:
    """The same calls, each one transaction: check the state, insert the event, update."""
    n = 0
    tid = f"t{i:08d}"
    for op, arg in task_script(i, per_task):
        now = time.time()
        con.execute("BEGIN IMMEDIATE")
        if op == "create":
            con.execute("INSERT INTO tasks VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                        (tid, arg[0], "created", json.dumps(arg[1]), now, now, 0, 0, "{}",
                         None, None))
            ids.append(tid)
            data: Any = {"title": arg[0], "labels": arg[1]}
            state = "created"
        else:
            (cur, notes) = con.execute("SELECT state, notes FROM tasks WHERE id = ?",
                                       (tid,)).fetchone()
            if op == "start":
                assert cur == "created"
                state, data = "running", {}
            elif op == "note":
                assert cur in ("created", "running")
                state, data = cur, {"type": arg[0], "data": arg[1]}
                counts = json.loads(notes)
                counts[arg[0]] = counts.get(arg[0], 0) + 1
                con.execute("UPDATE tasks SET notes = ? WHERE id = ?", (json.dumps(counts), tid))
            else:
                assert cur == "running"
                state = "completed" if op == "complete" else "failed"
                data = {"result": arg} if op == "complete" else {"reason": arg}
        seq = con.execute("INSERT INTO events(task_id, kind, at, data) VALUES (?,?,?,?)",
                          (tid, "task." + op, now, json.dumps(data))).lastrowid
        con.execute("UPDATE tasks SET state = ?, updated_at = ?, last_seq = ?, "
                    "events = events + 1 WHERE id = ?", (state, now, seq, tid))
        con.execute("COMMIT")
        n += 1
    return n


# --- timing helpers -------------------------------------------------------------------------


def median_time(fn: Callable[[], Any], reps: int) -> float:
    ts = []
    for _ in range(reps):
        gc.collect()
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def cli_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli", *args]


def run_proc(cmd: list[str], env: dict[str, str]) -> None:
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {r.returncode}: {r.stderr.decode()[:300]}")


SQL_LIST = """
import json, sqlite3, sys
con = sqlite3.connect(sys.argv[1])
cols = [c[1] for c in con.execute("PRAGMA table_info(tasks)")]
rows = [dict(zip(cols, r)) for r in con.execute({query!r}, tuple(sys.argv[2:]))]
print(json.dumps({{"rows": rows}}))
"""


def sql_cmd(db: str, query: str, *params: str) -> list[str]:
    return [sys.executable, "-c", SQL_LIST.format(query=query), db, *params]


# --- the runs ---------------------------------------------------------------------------------


def run_writes(work: str, n_writes: int, per_task: int) -> dict[str, Any]:
    tasks_needed = max(1, n_writes // per_task)
    out: dict[str, Any] = {"writes": tasks_needed * per_task}
    root = os.path.join(work, "writes_ctx")
    ids: list[str] = []
    gc.collect()
    t = time.perf_counter()
    with ContextStore.open(root) as store:
        n = sum(ctx_run(store, i, per_task, ids) for i in range(tasks_needed))
    out["ctx_s"] = time.perf_counter() - t
    db = os.path.join(work, "writes.sqlite")
    con = sql_open(db, "FULL")
    con.executescript(SQL_SCHEMA)
    ids2: list[str] = []
    gc.collect()
    t = time.perf_counter()
    m = sum(sql_run(con, i, per_task, ids2) for i in range(tasks_needed))
    con.close()
    out["sql_s"] = time.perf_counter() - t
    assert n == m == out["writes"]
    return out


def build_big(work: str, n_tasks: int, per_task: int) -> dict[str, Any]:
    root = os.path.join(work, "big_ctx")
    ids: list[str] = []
    t = time.perf_counter()
    with ContextStore.open(root, config=StoreConfig(sync="none")) as store:
        n = sum(ctx_run(store, i, per_task, ids) for i in range(n_tasks))
    ctx_s = time.perf_counter() - t
    db = os.path.join(work, "big.sqlite")
    con = sql_open(db, "OFF")
    con.executescript(SQL_SCHEMA)
    ids2: list[str] = []
    t = time.perf_counter()
    sum(sql_run(con, i, per_task, ids2) for i in range(n_tasks))
    con.close()
    sql_s = time.perf_counter() - t
    return {"root": root, "db": db, "ids": ids, "sql_ids": ids2, "events": n,
            "ctx_s": ctx_s, "sql_s": sql_s}


def run_reads(big: dict[str, Any], reps: int) -> dict[str, Any]:
    root, db = big["root"], big["db"]
    rng = random.Random(SEED)
    k = rng.randrange(len(big["ids"]))
    tid, sid = big["ids"][k], big["sql_ids"][k]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    R = ("--root", root)
    cold = {
        "task list --json": (cli_cmd("task", "list", "--json", *R),
                             sql_cmd(db, "SELECT * FROM tasks ORDER BY rowid")),
        "task list (human)": (cli_cmd("task", "list", *R), None),
        "task list --state running --json": (
            cli_cmd("task", "list", "--state", "running", "--json", *R),
            sql_cmd(db, "SELECT * FROM tasks WHERE state = ?", "running")),
        "task show ID --json": (cli_cmd("task", "show", tid, "--json", *R),
                                sql_cmd(db, "SELECT * FROM tasks WHERE id = ?", sid)),
        "task history ID --json": (
            cli_cmd("task", "history", tid, "--json", *R),
            [sys.executable, "-c",
             "import json, sqlite3, sys\ncon = sqlite3.connect(sys.argv[1])\n"
             "print(json.dumps({'events': [dict(zip(('seq','kind','at','data'), r)) for r in "
             "con.execute('SELECT seq, kind, at, data FROM events WHERE task_id = ? "
             "ORDER BY seq', (sys.argv[2],))]}))", db, sid]),
        "interpreter start (python -c pass)": ([sys.executable, "-c", "pass"], None),
    }
    rows = []
    for name, (ours, peer) in cold.items():
        run_proc(ours, env)  # warm the page cache and the .pyc files
        t_ours = median_time(lambda c=ours: run_proc(c, env), reps)
        t_peer = median_time(lambda c=peer: run_proc(c, env), reps) if peer else None
        rows.append((name, t_ours, t_peer))
        log(f"  cold {name}: {t_ours * 1e3:.0f} ms"
            + (f" vs {t_peer * 1e3:.0f} ms" if t_peer else ""))
    lib: list[tuple[str, float, float | None]] = []

    def cold_list() -> None:
        with ContextStore.open(root, readonly=True) as s:
            s.tasks.list()

    lib.append(("open + tasks.list() (cold, in process)", median_time(cold_list, reps), None))
    con = sqlite3.connect(db)
    cols = [c[1] for c in con.execute("PRAGMA table_info(tasks)")]
    with ContextStore.open(root, readonly=True) as s:
        s.tasks.list()
        lib.append(("tasks.list() (open store)", median_time(s.tasks.list, reps),
                    median_time(lambda: [dict(zip(cols, r, strict=True)) for r in
                                         con.execute("SELECT * FROM tasks")], reps)))
        sample = rng.sample(range(len(big["ids"])), min(200, len(big["ids"])))

        def per_key(fn: Callable[[int], Any]) -> float:
            ts = []
            for j in sample:
                t = time.perf_counter()
                fn(j)
                ts.append(time.perf_counter() - t)
            return statistics.median(ts)

        lib.append(("tasks.get(id) p50", per_key(lambda j: s.tasks.get(big["ids"][j])),
                    per_key(lambda j: con.execute("SELECT * FROM tasks WHERE id = ?",
                                                  (big["sql_ids"][j],)).fetchone())))
        lib.append(("tasks.history(id) p50", per_key(lambda j: s.tasks.history(big["ids"][j])),
                    per_key(lambda j: [json.loads(r[1]) for r in con.execute(
                        "SELECT seq, data FROM events WHERE task_id = ? ORDER BY seq",
                        (big["sql_ids"][j],))])))
    con.close()
    return {"cold": rows, "lib": lib}


def run_rebuild(big: dict[str, Any]) -> dict[str, Any]:
    with ContextStore.open(big["root"]) as s:
        tasks_only = s.rebuild("tasks")
        every = s.rebuild()
    return {"tasks": tasks_only, "every": every}


# --- report ------------------------------------------------------------------------------------


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.1f} ms" if x < 10 else f"{x:.2f} s"


def render(meta: dict[str, Any], w: dict[str, Any], big: dict[str, Any], reads: dict[str, Any],
           rb: dict[str, Any]) -> str:
    ctx_rate, sql_rate = w["writes"] / w["ctx_s"], w["writes"] / w["sql_s"]
    lines = [
        f"Run on {meta['date']} with `{meta['command']}` (medians of {meta['reps']}).",
        "",
        f"Machine: {meta['cpus']} cores ({meta['cpu']}), {meta['os']}; Python "
        f"{meta['python']}, SQLite {sqlite3.sqlite_version}. 1-min load average "
        f"{meta['load_before']:.2f} before, {meta['load_after']:.2f} after; compare the "
        "ratios of one run, not absolute figures across runs.",
        "",
        "What is timed is in the module docstring of `benchmarks/bench_tasks.py`: library "
        "calls and CLI processes, each task written one event per call as agents write "
        "them; the SQLite peer keeps a `tasks` table and an `events` table and does the "
        "same state checks, one transaction per write.",
        "",
        "| durable task writes (one call = one durable append) | writes | ctxledger | SQLite "
        "(WAL, FULL) | ratio |",
        "|---|---:|---:|---:|---:|",
        f"| `store.tasks.*` writes/s, `sync=\"always\"` | {w['writes']:,} | {ctx_rate:,.0f}/s | "
        f"{sql_rate:,.0f}/s | {ctx_rate / sql_rate:.2f}x |",
        "",
        f"The store read below: {len(big['ids']):,} tasks, {big['events']:,} task events, "
        f"written by {big['events']:,} library calls (`sync=\"none\"`: "
        f"{big['events'] / big['ctx_s']:,.0f} writes/s; SQLite `synchronous=OFF`: "
        f"{big['events'] / big['sql_s']:,.0f} writes/s; info).",
        "",
        "| cold CLI (a new process per call) | ctxledger | SQLite peer (`python -c`) | ratio |",
        "|---|---:|---:|---:|",
    ]
    for name, ours, peer in reads["cold"]:
        ratio = f"{ours / peer:.2f}x" if peer else "-"
        lines.append(f"| `{name}` | {ms(ours)} | {ms(peer)} | {ratio} |")
    lines += ["", "| library | ctxledger | SQLite | ratio |", "|---|---:|---:|---:|"]
    for name, ours, peer in reads["lib"]:
        ratio = f"{ours / peer:.2f}x" if peer else "-"
        lines.append(f"| `{name}` | {ms(ours)} | {ms(peer)} | {ratio} |")
    t, e = rb["tasks"], rb["every"]
    lines += [
        "",
        "| rebuild | events | events/s (returned) | checkpoint |",
        "|---|---:|---:|---:|",
        f"| `store.rebuild(\"tasks\")` | {t['events']:,} | {t['events_per_second']:,} | "
        f"{ms(t['checkpoint_seconds'])} |",
        f"| `store.rebuild()` (every view) | {e['events']:,} | {e['events_per_second']:,} | "
        f"{ms(e['checkpoint_seconds'])} |",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--events-per-task", type=int, default=20)
    ap.add_argument("--writes", type=int, default=2_000, help="durable writes timed")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args(argv)
    argv_text = sys.argv[1:] if argv is None else argv
    meta: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python3 benchmarks/bench_tasks.py", *argv_text]),
        "reps": args.reps, "cpus": os.cpu_count(), "cpu": cpu_model(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(), "load_before": loadavg(),
    }
    work = tempfile.mkdtemp(prefix="bench_tasks_", dir=args.workdir)
    try:
        log("durable writes ...")
        w = run_writes(work, args.writes, args.events_per_task)
        log(f"building {args.tasks:,} tasks x {args.events_per_task} events ...")
        big = build_big(work, args.tasks, args.events_per_task)
        log("reads ...")
        reads = run_reads(big, args.reps)
        log("rebuild ...")
        rb = run_rebuild(big)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    meta["load_after"] = loadavg()
    section = render(meta, w, big, reads, rb)
    print(section)
    if args.write_docs:
        write_section("bench_tasks", "Tasks: benchmarks/bench_tasks.py", section)
        log("wrote docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
