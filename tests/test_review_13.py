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
