"""I/O-error sweep: fail the Nth write, fsync, rename or open, for N = 1, 2, ... until
the operation completes, during every operation in :data:`harness.OPS` (appends
and checkpoints today).

For each N: the error surfaces as ``LedgerIOError`` carrying the injected
errno (operations.md, "A failed fsync"; format.md §10), or the operation
succeeds because that call was one whose failure is harmless (a best-effort
directory sync, a sweep of stale files); nothing is acknowledged that is not
there after a reopen; the store reopens, takes an append and verifies; every
view equals a fresh fold.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from harness import OPS, Ack, check_acked, check_views
from soak import Budget

from eventstore import Ledger, LedgerIOError, _osio
from projections import ContextStore
from projections.config import StoreConfig

#: The operations swept: every one in harness.OPS (compaction and salvage join there).
SWEPT = tuple(OPS)

#: What "the Nth write/fsync/rename/open" means: the functions one counter wraps.
TARGETS: dict[str, tuple[tuple[Any, str], ...]] = {
    "write": ((_osio, "pwrite"),),
    "fsync": ((_osio, "fsync"), (_osio, "fdatasync")),
    "rename": ((_osio, "replace"),),
    "open": ((os, "open"),),  # every os.open: segments, temp files, directories to sync
}
#: Operations that are one call (one append at most): a failure leaves no event of theirs.
ONE_CALL = {"put", "put_many", "checkpoint"}
ERRNOS = (errno.EIO, errno.ENOSPC)
CI_ROUNDS = 1


class FailNth:
    """Counts calls of one kind and fails the ``n``-th with ``code``."""

    def __init__(self, n: int, code: int) -> None:
        self.n, self.code, self.calls = n, code, 0

    def wrap(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kw: Any) -> Any:
            self.calls += 1
            if self.calls == self.n:
                raise OSError(self.code, os.strerror(self.code))
            return real(*args, **kw)

        return call

    @property
    def fired(self) -> bool:
        return self.calls >= self.n


@contextmanager
def failing(kind: str, fault: FailNth) -> Iterator[None]:
    mp = pytest.MonkeyPatch()
    try:
        for mod, name in TARGETS[kind]:
            mp.setattr(mod, name, fault.wrap(getattr(mod, name)))
        yield
    finally:
        mp.undo()


def open_store(root: Path, sync: str) -> ContextStore:
    """A store over a log of small segments (rolls are frequent)."""
    log = Ledger.open(root / ".ctxledger" / "log", sync=sync, segment_bytes=4096)  # type: ignore[arg-type]
    try:
        # checkpoints only when asked (the "checkpoint" operation): a put's own
        # checkpoint would fail harmlessly (they are disposable) and lengthen the sweep
        cfg = StoreConfig(sync=sync, checkpoint_every_events=1 << 30,
                          checkpoint_every_seconds=1e9, checkpoint_close_lag=1 << 30)
        return ContextStore.open(root, config=cfg, log=log)
    except BaseException:
        log.close()
        raise


def close_store(store: ContextStore) -> None:
    try:
        store.close()
    finally:
        store.ledger.close()


def build_template(root: Path, rng: random.Random, sync: str) -> list[Ack]:
    """A store with some history; sometimes a torn tail the next append must repair."""
    store = open_store(root, sync)
    acked: list[Ack] = []
    try:
        for n in range(rng.randint(3, 12)):
            acked += OPS[rng.choice(("put", "put_many", "task", "checkpoint"))](store, rng,
                                                                              f"t{n}")
    finally:
        close_store(store)
    if rng.random() < 0.3:
        last = sorted((root / ".ctxledger" / "log").glob("*.seg"))[-1]
        with open(last, "ab") as f:
            f.write(b"CTXF" + rng.randbytes(rng.randint(1, 200)))  # a torn frame
    return acked


def errno_of(e: BaseException) -> int | None:
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, OSError):
            return seen.errno
        seen = seen.__cause__ or seen.__context__
    return None


def sweep(tmp_path: Path, rng: random.Random, op_name: str, kind: str, sync: str,
          tally: Counter[str], seed: int) -> None:
    """Fail the Nth ``kind`` call of ``op_name`` for N = 1, 2, ... until it completes."""
    template = tmp_path / "template"
    shutil.rmtree(template, ignore_errors=True)
    acked = build_template(template, rng, sync)
    op_seed = rng.getrandbits(32)
    work = tmp_path / "work"
    for n in range(1, 500):
        code = ERRNOS[(n + op_seed) % 2]
        where = f"{op_name}: {kind} #{n} fails ({errno.errorcode[code]}), sync={sync}, seed {seed}"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(template, work)
        store = open_store(work, sync)
        fault = FailNth(n, code)
        new: list[Ack] = []
        error: BaseException | None = None
        try:
            with failing(kind, fault):
                new = OPS[op_name](store, random.Random(op_seed), "op")
        except LedgerIOError as e:
            error = e
        finally:
            close_store(store)
        if error is not None:
            assert fault.fired, where
            assert errno_of(error) == code, (where, error)
            tally[f"faults_surfaced_{kind}"] += 1
        elif fault.fired:
            tally[f"faults_harmless_{kind}"] += 1  # a best-effort call (directory sync, tidying)
        # reopen: what was acknowledged is there, the rest of the log is intact
        events = check_acked(work / ".ctxledger" / "log", acked + new, where)
        if error is not None and op_name in ONE_CALL and not (kind == "fsync" and sync != "always"):
            # nothing of a failed call may appear later, except a frame whose sync
            # failed under batch/none: written, never promised durable, not cut
            assert len(events) == len(acked), where
        store = open_store(work, sync)
        try:
            OPS["put"](store, rng, "after")
        finally:
            close_store(store)
        with Ledger.open(work / ".ctxledger" / "log", readonly=True) as ro:
            rep = ro.verify()
            assert rep.ok, (where, rep.problems)
            events = list(ro.read())
        check_views(work, tmp_path, events, where)
        tally["runs"] += 1
        if not fault.fired:
            tally["operations_completed"] += 1
            return
    raise AssertionError(f"{op_name} never completed under {kind} faults")


@pytest.mark.parametrize("kind", sorted(TARGETS))
def test_failing_the_nth_call_surfaces_and_loses_nothing(
    tmp_path: Path, budget: Budget, seed: int, tally: Counter[str], kind: str
) -> None:
    rng = random.Random(seed)
    for rnd in budget.rounds(CI_ROUNDS):
        for i, op_name in enumerate(SWEPT):
            sync = ("always", "batch", "none")[(rnd + i) % 3]
            sweep(tmp_path, rng, op_name, kind, sync, tally, seed)
    tally["losses"] += 0
