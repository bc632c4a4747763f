"""Cold starts of the real ``ctxledger`` console script: process start to printed answer.

Run from the repository root, with the console script of an environment where
this checkout is installed (not a pyenv shim: a shim is a shell script that
starts another interpreter, and costs tens of ms of its own)::

    python3 -m venv /tmp/cv && /tmp/cv/bin/pip install .
    /tmp/cv/bin/python benchmarks/bench_cold.py                 # 200k packets, 21 runs each
    /tmp/cv/bin/python benchmarks/bench_cold.py --write-docs    # also rewrite our docs section

The store (``projections.corpus.stdlib_packets(limit=N, seed=0)``, put in
1,000-packet batches, every view checkpointed at head) is built once under
``--dir`` and reused by later runs (``bench_cold.json`` beside it says what it
holds). Then, with bytecode cached and the files in the page cache (one
untimed warm-up round):

* wall time of fresh processes, in rotating order, same number of runs each:
  ``ctxledger recall --query Q --root R --json`` (Q cycles over a fixed mix:
  a phrase, a common word, a path, a symbol, a term in every packet),
  ``ctxledger store get --key K --root R --json`` (seeded random keys), and
  the interpreter floor ``python -c pass`` (same interpreter); medians, plus
  CPU time (user + sys of the child);
* a stage breakdown of ``recall`` and ``store get``: a fresh process imports
  in stages (click, attrs/cbor2/blake3, eventstore, cli.main, projections, the
  command module; each timed), then runs the real ``cli.main.main`` with
  timers around checkpoint mapping/reading, the checksum, numpy's import,
  view decoding, folding the log tail, the query, snippets and the printing.
  Rows marked "bg:" ran on another thread, overlapped with the rest, and are
  not part of the sum; "exit" is the process's wall time minus the floor
  minus the rest
  (the interpreter's teardown, beyond what ``python -c pass`` pays, unless
  ``main`` skips it). Medians per stage.

The machine may be shared: the load average before and after is reported.
Not part of the test suite or CI.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

from benchmarks.docsection import DOC, cpu_model, log, write_section  # noqa: E402

SEED = 0
BATCH = 1_000
GOAL_MS = 150.0  # issue 4: cold `ctxledger recall` at 200k packets
QUERIES = (
    "parse http header",  # phrase
    "return value",  # common words
    "Lib/json/decoder.py",  # path
    "JSONDecoder",  # symbol
    "stdlib",  # in every packet
)


# --- the store ----------------------------------------------------------------------


def ensure_store(workdir: Path, n: int) -> Path:
    """The n-packet store under ``workdir``, built on first use and reused after."""
    root = workdir / f"cold-{n}"
    marker = root / "bench_cold.json"
    want = {"packets": n, "seed": SEED, "corpus": "projections.corpus.stdlib_packets"}
    if marker.exists() and json.loads(marker.read_text()) == want:
        log(f"reusing the store at {root}")
        return root
    import gc
    import shutil

    from projections import ContextStore
    from projections.corpus import stdlib_packets

    shutil.rmtree(root, ignore_errors=True)
    log(f"building a {n:,}-packet store at {root} (a minute or so)")
    packets = list(stdlib_packets(limit=n, seed=SEED))[:n]
    if len(packets) != n:
        raise SystemExit(f"the corpus gave {len(packets)} packets, not {n}")
    gc.freeze()  # the packets stay alive: keep the cyclic GC off them
    store = ContextStore.open(root)
    try:
        for i in range(0, n, BATCH):
            store.put_many(packets[i : i + BATCH])
        store.checkpoint()  # every view at head: a cold reader folds nothing
    finally:
        store.close()
    marker.write_text(json.dumps(want))
    return root


def sample_keys(root: Path, k: int) -> list[str]:
    from projections import ContextStore

    with ContextStore.open(root, readonly=True) as store:
        keys = [e.cache_key for e in store.list(limit=10**7)]
    return random.Random(SEED).sample(keys, k)


# --- the console script -------------------------------------------------------------


def find_exe(explicit: str | None) -> Path:
    exe = Path(explicit) if explicit else Path(sys.executable).parent / "ctxledger"
    if not exe.exists():
        raise SystemExit(
            f"no console script at {exe}: install this checkout into a venv and run this "
            "script with that venv's python (see the module docstring), or pass --exe"
        )
    first = exe.open("rb").readline()
    if not first.startswith(b"#!") or b"python" not in first:
        raise SystemExit(f"{exe} is not a Python console script (a pyenv shim?): {first!r}")
    return exe


def exe_python(exe: Path) -> str:
    return exe.open("rb").readline()[2:].decode().strip().split()[0]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode cached
    return e


def code_of(py: str, cwd: Path) -> str:
    """Where the console script's interpreter imports ``cli`` from (``-c`` puts the
    working directory first on sys.path: ``cwd`` must not hold a checkout)."""
    out = subprocess.run([py, "-c", "import cli; print(cli.__file__)"],
                         capture_output=True, text=True, env=env(), cwd=cwd)
    return str(Path(out.stdout.strip()).parent.parent) if out.returncode == 0 else "unknown"


def same_code(installed: str) -> bool:
    """Whether the installed packages' sources equal this checkout's."""
    def digest(root: Path) -> list[tuple[str, bytes]]:
        return sorted((str(f.relative_to(root)), f.read_bytes())
                      for pkg in ("cli", "eventstore", "projections")
                      for f in (root / pkg).rglob("*.py"))
    try:
        return digest(Path(installed)) == digest(REPO)
    except OSError:
        return False


# --- timed runs ---------------------------------------------------------------------


def timed(argv: list[str]) -> tuple[float, float, str]:
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    cp = subprocess.run(argv, capture_output=True, text=True, env=env())
    ms = (time.perf_counter() - t0) * 1e3
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cp.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed ({cp.returncode}): {cp.stderr.strip()[-400:]}")
    cpu = (ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime) * 1e3
    return ms, cpu, cp.stdout


def cold_runs(exe: Path, root: Path, keys: list[str], runs: int) -> dict[str, dict[str, list]]:
    py = exe_python(exe)
    contenders = {
        "floor": lambda i: [py, "-c", "pass"],
        "recall": lambda i: [str(exe), "recall", "--query", QUERIES[i % len(QUERIES)],
                             "--root", str(root), "--json"],
        "store get": lambda i: [str(exe), "store", "get", "--key", keys[i % len(keys)],
                                "--root", str(root), "--json"],
    }
    names = list(contenders)
    out: dict[str, dict[str, list]] = {n: {"wall": [], "cpu": []} for n in names}
    for i in range(runs + 1):  # round 0 warms the page cache and bytecode; dropped
        order = names[i % len(names) :] + names[: i % len(names)]
        for name in order:
            ms, cpu, stdout = timed(contenders[name](i))
            if name == "recall" and not json.loads(stdout)["hits"]:
                raise RuntimeError(f"recall {QUERIES[i % len(QUERIES)]!r} found nothing")
            if name == "store get" and json.loads(stdout)["cache_key"] != keys[i % len(keys)]:
                raise RuntimeError("store get printed another entry")
            if i:
                out[name]["wall"].append(ms)
                out[name]["cpu"].append(cpu)
    return out


# --- stage breakdown ----------------------------------------------------------------

PROBE = r'''
import json, os, sys, time
pc = time.perf_counter
T0 = pc()
stages = {}
def mark(name, t):
    now = pc(); stages[name] = stages.get(name, 0.0) + (now - t) * 1e3; return now
cmd = sys.argv[1]
t = pc()
import click; t = mark("import click", t)
import attrs, cbor2, blake3; t = mark("import attrs, cbor2, blake3", t)
import eventstore; t = mark("import eventstore", t)
import cli.main; t = mark("import cli.main", t)
for k, v in getattr(cli.main, "ENV_DEFAULTS", {}).items():  # as main() does, before numpy
    os.environ.setdefault(k, v)
import projections; t = mark("import projections", t)
import importlib
importlib.import_module(cli.main.COMMANDS[cmd.split()[0]].split(":")[0])
import cli.views, cli.output; t = mark("import command module", t)
T_IMPORTS = pc()

def wrap(owner, attr, label):
    if not hasattr(owner, attr):
        return
    real = getattr(owner, attr)
    def timed(*a, **kw):
        t = pc()
        try:
            return real(*a, **kw)
        finally:
            mark(label(a, kw) if callable(label) else label, t)
    setattr(owner, attr, timed)

import attrs as _attrs
from eventstore import Ledger
import projections.checkpoints as ck, projections.runner as runner, projections.store as store
from cli.options import Ctx
def ckname(a, kw):
    return str(a[0]).rsplit("/", 1)[-1].split(".")[0]
wrap(ck, "_mmap", lambda a, kw: f"map {ckname(a, kw)} checkpoint")
wrap(ck, "_read", lambda a, kw: f"read {ckname(a, kw)} checkpoint")
wrap(ck, "_decode", lambda a, kw: f"check {a[1]} checkpoint (checksum unless prefetched)")
wrap(ck, "_checksum", lambda a, kw: "bg: checksum of prefetched checkpoints (another thread)")
if hasattr(ck, "_Prefetch"):
    wrap(ck._Prefetch, "result", "wait for the prefetch")
import builtins
_import, _depth = builtins.__import__, [0]
def import_(name, globals=None, locals=None, fromlist=(), level=0):
    # numpy and the recall engine load inside the command (beside the prefetch):
    # time the outermost import that brings numpy in
    if _depth[0] or "numpy" in sys.modules:
        return _import(name, globals, locals, fromlist, level)
    _depth[0] += 1
    t = pc()
    try:
        return _import(name, globals, locals, fromlist, level)
    finally:
        _depth[0] -= 1
        if "numpy" in sys.modules:
            mark("import numpy + recall engine", t)
builtins.__import__ = import_
for pname in ("CACHE", "RECALL"):
    p = getattr(store, pname, None)
    if p is not None:
        holder = {"f": p.decode}
        def dec(data, _h=holder, _n=p.name):
            t = pc()
            try:
                return _h["f"](data)
            finally:
                mark(f"decode {_n} view", t)
        setattr(store, pname, _attrs.evolve(p, decode=dec))
wrap(runner, "fold", "fold the log tail")
_open = Ledger.open.__func__
def lopen(cls, *a, **kw):
    t = pc()
    try:
        return _open(cls, *a, **kw)
    finally:
        mark("open log", t)
Ledger.open = classmethod(lopen)
if cmd == "recall":
    from projections.recall import RecallIndex
    wrap(RecallIndex, "search", "query")
    wrap(store.ContextStore, "_with_snippet", "snippets")
else:
    wrap(store.ContextStore, "_entry", "read the entry")
wrap(Ctx, "emit", "print JSON")
before = dict(stages)

def report(code):
    inner = sum(v for k, v in stages.items() if k not in before and not k.startswith("bg:"))
    stages["click, open, the rest"] = (pc() - t) * 1e3 - inner
    sys.stdout.flush()
    sys.stderr.write(json.dumps({"stages": stages, "code": code, "total": (pc() - T0) * 1e3}))
    sys.stderr.write("\n")
    sys.stderr.flush()

_exit = os._exit
def exit_(code):  # main() may end the process itself (os._exit): report first
    report(code)
    _exit(code)
os._exit = exit_
t = pc()
try:
    cli.main.main(sys.argv[2:])
    code = 0
except SystemExit as e:
    code = e.code
report(code)
'''


def breakdown(
    exe: Path, root: Path, keys: list[str], runs: int, floor_ms: float
) -> dict[str, dict[str, float]]:
    py = exe_python(exe)
    res: dict[str, dict[str, float]] = {}
    for cmd in ("recall", "store get"):
        per: dict[str, list[float]] = {}
        for i in range(runs + 1):
            args = (["recall", "--query", QUERIES[i % len(QUERIES)]] if cmd == "recall"
                    else ["store", "get", "--key", keys[i % len(keys)]])
            argv = [py, "-c", PROBE, cmd, *args, "--root", str(root), "--json"]
            t0 = time.perf_counter()
            # cwd: the store's root, so `-c` imports what the console script would
            cp = subprocess.run(argv, capture_output=True, text=True, env=env(), cwd=root)
            wall = (time.perf_counter() - t0) * 1e3
            rep = json.loads(cp.stderr.strip().splitlines()[-1])
            if rep["code"] not in (0, None):
                raise RuntimeError(f"probe {cmd} exited {rep['code']}: {cp.stderr[-400:]}")
            if not i:
                continue
            for k, v in rep["stages"].items():
                per.setdefault(k, []).append(v)
            per.setdefault("exit: wall - floor - the above", []).append(
                wall - floor_ms - rep["total"])
            per.setdefault("wall", []).append(wall)
        res[cmd] = {k: statistics.median(v) for k, v in per.items()}
    return res


# --- report -------------------------------------------------------------------------


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def render(r: dict[str, Any]) -> str:
    cold, br, n = r["cold"], r["breakdown"], r["packets"]
    rec = med(cold["recall"]["wall"])
    lines = [
        f"Command: `{r['command']}` ({r['runs']} cold runs per contender, rotating order, "
        "after one warm-up round; bytecode cached, files in the page cache).",
        "",
        f"Machine: {r['machine']['nproc']}, {r['machine']['os']}, Python "
        f"{r['machine']['python']}, numpy {r['machine']['numpy']}; code: {r['code']}. "
        f"Load average {r['load_before']} before, {r['load_after']} after.",
        "",
        f"Store: {n:,} packets from `projections.corpus.stdlib_packets(seed={SEED})`, every view "
        f"checkpointed at head ({r['bytes']['recall'] / 1e6:.1f} MB recall checkpoint, "
        f"{r['bytes']['cache'] / 1e6:.1f} MB cache checkpoint).",
        "",
        "| process start to printed answer | median wall ms | min | CPU ms (median) |",
        "|---|---|---|---|",
    ]
    for name, label in (("recall", "`ctxledger recall --query Q --json`"),
                        ("store get", "`ctxledger store get --key K --json`"),
                        ("floor", "`python -c pass` (the floor, in every row)")):
        c = cold[name]
        lines.append(f"| {label} | {med(c['wall']):.1f} | {min(c['wall']):.1f} | "
                     f"{med(c['cpu']):.1f} |")
    lines += [
        "",
        f"Goal (issue 4): cold `ctxledger recall` at 200k packets ≤ {GOAL_MS:.0f} ms: "
        f"{rec:.1f} ms, **{'met' if rec <= GOAL_MS and n >= 200_000 else 'not met'}**"
        + ("" if n >= 200_000 else f" (this run: {n:,} packets)") + ".",
        "",
        "Stage breakdown (a probe process per run: staged imports, then the real "
        "`cli.main.main` with timers around its steps; medians, ms):",
        "",
        "| stage | recall | store get |",
        "|---|---|---|",
    ]
    keys = list(dict.fromkeys([*br["recall"], *br["store get"]]))
    keys = [k for k in keys if k != "wall"]
    lines.append(f"| interpreter start (`python -c pass`) | {r['floor']:.1f} | {r['floor']:.1f} |")
    for k in keys:
        a, b = br["recall"].get(k), br["store get"].get(k)
        lines.append(f"| {k} | {'-' if a is None else f'{a:.1f}'} | "
                     f"{'-' if b is None else f'{b:.1f}'} |")
    lines.append(f"| probe wall (median) | {br['recall']['wall']:.1f} | "
                 f"{br['store get']['wall']:.1f} |")
    lines += [
        "",
        "Queries cycle over: " + ", ".join(f"`{q}`" for q in QUERIES) + ".",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--packets", type=int, default=200_000, help="store size (default 200000)")
    ap.add_argument("--runs", type=int, default=21, help="cold runs per contender (default 21)")
    ap.add_argument("--breakdown-runs", type=int, default=11, help="probe runs (default 11)")
    ap.add_argument("--dir", help="where the store lives (default: <tmp>/ctxledger-bench-cold)")
    ap.add_argument("--exe", help="the ctxledger console script (default: beside this python)")
    ap.add_argument("--write-docs", action="store_true", help=f"rewrite our section of {DOC}")
    ap.add_argument("--json-out", help="also write the raw results here")
    args = ap.parse_args(argv)
    exe = find_exe(args.exe)
    workdir = Path(args.dir or Path(tempfile.gettempdir()) / "ctxledger-bench-cold")
    workdir.mkdir(parents=True, exist_ok=True)
    root = ensure_store(workdir, args.packets)
    keys = sample_keys(root, 64)
    code = code_of(exe_python(exe), root)
    same = same_code(code)
    if not same:
        log(f"WARNING: {exe} runs the code at {code}, which differs from this checkout "
            f"({REPO}): reinstall (pip install --force-reinstall .) to time this code")
    import numpy

    from benchmarks.bench_cache import _code_version

    ck = root / ".ctxledger" / "checkpoints"
    res: dict[str, Any] = {
        "packets": args.packets,
        "runs": args.runs,
        "command": "python benchmarks/bench_cold.py" + "".join(f" {a}" for a in argv),
        "machine": {
            "nproc": f"{os.cpu_count()} cores ({cpu_model()})",
            "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(),
            "numpy": numpy.__version__,
        },
        "code": f"{_code_version()}, run from {code} via {exe}"
        + ("" if same else " (which DIFFERS from the checkout)"),
        "bytes": {n: (ck / f"{n}.ckpt").stat().st_size for n in ("cache", "recall")},
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    log(f"cold runs: {args.runs} per contender via {exe}")
    res["cold"] = cold_runs(exe, root, keys, args.runs)
    res["floor"] = med(res["cold"]["floor"]["wall"])
    log(f"stage breakdown: {args.breakdown_runs} probe runs per command")
    res["breakdown"] = breakdown(exe, root, keys, args.breakdown_runs, res["floor"])
    res["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    section = render(res)
    print(section)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(res, indent=1))
    if args.write_docs:
        write_section("bench_cold", "Cold starts: `benchmarks/bench_cold.py`", section, DOC)
        log(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
