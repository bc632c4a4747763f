"""Power cuts, simulated: only what no sync covered may be lost, in every sync mode.

A store appends and checkpoints under :class:`powercut.PowerCut`; at random
calls (in the middle of operations as well as between them) the simulation
writes what a power cut at that instant could leave on disk, three ways
(unsynced changes dropped; a prefix of them, the last one torn; a random
subset in a random order, some torn). Then, for each image:

- ``sync="always"``: every acknowledged event is there with its exact data,
  the log opens cleanly (at most a torn tail), and after an append ``verify``
  is clean (operations.md: "a power cut can lose nothing that was
  acknowledged"); the simulation also finds nothing of the log unsynced when
  an append returns;
- ``sync="batch"`` and ``"none"``: every event acknowledged before the log
  was last fully synced (a ``flush()``, a batch-interval sync, a roll) is
  there with its exact data; later ones may be lost. The log may fail closed
  (``CorruptLogError``: the OS wrote a later frame and not an earlier one,
  format.md §10); then everything before the first damaged byte must hold
  those events (:data:`RECOVER` cuts there; salvage will plug in beside it).

In every image the views, loaded from the image's own checkpoints, equal a
fresh fold of what its log holds (a checkpoint ahead of a log that lost its
tail is refused and the view refolded); then a writer opens it, appends, and
``verify`` is clean.
"""

from __future__ import annotations

import random
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from harness import DEFAULT_MIX, OPS, Ack, carries, check_acked, check_views, config, event_at
from powercut import PowerCut
from soak import Budget

from eventstore import CorruptLogError, Ledger
from projections import ContextStore

MODES = ("always", "batch", "none")
HOWS = ("drop", "prefix", "reorder")
CI_ROUNDS = 6
STEPS = 14  # operations per round
IMAGE_CHANCE = 0.02  # per wrapped call: take images there


def cut_at_first_problem(log_dir: Path) -> None:
    """Keep the log up to its first damaged byte: cut that segment there and set the
    segments after it aside (what a salvage keeps, short of what follows the damage)."""
    with Ledger.open(log_dir, readonly=True) as ro:
        rep = ro.verify()
    first = min((p for p in rep.problems), key=lambda p: (p.segment, p.offset))
    aside = log_dir.parent / "cut-aside"
    aside.mkdir(exist_ok=True)
    for seg in sorted(log_dir.glob("*.seg")):
        if seg.name > first.segment:
            seg.rename(aside / seg.name)
    seg = log_dir / first.segment
    if first.offset <= 64:
        seg.rename(aside / seg.name)
    else:
        with open(seg, "r+b") as f:
            f.truncate(first.offset)


def salvage(log_dir: Path) -> None:
    """What ``ctxledger salvage`` does: every frame that checks out, in a new generation."""
    with Ledger.open(log_dir) as led:
        assert led.salvage().salvaged


#: Ways to bring back a log that failed closed after a power cut: each must keep every
#: durable acknowledgement (a function of the log directory).
RECOVER: dict[str, Callable[[Path], None]] = {"cut": cut_at_first_problem, "salvage": salvage}


class Image:
    def __init__(self, path: Path, how: str, n_acked: int, n_durable: int) -> None:
        self.path, self.how, self.n_acked, self.n_durable = path, how, n_acked, n_durable


def open_store(root: Path, sync: str) -> tuple[ContextStore, Ledger]:
    log = Ledger.open(root / ".ctxledger" / "log", sync=sync, segment_bytes=4096)  # type: ignore[arg-type]
    try:
        return ContextStore.open(root, config=config(sync), log=log), log
    except BaseException:
        log.close()
        raise


def run_workload(root: Path, sync: str, rng: random.Random, images_dir: Path,
                 ) -> tuple[list[Ack], list[Image], int]:
    """Operations under the simulation; returns the acknowledgements, the images
    taken, and how many syncs the simulation saw."""
    with ContextStore.open(root, config=config(sync)):
        pass  # the store's directories and config exist before the power can fail
    sim = PowerCut(root)
    acked: list[Ack] = []
    images: list[Image] = []
    durable = [0]
    log_dir = root / ".ctxledger" / "log"

    def take() -> None:
        for how in HOWS:
            path = images_dir / f"img{len(images)}"
            sim.image(path, how, rng)
            images.append(Image(path, how, len(acked), durable[0]))

    def maybe_take() -> None:
        if rng.random() < IMAGE_CHANCE:
            take()

    mp = pytest.MonkeyPatch()
    try:
        sim.install(mp)
        sim.before = maybe_take
        store, log = open_store(root, sync)
        try:
            for step in range(STEPS):
                acked += OPS[rng.choice(DEFAULT_MIX)](store, rng, f"s{step}")
                if sync != "always" and rng.random() < 0.2:
                    log.flush()
                if sync == "always":  # the promise: acknowledged is durable
                    assert sim.clean(log_dir), f"sync=always left the log unsynced, step {step}"
                    durable[0] = len(acked)
                elif sim.clean(log_dir):
                    durable[0] = len(acked)
                if rng.random() < 0.1:
                    take()
        finally:
            sim.before = lambda: None
            store.close()
            log.close()
        sim.check_model()
    finally:
        mp.undo()
    return acked, images, sim.syncs


