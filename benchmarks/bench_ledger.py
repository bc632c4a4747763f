"""ctxledger's log side by side with stdlib sqlite3 and the raw fsync floor.

Run from the repository root::

    python3 benchmarks/bench_ledger.py              # full run (7 repetitions)
    python3 benchmarks/bench_ledger.py --quick      # smaller, 3 repetitions
    python3 benchmarks/bench_ledger.py --write-docs # also rewrite docs/benchmarks.md

Every contender gets the same seeded events (``data`` CBOR-encodes to exactly
200 bytes), in one run, on the same filesystem. Each repetition runs the
contenders of a scenario back to back (in rotating order), so a burst of
background load hits all of them; medians over the repetitions are reported,
and the goal ratios are ratios of those medians. The harness's own event pool
is ``gc.freeze()``-d so that garbage collection costs only what each contender
allocates.

Scenarios (issue 2, "Benchmark"):

* durable single appends: ``Ledger.append([e])`` with ``sync="always"`` vs
  sqlite3 in WAL mode with ``synchronous=FULL``, one row per transaction;
* batched appends: 1,000 events per ``append`` vs 1,000-row transactions;
* full sequential read with decoding: ``Ledger.read()`` over the whole log
  (``Event`` objects with decoded ``data``), for a log written one event per
  append and one written in 1,000-event batches, vs sqlite selecting the rows
  and ``cbor2.loads``-ing the blobs;
* the floor: ``os.write`` of 200 bytes + ``os.fsync`` in a loop on one file.

Not part of the test suite or CI.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import os
import platform
import random
import shutil
import sqlite3
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import cbor2

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

from eventstore import Event, Ledger  # noqa: E402

SEED = 20240601
DATA_BYTES = 200
BATCH = 1_000
from docsection import cpu_model, write_section  # noqa: E402  (a sibling module)

DOC = REPO / "docs" / "benchmarks.md"

# The figures measured when issue 2 was filed (2 cores) and the goals set there.
REFERENCE = {"sqlite_full": 4_800, "fsync_floor": 6_900, "sqlite_batched": 375_000}

SIZES = {
    # single: appends per repetition; batches: 1,000-event appends per repetition;
    # read: events in each read log
    "full": {"reps": 7, "single": 2_000, "batches": 100, "read": 100_000},
    "quick": {"reps": 3, "single": 300, "batches": 20, "read": 20_000},
}


# --- the events ---------------------------------------------------------------------


def make_events(n: int, seed: int = SEED) -> list[tuple[str, str, dict[str, Any]]]:
    """``n`` seeded ``(kind, key, data)`` whose data CBOR-encodes to exactly 200 bytes."""
    rng = random.Random(seed)
    kinds = ["task.note", "task.created", "cache.put", "calibration.sample", "task.started"]
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))) for _ in range(400)]
    out = []
    for i in range(n):
        data: dict[str, Any] = {
            "title": " ".join(rng.choices(words, k=3)),
            "path": "src/" + "/".join(rng.choices(words, k=2)) + ".py",
            "tokens": rng.randint(0, 1 << 20),
            "score": round(rng.random(), 6),
            "tags": rng.choices(words, k=2),
            "body": "",
        }
        room = DATA_BYTES - len(cbor2.dumps(data))
        body = " ".join(rng.choices(words, k=40))[: max(room, 0)]
        data["body"] = body
        # the body's length prefix grows by a byte past 23 characters: settle it
        while len(cbor2.dumps(data)) > DATA_BYTES:
            data["body"] = data["body"][:-1]
        while len(cbor2.dumps(data)) < DATA_BYTES:
            data["body"] += "x"
        out.append((rng.choice(kinds), f"task-{i % 997}", data))
    return out


# --- contenders ---------------------------------------------------------------------


def _timed(fn: Callable[[], int]) -> float:
    """Run ``fn`` (which returns how many items it handled); return items per second."""
    gc.collect()
    t0 = time.perf_counter()
    n = fn()
    return n / (time.perf_counter() - t0)


def _sqlite_open(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)  # we issue BEGIN/COMMIT ourselves
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS events "
        "(seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, key TEXT, at REAL NOT NULL,"
        " data BLOB NOT NULL)"
    )
    return conn


def _warm_ledger(log_dir: Path, sync: str = "always") -> Ledger:
    """Open a fresh ledger and make its first (segment-creating) append outside the clock."""
    led = Ledger.open(log_dir, sync=sync)  # type: ignore[arg-type]
    led.append([Event("bench.warmup", None, {})])
    return led


def ledger_single(workdir: Path, events: list[Event], sync: str = "always") -> float:
    led = _warm_ledger(workdir / f"led-single-{sync}", sync)
    try:

        def run() -> int:
            for e in events:
                led.append([e])
            return len(events)

        return _timed(run)
    finally:
        led.close()


def ledger_batched(workdir: Path, events: list[Event]) -> float:
    led = _warm_ledger(workdir / "led-batched")
    batches = [events[i : i + BATCH] for i in range(0, len(events), BATCH)]
    try:

        def run() -> int:
            for b in batches:
                led.append(b)
            return len(events)

        return _timed(run)
    finally:
        led.close()


def sqlite_single(workdir: Path, rows: list[tuple[str, str, dict[str, Any]]]) -> float:
    conn = _sqlite_open(workdir / "single.sqlite")
    conn.execute("INSERT INTO events (kind, key, at, data) VALUES ('bench.warmup', NULL, 0, x'a0')")
    try:

        def run() -> int:
            ex, dumps, now = conn.execute, cbor2.dumps, time.time
            for kind, key, data in rows:
                ex("BEGIN")
                ex(
                    "INSERT INTO events (kind, key, at, data) VALUES (?, ?, ?, ?)",
                    (kind, key, now(), dumps(data)),
                )
                ex("COMMIT")
            return len(rows)

        return _timed(run)
    finally:
        conn.close()


def sqlite_batched(workdir: Path, rows: list[tuple[str, str, dict[str, Any]]]) -> float:
    conn = _sqlite_open(workdir / "batched.sqlite")
    conn.execute("INSERT INTO events (kind, key, at, data) VALUES ('bench.warmup', NULL, 0, x'a0')")
    batches = [rows[i : i + BATCH] for i in range(0, len(rows), BATCH)]
    try:

        def run() -> int:
            dumps = cbor2.dumps
            for b in batches:
                at = time.time()
                conn.execute("BEGIN")
                conn.executemany(
                    "INSERT INTO events (kind, key, at, data) VALUES (?, ?, ?, ?)",
                    [(kind, key, at, dumps(data)) for kind, key, data in b],
                )
                conn.execute("COMMIT")
            return len(rows)

        return _timed(run)
    finally:
        conn.close()


def fsync_floor(workdir: Path, n: int) -> float:
    path = workdir / "floor.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    rec = b"r" * DATA_BYTES
    try:
        os.write(fd, rec)
        os.fsync(fd)

        def run() -> int:
            w, s = os.write, os.fsync
            for _ in range(n):
                w(fd, rec)
                s(fd)
            return n

        return _timed(run)
    finally:
        os.close(fd)
        path.unlink()


def fsync_floor_prealloc(workdir: Path, n: int) -> float:
    """(info) The floor of ctxledger's own method: overwrite zeros written ahead, fdatasync."""
    path = workdir / "floor-prealloc.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    rec, chunk = b"r" * DATA_BYTES, 256 * 1024
    try:
        os.pwrite(fd, bytes(chunk), 0)
        os.fdatasync(fd)

        def run() -> int:
            w, s, off, alloc = os.pwrite, os.fdatasync, 0, chunk
            for _ in range(n):
                if off + DATA_BYTES > alloc:
                    w(fd, bytes(chunk), alloc)
                    alloc += chunk
                w(fd, rec, off)
                s(fd)
                off += DATA_BYTES
            return n

        return _timed(run)
    finally:
        os.close(fd)
        path.unlink()


