"""Helpers for tests that run the CLI in a child process and interrupt it."""

from __future__ import annotations

import signal


def sigint_default() -> None:
    """``preexec_fn`` for a child a test stops with SIGINT.

    A shell starts background jobs with SIGINT ignored, and a Python child that starts
    with SIGINT ignored keeps ignoring it (no KeyboardInterrupt). A suite run in the
    background would then wait forever for the child; restore the default so the child
    behaves as it does under a user's Ctrl-C.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
