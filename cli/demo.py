"""``ctxledger demo``: a real store from text every machine has, in seconds."""

from __future__ import annotations

import shlex
import shutil
import time
from pathlib import Path
from typing import Any

import click

from projections import ContextStore
from projections.corpus import stdlib_packets
from projections.scope import HOME_ENV as HOME_ENV  # (re-exported: older tests import it here)
from projections.scope import agent_home

from .options import Ctx, examples, store_options
from .output import safe
from .views import iso, progress_bar

BATCH = 500


def demo_root() -> Path:
    """The demo's own store: ``$CTXLEDGER_HOME/demo`` (default ``~/.ctxledger/demo``)."""
    return agent_home() / "demo"


@examples("ctxledger demo", "ctxledger demo --packets 500 --query 'json decoder' --json")
@click.command("demo")
@store_options
@click.option(
    "--packets",
    type=click.IntRange(min=1, max=1_000_000),
    default=3000,
    show_default=True,
    help="How many stdlib packets to cache.",
)
@click.option(
    "--query",
    default="parse http header",
    show_default=True,
    help="What the demo recalls at the end.",
)
def demo(ctx: Ctx, packets: int, query: str) -> None:
    """Cache packets cut from this Python's standard library, then show the store at work.

    Without --root the demo uses its own store ($CTXLEDGER_HOME/demo, default
    ~/.ctxledger/demo) and starts it afresh each run; with --root it adds to
    that store. It ingests, lists, gets, recalls, works one task on the answer
    (notes, a handoff), prints stats and verifies the log.
    """
    if ctx.root_given:
        root, scope = ctx.root, ctx.storage_scope
    else:  # its own disposable project store, whatever scope the config asks for
        root, scope = demo_root(), "project"
        shutil.rmtree(root / ".ctxledger", ignore_errors=True)
    pkts = list(stdlib_packets(limit=packets, seed=0))
    t0 = time.perf_counter()
    store = ctx.managed(ContextStore.open(root, storage_scope=scope))
    report: dict[str, Any] = {"root": str(root), "store": str(store.path),
                              "storage_scope": store.layout.scope}
    with progress_bar(ctx, len(pkts), "caching stdlib packets") as bar:
        for i in range(0, len(pkts), BATCH):
            store.put_many(pkts[i : i + BATCH])
            if bar:
                bar(len(pkts[i : i + BATCH]))
    report["ingest"] = {"packets": len(pkts), "seconds": round(time.perf_counter() - t0, 3)}
    t1 = time.perf_counter()
    store.checkpoint()  # builds every view (the recall index too) and checkpoints it
    report["views"] = {"seconds": round(time.perf_counter() - t1, 3)}
    listed = store.list(limit=5)
    report["list"] = [e.to_json() for e in listed]
    entry = store.get(listed[0].cache_key) if listed else None
    report["get"] = entry.to_json() if entry else None
    t2 = time.perf_counter()
    hits = store.recall(query, limit=5)
    report["recall"] = {
        "query": query,
        "ms": round((time.perf_counter() - t2) * 1000, 2),
        "hits": [h.to_json() for h in hits],
    }
    report["task"] = _task_round(store, query, hits)
    report["stats"] = store.stats()
    report["verify"] = store.ledger.verify().to_json()
    ctx.emit(report, human=_text)


def _task_round(store: ContextStore, query: str, hits: list[Any]) -> dict[str, Any]:
    """What an agent does with the answer: a task with notes, then a handoff for the next run."""
    t = store.tasks.create(f"answer {query!r} from the recalled modules", labels=["demo"])
    store.tasks.start(t.id)
    paths: list[str] = []
    for h in hits[:3]:  # the files an agent would open: the top hits' paths
        entry = store.get(h.cache_key)
        if entry is not None and entry.body.get("paths"):
            paths.append(entry.body["paths"][0])
    for p in sorted(set(paths)):
        store.tasks.note(t.id, "file_read", {"path": p})
    q = store.tasks.note(t.id, "question", {"text": f"which of {len(hits)} hits answers it?"})
    first = hits[0].target if hits else "nothing"
    store.tasks.note(t.id, "decision", {"text": f"start from {first}", "resolves": q.last_seq})
    done = store.tasks.complete(t.id, {"hits": len(hits)})
    handoff = store.agent.handoff({"next": f"read {first}", "query": query}, task_id=t.id)
    record = store.tasks.record(t.id)
    return {"task": done.to_json(), "record": record.to_json() if record else None,
            "handoff": handoff.to_json()}


def _text(r: dict[str, Any]) -> str:
    ing = r["ingest"]
    root = safe(shlex.quote(r["root"]))
    lines = [
        f"store      {safe(r['store'])}",
        f"ingested   {ing['packets']} stdlib packets in {ing['seconds']:.2f}s "
        f"({ing['packets'] / max(ing['seconds'], 1e-9):,.0f} packets/s, "
        f"one atomic batch per {BATCH})",
        f"indexed    cache and recall views built and checkpointed in "
        f"{r['views']['seconds']:.2f}s",
        "",
        "newest entries (store list --limit 5):",
    ]
    for e in r["list"]:
        lines.append(f"  {e['cache_key'][:16]}  {iso(e['created_at_unix'])}  {safe(e['target'])}")
    if r["get"]:
        body = r["get"]["body"]
        lines += [
            "",
            f"store get --key {r['get']['cache_key'][:16]}:",
            f"  target   {safe(body.get('target') or '')}",
            f"  summary  {safe((body.get('summary') or '')[:90])}",
            f"  paths    {safe(', '.join((body.get('paths') or [])[:3]))}",
            f"  symbols  {safe(', '.join((body.get('symbols') or [])[:4]))}",
        ]
    rc = r["recall"]
    lines += ["", f"recall {safe(repr(rc['query']))} ({rc['ms']} ms):"]
    for h in rc["hits"]:
        summary = safe((h.get("summary") or "")[:60])
        lines.append(f"  {h['score']:7.3f}  {safe(h['target']):28}  {summary}")
    tk = r["task"]
    t, rec = tk["task"], tk["record"]
    lines += ["", f"task {safe(t['id'])} ({t['state']}, {t['events']} events): "
              f"{safe(t['title'])}"]
    lines += [f"  read     {safe(p)}" for p in rec["files"]]
    lines += [f"  decided  {safe(str(d['data']['text']))}" for d in rec["decisions"]]
    lines.append(f"  handoff  {safe(tk['handoff']['id'])}: "
                 f"{safe(str(tk['handoff']['payload']['next']))}")
    st, v = r["stats"], r["verify"]
    lines += [
        "",
        f"stats      {st['entries']} live entries, head seq {st['head_seq']}, "
        f"evictions {sum(st['evictions'].values())}",
        f"verify     {'ok' if v['ok'] else 'FAILED'}: {v['events']} events in "
        f"{v['frames']} frames, {len(v['problems'])} problems",
        "",
        f"explore:   ctxledger store list --root {root}",
        f"           ctxledger task show {safe(t['id'])} --root {root}",
        f"           ctxledger log show --root {root} --limit 3",
    ]
    return "\n".join(lines)