def build_read_logs(workdir: Path, events: list[Event], rows: list[Any]) -> dict[str, Path]:
    """The logs the read scenario reads (built with sync off: the bytes are the same)."""
    single, batched = workdir / "read-single", workdir / "read-batched"
    with Ledger.open(single, sync="none") as led:
        for e in events:
            led.append([e])
    with Ledger.open(batched, sync="none") as led:
        for i in range(0, len(events), BATCH):
            led.append(events[i : i + BATCH])
    db = workdir / "read.sqlite"
    conn = _sqlite_open(db)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("BEGIN")
    at = time.time()
    conn.executemany(
        "INSERT INTO events (kind, key, at, data) VALUES (?, ?, ?, ?)",
        [(kind, key, at, cbor2.dumps(data)) for kind, key, data in rows],
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return {"single": single, "batched": batched, "sqlite": db}


def ledger_read(log_dir: Path, expect: int) -> float:
    led = Ledger.open(log_dir, readonly=True)
    try:

        def run() -> int:
            n = 0
            for e in led.read():
                e.data  # noqa: B018 - decoded already; touch it like a consumer would
                n += 1
            assert n == expect, (n, expect)
            return n

        return _timed(run)
    finally:
        led.close()


def frames_read_floor(log_dir: Path, expect: int) -> float:
    """(info) The least work a Python reader of a log can do: walk the frames of every
    segment (header unpack, payload slice), ``cbor2.loads`` each payload and yield a
    tuple per event, checking nothing. Not a reader anyone should use: it shows
    what is left for integrity checks once decoding is paid for."""
    from eventstore.frame import FRAME_HEADER, SEGMENT_HEADER_SIZE, content_end

    segs = sorted(p for p in log_dir.iterdir() if p.suffix == ".seg")

    def run() -> int:
        unpack, loads, n_ev = FRAME_HEADER.unpack_from, cbor2.loads, 0
        for seg in segs:
            data = seg.read_bytes()
            off, size = SEGMENT_HEADER_SIZE, content_end(data, SEGMENT_HEADER_SIZE)
            while off < size:
                _m, _c, n, _count, first, _d = unpack(data, off)
                end = off + n + 64
                obj = loads(data[off + 56 : end - 8])
                at = obj[0]
                for kind, key, d in obj[3]:
                    _row = (first, kind, key, at, d)  # what a reader hands out
                    first += 1
                    n_ev += 1
                off = end
        assert n_ev == expect, (n_ev, expect)
        return n_ev

    return _timed(run)


def sqlite_read(db: Path, expect: int) -> float:
    conn = sqlite3.connect(db)
    try:

        def run() -> int:
            loads = cbor2.loads
            n = 0
            for seq, kind, key, at, blob in conn.execute(
                "SELECT seq, kind, key, at, data FROM events ORDER BY seq"
            ):
                (seq, kind, key, at, loads(blob))
                n += 1
            assert n == expect, (n, expect)
            return n

        return _timed(run)
    finally:
        conn.close()


# --- the run ------------------------------------------------------------------------


def pick_workdir(explicit: str | None) -> Path:
    """A temp dir on the filesystem that holds the repository (fsync figures depend on it)."""
    if explicit:
        base = Path(explicit)
    else:
        tmp = Path(tempfile.gettempdir())
        base = tmp if os.stat(tmp).st_dev == os.stat(REPO).st_dev else REPO.parent
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="ctxledger-bench-", dir=base))


