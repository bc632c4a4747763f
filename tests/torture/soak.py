"""How long a torture test runs: its bounded CI part, or as long as ``--soak`` asks."""

from __future__ import annotations

import time
from collections.abc import Iterator


class Budget:
    """How long a torture test goes on: ``rounds(ci)`` yields round numbers."""

    def __init__(self, soak: float | None) -> None:
        self.soak = soak

    def rounds(self, ci: int) -> Iterator[int]:
        """``ci`` rounds; under ``--soak``, at least that many and until the time is up.

        Time decides only how many rounds run, never what one expects.
        """
        end = None if self.soak is None else time.monotonic() + self.soak
        i = 0
        while i < ci or (end is not None and time.monotonic() < end):
            yield i
            i += 1
