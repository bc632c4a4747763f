"""Every test runs with its own agent home, never the developer's ``~/.ctxledger``."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _agent_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("agent-home") / "home"
    monkeypatch.setenv("CTXLEDGER_HOME", str(home))
    return home