def fs_type(path: Path) -> str:
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, typ = line.split()[:3]
                if str(path).startswith(mnt) and len(mnt) > len(best):
                    best, kind = mnt, f"{typ} on {dev}"
    except OSError:
        pass
    return kind


def machine(workdir: Path) -> dict[str, str]:
    cpu = cpu_model()
    import blake3

    return {
        "cpus": f"{os.cpu_count()} ({cpu})",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "cbor2": getattr(cbor2, "__version__", None) or _dist_version("cbor2"),
        "blake3": getattr(blake3, "__version__", None) or _dist_version("blake3"),
        "filesystem": f"temp dir under {workdir.parent} ({fs_type(workdir)}; "
        + ("same" if os.stat(workdir).st_dev == os.stat(REPO).st_dev else "NOT the same")
        + " device as the repository)",
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def run(size: dict[str, int], workdir: Path, log: Callable[[str], None]) -> dict[str, list[float]]:
    reps = size["reps"]
    need = max(size["single"], size["batches"] * BATCH, size["read"])
    rows = make_events(need)
    events = [Event(k, key, d) for k, key, d in rows]
    # The harness's own event pool (~1M objects in a full run) is not what is being
    # measured: move it out of the collector's reach, or every full collection
    # walks it and penalises whichever contender keeps objects alive longest.
    gc.collect()
    gc.freeze()
    res: dict[str, list[float]] = {}

    def rec(name: str, value: float) -> None:
        res.setdefault(name, []).append(value)

    def rotate(rep: int, jobs: list[tuple[str, Callable[[], float]]]) -> None:
        k = rep % len(jobs)
        for name, job in jobs[k:] + jobs[:k]:
            rec(name, job())

    n1 = size["single"]
    nb = size["batches"] * BATCH
    for rep in range(reps):
        d = workdir / f"w{rep}"
        d.mkdir()
        rotate(
            rep,
            [
                ("ledger_single", partial(ledger_single, d, events[:n1])),
                ("sqlite_single", partial(sqlite_single, d, rows[:n1])),
                ("fsync_floor", partial(fsync_floor, d, n1)),
                ("fsync_floor_prealloc", partial(fsync_floor_prealloc, d, n1)),
            ],
        )
        rotate(
            rep,
            [
                ("ledger_batched", partial(ledger_batched, d, events[:nb])),
                ("sqlite_batched", partial(sqlite_batched, d, rows[:nb])),
            ],
        )
        rec("ledger_single_nosync", ledger_single(d, events[:n1], sync="none"))
        shutil.rmtree(d)
        done = ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in res.items())
        log(f"  write rep {rep + 1}/{reps}: {done}")

    nr = size["read"]
    log(f"  building read logs ({nr:,} events each) ...")
    logs = build_read_logs(workdir, events[:nr], rows[:nr])
    for rep in range(reps):
        rotate(
            rep,
            [
                ("ledger_read_single", partial(ledger_read, logs["single"], nr)),
                ("ledger_read_batched", partial(ledger_read, logs["batched"], nr)),
                ("sqlite_read", partial(sqlite_read, logs["sqlite"], nr)),
                ("frames_read_floor", partial(frames_read_floor, logs["single"], nr)),
            ],
        )
        done = ", ".join(
            f"{k} {res[k][-1]:,.0f}/s"
            for k in (
                "ledger_read_single", "ledger_read_batched", "sqlite_read", "frames_read_floor"
            )
        )
        log(f"  read rep {rep + 1}/{reps}: {done}")
    return res


