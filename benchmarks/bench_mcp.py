"""Recall over MCP (``ctxledger mcp``) against the cold CLI and the library, in one run (issue 15).

Run from the repository root with a Python that has the ``mcp`` extra
(``pip install -e '.[mcp]'``)::

    python benchmarks/bench_mcp.py                                  # 200k packets
    python benchmarks/bench_mcp.py --size 2000 --queries 3 --reps 2 # a quick look
    python benchmarks/bench_mcp.py --write-docs                     # also rewrite our docs section

The store: ``projections.corpus.stdlib_packets(--size, seed=0)`` put in
1,000-packet batches into a fresh directory under ``--workdir``, closed (every
view checkpointed at the head), removed afterwards. The server and the CLI
are the ``ctxledger`` console script beside this Python when there is one (what
``ctxledger mcp config`` tells a client to run), else ``python -m cli``.
Queries: the seeded mix of ``benchmarks/bench_recall.py`` (``make_queries``,
``--queries`` per class: rare, common, phrase, path, basename, test, filtered,
task, unknown, every-doc), ``limit=8``, each class's ``target`` / ``task_id`` /
``scope`` passed as the library takes them. What is timed:

* **spawn + initialize** -- the MCP stdio client of the ``mcp`` package
  (``mcp.Client``) starting ``ctxledger mcp --root R`` and completing the
  protocol's initialization: process start, imports, opening the store and
  loading every view, the handshake. Then the first ``recall`` round trip
  (mostly the client's: its first answer from a tool makes it import
  jsonschema and compile that tool's output schema). Medians of ``--spawns``
  fresh servers.
* **recall round trip over MCP, minimal client** -- a client with no MCP
  library (:class:`RawClient`): the ``initialize`` handshake, then per query
  one ``tools/call`` JSON-RPC line written to the server's stdin and the
  answer line read from its stdout and parsed (``json.loads``), in one
  long-lived session: what the server and the pipes cost, the wire's round
  trip whatever the client. The goal is judged on this row.
* **recall round trip over MCP, ``mcp`` client** --
  ``await client.call_tool("recall", ...)`` in one long-lived session (one
  warm-up call), wall time from the call to the parsed result in the client;
  the client is in this process. This adds that client's own work per answer:
  pydantic models, and a check of the structured answer against the tool's
  output schema with jsonschema, in Python (the info row without that check
  says what it costs).
* **the library in process** -- ``store.recall(...)`` on ``ContextStore.open(R)``
  in this process (one warm-up call): what the server does for one call.
* **the cold CLI** -- ``ctxledger recall --root R -q Q ... --json``, a new
  process per query (fewer rounds: ``--cli-reps``).
* with ``--baseline DIR``, info rows: the same MCP calls (both clients) to a
  second server whose code is the checkout DIR (``python -m cli`` there, e.g.
  a ``git worktree`` of an older commit), timed in the same rounds: a
  before/after of a server change in one run.

MCP and the library answer the whole query set in turn, ``--reps`` rounds;
per query the median over rounds, then p50/p95 over all queries and per
class. Every MCP answer's keys are checked against the library's before
timing. Info rows: the same MCP calls with the client's check of every
answer against the tool's output schema switched off (the ``mcp`` client
validates with jsonschema, in Python: what that check costs), and the round
trip of ``latest_handoff``, a call that does almost nothing (the protocol's
own cost, both ends in Python).

Goal (issue 15): MCP recall round trip p50 <= 5 ms at 200k packets (the cold
CLI: ~110-170 ms), judged on the minimal client's row. Not part of the test
suite or CI; numbers from a shared machine are noisy (the 1-minute load
average before and after is printed).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
for _p in (str(REPO), str(BENCH)):  # run from a checkout without installing
    if _p not in sys.path:
        sys.path.insert(0, _p)

import anyio  # noqa: E402
import bench_recall  # noqa: E402  (a sibling module: the seeded query mix)
from docsection import cpu_model, loadavg, log, write_section  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from projections import ContextStore  # noqa: E402
from projections.corpus import stdlib_packets  # noqa: E402

SEED = 0
LIMIT = 8
BATCH = 1_000
GOAL_MS = 5.0
CLASSES: list[str] = bench_recall.CLASSES


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p * (len(s) - 1))))] if s else float("nan")


def program() -> tuple[list[str], dict[str, str], str]:
    """How to run ctxledger: argv prefix, environment, and how to say it."""
    script = Path(sys.executable).parent / "ctxledger"
    env = dict(os.environ)
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)], env, f"`{script}` (the console script)"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return [sys.executable, "-m", "cli"], env, "`python -m cli` (no console script here)"


def build(root: str, size: int) -> list[dict[str, Any]]:
    packets = list(stdlib_packets(size, seed=SEED))
    with ContextStore.open(root) as store:
        for i in range(0, len(packets), BATCH):
            store.put_many(packets[i : i + BATCH])
    return packets


def make_queries(packets: list[dict[str, Any]], n: int, size: int) -> list[dict[str, Any]]:
    docs = bench_recall.make_docs(packets, SEED)
    qs = bench_recall.make_queries(docs, n, SEED + size)
    return [{"cls": q["cls"], "query": q["query"],
             "kwargs": {k: q[k] for k in ("target", "task_id", "scope") if k in q}}
            for q in qs]


def mcp_args(q: dict[str, Any]) -> dict[str, Any]:
    return {"query": q["query"], "limit": LIMIT, **q["kwargs"]}


def cli_argv(prefix: list[str], root: str, q: dict[str, Any]) -> list[str]:
    argv = [*prefix, "recall", "--root", root, "-q", q["query"], "--limit", str(LIMIT), "--json"]
    kw = q["kwargs"]
    if "target" in kw:
        argv += ["--target", kw["target"]]
    if "task_id" in kw:
        argv += ["--task", kw["task_id"], "--scope", kw["scope"]]
    return argv


def params(prefix: list[str], env: dict[str, str], root: str) -> StdioServerParameters:
    return StdioServerParameters(command=prefix[0], args=[*prefix[1:], "mcp", "--root", root],
                                 env=env)


def baseline_params(tree: str, root: str) -> StdioServerParameters:
    """A server run from the checkout ``tree`` (its code first on the path)."""
    env = {**os.environ, "PYTHONPATH": tree}
    return StdioServerParameters(command=sys.executable, args=["-m", "cli", "mcp", "--root", root],
                                 env=env, cwd=tree)


class RawClient:
    """A minimal MCP client: JSON-RPC lines over the server's pipes, no client library."""

    def __init__(self, p: StdioServerParameters) -> None:
        self.proc = subprocess.Popen([p.command, *p.args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=p.env, cwd=p.cwd)
        self.next_id = 0
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "bench_mcp", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> Any:
        assert self.proc.stdout is not None
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        answer = json.loads(self.proc.stdout.readline())
        if answer.get("id") != self.next_id or "result" not in answer:
            raise SystemExit(f"{method}: unexpected answer {str(answer)[:300]}")
        return answer["result"]

    def recall(self, args: dict[str, Any]) -> list[str]:
        result = self.request("tools/call", {"name": "recall", "arguments": args})
        if result.get("isError"):
            raise SystemExit(f"recall {args}: {result['content']}")
        return [h["cache_key"] for h in result["structuredContent"]["hits"]]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def raw_rounds(clients: dict[str, StdioServerParameters], store: ContextStore,
               queries: list[dict[str, Any]], reps: int) -> dict[str, list[float]]:
    """Per query, the median seconds over ``reps`` rounds of each minimal client, in turn."""
    opened = {n: RawClient(p) for n, p in clients.items()}
    try:
        for q in queries:  # same answers, or the timings compare different work
            mine = [h.cache_key for h in store.recall(q["query"], limit=LIMIT, **q["kwargs"])]
            for c in opened.values():
                if c.recall(mcp_args(q)) != mine:
                    raise SystemExit(f"the minimal client and the library disagree on {q}")
        samples = {n: [[] for _ in queries] for n in opened}  # type: dict[str, list[list[float]]]
        clock = time.perf_counter
        for _ in range(reps):
            for n, c in opened.items():
                gc.collect()
                for i, q in enumerate(queries):
                    args = mcp_args(q)
                    t = clock()
                    c.recall(args)
                    samples[n][i].append(clock() - t)
    finally:
        for c in opened.values():
            c.close()
    return {n: [statistics.median(x) for x in s] for n, s in samples.items()}


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    t = time.perf_counter()
    await fn()
    return time.perf_counter() - t


async def spawns(p: StdioServerParameters, n: int, warm: dict[str, Any]) -> dict[str, float]:
    init, first = [], []
    for _ in range(n):
        gc.collect()
        t = time.perf_counter()
        async with Client(p) as client:
            init.append(time.perf_counter() - t)
            first.append(await timed(lambda c=client: c.call_tool("recall", warm)))
    return {"init": statistics.median(init), "first": statistics.median(first)}


async def rounds(p: StdioServerParameters, store: ContextStore, queries: list[dict[str, Any]],
                 reps: int, base: StdioServerParameters | None = None) -> dict[str, list[float]]:
    """Per query, the median seconds over ``reps`` rounds: MCP, library, and the protocol floor
    (and MCP to the ``base`` server, when given)."""
    samples: dict[str, list[list[float]]] = {n: [[] for _ in queries]
                                             for n in ("mcp", "mcp_novalidate", "lib", "base")}
    floor: list[float] = []
    clock = time.perf_counter
    checked = ClientSession.validate_tool_result

    async def unchecked(self: ClientSession, name: str, result: Any) -> None:
        return None

    async with Client(p) as client, Client(base or p) as other:
        await client.call_tool("recall", mcp_args(queries[0]))  # warm-up, both sides
        await other.call_tool("recall", mcp_args(queries[0]))
        store.recall(queries[0]["query"], limit=LIMIT, **queries[0]["kwargs"])
        for q in queries:  # same answers, or the timings compare different work
            got = await client.call_tool("recall", mcp_args(q))
            mine = store.recall(q["query"], limit=LIMIT, **q["kwargs"])
            keys = [h["cache_key"] for h in (got.structured_content or {}).get("hits", [])]
            if got.is_error or keys != [h.cache_key for h in mine]:
                raise SystemExit(f"MCP and the library disagree on {q}: {got.content}")
        for _ in range(reps):
            gc.collect()
            for i, q in enumerate(queries):
                args = mcp_args(q)
                t = clock()
                await client.call_tool("recall", args)
                samples["mcp"][i].append(clock() - t)
            gc.collect()
            for i, q in enumerate(queries if base else []):
                args = mcp_args(q)
                t = clock()
                await other.call_tool("recall", args)
                samples["base"][i].append(clock() - t)
            gc.collect()
            ClientSession.validate_tool_result = unchecked  # type: ignore[method-assign]
            try:
                for i, q in enumerate(queries):
                    args = mcp_args(q)
                    t = clock()
                    await client.call_tool("recall", args)
                    samples["mcp_novalidate"][i].append(clock() - t)
            finally:
                ClientSession.validate_tool_result = checked  # type: ignore[method-assign]
            gc.collect()
            for i, q in enumerate(queries):
                t = clock()
                store.recall(q["query"], limit=LIMIT, **q["kwargs"])
                samples["lib"][i].append(clock() - t)
            for _ in range(20):
                floor.append(await timed(lambda: client.call_tool("latest_handoff", {})))
    out = {n: [statistics.median(x) for x in s] for n, s in samples.items() if s[0]}
    out["floor"] = floor
    return out


def cold_cli(prefix: list[str], env: dict[str, str], root: str, queries: list[dict[str, Any]],
             reps: int) -> list[float]:
    per_query: list[list[float]] = [[] for _ in queries]
    subprocess.run(cli_argv(prefix, root, queries[0]), env=env, capture_output=True, check=True)
    for _ in range(reps):
        for i, q in enumerate(queries):
            t = time.perf_counter()
            cp = subprocess.run(cli_argv(prefix, root, q), env=env, capture_output=True)
            per_query[i].append(time.perf_counter() - t)
            if cp.returncode != 0:
                raise SystemExit(f"{q}: exit {cp.returncode}: {cp.stderr.decode()[-300:]}")
    return [statistics.median(x) for x in per_query]


def by_class(lat: list[float], queries: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    groups: dict[str, list[float]] = {c: [] for c in CLASSES}
    for q, s in zip(queries, lat, strict=True):
        groups[q["cls"]].append(s * 1e3)
    return {c: (pct(v, 0.5), pct(v, 0.95)) for c, v in groups.items() if v}


def render(meta: dict[str, Any], res: dict[str, Any], queries: list[dict[str, Any]]) -> str:
    ms = {n: [s * 1e3 for s in res[n]]
          for n in ("raw", "mcp", "mcp_novalidate", "lib", "cli", "floor", "base", "raw_base")
          if n in res}
    p50 = {n: pct(v, 0.5) for n, v in ms.items()}
    p95 = {n: pct(v, 0.95) for n, v in ms.items()}
    classes = {n: by_class(res[n], queries) for n in ("raw", "mcp", "lib", "cli")}
    ok = p50["raw"] <= GOAL_MS
    lines = [
        f"Run on {meta['date']} with `{meta['command']}` ({meta['size']:,} packets, "
        f"{len(queries)} queries, {meta['reps']} rounds over MCP and the library, "
        f"{meta['cli_reps']} for the cold CLI; medians per query).",
        "",
        f"Machine: {meta['cpus']} cores ({meta['cpu']}), {meta['os']}; Python "
        f"{meta['python']}, mcp {meta['mcp']}. 1-min load average {meta['load_before']:.2f} "
        f"before, {meta['load_after']:.2f} after; compare the ratios of one run, not absolute "
        "figures across runs.",
        "",
        f"ctxledger ran as {meta['program']}. What is timed is in the module docstring of "
        "`benchmarks/bench_mcp.py`: the `mcp` package's stdio client in this process, the "
        "server in its own; the library in this process; a new CLI process per query.",
        "",
        "| start | median |",
        "|---|---:|",
        f"| spawn + initialize (`mcp.Client` entered: process, imports, store open, every view "
        f"loaded, handshake), x{meta['spawns']} | {res['spawn']['init'] * 1e3:,.0f} ms |",
        f"| then the first `recall` round trip (the client imports jsonschema and compiles the "
        f"tool's output schema on a tool's first answer) | {res['spawn']['first'] * 1e3:.1f} ms |",
        "",
        "| recall, p50 / p95 ms | MCP, minimal client | MCP, `mcp` client | library in "
        "process | cold CLI (`recall --json`) |",
        "|---|---:|---:|---:|---:|",
        f"| all {len(queries)} queries | **{p50['raw']:.2f}** / {p95['raw']:.2f} | "
        f"{p50['mcp']:.2f} / {p95['mcp']:.2f} | {p50['lib']:.2f} / {p95['lib']:.2f} | "
        f"{p50['cli']:.1f} / {p95['cli']:.1f} |",
    ]
    for c in CLASSES:
        if c in classes["mcp"]:
            cells = [classes[n][c] for n in ("raw", "mcp", "lib")]
            c50, c95 = classes["cli"][c]
            lines.append(f"| {c} | " + " | ".join(f"{a:.2f} / {b:.2f}" for a, b in cells)
                         + f" | {c50:.1f} / {c95:.1f} |")
    lines += [
        f"| info: the `mcp` client not validating answers against the output schema | | "
        f"{p50['mcp_novalidate']:.2f} / {p95['mcp_novalidate']:.2f} | | |",
        f"| info: `latest_handoff` round trip (the protocol's own cost), "
        f"{len(ms['floor'])} calls | | {p50['floor']:.2f} / {p95['floor']:.2f} | | |",
    ]
    if "base" in ms:
        lines.append(f"| info: the same calls to a server run from {meta['baseline']} | "
                     f"{p50['raw_base']:.2f} / {p95['raw_base']:.2f} | "
                     f"{p50['base']:.2f} / {p95['base']:.2f} | | |")
    lines += [
        "",
        f"MCP p50 / library p50: {p50['raw'] / p50['lib']:.1f}x with the minimal client, "
        f"{p50['mcp'] / p50['lib']:.1f}x with the `mcp` client; cold CLI p50 / MCP p50 "
        f"(minimal client): {p50['cli'] / p50['raw']:.0f}x.",
        "",
        "| goal (issue 15) | measured | |",
        "|---|---|---|",
        f"| MCP recall round trip p50 <= {GOAL_MS:g} ms at 200k packets (minimal client) | "
        f"{p50['raw']:.2f} ms at {meta['size']:,} | {'PASS' if ok else '**FAIL**'}"
        f"{'' if meta['size'] >= 200_000 else ' (not the goal size)'} |",
        f"| the same with the `mcp` package's client (its own per-answer work included) | "
        f"{p50['mcp']:.2f} ms | info |",
        "",
    ]
    return "\n".join(lines)


def describe_tree(tree: str) -> str:
    """``DIR`` as the docs say it: its git commit when it is a checkout."""
    cp = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"],
                        capture_output=True, text=True)
    rev = cp.stdout.strip()
    return f"git {rev} (`{tree}`)" if cp.returncode == 0 and rev else f"`{tree}`"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--size", type=int, default=200_000, help="packets in the store")
    ap.add_argument("--queries", type=int, default=10, help="queries per class")
    ap.add_argument("--reps", type=int, default=5, help="rounds over MCP and the library")
    ap.add_argument("--cli-reps", type=int, default=1, help="rounds of cold CLI processes")
    ap.add_argument("--spawns", type=int, default=5, help="fresh servers for spawn + init")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--baseline", default=None, metavar="DIR",
                    help="also time a server run from this checkout (an info row)")
    args = ap.parse_args(argv)
    from importlib import metadata

    argv_text = sys.argv[1:] if argv is None else argv
    prefix, env, said = program()
    meta: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python benchmarks/bench_mcp.py", *argv_text]),
        "size": args.size, "reps": args.reps, "cli_reps": args.cli_reps,
        "spawns": args.spawns, "cpus": os.cpu_count(), "cpu": cpu_model(),
        "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
        "mcp": metadata.version("mcp"), "program": said, "load_before": loadavg(),
        "baseline": args.baseline and describe_tree(args.baseline),
    }
    work = tempfile.mkdtemp(prefix="bench_mcp_", dir=args.workdir)
    try:
        root = os.path.join(work, "store")
        log(f"building {args.size:,} packets ...")
        packets = build(root, args.size)
        queries = make_queries(packets, args.queries, args.size)
        del packets
        p = params(prefix, env, root)
        log("spawn + initialize ...")
        res: dict[str, Any] = {"spawn": anyio.run(spawns, p, args.spawns,
                                                  mcp_args(queries[0]))}
        log("MCP and library rounds ...")
        with ContextStore.open(root) as store:
            base = args.baseline and baseline_params(os.path.abspath(args.baseline), root)
            res.update(anyio.run(rounds, p, store, queries, args.reps, base or None))
            log("minimal-client rounds ...")
            raw = raw_rounds({"raw": p, **({"raw_base": base} if base else {})}, store,
                             queries, args.reps)
            res.update(raw)
        log("cold CLI ...")
        res["cli"] = cold_cli(prefix, env, root, queries, args.cli_reps)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    meta["load_after"] = loadavg()
    section = render(meta, res, queries)
    print(section)
    if args.write_docs:
        write_section("bench_mcp", "MCP: benchmarks/bench_mcp.py", section)
        log("wrote docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
