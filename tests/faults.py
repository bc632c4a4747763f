"""Fault-injection helpers shared by the mayhem tests and the torture suite.

Child processes, injected ``OSError``s and looks at a log's files. Nothing
here asserts anything.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import eventstore
from eventstore import Event, Ledger
from eventstore.frame import SEGMENT_HEADER_SIZE, content_end

# children import the very eventstore (and projections) this process is testing
CODE_ROOT = Path(eventstore.__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    """This process's environment now (a test's ``CTXLEDGER_HOME`` included), with
    the code under test first on ``PYTHONPATH``."""
    path = os.pathsep.join(filter(None, [str(CODE_ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def child(code: str, *args: object, **kw: Any) -> subprocess.Popen[str]:
    """``python -c code args...``: ``code`` is dedented."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        env=child_env(),
        text=True,
        **kw,
    )


def oserror(code: int) -> Callable[..., Any]:
    """A stand-in for a system call that always fails with ``code``."""

    def fail(*_a: Any, **_k: Any) -> Any:
        raise OSError(code, os.strerror(code))

    return fail


def failing_for(real: Callable[..., Any], where: Path, exc: BaseException
                ) -> Callable[..., Any]:
    """A stand-in for ``real`` that raises ``exc`` when called on the path ``where``
    (its first argument) and is ``real`` for every other path."""

    def call(path: Any, *a: Any, **k: Any) -> Any:
        if Path(path) == where:
            raise exc
        return real(path, *a, **k)

    return call


def short_then(code: int) -> Callable[..., Any]:
    """pwrite that writes half of the first call's bytes, then fails with ``code``."""
    real = os.pwrite
    calls = [0]

    def pwrite(fd: int, data: Any, offset: int) -> int:
        calls[0] += 1
        if calls[0] == 1 and len(data) > 1:
            return real(fd, bytes(data[: len(data) // 2]), offset)
        raise OSError(code, os.strerror(code))

    return pwrite


def content_size(seg: Path) -> int:
    """A segment's size without the zeros a writer preallocated past its last frame."""
    return content_end(seg.read_bytes(), SEGMENT_HEADER_SIZE)


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (names included: no file appears or goes)."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def all_events(log: Path) -> list[Event]:
    with Ledger.open(log, readonly=True) as ro:
        return list(ro.read())
