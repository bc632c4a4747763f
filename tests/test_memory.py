"""Issue 13: memory fields (kinds, tiers, dedupe keys, supersession) and the memory scoring."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import ctxledger
from eventstore import Event, MemoryLog
from eventstore.event import build_event
from projections import ContextStore, memory_rank
from projections.cache import EVICTED, PUT, CacheState
from projections.config import StoreConfig
from projections.memory import MEMORY_KINDS, MemoryState
from projections.memory_rank import Adjuster, Scoring, search
from projections.packet import InvalidPacketError, cache_key_of, canonical_bytes
from projections.recall import RecallQuery
from projections.recall import constants as recall_constants
from projections.recall_view import RecallState

DAY = 86_400.0
T0 = 1_700_000_000.0


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@contextmanager
def store(tmp_path: Path, clock: Clock, log: MemoryLog | None = None,
          **cfg: Any) -> Iterator[ContextStore]:
    """A store over a log whose put times are ``clock``'s."""
    own = log is None
    log = MemoryLog(clock=clock) if log is None else log
    try:
        with ContextStore.open(tmp_path, log=log, clock=clock, config=StoreConfig(**cfg),
                               home=tmp_path / "home") as s:
            yield s
    finally:
        if own:
            log.close()


def pkt(summary: str, **fields: Any) -> dict[str, Any]:
    return {"target": "mem.t", "summary": summary, **fields}


def keys(hits: list[Any]) -> list[str]:
    return [h.cache_key for h in hits]


# --- validation at put ------------------------------------------------------------------------


@pytest.mark.parametrize("fields", [
    {"memory_kind": "note"}, {"memory_kind": 3}, {"source_tier": "gold"},
    {"source_tier": ["curated"]}, {"dedupe_key": ""}, {"dedupe_key": "  "},
    {"dedupe_key": 7}, {"dedupe_key": "k" * 513}, {"superseded": "yes"}, {"superseded": 1},
])
def test_bad_memory_fields_are_refused_at_put(tmp_path: Path, fields: dict[str, Any]) -> None:
    with store(tmp_path, Clock()) as s:
        with pytest.raises(InvalidPacketError):
            s.put(pkt("x", **fields))
        assert s.ledger.head == 0


def test_good_memory_fields_are_kept(tmp_path: Path) -> None:
    with store(tmp_path, Clock()) as s:
        for kind in MEMORY_KINDS:
            s.put(pkt(f"word {kind}", memory_kind=kind, source_tier="telemetry",
                      dedupe_key="k" * 512, superseded=False))
        hits = s.recall("word", limit=20, include_superseded=True)
        assert sorted(str(h.memory_kind) for h in hits) == sorted(MEMORY_KINDS)
        assert {h.source_tier for h in hits} == {"telemetry"}


# --- supersession -----------------------------------------------------------------------------


def test_a_dedupe_chain_keeps_the_newest(tmp_path: Path) -> None:
    clock = Clock()
    log = MemoryLog(clock=clock)
    with store(tmp_path, clock, log) as s:
        puts = []
        for i in range(3):
            puts.append(s.put(pkt(f"auth rule v{i}", dedupe_key="auth-rule")))
            clock.t += 60
        other = s.put(pkt("auth other"))
        a, b, c = (p.cache_key for p in puts)
        assert set(keys(s.recall("auth"))) == {c, other.cache_key}
        everything = {h.cache_key: h for h in s.recall("auth", include_superseded=True)}
        assert set(everything) == {a, b, c, other.cache_key}
        for k in (a, b):
            assert "superseded" in everything[k].match_reasons
            assert everything[k].superseded_by == c
        assert everything[c].superseded_by is None
        assert "superseded" not in everything[c].match_reasons
        # time travel: as the log stood after b, b was current and a superseded by it
        old = {h.cache_key: h for h in s.recall("auth", as_of=puts[1].seq,
                                                  include_superseded=True)}
        assert set(old) == {a, b} and old[a].superseded_by == b
        assert keys(s.recall("auth", as_of=puts[1].seq)) == [b]
        assert [e.cache_key for e in s.list(as_of=puts[1].seq)] == [b]
        want = keys(s.recall("auth", include_superseded=True))
    with store(tmp_path, clock, log) as s:  # reopened: from the memory view's checkpoint
        assert set(keys(s.recall("auth"))) == {c, other.cache_key}
        assert s.rebuild()["projections"][-1] == "memory"
        assert keys(s.recall("auth", include_superseded=True)) == want
        assert s.recall("auth", include_superseded=True)[0].superseded_by in (None, c)
        # a re-put of the oldest makes it the newest: current is by the latest put
        clock.t += 60
        s.put(pkt("auth rule v0", dedupe_key="auth-rule"))
        assert set(keys(s.recall("auth"))) == {a, other.cache_key}
    log.close()


