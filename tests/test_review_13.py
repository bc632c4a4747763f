"""Review of issue 13 (budgets, memory, freshness): regression tests for what it found."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from projections import ContextStore
from projections import freshness as fr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("def a(): pass\n")
    return root


def test_a_path_too_long_for_the_system_is_no_crash_at_put(project: Path) -> None:
    # any string is a valid path in a packet; one the OS cannot even stat is simply
    # not fingerprinted (it cannot exist), it does not fail the put
    long_name = "x" * 300
    with ContextStore.open(project) as store:
        for path in (long_name, f"src/{long_name}", f"src/{long_name}/a.py"):
            key = store.put({"target": "t", "summary": f"auth {path[:6]}",
                             "paths": [path, "src/a.py"]}).cache_key
            entry = store.get(key)
            assert entry is not None and entry.freshness is not None
            assert entry.freshness.state == "fresh"
        assert {h.freshness.state for h in store.recall("auth") if h.freshness} == {"fresh"}


def test_stat_file_says_unresolvable_rather_than_raising(project: Path) -> None:
    assert fr.stat_file(str(project), "y" * 300) is None
    assert fr.stat_file(str(project), "y" * 300, {}) is None


def reads_of(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every file whose bytes are read with ``os.read``, by the real path of its fd."""
    seen: list[str] = []
    real_read = os.read

    def read(fd: int, n: int) -> bytes:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", read)
    return seen


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_directory_swapped_for_a_symlink_mid_query_is_never_read_through(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one query's hits share its directory cache: the second hit's file is looked up
    # under the directory as the first hit resolved it. Swapped for a symlink out of
    # the root in between, the lookup goes through the symlink; hash_file's
    # O_NOFOLLOW guards only the last component, so it read the file outside.
    (project / "src" / "b.py").write_text("def b(): pass\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "b.py").write_text("SECRET=123456\n")  # same size, other bytes
    assert (outside / "b.py").stat().st_size == (project / "src" / "b.py").stat().st_size
    root = str(project)
    row = fr.hash_file(str(project / "src" / "b.py"), 1 << 20)
    assert row is not None
    files: list[Any] = [["src/b.py", row[0], row[1], row[2] - 1]]  # mtime moved: re-hash
    budget = fr.CheckBudget()
    assert fr.check(root, [["src/a.py", b"\0" * 32, 0, 0]], True, budget).state == "stale"
    (project / "src").rename(project / "src-old")
    (project / "src").symlink_to(outside, target_is_directory=True)
    read = reads_of(monkeypatch)
    got = fr.check(root, files, True, budget)
    assert not [p for p in read if not p.startswith(root + os.sep)], read
    assert got.state == "stale" and got.changed_paths == ("src/b.py",)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_hash_file_reads_only_the_path_it_was_given(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the resolved path handed to hash_file must be the file opened: a parent swapped
    # for a symlink between resolving and opening is refused, not followed
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.py").write_text("def a(): pass\n")
    resolved = str(project / "src" / "a.py")
    (project / "src").rename(project / "src-old")
    (project / "src").symlink_to(outside, target_is_directory=True)
    read = reads_of(monkeypatch)
    assert fr.hash_file(resolved, 1 << 20) is None
    assert read == []


def test_a_big_dedupe_group_is_walked_once_per_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # judging each candidate walked its whole dedupe group again: a telemetry key
    # re-put with new content every minute made one recall cost candidates x members
    # (8,000 members: 4 s a query), work the group's size left unbounded
    from eventstore import MemoryLog
    from projections.memory import MemoryState

    calls: list[str] = []
    real = MemoryState.current

    def counted(self: MemoryState, dedupe_key: str, live_after: float | None) -> str | None:
        calls.append(dedupe_key)
        return real(self, dedupe_key, live_after)

    with ContextStore.open(tmp_path, log=MemoryLog()) as store:
        keys = [r.cache_key for r in store.put_many([
            {"target": "t", "summary": f"build status {i}", "dedupe_key": "status"}
            for i in range(300)])]
        monkeypatch.setattr(MemoryState, "current", counted)
        hits = store.recall("build status")
        assert [h.cache_key for h in hits] == [keys[-1]]
        assert len(calls) <= 2, len(calls)
        calls.clear()
        hits = store.recall("build status", include_superseded=True, limit=300)
        assert len(hits) == 300
        assert {h.superseded_by for h in hits} == {keys[-1], None}
        assert len(calls) <= 2, len(calls)


def test_fingerprints_follow_the_caches_rules_for_puts_and_evictions(project: Path) -> None:
    # the fingerprints view dropped a key's fingerprints on any cache.put or
    # cache.evicted naming it, even ones the cache refuses (no reason, no target):
    # the cache still served the entry, its freshness silently became unknown
    from eventstore import Event, MemoryLog
    from projections.cache import EVICTED, PUT

    log = MemoryLog()
    with ContextStore.open(project, log=log) as store:
        key = store.put({"target": "t", "summary": "auth", "paths": ["src/a.py"]}).cache_key
        store.ledger.append([Event(EVICTED, key, {"why": "no reason given"}),
                             Event(PUT, key, {"bytes": 1, "packet": {"summary": "no target"}})])
    with ContextStore.open(project, log=log) as store:
        entry = store.get(key)
        assert entry is not None  # the cache refused both events
        assert entry.freshness is not None and entry.freshness.state == "fresh"
        store.rebuild()
        assert [h.freshness.state for h in store.recall("auth") if h.freshness] == ["fresh"]
