"""Crash loop: a child appends and checkpoints in every sync mode; the parent kills it.

Each round a child process (a fork of the test process) opens the store with the next
sync mode and runs operations from :data:`harness.OPS`; the parent reads a
random number of its acknowledgements, lets it run a random moment more, and
sends SIGKILL. After every kill: every acknowledged event is there with its
exact data, seqs are gapless, ``verify`` finds nothing but a torn tail, and
every view (checkpoint plus tail) equals a fresh fold of the log.

A process crash loses nothing in any sync mode (operations.md, "Durability
modes"): the modes differ only on a power cut (``test_power_cut.py``).
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import signal
import traceback
from collections import Counter
from pathlib import Path

import pytest
from harness import DEFAULT_MIX, OPS, Ack, check_acked, check_views, config
from soak import Budget

from eventstore import Ledger
from projections import ContextStore

MODES = ("always", "batch", "none")
CI_ROUNDS = 45
ROUNDS_PER_STORE = 20  # a new store now and then: checks (whole-log reads) stay cheap


def child_main(root: Path, sync: str, tag: str, seed: int, mix: tuple[str, ...],
               out: int) -> None:
    """The child: opens the store and runs operations until it is killed, writing one
    JSON line per acknowledged event to ``out`` after the call that acknowledged it
    returned."""
    rng = random.Random(seed)
    store = ContextStore.open(root, config=config(sync))
    os.write(out, b"ready\n")
    n = 0
    while True:
        lines = [json.dumps(a) + "\n" for a in OPS[rng.choice(mix)](store, rng, f"{tag}-{n}")]
        if lines:
            data = "".join(lines).encode()
            while data:
                data = data[os.write(out, data):]
        n += 1


def run_round(root: Path, sync: str, tag: str, rng: random.Random, mix: tuple[str, ...],
              ) -> list[Ack]:
    """One child, killed at a random point; the acknowledgements it wrote.

    The child is a fork of this process (the library already imported: a round
    costs milliseconds, not an interpreter start), killed with SIGKILL like any
    other process.
    """
    r, w = os.pipe()
    child_seed = rng.getrandbits(32)
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        code = 0
        try:
            os.close(r)
            child_main(root, sync, tag, child_seed, mix, w)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    seen: list[str] = []
    with os.fdopen(r, "r") as pipe:
        try:
            if pipe.readline() != "ready\n":
                pytest.fail("child did not start (its traceback is on stderr)")
            for _ in range(rng.choice((0, 1, 2, 5, 12))):  # die after some acknowledgements...
                line = pipe.readline()
                if not line:
                    break
                seen.append(line)
            # ... and somewhere in the middle of what comes next
            delay = rng.choice((0.0, 0.0005, 0.002, 0.01, 0.03)) * rng.random()
            select.select([pipe], [], [], delay)  # (only decides where it dies)
        finally:
            os.kill(pid, signal.SIGKILL)
            _pid, status = os.waitpid(pid, 0)
        out = pipe.read()
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
        "child ended on its own (its traceback is on stderr)")
    acks = []
    for line in seen + out.splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # being written when it died: not an acknowledgement
        acks.append(json.loads(line))
    return acks


def crash_loop(tmp_path: Path, budget: Budget, seed: int, tally: Counter[str],
               mix: tuple[str, ...] = DEFAULT_MIX) -> None:
    """The harness: ``mix`` names the operations (harness.OPS) children run."""
    rng = random.Random(seed)
    root, store_no = tmp_path / "store0", 0
    acked: list[Ack] = []
    seen_ckpt = 0
    for rnd in budget.rounds(CI_ROUNDS):
        if rnd and rnd % ROUNDS_PER_STORE == 0:
            shutil.rmtree(root)
            store_no += 1
            root, acked = tmp_path / f"store{store_no}", []
        sync = MODES[rnd % len(MODES)]
        acks = run_round(root, sync, f"r{rnd}", rng, mix)
        acked += acks
        where = f"after round {rnd} (sync={sync}, seed {seed})"
        log_dir = root / ".ctxledger" / "log"
        events = check_acked(log_dir, acked, where)
        with Ledger.open(log_dir, readonly=True) as ro:
            rep = ro.verify()
        assert all("torn" in p.error for p in rep.problems), (where, rep.problems)
        loaded = check_views(root, tmp_path, events, where)
        seen_ckpt += loaded["primary"] + loaded["backup"]
        tally["rounds"] += 1
        tally[f"rounds_{sync}"] += 1
        tally["kills"] += 1
        tally["acknowledged_events_checked"] += len(acked)
        tally["torn_tails_seen"] += bool(rep.problems)
        tally["views_compared"] += sum(loaded.values())
    tally["losses"] += 0  # any loss failed an assertion above
    # the views were loaded from checkpoints the children wrote, not only folded
    assert seen_ckpt > 0
    # a writer tidies what the last kill left; then every byte checks out
    with ContextStore.open(root) as store:
        store.put({"target": "t", "summary": "after the last kill"})
    with Ledger.open(root / ".ctxledger" / "log", readonly=True) as ro:
        rep = ro.verify()
        assert rep.ok, rep.problems


def test_kill_9_in_every_sync_mode_loses_no_acknowledged_event(
    tmp_path: Path, budget: Budget, seed: int, tally: Counter[str]
) -> None:
    crash_loop(tmp_path, budget, seed, tally)