def test_the_next_live_member_is_current_when_the_newest_goes(tmp_path: Path) -> None:
    clock = Clock()
    with store(tmp_path, clock, ttl_seconds=1000) as s:
        a = s.put(pkt("auth x", dedupe_key="d")).cache_key
        clock.t += 10
        b = s.put(pkt("auth y", dedupe_key="d")).cache_key
        assert keys(s.recall("auth")) == [b]
        s._append([Event(EVICTED, b, {"reason": "manual_prune"})])  # the newest goes
        assert keys(s.recall("auth")) == [a]
        assert [e.cache_key for e in s.list()] == [a]
        clock.t += 995  # a expires (put 1005 s ago); the group has no live member left
        assert keys(s.recall("auth", include_superseded=True)) == []


def test_expiry_is_a_read_time_rule(tmp_path: Path) -> None:
    """A member that expired no longer supersedes (and the state needs no event for it)."""
    ms = MemoryState()
    k1, k2 = "1" * 64, "2" * 64
    for seq, (k, at) in enumerate([(k1, 100.0), (k2, 50.0)], 1):
        ms.apply(build_event(PUT, k, {"bytes": 1, "packet": pkt("x", dedupe_key="g")}, seq, at))
    assert ms.current("g", None) == k1 and ms.superseded(k2, None).by == k1  # type: ignore[union-attr]
    assert ms.current("g", 120.0) is None
    assert ms.current("g", 75.0) == k1
    # ties on time: the later put (seq) wins
    ms.apply(build_event(PUT, "3" * 64, {"bytes": 1, "packet": pkt("y", dedupe_key="g")}, 3,
                         100.0))
    assert ms.current("g", None) == "3" * 64
    assert MemoryState.from_bytes(ms.to_bytes()).superseded_keys(None) == \
        ms.superseded_keys(None)


def test_a_packet_may_mark_itself_superseded(tmp_path: Path) -> None:
    with store(tmp_path, Clock()) as s:
        gone = s.put(pkt("auth old", superseded=True)).cache_key
        kept = s.put(pkt("auth new", superseded=False)).cache_key
        assert keys(s.recall("auth")) == [kept]
        hits = {h.cache_key: h for h in s.recall("auth", include_superseded=True)}
        assert "superseded" in hits[gone].match_reasons and hits[gone].superseded_by is None
        page = s.list_page(include_superseded=True)
        assert {(e.cache_key, e.superseded) for e in page.entries} == {(gone, True),
                                                                         (kept, False)}


def test_a_newest_that_marks_itself_superseded_retracts_the_group(tmp_path: Path) -> None:
    clock = Clock()
    with store(tmp_path, clock) as s:
        a = s.put(pkt("auth a", dedupe_key="g")).cache_key
        clock.t += 1
        r = s.put(pkt("auth retract", dedupe_key="g", superseded=True)).cache_key
        assert keys(s.recall("auth")) == []
        hits = {h.cache_key: h for h in s.recall("auth", include_superseded=True)}
        assert hits[a].superseded_by == r and hits[r].superseded_by is None


def test_store_list_counts_and_pages_what_it_returns(tmp_path: Path) -> None:
    clock = Clock()
    with store(tmp_path, clock) as s:
        for i in range(6):  # groups g0, g1, g2: two members each, the second current
            s.put(pkt(f"p{i}", dedupe_key=f"g{i % 3}"))
            clock.t += 1
        s.put(pkt("loner"))
        page = s.list_page(limit=2)
        assert page.total == 4 and len(page.entries) == 2 and page.next_offset == 2
        last = s.list_page(offset=2, limit=2)
        assert last.total == 4 and len(last.entries) == 2 and last.next_offset is None
        assert not any(e.superseded for e in page.entries + last.entries)
        both = s.list_page(limit=100, include_superseded=True)
        assert both.total == 7 and sum(e.superseded for e in both.entries) == 3
        assert s.list_page(offset=6, limit=2, include_superseded=True).next_offset is None
        assert len(s.list(limit=100)) == 4


