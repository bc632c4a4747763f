"""Bit-flip and truncation sweeps over a small store: segments and checkpoints alike.

Every flipped bit and every truncation length must be either **detected** (a
``LedgerError`` such as ``CorruptLogError`` from opening or asking, or a damaged
final frame taken for a torn tail: the answers of the log before it, with
``verify`` reporting the damage; failure rule 2) or **harmless** (the answers
of the undamaged store, e.g. a checkpoint refused and its view rebuilt:
failure rule 4). Never a wrong answer and never another exception. A
truncation may also cut the last segment exactly at a frame boundary: that
leaves an earlier, consistent log whose answers are those of that prefix
(only ``verify --anchor`` can tell; operations.md, "What verify proves").

The answers compared are get of every key ever put, list, recall of a few
queries, the task list and every task's history (:func:`harness.answers`).
"""

from __future__ import annotations

import random
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import OPS, answers, keys_and_tasks
from soak import Budget

from eventstore import Ledger, LedgerError
from eventstore.frame import SEGMENT_HEADER_SIZE, iter_frames
from projections import ContextStore
from projections.config import StoreConfig

#: Bytes (flips) and lengths (truncations) tried per test in CI, spread over every file.
CI_FLIPS = 700
CI_TRUNCATIONS = 250
T0 = 1_800_000_000.0


