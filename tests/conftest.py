"""Every test runs with its own agent home, never the developer's ``~/.ctxledger``."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, Phase, settings

from eventstore import event as event_mod

if "MUTANT_UNDER_TEST" in os.environ:
    # Under mutmut (.ci/mutate), which runs the tests that reach a mutant once per mutant:
    # at most 10 examples per property and state machine (a surviving mutant pays for
    # every test that reaches it), derandomized (a verdict does not depend on the run),
    # no deadlines (mutated code runs behind mutmut's trampolines). pytest runs many
    # times in one process, so a test method meets new instances of its class: not the
    # flaky test hypothesis's differing_executors check looks for. A failing example is
    # not shrunk (the explicit and generate phases only): a mutant is killed by the
    # first failure, and shrinking a state machine's run took up to a minute of CPU,
    # enough to end as a timeout instead.
    _MUTMUT = {"derandomize": True, "deadline": None,
               "phases": (Phase.explicit, Phase.generate)}
    _SUPPRESS = [HealthCheck.differing_executors, HealthCheck.too_slow]
    _EXAMPLES = 10
    settings.register_profile(
        "mutmut", suppress_health_check=_SUPPRESS, max_examples=_EXAMPLES, **_MUTMUT
    )
    settings.load_profile("mutmut")

    def _capped(own: settings) -> settings:
        return settings(own, suppress_health_check=[*own.suppress_health_check, *_SUPPRESS],
                        max_examples=min(own.max_examples, _EXAMPLES), **_MUTMUT)

    def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
        for item in items:  # tests with their own settings: the same changes
            obj = getattr(item, "obj", None)
            fn = getattr(obj, "__func__", obj)
            own = getattr(fn, "_hypothesis_internal_use_settings", None)
            if own is not None:
                fn._hypothesis_internal_use_settings = _capped(own)  # type: ignore[union-attr]
            cls = getattr(item, "cls", None)  # a state machine's TestCase
            if cls is not None and isinstance(getattr(cls, "settings", None), settings):
                cls.settings = _capped(cls.settings)
        # a mutant's run: only the tests that run a statement it changes (the map
        # .ci/mutate collects first; tests/mutation_select.py says why that is sound)
        mutant = os.environ.get("MUTANT_UNDER_TEST", "")
        if "__mutmut_" in mutant:
            from mutation_select import SKIPPED, listed_equivalent, narrow

            here = Path(__file__).resolve().parent  # mutants/tests
            if listed_equivalent(mutant, here.parent):
                # no test can kill it (the reason is beside its code): running its tests
                # would only cost their whole time; "skipped", and the figures count it
                # as equivalent
                pytest.exit("listed in .ci/mutants-equivalent", returncode=SKIPPED)
            keep = narrow(mutant, here.parent)
            if keep is not None:
                config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in keep])
                items[:] = [i for i in items if i.nodeid in keep]
            # a mutant that loops: stopped in the test it loops in (mutation_select.py);
            # mutmut's own limit, set in this process before pytest started, stays above
            import resource

            from mutation_select import cpu_limits, cpu_used, load_seconds

            _CPU_CEILING[:] = [resource.getrlimit(resource.RLIMIT_CPU)[0]]
            _CPU_LIMITS.clear()
            _CPU_LIMITS.update(cpu_limits([i.nodeid for i in items], load_seconds(here.parent),
                                          cpu_used()))

    _CPU_LIMITS: dict[str, int] = {}  # node id -> CPU seconds by the end of that test
    _CPU_CEILING: list[int] = []

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
        if _CPU_CEILING:
            from mutation_select import limit_cpu

            limit_cpu(_CPU_LIMITS.get(item.nodeid), _CPU_CEILING[0])

if TYPE_CHECKING:
    from natscluster import NatsCluster


@pytest.fixture(autouse=True)
def _fresh_kind_cache() -> None:
    """Every test validates its event kinds afresh: the writer's cache of kinds that
    passed would otherwise let a test skip the checks for a kind an earlier test used,
    so its path (and what mutation testing's coverage maps say it runs) would depend
    on which tests ran before it."""
    event_mod._KINDS_OK.clear()


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


# -- the torture suite's figures (tests/torture/conftest.py fills them) -----------------
# Here, not in tests/torture/: under xdist the controller collects nothing, so only this
# conftest's hooks run where the reports arrive.

_TALLIES: dict[str, Counter[str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "teardown":
        return
    for key, value in report.user_properties:
        if key == "torture_tally":
            name, counts = value
            _TALLIES.setdefault(name, Counter()).update(counts)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _TALLIES:
        return
    terminalreporter.section("torture figures")
    for name, counts in sorted(_TALLIES.items()):
        figures = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
        terminalreporter.write_line(f"{name}: {figures}")


# -- NATS JetStream clusters (issue 17): tests/natscluster.py --------------------------

NATS_MISSING = "nats-server not found: install Debian's nats-server to run the JetStream tests"
NATS_PY_MISSING = "the nats module (nats-py) is missing: pip install 'ctxledger[jetstream]'"


def _nats_binary_or_skip() -> str:
    """The nats-server binary; skip (or fail under CTXLEDGER_REQUIRE_NATS=1) without it."""
    from natscluster import nats_binary

    reason = None
    binary = nats_binary()
    if binary is None:
        reason = NATS_MISSING
    else:
        try:
            import nats  # noqa: F401
        except ImportError:
            reason = NATS_PY_MISSING
    if reason is not None:
        if os.environ.get("CTXLEDGER_REQUIRE_NATS") == "1":
            pytest.fail(f"{reason} (CTXLEDGER_REQUIRE_NATS=1)", pytrace=False)
        pytest.skip(reason)
    assert binary is not None
    return binary


def _nats_cluster(factory: pytest.TempPathFactory, name: str, size: int) -> Iterator[NatsCluster]:
    from natscluster import NatsCluster

    binary = _nats_binary_or_skip()
    cluster = NatsCluster(factory.mktemp(name), size=size, binary=binary)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """A 3-node JetStream cluster shared by the session; a test that kills nodes must
    restore it (``restart_dead()``, then ``wait_for_leader`` of its streams) or use
    ``nats_cluster_fresh``."""
    yield from _nats_cluster(tmp_path_factory, "nats-cluster", 3)


@pytest.fixture(scope="session")
def nats_single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """One JetStream node (R1 streams), shared by the session."""
    yield from _nats_cluster(tmp_path_factory, "nats-single", 1)


@pytest.fixture
def nats_cluster_fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """A 3-node JetStream cluster of this test's own (for tests that kill nodes)."""
    yield from _nats_cluster(tmp_path_factory, "nats-fresh", 3)