# --- scoring ----------------------------------------------------------------------------------


def _base(s: ContextStore, query: str) -> dict[str, float]:
    index = s.runner.state("recall").index  # type: ignore[attr-defined]
    return dict(index.rank(query, limit=1000, live_after=s.clock() - s.config.ttl_seconds))


def test_scores_are_the_documented_formula(tmp_path: Path) -> None:
    clock = Clock()
    with store(tmp_path, clock, ttl_seconds=100 * DAY, recall_tier_bonus=0.75,
               recall_tier_penalty=0.5, recall_recency_weight=0.25) as s:
        cur = s.put(pkt("deploy step", source_tier="curated")).cache_key
        clock.t += 2 * DAY
        tel = s.put(pkt("deploy step trace", source_tier="telemetry")).cache_key
        clock.t += DAY / 2
        plain = s.put(pkt("deploy step note")).cache_key
        clock.t += DAY
        base = _base(s, "deploy step")
        got = {h.cache_key: h for h in s.recall("deploy step")}
        # ages: 3.5, 1.5 and 1 days; w = 0.25
        assert got[cur].score == pytest.approx(base[cur] + 0.75 + 0.25 / 4.5, abs=1e-12)
        assert got[tel].score == pytest.approx(base[tel] - 0.5 + 0.25 / 2.5, abs=1e-12)
        assert got[plain].score == pytest.approx(base[plain] + 0.25 / 2, abs=1e-12)
        assert got[cur].match_reasons == ("bm25_text", "curated_memory", "recency")
        assert got[tel].match_reasons == ("bm25_text", "telemetry", "recency")
        assert got[plain].match_reasons == ("bm25_text", "recency")
        assert (got[cur].source_tier, got[tel].source_tier, got[plain].source_tier) == \
            ("curated", "telemetry", None)
        flipped = {h.cache_key: h for h in s.recall("deploy step", mode="telemetry")}
        assert flipped[cur].score == pytest.approx(base[cur] - 0.5 + 0.25 / 4.5, abs=1e-12)
        assert flipped[tel].score == pytest.approx(base[tel] + 0.75 + 0.25 / 2.5, abs=1e-12)


def test_without_adjustments_recall_is_the_engine(tmp_path: Path) -> None:
    clock = Clock()
    with store(tmp_path, clock, recall_recency_weight=0.0) as s:
        for i in range(30):
            s.put(pkt(f"alpha beta {i % 7} gamma{i % 3}"))
            clock.t += 3600
        index = s.runner.state("recall").index  # type: ignore[attr-defined]
        want = index.search("alpha gamma1", limit=10, live_after=clock.t - s.config.ttl_seconds,
                            now=clock.t)
        got = s.recall("alpha gamma1", limit=10)
        assert [(h.cache_key, h.score, h.match_reasons) for h in got] == \
            [(h.cache_key, h.score, h.match_reasons) for h in want]


def test_recency_orders_equal_texts_newest_first(tmp_path: Path) -> None:
    clock = Clock()
    with store(tmp_path, clock, ttl_seconds=100 * DAY, recall_recency_weight=0.25) as s:
        old = s.put(pkt("same words", n=1)).cache_key
        clock.t += 10 * DAY
        new = s.put(pkt("same words", n=2)).cache_key
        hits = s.recall("same words")
        assert keys(hits) == [new, old]
        assert hits[0].score - hits[1].score == pytest.approx(0.25 - 0.25 / 11, abs=1e-12)


def test_mode_flips_the_tier_preference(tmp_path: Path) -> None:
    with store(tmp_path, Clock()) as s:
        cur = s.put(pkt("flaky login test", source_tier="curated", memory_kind="brief"))
        tel = s.put(pkt("flaky login test", source_tier="telemetry", memory_kind="tool_trace"))
        c, t = cur.cache_key, tel.cache_key
        assert keys(s.recall("flaky login")) == [c, t]
        assert keys(s.recall("flaky login", mode="conceptual")) == [c, t]
        assert keys(s.recall("flaky login", mode="telemetry")) == [t, c]
        # auto: telemetry only when every kind asked for is a telemetry kind
        both = ["brief", "tool_trace"]
        assert keys(s.recall("flaky login", kinds=both)) == [c, t]
        hit = s.recall("flaky login", kinds=["tool_trace", "state_write"])
        assert keys(hit) == [t] and "telemetry" in hit[0].match_reasons
        assert hit[0].score > s.recall("flaky login", mode="conceptual", kinds=["tool_trace"])[
            0].score
        with pytest.raises(ValueError, match="conceptual"):
            s.recall("x", mode="smart")
        with pytest.raises(ValueError, match="tool_trace"):
            s.recall("x", kinds=["note"])


