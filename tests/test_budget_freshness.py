"""Token budgets over recall hits, and freshness: fingerprints at put time, checked at recall."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import ctxledger
from eventstore import MemoryLog
from projections import ContextStore
from projections import fingerprints as fp
from projections import freshness as fr
from projections.budget import fit
from projections.recall import RecallHit


def recording(real: Callable[..., Any], seen: list[Any]) -> Callable[..., Any]:
    """``real``, noting the first argument of every call in ``seen``."""
    def call(*args: Any) -> Any:
        seen.append(args[0] if len(args) == 1 or isinstance(args[1], int) else args)
        return real(*args)

    return call


def hit(key: str, tokens: int, score: float) -> RecallHit:
    return RecallHit(key, "t", score, "", "", (), (), (), (), (), (),
                     {"est_tokens": tokens, "est_bytes": tokens * 4}, 0.0, 0.0)


# --- budgets ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 500), max_size=30), st.integers(1, 2000))
def test_the_budget_is_never_exceeded_and_nothing_is_lost(costs: list[int], limit: int) -> None:
    hits = [hit(f"{i:064x}", c, 100.0 - i) for i, c in enumerate(costs)]
    kept, report = fit(hits, limit)
    assert report.used == sum(h.budget_estimate["est_tokens"] for h in kept) <= limit
    kept_keys = [h.cache_key for h in kept]
    omitted = [o.cache_key for o in report.omitted]
    assert sorted(kept_keys + omitted) == sorted(h.cache_key for h in hits)  # each once
    order = [h.cache_key for h in hits]
    assert kept_keys == [k for k in order if k in set(kept_keys)]  # rank order kept
    assert omitted == [k for k in order if k in set(omitted)]
    assert report.overflow == bool(omitted)
    used = 0
    for h in hits:  # greedy: an omitted hit did not fit in what was left at its turn
        if h.cache_key in kept_keys:
            used += h.budget_estimate["est_tokens"]
        else:
            assert used + h.budget_estimate["est_tokens"] > limit


def test_a_hit_bigger_than_the_budget_is_omitted_and_smaller_ones_still_fit() -> None:
    hits = [hit("a" * 64, 50, 3.0), hit("b" * 64, 500, 2.0), hit("c" * 64, 40, 1.0)]
    kept, report = fit(hits, 100)
    assert [h.cache_key[0] for h in kept] == ["a", "c"]
    assert report.to_json() == {"limit": 100, "used": 90, "overflow": True,
                                "omitted": [{"cache_key": "b" * 64, "est_tokens": 500,
                                             "score": 2.0}]}


@pytest.mark.parametrize("bad", [0, -5, True, 1.5, "3"])
def test_budget_tokens_must_be_a_positive_integer(tmp_path: Path, bad: Any) -> None:
    with ContextStore.open(tmp_path) as store:
        store.put({"target": "t", "summary": "auth"})
        with pytest.raises(ValueError, match="positive integer"):
            store.recall_answer("auth", budget_tokens=bad)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 400), st.integers(0, 12))
def test_recall_answer_over_a_store(tmp_path_factory: pytest.TempPathFactory, budget: int,
                                    limit: int) -> None:
    root = tmp_path_factory.mktemp("budget")
    with ContextStore.open(root) as store:
        store.put_many([{"target": "t", "summary": "auth " + "word " * (i * 7)}
                        for i in range(10)])
        ranked = store.recall("auth", limit=limit)
        answer = store.recall_answer("auth", limit=limit, budget_tokens=budget)
    assert answer.budget is not None
    assert answer.budget.used <= budget
    got = [h.cache_key for h in answer.hits]
    assert got == [h.cache_key for h in ranked if h.cache_key in set(got)]
    assert len(got) + len(answer.budget.omitted) == len(ranked)
    assert answer.to_json()["budget"]["limit"] == budget


def test_without_a_budget_the_answer_has_none(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path) as store:
        store.put({"target": "t", "summary": "auth"})
        answer = store.recall_answer("auth")
        assert answer.budget is None and "budget" not in answer.to_json()
        again = store.recall("auth")
        assert [h.to_json() | {"age_secs": 0} for h in answer.hits] == \
            [h.to_json() | {"age_secs": 0} for h in again]


# --- freshness ------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("def a(): pass\n")
    (root / "src" / "b.py").write_text("def b(): pass\n")
    return root


PACKET = {"target": "t", "summary": "auth login", "paths": ["src/a.py", "src/b.py"]}


def freshness_of(store: ContextStore, query: str = "auth", **kw: Any) -> dict[str, Any]:
    hits = store.recall(query, **kw)
    assert len(hits) == 1
    assert hits[0].freshness is not None
    return hits[0].freshness.to_json()


def test_a_fresh_packet_then_an_edit_and_a_delete_make_it_stale(project: Path) -> None:
    with ContextStore.open(project) as store:
        key = store.put(PACKET).cache_key
        assert freshness_of(store) == {"state": "fresh", "changed_paths": [],
                                       "missing_paths": []}
        (project / "src" / "a.py").write_text("def a(): return 1\n")
        (project / "src" / "b.py").unlink()
        want = {"state": "stale", "changed_paths": ["src/a.py"], "missing_paths": ["src/b.py"]}
        assert freshness_of(store) == want
        entry = store.get(key)
        assert entry is not None and entry.freshness is not None
        assert entry.to_json()["freshness"] == want


def test_an_edit_that_keeps_the_size_is_found_by_hashing_again(project: Path) -> None:
    with ContextStore.open(project) as store:
        store.put(PACKET)
        a = project / "src" / "a.py"
        st_ = a.stat()
        a.write_text("def x(): pass\n")  # same length
        os.utime(a, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1_000_000_000))
        assert freshness_of(store)["changed_paths"] == ["src/a.py"]


def test_a_touch_without_change_stays_fresh_after_hashing_again(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ContextStore.open(project) as store:
        store.put(PACKET)
        a = project / "src" / "a.py"
        st_ = a.stat()
        os.utime(a, ns=(st_.st_atime_ns, st_.st_mtime_ns + 5_000_000_000))
        hashed: list[Path] = []
        real = fr.hash_file
        monkeypatch.setattr(fr, "hash_file", recording(real, hashed))
        assert freshness_of(store)["state"] == "fresh"
        assert [Path(h) for h in hashed] == [project / "src" / "a.py"]  # only the touched one
        hashed.clear()
        (project / "src" / "b.py").write_text("longer than before\n")
        assert freshness_of(store)["changed_paths"] == ["src/b.py"]
        assert project / "src" / "b.py" not in map(Path, hashed)  # a new size needs no hash


def test_a_path_replaced_by_a_symlink_out_of_the_root_is_changed_and_never_read(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    fifo = outside / "fifo"
    os.mkfifo(fifo)  # reading it would block this test forever
    with ContextStore.open(project) as store:
        store.put(PACKET)
        (project / "src" / "a.py").unlink()
        (project / "src" / "a.py").symlink_to(fifo)
        touched: list[Path] = []
        real_hash, real_stat = fr.hash_file, fr.stat_file
        monkeypatch.setattr(fr, "hash_file", recording(real_hash, touched))
        monkeypatch.setattr(fr, "stat_file", recording(real_stat, touched))
        assert freshness_of(store) == {"state": "stale", "changed_paths": ["src/a.py"],
                                       "missing_paths": []}
        assert touched and all(str(project) in str(t) for t in touched), touched
        assert not any(str(outside) in str(t) for t in touched)


def test_a_directory_replaced_by_a_symlink_out_of_the_root_is_changed_and_never_read(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside-src"
    outside.mkdir()
    for name in ("a.py", "b.py"):  # same names, same sizes: only where they are differs
        (outside / name).write_bytes((project / "src" / name).read_bytes())
    with ContextStore.open(project) as store:
        store.put(PACKET)
        assert freshness_of(store)["state"] == "fresh"
        (project / "src").rename(project / "src-old")
        (project / "src").symlink_to(outside, target_is_directory=True)
        opened: list[Any] = []
        monkeypatch.setattr(fr, "hash_file", recording(fr.hash_file, opened))
        assert freshness_of(store) == {"state": "stale",
                                       "changed_paths": ["src/a.py", "src/b.py"],
                                       "missing_paths": []}
        assert opened == []  # nothing outside the root is read
        (project / "src").unlink()
        (project / "src-old").rename(project / "src")
        assert freshness_of(store)["state"] == "fresh"  # each query resolves afresh


def test_paths_outside_the_root_are_never_fingerprinted(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    (project / "link.txt").symlink_to(secret)
    opened: list[Path] = []
    real = fp.hash_file
    monkeypatch.setattr(fp, "hash_file", recording(real, opened))
    with ContextStore.open(project) as store:
        key = store.put({"target": "t", "summary": "auth", "paths": [
            str(secret), "../secret.txt", "link.txt", "/etc/passwd", "src/a.py", "src/"]}
        ).cache_key
        rec = store.runner.state(fp.NAME).get(key)  # type: ignore[attr-defined]
        assert rec is not None
        files, complete = rec
        assert [f[0] for f in files] == ["src/a.py"] and complete
        assert [Path(o) for o in opened] == [project / "src" / "a.py"]
        events = [e for e in store.ledger.read(1) if e.kind == fp.FILES]
        assert len(events) == 1 and events[0].key == key
        assert freshness_of(store)["state"] == "fresh"


def test_a_packet_naming_no_existing_file_has_no_fingerprints_and_is_unknown(
    project: Path,
) -> None:
    with ContextStore.open(project) as store:
        store.put({"target": "t", "summary": "auth", "paths": ["nope.py"]})
        assert store.ledger.head == 1  # no cache.files event
        assert freshness_of(store) == {"state": "unknown", "changed_paths": [],
                                       "missing_paths": []}
        stats = store.stats()
        assert stats["skipped_unknown_events"] == 0


def test_fingerprints_survive_rebuild_and_travel_with_as_of(project: Path) -> None:
    with ContextStore.open(project) as store:
        store.put(PACKET)  # seq 1 (put), 2 (files)
        (project / "src" / "a.py").write_text("new content, new size\n")
        # the same packet again: its latest put fingerprints the new content
        store.put(PACKET)  # seq 3, 4
        assert freshness_of(store)["state"] == "fresh"
        assert freshness_of(store, as_of=2)["changed_paths"] == ["src/a.py"]
        assert freshness_of(store, as_of=1)["state"] == "unknown"  # its files event is seq 2
        store.rebuild()
        assert freshness_of(store)["state"] == "fresh"
    with ContextStore.open(project, readonly=True) as store:  # from the checkpoint
        assert store.runner.view(fp.NAME).loaded_from == "primary"
        assert freshness_of(store)["state"] == "fresh"
        assert freshness_of(store, as_of=2)["state"] == "stale"


def test_a_re_put_naming_no_file_drops_the_old_fingerprints() -> None:
    state = fp.FingerprintState()
    from eventstore.event import build_event

    row = [["a.py", b"\0" * 32, 1, 2]]
    k = "ab" * 32  # a put the cache takes (the view follows its rules)
    put = {"bytes": 1, "packet": {"target": "t"}}
    state.apply(build_event("cache.put", k, put, 1, 0.0))
    state.apply(build_event(fp.FILES, k, {"files": row, "complete": True}, 2, 0.0))
    assert state.get(k) == (row, True)
    again = fp.FingerprintState.from_bytes(state.to_bytes())
    assert again.get(k) == (row, True) and again.seq == 2
    state.apply(build_event("cache.put", k, put, 3, 0.0))
    assert state.get(k) is None
    state.apply(build_event(fp.FILES, k, {"files": [["a.py", b"x", 1, 2]], "complete": True},
                            4, 0.0))
    assert state.get(k) is None and state.skipped_bad == 1


def test_fresh_only_drops_stale_hits_and_keeps_unknown(project: Path) -> None:
    with ContextStore.open(project) as store:
        stale = store.put(PACKET).cache_key
        fresh = store.put({"target": "t", "summary": "auth b", "paths": ["src/b.py"]}).cache_key
        unknown = store.put({"target": "t", "summary": "auth none"}).cache_key
        (project / "src" / "a.py").unlink()
        every = {h.cache_key for h in store.recall("auth")}
        assert every == {stale, fresh, unknown}
        kept = {h.cache_key for h in store.recall("auth", fresh_only=True)}
        assert kept == {fresh, unknown}


def test_a_query_stats_no_more_files_than_its_bound(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = [f"f{i}.txt" for i in range(30)]
    for f in files:
        (project / f).write_text(f)
    monkeypatch.setattr(fr, "MAX_QUERY_STATS", 50)
    with ContextStore.open(project) as store:
        store.put_many([{"target": "t", "summary": f"auth {i}", "paths": files}
                        for i in range(3)])
        calls: list[Path] = []
        real = fr.stat_file
        monkeypatch.setattr(fr, "stat_file", recording(real, calls))
        hits = store.recall("auth", limit=3)
        assert len(calls) == 50
        states = [h.freshness.state for h in hits if h.freshness is not None]
        assert states == ["fresh", "unknown", "unknown"]
        calls.clear()
        entry = store.get(hits[2].cache_key)  # a get has a budget of its own
        assert entry is not None and entry.freshness is not None
        assert entry.freshness.state == "fresh" and len(calls) == 30


def test_the_query_hash_bound_makes_a_hit_unknown(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fr, "MAX_QUERY_HASH_BYTES", 4)
    with ContextStore.open(project) as store:
        store.put(PACKET)
        a = project / "src" / "a.py"
        st_ = a.stat()
        os.utime(a, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1_000_000_000))
        assert freshness_of(store)["state"] == "unknown"


def test_put_time_bounds_leave_a_packet_unknown(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [f"p{i}.txt" for i in range(fp.MAX_PATHS_PER_PACKET + 1)]
    for p in paths:
        (project / p).write_text("x")
    with ContextStore.open(project) as store:
        key = store.put({"target": "t", "summary": "auth", "paths": paths}).cache_key
        files, complete = store.runner.state(fp.NAME).get(key)  # type: ignore[attr-defined]
        assert len(files) == fp.MAX_PATHS_PER_PACKET and not complete
        assert freshness_of(store)["state"] == "unknown"
        (project / "p0.txt").unlink()  # a checked file gone: stale whatever was left out
        assert freshness_of(store) == {"state": "stale", "changed_paths": [],
                                       "missing_paths": ["p0.txt"]}
    monkeypatch.setattr(fp, "MAX_PUT_HASH_BYTES", 20)
    with ContextStore.open(project) as store:  # a 14-byte file fits, the next does not
        key = store.put({"target": "t", "summary": "auth2", "paths": ["src/a.py", "src/b.py"]}
                        ).cache_key
        files, complete = store.runner.state(fp.NAME).get(key)  # type: ignore[attr-defined]
        assert [f[0] for f in files] == ["src/a.py"] and not complete


def test_a_store_over_a_memory_log_uses_the_same_root_rules(project: Path) -> None:
    with ContextStore.open(project, log=MemoryLog()) as store:
        store.put(PACKET)
        (project / "src" / "b.py").unlink()
        assert freshness_of(store)["missing_paths"] == ["src/b.py"]


def test_a_broad_root_gets_no_freshness(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with ContextStore.open("/", home=home, log=MemoryLog()) as store:
        assert store.files_root is None
        store.put({"target": "t", "summary": "auth", "paths": ["/etc/passwd"]})
        assert store.ledger.head == 1
        hits = store.recall("auth")
        assert hits[0].freshness is None and "freshness" not in hits[0].to_json()


def test_agent_scope_fingerprints_under_the_project_root(project: Path, tmp_path: Path) -> None:
    with ContextStore.open(project, home=tmp_path / "home", storage_scope="agent") as store:
        store.put(PACKET)
        (project / "src" / "a.py").write_text("changed!\n")
        assert freshness_of(store)["changed_paths"] == ["src/a.py"]


# --- the CLI ----------------------------------------------------------------------------------


def cli(*args: str) -> Any:
    return CliRunner().invoke(ctxledger, list(args))


def test_cli_recall_budget_and_fresh_only(project: Path) -> None:
    with ContextStore.open(project) as store:
        store.put(PACKET)
        small = store.put({"target": "t", "summary": "auth"}).cache_key
    (project / "src" / "a.py").write_text("gone stale\n")
    r = cli("recall", "--root", str(project), "-q", "auth", "--json")
    doc = json.loads(r.stdout)
    assert "budget" not in doc and len(doc["hits"]) == 2
    assert {h["freshness"]["state"] for h in doc["hits"]} == {"stale", "unknown"}
    r = cli("recall", "--root", str(project), "-q", "auth", "--json", "--fresh-only",
            "--budget-tokens", "12")
    doc = json.loads(r.stdout)
    assert [h["cache_key"] for h in doc["hits"]] == [small]
    assert doc["budget"]["used"] <= 12 and doc["budget"]["omitted"] == []
    r = cli("recall", "--root", str(project), "-q", "auth", "--budget-tokens", "1")
    assert r.exit_code == 0 and "(no hits)" in r.stdout and "2 omitted" in r.stdout
    r = cli("recall", "--root", str(project), "-q", "auth")
    assert "[stale]" in r.stdout
    r = cli("store", "get", "--root", str(project), "--key", small, "--json")
    assert json.loads(r.stdout)["freshness"]["state"] == "unknown"


def test_a_files_directory_gone_or_moved_out_of_the_root(project: Path, tmp_path: Path) -> None:
    """A parent directory deleted: missing. Replaced by a symlink out of the root whose
    target lacks it: changed (the existing part of the path leads out), never read."""
    deep = project / "x" / "y"
    deep.mkdir(parents=True)
    (deep / "a.py").write_text("deep\n")
    with ContextStore.open(project) as store:
        store.put({"target": "t", "summary": "auth deep", "paths": ["x/y/a.py"]})
        assert freshness_of(store)["state"] == "fresh"
        (project / "x").rename(project / "x-old")
        assert freshness_of(store) == {"state": "stale", "changed_paths": [],
                                       "missing_paths": ["x/y/a.py"]}
        outside = tmp_path / "elsewhere"
        outside.mkdir()
        (project / "x").symlink_to(outside, target_is_directory=True)
        assert freshness_of(store) == {"state": "stale", "changed_paths": ["x/y/a.py"],
                                       "missing_paths": []}


def test_a_file_named_by_many_packets_of_one_put_call_is_hashed_once(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[Any] = []
    monkeypatch.setattr(fp, "hash_file", recording(fp.hash_file, opened))
    with ContextStore.open(project) as store:
        store.put_many([{"target": "t", "summary": f"auth {i}", "paths": ["src/a.py"]}
                        for i in range(5)])
        assert [Path(o) for o in opened] == [project / "src" / "a.py"]
        states = {h.freshness.state for h in store.recall("auth", limit=10)
                  if h.freshness is not None}
        assert states == {"fresh"}
        store.put({"target": "t", "summary": "auth again", "paths": ["src/a.py"]})
        assert len(opened) == 2  # another call hashes it again
