"""What the torture tests do to a store, and what they check after each disaster.

An *operation* is a callable ``op(store, rng, tag) -> [Ack, ...]``: it changes
the store and returns what it acknowledged (the seq, kind, key and data of
each event its call returned for). Harnesses take operations by name from
:data:`OPS`, so a new maintenance operation joins every harness with one line
here (see the comment on :data:`OPS`).

The checks are the suite's one definition of "nothing acknowledged was lost"
(:func:`check_acked`) and "the views are what the log implies"
(:func:`check_views`).
"""

from __future__ import annotations

import random
import shutil
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypedDict

from eventstore import Event, Ledger
from projections import ContextStore
from projections.compaction import compact
from projections.config import StoreConfig


class Ack(TypedDict):
    """One event a returned call acknowledged: ``data`` holds fields it must carry."""

    seq: int
    kind: str
    key: str | None
    data: dict[str, Any]


Op = Callable[[ContextStore, random.Random, str], list[Ack]]

VOCAB = ("alpha", "beta", "gamma", "delta", "kappa", "sigma", "omega", "lambda", "tau")
QUERIES = ("alpha beta", "omega", "sigma tau")


def packet(rng: random.Random, tag: str) -> dict[str, Any]:
    words = " ".join(rng.choice(VOCAB) for _ in range(rng.randint(1, 6)))
    return {"target": f"t{rng.randint(0, 2)}", "summary": f"{tag} {words}",
            "body": "x" * rng.choice((0, 10, 300, 2000))}


def op_put(store: ContextStore, rng: random.Random, tag: str) -> list[Ack]:
    pkt = packet(rng, tag)
    r = store.put(pkt)
    return [Ack(seq=r.seq, kind="cache.put", key=r.cache_key, data={"packet": pkt})]


def op_put_many(store: ContextStore, rng: random.Random, tag: str) -> list[Ack]:
    pkts = [packet(rng, f"{tag}-{i}") for i in range(rng.randint(2, 4))]
    return [Ack(seq=r.seq, kind="cache.put", key=r.cache_key, data={"packet": p})
            for r, p in zip(store.put_many(pkts), pkts, strict=True)]


def op_task(store: ContextStore, rng: random.Random, tag: str) -> list[Ack]:
    tid, title = f"task-{tag}", f"task {tag} {rng.choice(VOCAB)}"
    acks = [Ack(seq=store.tasks.create(title, id=tid).last_seq, kind="task.created", key=tid,
                data={"title": title})]
    if rng.random() < 0.7:
        acks.append(Ack(seq=store.tasks.start(tid).last_seq, kind="task.started", key=tid,
                        data={}))
        if rng.random() < 0.5:
            acks.append(Ack(seq=store.tasks.complete(tid).last_seq, kind="task.completed",
                            key=tid, data={}))
    return acks


def op_checkpoint(store: ContextStore, rng: random.Random, tag: str) -> list[Ack]:
    store.checkpoint()
    return []


def op_reput(store: ContextStore, rng: random.Random, tag: str) -> list[Ack]:
    """Put a live entry's packet again: the earlier put is superseded (compaction drops it)."""
    entries = store.list(limit=50)
    got = store.get(rng.choice(entries).cache_key) if entries else None
    if got is None:
        return op_put(store, rng, tag)
    r = store.put(got.body)
    return [Ack(seq=r.seq, kind="cache.put", key=r.cache_key, data={"packet": got.body})]


def op_compact(store: ContextStore, rng: random.Random, tag: str) -> list[Ack]:
    """What ``ctxledger compact`` does: a new generation, then the checkpoints afresh."""
    if compact(store.ledger).compacted:
        store.checkpoint()
    return []


#: Operations by name: every harness runs all of them (the crash loop and the power cut
#: in a random mix, the I/O-error sweep one after another). A new operation joins every
#: harness with one line here.
OPS: dict[str, Op] = {
    "put": op_put,
    "put_many": op_put_many,
    "task": op_task,
    "checkpoint": op_checkpoint,
    "reput": op_reput,
    "compact": op_compact,
}

#: The mix the crash loop and the power cut draw from: every operation, puts twice.
DEFAULT_MIX = ("put", *OPS)


def config(sync: str) -> StoreConfig:
    """A store that also checkpoints on its own every few events."""
    return StoreConfig(sync=sync, checkpoint_every_events=7, checkpoint_every_seconds=0.0,
                       checkpoint_close_lag=1)