# --- the report ---------------------------------------------------------------------

ROWS = [
    ("ledger_single", 'ctxledger append, 1 event/append, sync="always"'),
    ("sqlite_single", "sqlite3 WAL synchronous=FULL, 1 row/transaction"),
    ("fsync_floor", "floor: os.write 200 B + os.fsync"),
    ("ledger_batched", 'ctxledger append, 1,000 events/append, sync="always"'),
    ("sqlite_batched", "sqlite3 WAL synchronous=FULL, 1,000 rows/transaction"),
    ("ledger_read_single", "ctxledger Ledger.read(), log of 1-event appends"),
    ("ledger_read_batched", "ctxledger Ledger.read(), log of 1,000-event appends"),
    ("sqlite_read", "sqlite3 SELECT + cbor2.loads"),
    (
        "frames_read_floor",
        "(info) floor for 1-event frames: walk + cbor2.loads + tuples, no checks, no Events",
    ),
    ("ledger_single_nosync", '(info) ctxledger append, 1 event/append, sync="none"'),
    (
        "fsync_floor_prealloc",
        "(info) floor of ctxledger's method: pwrite 200 B over preallocated zeros + fdatasync",
    ),
]


def goals(med: dict[str, float]) -> list[tuple[str, str, float, float, bool]]:
    """``(goal, measured expression, value, target, met)`` for each of issue 2's goals."""
    g = []

    def add(goal: str, expr: str, value: float, target: float) -> None:
        g.append((goal, expr, value, target, value >= target))

    add(
        "durable single appends >= SQLite FULL",
        "ledger_single / sqlite_single",
        med["ledger_single"] / med["sqlite_single"],
        1.0,
    )
    add(
        "... and within 1.5x of the fsync floor",
        "ledger_single / fsync_floor",
        med["ledger_single"] / med["fsync_floor"],
        1 / 1.5,
    )
    add(
        "batched >= 0.75x SQLite batched",
        "ledger_batched / sqlite_batched",
        med["ledger_batched"] / med["sqlite_batched"],
        0.75,
    )
    add(
        "read >= SQLite read+decode (1-event appends)",
        "ledger_read_single / sqlite_read",
        med["ledger_read_single"] / med["sqlite_read"],
        1.0,
    )
    add(
        "read >= SQLite read+decode (1,000-event appends)",
        "ledger_read_batched / sqlite_read",
        med["ledger_read_batched"] / med["sqlite_read"],
        1.0,
    )
    return g