def test_kind_filter(tmp_path: Path) -> None:
    with store(tmp_path, Clock()) as s:
        by_kind = {k: s.put(pkt(f"topic {k}", memory_kind=k)).cache_key for k in MEMORY_KINDS}
        s.put(pkt("topic without a kind"))
        for k in MEMORY_KINDS:
            hits = s.recall("topic", kinds=[k])
            assert keys(hits) == [by_kind[k]] and hits[0].memory_kind == k
        two = s.recall("topic", kinds=["brief", "evidence", "brief"])
        assert set(keys(two)) == {by_kind["brief"], by_kind["evidence"]}
        assert len(s.recall("topic", limit=20)) == len(MEMORY_KINDS) + 1


def test_task_first_keeps_the_task_entries_first(tmp_path: Path) -> None:
    clock = Clock()
    with store(tmp_path, clock, ttl_seconds=100 * DAY) as s:
        mine = s.put(pkt("cache miss", task_ids=["t-1"], source_tier="telemetry")).cache_key
        clock.t += DAY
        other = s.put(pkt("cache miss cache miss", source_tier="curated")).cache_key
        hits = s.recall("cache miss", task_id="t-1", scope="task-first")
        assert keys(hits) == [mine, other]
        assert keys(s.recall("cache miss", task_id="t-1", scope="task-only")) == [mine]