# --- checks ----------------------------------------------------------------------------------


def check_acked(log_dir: Path, acked: Iterable[Ack], where: str = "") -> list[Event]:
    """The log reads as a gapless run of seqs from its base holding every acknowledged event.

    An event acknowledged in the current generation must be at its seq, exactly. One
    acknowledged before a compaction or a salvage cut (its seq is below the log's base)
    was copied to a new seq or dropped as superseded: an event of the same kind and key
    carrying the same data must be there (a superseded put has the same key, so the same
    packet, as the put that replaced it). Returns the events (unacknowledged ones may be
    there too: written, then the writer died before it could say so).
    """
    with Ledger.open(log_dir, readonly=True) as ro:
        events = list(ro.read())
    base = events[0].seq if events else 1
    assert [e.seq for e in events] == list(range(base, base + len(events))), f"seq gap {where}"
    copies: dict[tuple[str, str | None], list[Event]] = {}
    for e in events:
        copies.setdefault((e.kind, e.key), []).append(e)
    for a in acked:
        if a["seq"] < base:
            same = copies.get((a["kind"], a["key"]), [])
            assert any(carries(e, a["data"]) for e in same), \
                f"acknowledged seq {a['seq']} not kept across the cut at {base} {where}"
            continue
        e = event_at(events, a["seq"])
        assert e is not None, f"acknowledged seq {a['seq']} lost {where}"
        assert (e.kind, e.key) == (a["kind"], a["key"]), f"seq {a['seq']} changed {where}"
        assert carries(e, a["data"]), f"seq {a['seq']} data changed {where}"
    return events


def carries(e: Event, fields: dict[str, Any]) -> bool:
    """``e``'s data holds each of ``fields`` with the same value."""
    return isinstance(e.data, dict) and all(
        field in e.data and e.data[field] == value for field, value in fields.items())


def event_at(events: list[Event], seq: int) -> Event | None:
    """The event at ``seq`` in a gapless run (None past either end)."""
    i = seq - events[0].seq if events else -1
    return events[i] if 0 <= i < len(events) else None


def later_clock(events: list[Event]) -> Callable[[], float]:
    """A fixed clock just after the last event: answers (ages, expiry) are then a
    function of the files alone."""
    now = (events[-1].at if events else 0.0) + 1.0
    return lambda: now


def answers(store: ContextStore, keys: Iterable[str], task_ids: Iterable[str]) -> Any:
    """What users ask a store (get, list, recall, tasks), as comparable values."""
    return (
        [store.get(k) for k in keys],
        store.list(limit=10_000),
        [store.recall(q, limit=20) for q in QUERIES],
        store.tasks.list(),
        [store.tasks.history(t) for t in task_ids],
    )


def keys_and_tasks(events: Iterable[Event]) -> tuple[list[str], list[str]]:
    keys, tasks = set(), set()
    for e in events:
        if e.kind == "cache.put" and e.key:
            keys.add(e.key)
        elif e.kind.startswith("task.") and e.key:
            tasks.add(e.key)
    return sorted(keys), sorted(tasks)


def check_views(root: Path, scratch: Path, events: list[Event], where: str = "") -> Counter[str]:
    """Every view, loaded the way a store loads it (checkpoints, then the log's tail),
    equals a fresh fold of the whole log; and the store answers exactly as a copy of
    it without any checkpoint does. Returns where each view was loaded from."""
    clock = later_clock(events)
    keys, tasks = keys_and_tasks(events)
    loaded_from: Counter[str] = Counter()
    with ContextStore.open(root, readonly=True, clock=clock) as ro:
        ro.runner.load_all()
        names = list(ro.runner.views)
        fresh, _n = ro.runner.refold(names)
        for name in names:
            view = ro.runner.views[name]
            loaded_from[view.loaded_from] += 1
            assert view.state.snapshot() == fresh[name].snapshot(), f"view {name} {where}"
        got = answers(ro, keys, tasks)
    bare = scratch / "no-checkpoints"
    shutil.rmtree(bare, ignore_errors=True)
    shutil.copytree(root, bare, ignore=shutil.ignore_patterns("checkpoints", "LOCK"))
    with ContextStore.open(bare, readonly=True, clock=clock) as ref:
        assert got == answers(ref, keys, tasks), f"answers differ from a fresh fold {where}"
    return loaded_from
