"""Every test runs with its own agent home, never the developer's ``~/.ctxledger``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

if "MUTANT_UNDER_TEST" in os.environ:
    # Under mutmut (.ci/mutate), which runs pytest many times in one process, a test
    # method is called on a new instance of its class each run: not the flaky test
    # hypothesis's differing_executors check looks for. Examples are derandomized, so a
    # mutant's verdict does not depend on the run, and deadlines are off (the mutated
    # code runs slower, behind mutmut's trampolines).
    _MUTMUT = {"derandomize": True, "deadline": None}
    _SUPPRESS = [HealthCheck.differing_executors, HealthCheck.too_slow]
    settings.register_profile("mutmut", suppress_health_check=_SUPPRESS, **_MUTMUT)
    settings.load_profile("mutmut")

    def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
        for item in items:  # tests with their own @settings: the same three changes
            fn = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
            own = getattr(fn, "_hypothesis_internal_use_settings", None)
            if own is not None:
                fn._hypothesis_internal_use_settings = settings(  # type: ignore[union-attr]
                    own, suppress_health_check=[*own.suppress_health_check, *_SUPPRESS],
                    **_MUTMUT,
                )


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