def ticking() -> Callable[[], float]:
    now = [T0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    return clock


def build(root: Path, rng: random.Random) -> None:
    """A small store: a few batches over two or three 4 KiB segments, with checkpoints
    (primary and backup) of every view."""
    cfg = StoreConfig(checkpoint_every_events=1 << 30, checkpoint_every_seconds=1e9,
                      checkpoint_close_lag=1)
    log = Ledger.open(root / ".ctxledger" / "log", segment_bytes=4096)
    try:
        with ContextStore.open(root, config=cfg, log=log, clock=ticking()) as store:
            for n in range(rng.randint(8, 12)):
                OPS[rng.choice(("put", "put", "put_many", "task"))](store, rng, f"d{n}")
                if n in (3, 6):
                    store.checkpoint()  # .ckpt and .ckpt.bak both
    finally:
        log.close()


def frame_ends(log_dir: Path) -> list[tuple[str, int]]:
    """``(segment, end offset)`` of every frame, in log order."""
    out = []
    digest, seq = bytes(32), 1
    for seg in sorted(log_dir.glob("*.seg")):
        data = seg.read_bytes()
        for f in iter_frames(data, SEGMENT_HEADER_SIZE, digest, seq):
            out.append((seg.name, f.end))
            digest, seq = f.digest, f.last_seq + 1
    return out


class Oracle:
    """The answers of the undamaged store, and of each of its prefixes of whole frames."""

    def __init__(self, root: Path, scratch: Path) -> None:
        self.root = root
        self.log_dir = root / ".ctxledger" / "log"
        with Ledger.open(self.log_dir, readonly=True) as ro:
            events = list(ro.read())
        self.keys, self.tasks = keys_and_tasks(events)
        now = events[-1].at + 1.0
        self.clock = lambda: now
        self.by_prefix: list[Any] = []
        ends = frame_ends(self.log_dir)
        for k in range(len(ends) + 1):  # the log cut after k frames, no checkpoints
            copy = scratch / f"prefix{k}"
            shutil.copytree(root, copy, ignore=shutil.ignore_patterns("checkpoints"))
            cut_log = copy / ".ctxledger" / "log"
            last_seg, last_end = ends[k - 1] if k else (min(n for n, _ in ends), 64)
            for seg in sorted(cut_log.glob("*.seg")):
                if seg.name == last_seg:
                    with open(seg, "r+b") as f:
                        f.truncate(last_end)
                elif seg.name > last_seg:
                    seg.unlink()
            self.by_prefix.append(self.ask(copy))
            shutil.rmtree(copy)
        self.full = self.by_prefix[-1]
        assert self.full[0] == "answers"

    def ask(self, root: Path) -> tuple[str, Any]:
        try:
            with ContextStore.open(root, readonly=True, clock=self.clock) as ro:
                return "answers", answers(ro, self.keys, self.tasks)
        except LedgerError as e:  # the documented errors, one base
            return "error", type(e).__name__

    def verify_complains(self) -> bool:
        try:
            with Ledger.open(self.log_dir, readonly=True) as ro:
                return not ro.verify().ok
        except LedgerError:
            return True

    def judge(self, path: Path, damaged: bytes, truncated: bool) -> str:
        """Put ``damaged`` in place of ``path``'s bytes, ask, put the bytes back."""
        good = path.read_bytes()
        path.write_bytes(damaged)
        try:
            got = self.ask(self.root)
            if got[0] == "error":
                return "detected_error"
            if got == self.full:
                return "harmless"
            for k, earlier in enumerate(self.by_prefix):
                if got == earlier:
                    if self.verify_complains():
                        return "detected_by_verify"
                    last = sorted(self.log_dir.glob("*.seg"))[-1]
                    if truncated and path == last:
                        return "cut_at_frame_boundary"
                    raise AssertionError(f"{path.name}: answers of frame {k}, verify is clean")
            raise AssertionError(f"{path.name}: a wrong answer")
        finally:
            path.write_bytes(good)


def files(root: Path) -> list[Path]:
    d = root / ".ctxledger"
    return sorted((d / "log").glob("*.seg")) + sorted((d / "checkpoints").glob("*.ckpt*"))


def offsets(size: int, want: int, rng: random.Random) -> list[int]:
    """``want`` offsets spread evenly over ``range(size)`` (all of them if fewer)."""
    if want >= size:
        return list(range(size))
    step = size / want
    start = rng.random() * step
    return sorted({int(start + i * step) for i in range(want)})


def damage_one(oracle: Oracle, path: Path, raw: bytes, off: int, what: str,
               rng: random.Random, tally: Counter[str]) -> None:
    if what == "flip":
        damaged = bytearray(raw)
        damaged[off] ^= 1 << rng.randrange(8)
        outcome = oracle.judge(path, bytes(damaged), truncated=False)
        tally["bits_flipped"] += 1
    else:
        outcome = oracle.judge(path, raw[:off], truncated=True)
        tally["truncations"] += 1
    tally[outcome] += 1


def sweep(tmp_path: Path, budget: Budget, seed: int, tally: Counter[str], what: str) -> None:
    """CI: one small store, a spread of offsets over every file (``CI_FLIPS`` or
    ``CI_TRUNCATIONS`` in all). Soak: every offset of one file per round (a random
    bit of each byte for flips), file after file, a new store after the last."""
    rng = random.Random(seed)
    root = tmp_path / "store"
    oracle: Oracle | None = None
    targets: list[Path] = []
    for _ in budget.rounds(1):
        if not targets:
            shutil.rmtree(root, ignore_errors=True)
            build(root, rng)
            oracle, targets = Oracle(root, tmp_path), files(root)
            tally["stores"] += 1
        assert oracle is not None
        if budget.soak is None:
            total = sum(p.stat().st_size for p in targets)
            want = CI_FLIPS if what == "flip" else CI_TRUNCATIONS
            for path in targets:
                raw = path.read_bytes()
                for off in offsets(len(raw), max(1, want * len(raw) // total), rng):
                    damage_one(oracle, path, raw, off, what, rng, tally)
                tally["files"] += 1
            targets = []
        else:
            path = targets.pop(0)
            raw = path.read_bytes()
            for off in range(len(raw)):
                damage_one(oracle, path, raw, off, what, rng, tally)
            tally["files"] += 1
            tally["bytes_swept_whole"] += len(raw)
    tally["wrong_answers"] += 0


def test_every_flipped_bit_is_detected_or_harmless(
    tmp_path: Path, budget: Budget, seed: int, tally: Counter[str]
) -> None:
    sweep(tmp_path, budget, seed, tally, "flip")


def test_every_truncation_is_detected_or_harmless(
    tmp_path: Path, budget: Budget, seed: int, tally: Counter[str]
) -> None:
    sweep(tmp_path, budget, seed, tally, "truncate")
