"""Every test runs with its own agent home, never the developer's ``~/.ctxledger``."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _agent_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("agent-home") / "home"
    monkeypatch.setenv("CTXLEDGER_HOME", str(home))
    return home


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torture", "the torture suite (tests/torture/)")
    group.addoption(
        "--soak", type=float, default=None, metavar="SECONDS",
        help="run each torture test for at least SECONDS (after its bounded CI part), "
             "with a fresh random seed",
    )
    group.addoption(
        "--torture-seed", type=int, default=None, metavar="N",
        help="the seed of every torture test (what a failure printed), to reproduce it",
    )