def render(
    res: dict[str, list[float]], info: dict[str, str], size: dict[str, int], command: str
) -> str:
    med = {k: statistics.median(v) for k, v in res.items()}
    lines = [
        f"Run on {_dt.date.today().isoformat()} with `{command}` "
        f"({size['reps']} repetitions; medians; min - max over the repetitions).",
        "",
        "| contender | events/s (median) | min - max |",
        "|---|---:|---:|",
    ]
    for key, label in ROWS:
        v = res[key]
        lines.append(f"| {label} | {med[key]:,.0f} | {min(v):,.0f} - {max(v):,.0f} |")
    lines += [
        "",
        "| goal (issue 2) | ratio of medians | target | met |",
        "|---|---:|---:|:---:|",
    ]
    for goal, expr, value, target, met in goals(med):
        ok = "yes" if met else "**no**"
        lines.append(f"| {goal} (`{expr}`) | {value:.2f} | >= {target:.2f} | {ok} |")
    lines += [
        "",
        "Reference figures when the goals were set (2 cores): SQLite FULL ~ "
        f"{REFERENCE['sqlite_full']:,} rows/s, fsync floor ~ {REFERENCE['fsync_floor']:,}/s, "
        f"1,000-row transactions ~ {REFERENCE['sqlite_batched']:,} rows/s.",
        "",
        "Sizes: "
        f"{size['single']:,} single appends/rows/fsyncs, {size['batches']} x 1,000-event batches, "
        f"read logs of {size['read']:,} events (read from the page cache) per repetition. "
        "Event data CBOR-encodes to 200 bytes; every write contender encodes inside the clock.",
        "",
        "Method:",
        "",
        "- ctxledger: a fresh log per repetition with the default 16 MiB segments; its first "
        'append (which creates the segment) runs before the clock starts. `sync="always"` '
        "calls `fdatasync` once per append; from a handle's second append on it overwrites "
        "zeros it preallocated (256 KiB at a time, written inside the clock), so the sync "
        "commits no new file size (docs/format.md section 7).",
        "- sqlite3 (stdlib): `journal_mode=WAL`, `synchronous=FULL`, table `events(seq INTEGER "
        "PRIMARY KEY, kind, key, at, data BLOB)`, explicit `BEGIN`/`COMMIT`, default WAL "
        "autocheckpoint; `data` is `cbor2.dumps`-ed inside the clock.",
        "- floor: `os.write` of 200 bytes then `os.fsync`, on one `O_APPEND` file.",
        '- reads: the logs are written with `sync="none"` (same bytes) and read from the '
        "page cache; `Ledger.read()` yields `Event` objects (digests checked, data decoded), "
        "sqlite yields `(seq, kind, key, at, cbor2.loads(data))` tuples. In a log of 1-event "
        "appends every event is a frame of its own, whose header crc, footer and blake3 chain "
        "digest are checked in Python before its payload is decoded: about 1.5 us per frame "
        "on this machine, more than SQLite's whole per-row cost, which is paid in C. The "
        "info row \"floor for 1-event frames\" walks the same log doing only the unavoidable "
        "part (unpack a header, decode the payload, yield a tuple): it runs at about "
        "SQLite's rate, so any check at all puts a pure-Python reader of 1-event frames "
        "below it.",
        "- the harness's own event pool is `gc.freeze()`-d, so garbage collection charges each "
        "contender only for what it allocates.",
        "",
        "Machine:",
        "",
    ]
    lines += [f"- {k}: {v}" for k, v in info.items()]
    return "\n".join(lines) + "\n"


def write_docs(section: str) -> None:
    write_section("bench_ledger", "The log: `benchmarks/bench_ledger.py`", section, DOC)



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, 3 repetitions")
    ap.add_argument(
        "--write-docs", action="store_true", help=f"rewrite this script's section of {DOC}"
    )
    ap.add_argument("--reps", type=int, help="override the number of repetitions")
    ap.add_argument(
        "--dir",
        help="where to make the temp dir (default: /tmp if it is on the "
        "repository's filesystem, else beside the repository)",
    )
    args = ap.parse_args(argv)
    size = dict(SIZES["quick" if args.quick else "full"])
    if args.reps:
        size["reps"] = args.reps
    workdir = pick_workdir(args.dir)
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    try:
        info = machine(workdir)
        log(f"bench_ledger: working in {workdir} ({fs_type(workdir)}), {size}")
        res = run(size, workdir, log)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    command = "python3 benchmarks/bench_ledger.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    section = render(res, info, size, command)
    print(section)
    if args.write_docs:
        write_docs(section)
        log(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