def test_task_first_with_a_large_task_and_a_rare_term(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over 256 entries in the task: its docs are kept as a bitmap over the index, and a
    rare term is ranked in plain Python (the tiny-query path) against it. (Scoring the
    task's docs directly, the way for tasks up to DIRECT_MAX entries, is turned off.)"""
    monkeypatch.setattr(recall_constants, "DIRECT_MAX", -1)
    clock = Clock()
    with store(tmp_path, clock, ttl_seconds=100 * DAY) as s:
        s.put_many([pkt(f"note {i}", task_ids=["t-1"]) for i in range(300)])
        mine = s.put(pkt("zebra crossing", task_ids=["t-1"])).cache_key
        other = s.put(pkt("zebra zebra")).cache_key
        assert keys(s.recall("zebra", task_id="t-1", scope="task-first")) == [mine, other]
        assert keys(s.recall("zebra", task_id="t-1", scope="task-only")) == [mine]


# --- the exact re-rank against a brute-force oracle -------------------------------------------

WORDS = ["auth", "token", "parse", "cache", "miss", "retry", "flaky", "deploy"]
corpus_doc = st.fixed_dictionaries({
    "words": st.lists(st.sampled_from(WORDS), min_size=1, max_size=5),
    "kind": st.none() | st.sampled_from(MEMORY_KINDS),
    "tier": st.none() | st.sampled_from(["curated", "telemetry"]),
    "dedupe": st.none() | st.sampled_from(["d1", "d2", "d3"]),
    "sup": st.booleans() | st.none(),
    "age": st.floats(min_value=0, max_value=30 * DAY) | st.sampled_from([0.0, DAY, 2 * DAY]),
    "task": st.booleans(),
    "evict": st.integers(min_value=0, max_value=9),
    "reput": st.integers(min_value=0, max_value=9),
})


def _packet(i: int, d: dict[str, Any]) -> dict[str, Any]:
    p: dict[str, Any] = {"target": "t", "summary": " ".join(d["words"]), "n": i}
    if d["kind"] is not None:
        p["memory_kind"] = d["kind"]
    if d["tier"] is not None:
        p["source_tier"] = d["tier"]
    if d["dedupe"] is not None:
        p["dedupe_key"] = d["dedupe"]
    if d["sup"] is not None:
        p["superseded"] = d["sup"]
    if d["task"]:
        p["task_ids"] = ["t-1"]
    return p


def _fold(docs: list[dict[str, Any]], now: float) -> tuple[CacheState, RecallState, MemoryState]:
    states = (CacheState(), RecallState(), MemoryState())
    events = []
    puts = []
    for i, d in enumerate(docs):
        p = _packet(i, d)
        key = cache_key_of(canonical_bytes(p))
        puts.append((key, p))
        events.append((PUT, key, {"bytes": 10 + i, "packet": p}, now - d["age"]))
    for (key, p), d in zip(puts, docs, strict=True):
        if d["evict"] == 0:
            events.append((EVICTED, key, {"reason": "manual_prune"}, now))
        elif d["reput"] == 0:
            events.append((PUT, key, {"bytes": 10, "packet": p}, now - d["age"] / 2))
    for seq, (kind, key, data, at) in enumerate(events, 1):
        ev = build_event(kind, key, data, seq, at)
        for s_ in states:
            s_.apply(ev)
    return states


@settings(max_examples=150, deadline=None)
@given(
    docs=st.lists(corpus_doc, min_size=1, max_size=40),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=2).map(" ".join),
    limit=st.integers(min_value=0, max_value=12),
    mode=st.sampled_from(["auto", "conceptual", "telemetry"]),
    kinds=st.lists(st.sampled_from(MEMORY_KINDS), max_size=3),
    include=st.booleans(),
    scope=st.sampled_from(["global", "task-first", "task-only"]),
    scoring=st.builds(Scoring, st.sampled_from([0.0, 0.5, 3.0]), st.sampled_from([0.0, 0.25]),
                      st.sampled_from([0.0, 0.25, 2.0])),
    ttl=st.sampled_from([None, 10 * DAY]),
    first_n=st.sampled_from([None, 1, 2, 3]),
)
def test_the_re_rank_is_exact(docs: list[dict[str, Any]], query: str, limit: int, mode: str,
                              kinds: list[str], include: bool, scope: str, scoring: Scoring,
                              ttl: float | None, first_n: int | None) -> None:
    now = T0
    cache, recall, memory = _fold(docs, now)
    index = recall.index
    live_after = None if ttl is None else now - ttl
    engine: dict[str, Any] = dict(live_after=live_after, scope=scope,
                  task_id=None if scope == "global" else "t-1")
    q = RecallQuery(query, limit, mode=mode, kinds=kinds, include_superseded=include, **engine)
    got = search(index, memory, cache, q, scoring=scoring, now=now, first_n=first_n)

    # the oracle: every live match's base score, adjusted and filtered, sorted
    from projections.memory_rank import preferred_tier

    adj = Adjuster(scoring, preferred_tier(mode, kinds), now)

    def candidates(scope_: str, skip: set[str]) -> list[tuple[float, float, str]]:
        out = []
        for key, base in index.rank(query, limit=10_000, **dict(engine, scope=scope_)):
            info = memory.info(key)
            if key in skip or (kinds and info.memory_kind not in kinds):
                continue
            if not include and memory.superseded(key, live_after) is not None:
                continue
            created = cache.get(key).created_at  # type: ignore[union-attr]
            out.append((-adj.score(base, info.source_tier, created), -created, key))
        return sorted(out)

    if scope == "task-first":
        task = {k for k, _ in index.rank(query, limit=10_000, **dict(engine, scope="task-only"))}
        want = (candidates("task-only", set()) + candidates("global", task))
    else:
        want = candidates(scope, set())
    want = want[:limit]
    assert [h.cache_key for h in got] == [k for _s, _c, k in want]
    for h, (s_, _c, _k) in zip(got, want, strict=True):
        assert abs(h.score - -s_) <= 1e-9
        assert ("superseded" in h.match_reasons) == (
            memory.superseded(h.cache_key, live_after) is not None)


# --- the CLI --------------------------------------------------------------------------------


def test_cli_options_and_json_fields(tmp_path: Path) -> None:
    root = tmp_path / "p"
    run = CliRunner().invoke
    assert run(ctxledger, ["init", "--root", str(root)]).exit_code == 0
    for p in (pkt("auth v1", dedupe_key="a", memory_kind="brief", source_tier="curated"),
              pkt("auth v2", dedupe_key="a", memory_kind="brief", source_tier="curated"),
              pkt("auth trace", memory_kind="tool_trace", source_tier="telemetry")):
        r = run(ctxledger, ["store", "put", "--root", str(root), "--json"], input=json.dumps(p))
        assert r.exit_code == 0, r.output
    bad = run(ctxledger, ["store", "put", "--root", str(root)],
              input=json.dumps(pkt("x", source_tier="gold")))
    assert bad.exit_code == 1 and "source_tier" in bad.output

    def hits(*args: str) -> list[dict[str, Any]]:
        r = run(ctxledger, ["recall", "--root", str(root), "-q", "auth", "--json", *args])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["hits"]

    assert [h["summary"] for h in hits()] == ["auth v2", "auth trace"]
    assert {"memory_kind", "source_tier", "superseded_by"} <= hits()[0].keys()
    assert [h["summary"] for h in hits("--mode", "telemetry")] == ["auth trace", "auth v2"]
    assert [h["summary"] for h in hits("--kind", "tool_trace")] == ["auth trace"]
    every = hits("--include-superseded", "--kind", "brief")
    assert len(every) == 2 and every[1]["superseded_by"] == every[0]["cache_key"]
    assert "superseded" in every[1]["match_reasons"]
    listed = run(ctxledger, ["store", "list", "--root", str(root), "--json"])
    assert json.loads(listed.stdout)["total"] == 2
    listed = run(ctxledger, ["store", "list", "--root", str(root), "--json",
                             "--include-superseded"])
    doc = json.loads(listed.stdout)
    assert doc["total"] == 3 and sum(e["superseded"] for e in doc["entries"]) == 1
    text = run(ctxledger, ["store", "list", "--root", str(root), "--include-superseded"])
    assert "(superseded)" in text.output
    assert run(ctxledger, ["recall", "--root", str(root), "-q", "x", "--mode", "x"]
               ).exit_code == 2


def test_an_entry_the_engine_left_out_can_win() -> None:
    """The engine's top 1 is a plain entry; the curated one just below it wins once
    adjusted: the re-rank must ask for more than the engine's first answer."""
    docs: list[dict[str, Any]] = [
        {"words": ["auth", "auth", "token"], "kind": None, "tier": None, "dedupe": None,
         "sup": None, "age": 0.0, "task": False, "evict": 5, "reput": 5},
        {"words": ["auth", "token", "parse"], "kind": None, "tier": "curated", "dedupe": None,
         "sup": None, "age": 0.0, "task": False, "evict": 5, "reput": 5},
    ]
    cache, recall, memory = _fold(docs, T0)
    base = dict(recall.index.rank("auth", limit=5))
    plain_key, curated_key = sorted(base, key=lambda k: -base[k])
    assert base[plain_key] > base[curated_key] > base[plain_key] - 0.5
    for first_n in (1, 2, None):
        got = search(recall.index, memory, cache, RecallQuery("auth", 1),
                     scoring=Scoring(recency_weight=0.25), now=T0, first_n=first_n)
        assert [h.cache_key for h in got] == [curated_key]
        assert got[0].score == pytest.approx(base[curated_key] + 0.5 + 0.25, abs=1e-12)


def test_the_rerank_is_bounded_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Equal texts of different ages with recency on: the newest must be found, which
    can take every match; past MAX_RERANK candidates the best of them is returned,
    flagged ``rerank_bounded`` (failure rule 8), and within it the answer is exact."""
    docs: list[dict[str, Any]] = [
        {"words": ["same", "words"], "kind": None, "tier": None, "dedupe": None,
         "sup": None, "age": float(i), "task": False, "evict": 99, "reput": 99}
        for i in range(12)
    ]
    cache, recall, memory = _fold(docs, T0)
    scoring = Scoring(recency_weight=0.25)
    exact = search(recall.index, memory, cache, RecallQuery("same", 3), scoring=scoring, now=T0,
                   first_n=1)
    assert all("rerank_bounded" not in h.match_reasons for h in exact)
    monkeypatch.setattr(memory_rank, "MAX_RERANK", 4)
    got = search(recall.index, memory, cache, RecallQuery("same", 3), scoring=scoring, now=T0,
                 first_n=1)
    assert len(got) == 3 and all("rerank_bounded" in h.match_reasons for h in got)
    assert [h.score for h in got] == sorted((h.score for h in got), reverse=True)
    monkeypatch.setattr(memory_rank, "MAX_RERANK", 1000)
    assert [h.cache_key for h in search(recall.index, memory, cache, RecallQuery("same", 3),
                                        scoring=scoring, now=T0, first_n=1)] \
        == [h.cache_key for h in exact]
