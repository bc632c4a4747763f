"""The torture suite's budget (``--soak``), seeds and figures.

``--soak SECONDS`` and ``--torture-seed N`` are registered in ``tests/conftest.py``
(options must be known before this directory is collected). Without ``--soak``
each test runs its bounded CI part with a fixed seed per test; with it, the
same test loops with a random seed until SECONDS have passed. A failing test
shows its seed in its captured output; ``--torture-seed N`` replays it.
"""

from __future__ import annotations

import os
import zlib
from collections import Counter
from collections.abc import Iterator

import pytest
from soak import Budget

TALLY = "torture_tally"  # the user property a tally travels in


@pytest.fixture
def budget(request: pytest.FixtureRequest) -> Budget:
    return Budget(request.config.getoption("--soak"))


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """The test's seed: given, random under ``--soak``, else fixed per test."""
    given = request.config.getoption("--torture-seed")
    if given is not None:
        value = int(given)
    elif request.config.getoption("--soak") is not None:
        value = int.from_bytes(os.urandom(4), "little")
    else:
        value = zlib.crc32(request.node.name.encode())
    print(f"torture seed {value} (replay: --torture-seed {value})")
    return value


@pytest.fixture
def tally(request: pytest.FixtureRequest) -> Iterator[Counter[str]]:
    """Counters a test fills (rounds, faults, flips, ...); the figures in
    docs/reliability.md. They travel in the test's report (so they reach the
    terminal summary from an xdist worker too): ``tests/conftest.py`` prints them."""
    counts: Counter[str] = Counter()
    yield counts
    request.node.user_properties.append((TALLY, (request.node.originalname, dict(counts))))