def check_image(img: Image, sync: str, acked: list[Ack], scratch: Path, where: str,
                tally: Counter[str]) -> str:
    log_dir = img.path / ".ctxledger" / "log"
    durable = acked[: img.n_durable]
    outcome = "clean"
    try:
        events = check_acked(log_dir, durable, where)
    except CorruptLogError:
        # the OS wrote a later frame but not an earlier one (format.md §10): only possible
        # when appends were acknowledged before their sync
        assert sync != "always", where
        for name, recover in RECOVER.items():  # each way back keeps every durable event
            copy = img.path.with_name(f"{img.path.name}-{name}")
            shutil.copytree(img.path, copy)
            recover(copy / ".ctxledger" / "log")
            check_acked(copy / ".ctxledger" / "log", durable, f"{where} (after {name})")
            shutil.rmtree(copy)
        cut_at_first_problem(log_dir)  # the rest of the checks go on from the cut
        events = check_acked(log_dir, durable, where)
        outcome = "failed_closed"
    for a in acked[: img.n_acked]:  # acknowledged but maybe not durable: gone, or exact
        e = event_at(events, a["seq"])
        if e is not None:
            assert (e.kind, e.key) == (a["kind"], a["key"]), where
            assert carries(e, a["data"]), where
    # the views as the image's checkpoints and log give them, before any writer runs
    for source, n in check_views(img.path, scratch, events, where).items():
        tally[f"views_from_{source}"] += n  # "rebuild": a checkpoint refused, refolded
    store, log = open_store(img.path, sync)  # a writer tidies what the cut left, appends
    try:
        OPS["put"](store, random.Random(0), "after")
    finally:
        store.close()
        log.close()
    with Ledger.open(log_dir, readonly=True) as ro:
        rep = ro.verify()
        assert rep.ok, (where, rep.problems)
    return outcome


def test_a_power_cut_loses_only_what_no_sync_covered(
    tmp_path: Path, budget: Budget, seed: int, tally: Counter[str]
) -> None:
    rng = random.Random(seed)
    for rnd in budget.rounds(CI_ROUNDS):
        sync = MODES[rnd % len(MODES)]
        work = tmp_path / "work"
        shutil.rmtree(work, ignore_errors=True)
        root, images_dir = work / "store", work / "images"
        acked, images, syncs = run_workload(root, sync, rng, images_dir)
        tally["rounds"] += 1
        tally["syncs_modelled"] += syncs
        for i, img in enumerate(images):
            where = f"round {rnd} image {i} ({img.how}, sync={sync}, seed {seed})"
            outcome = check_image(img, sync, acked, work, where, tally)
            tally[f"images_{sync}"] += 1
            tally[f"images_{img.how}"] += 1
            tally[f"outcome_{outcome}"] += 1
            tally["durable_acks_checked"] += img.n_durable
    tally["losses"] += 0


class _All(random.Random):
    """An rng for :meth:`PowerCut.image` ``"prefix"`` that keeps every change, whole."""

    def randint(self, a: int, b: int) -> int:
        return b

    def random(self) -> float:
        return 0.99


def test_a_power_cut_after_the_commit_rename_finds_the_anchors_file(tmp_path: Path) -> None:
    """The new generation's segment and its anchors file are renamed into place in one
    directory; a power cut before the directory sync may keep either rename. The anchors
    file must be in place (synced) before the segment's rename commits the generation,
    or the new generation is in use without the file that proves its cut."""
    from projections.compaction import compact

    root = tmp_path / "s"
    with ContextStore.open(root) as s:
        for i in range(8):
            s.put({"target": "t", "summary": "x", "n": i % 2})
    sim = PowerCut(root)
    img = tmp_path / "img"

    def before() -> None:
        committed = any(c[0] == "rename" and c[4].endswith(".seg") for c in sim.dir_changes)
        if committed and not img.exists():
            changes = sim.dir_changes
            sim.dir_changes = [c for c in changes if ".anchors" not in c[2] + c[4]]
            try:
                sim.image(img, "prefix", _All())
            finally:
                sim.dir_changes = changes

    mp = pytest.MonkeyPatch()
    try:
        sim.install(mp)
        sim.before = before
        with Ledger.open(root / ".ctxledger" / "log") as led:
            assert compact(led).compacted
    finally:
        mp.undo()
    assert img.exists()
    with Ledger.open(img / ".ctxledger" / "log", readonly=True) as ro:
        assert ro.verify().ok, ro.verify().problems
