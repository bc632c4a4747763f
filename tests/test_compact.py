"""Compaction: a new log generation holding only what the views need.

docs/operations.md ("Compaction") and docs/format.md (§12, generations) are
the contract: every view answers as before (seqs aside), the chain is proved
across the cut, anchors taken before still verify, and a failure or a kill at
any point leaves the old or the new generation whole and in use.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import ctxledger
from eventstore import (
    Anchor,
    Event,
    HeadMismatchError,
    Ledger,
    LedgerIOError,
    LockTimeout,
    MemoryLog,
    _osio,
    check_anchor,
    head_anchor,
)
from eventstore.frame import encode_row
from eventstore.generation import COMPACTED, anchors_name
from eventstore.records import RawBatch
from eventstore.segments import list_all_segments
from projections import ContextStore
from projections.cache import CacheState
from projections.compaction import compact, kept_batches, plan_compaction

REPO = Path(__file__).resolve().parents[1]
SEQ_KEYS = {"seq", "last_seq", "first_seq", "age_secs", "watermark_seq"}


def plain(obj: Any) -> Any:
    """A comparable picture of an answer without seqs (compaction renumbers them) and
    without ages (they move with the clock)."""
    if attrs.has(type(obj)):
        obj = attrs.asdict(obj, recurse=False)
    elif hasattr(obj, "to_json"):
        obj = obj.to_json()
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items() if k not in SEQ_KEYS}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    return obj


def fill(root: Path, scope: str | None = None, n: int = 12) -> None:
    """A store with superseded, evicted and live entries, tasks, handoffs, fingerprints."""
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "src" / "a.py").write_text("print(1)\n")
    with ContextStore.open(root, storage_scope=scope) as s:
        for i in range(n):
            s.put({"target": "t", "summary": f"auth gap {i}", "n": i, "paths": ["src/a.py"]})
        for i in range(n // 2):  # re-puts: the first puts are superseded
            s.put({"target": "t", "summary": f"auth gap {i}", "n": i, "paths": ["src/a.py"]})
        s.prune(all=True)  # every entry evicted
        for i in range(n):
            s.put_many([
                {"target": "u", "summary": f"login flow {i}", "n": i, "dedupe_key": f"d{i % 3}"},
                {"target": "v", "summary": f"cache miss {i}", "n": i, "paths": ["src/a.py"]},
            ])
        for i in range(3):
            t = s.tasks.create(f"task {i}", labels=["x"])
            s.tasks.start(t.id)
            s.tasks.note(t.id, "decision", {"i": i})
            if i == 0:
                s.tasks.complete(t.id, {"ok": True})
            s.agent.handoff({"next": f"step {i}"}, task_id=t.id)
        s.agent.handoff({"next": "store-wide"})
        s.agent.bootstrap({"goal": "ship"})


def answers(root: Path, scope: str | None = None) -> dict[str, Any]:
    """What the views answer: cache get/list/recall, tasks, handoffs, stats counts."""
    with ContextStore.open(root, storage_scope=scope, readonly=True) as s:
        entries = s.list(limit=1000)
        out: dict[str, Any] = {
            "list": plain(entries),
            "list_superseded": plain(s.list(limit=1000, include_superseded=True)),
            "get": {e.cache_key: plain(s.get(e.cache_key)) for e in entries},
            "recall": {q: plain(s.recall(q, limit=50)) for q in ("auth", "login", "cache miss")},
            "tasks": plain(s.tasks.list()),
            "show": {t.id: plain(s.tasks.show(t.id)) for t in s.tasks.list()},
            "history": {t.id: [(e.kind, plain(e.data)) for e in s.tasks.history(t.id)]
                        for t in s.tasks.list()},
            "handoff": plain(s.agent.latest_handoff()),
            "handoffs": {t.id: plain(s.agent.latest_handoff(t.id)) for t in s.tasks.list()},
            "bootstrap": plain(s.agent.latest_bootstrap()),
        }
    return out


def log_dir(root: Path) -> Path:
    return root / ".ctxledger" / "log"


def test_compaction_drops_what_no_view_needs_and_every_view_answers_as_before(
    tmp_path: Path,
) -> None:
    fill(tmp_path)
    before = answers(tmp_path)
    with Ledger.open(log_dir(tmp_path)) as led:
        old_head, old_digest = led.head, led.head_digest
        dry = compact(led, dry_run=True)
        assert led.head == old_head and led.base == 1  # a dry run writes nothing
        rep = compact(led)
        assert rep.compacted and rep.plan.to_json() == dry.plan.to_json()
        assert rep.plan.dropped == {"cache.put": 18, "cache.evicted": 12, "cache.files": 18}
        assert led.base == old_head + 1 and rep.new_base == old_head + 1
        first = next(led.read())
        assert first.seq == led.base and first.kind == COMPACTED
        assert first.data["old_head"] == old_head and first.data["old_digest"] == old_digest.hex()
        assert led.verify().ok and led.verify().base_seq == led.base
        assert [p for _b, p, _i in list_all_segments(log_dir(tmp_path))] == [
            log_dir(tmp_path) / f"{led.base:020d}.seg"
        ]
    assert answers(tmp_path) == before
    with Ledger.open(log_dir(tmp_path)) as led:  # again: nothing left to drop
        assert not compact(led).compacted


@pytest.mark.parametrize("scope", ["project", "agent"])
def test_views_fold_the_compacted_log_to_the_same_answers_in_both_scopes(
    tmp_path: Path, scope: str
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    fill(a, scope)
    fill(b, scope, n=5)  # in agent scope both projects share one log
    with ContextStore.open(a, storage_scope=scope) as s:
        s.calibration.record("p", "m", 100, 120)
        s.calibration.record("p", "m", 100, 130)
        profile = s.calibration.profile("p", "m")
        log = s.layout.log_dir
    before = (answers(a, scope), answers(b, scope))
    with Ledger.open(log) as led:
        assert compact(led).compacted
    assert (answers(a, scope), answers(b, scope)) == before
    with ContextStore.open(a, storage_scope=scope) as s:
        assert s.calibration.profile("p", "m") == profile
        home_log = s.calibration.log_dir
    with Ledger.open(home_log) as led:  # the agent home's log: samples are kept
        compact(led)
    with ContextStore.open(a, storage_scope=scope) as s:
        assert s.calibration.profile("p", "m") == profile


def test_anchors_taken_before_compactions_still_verify(tmp_path: Path) -> None:
    fill(tmp_path, n=4)
    with Ledger.open(log_dir(tmp_path)) as led:
        frames = list(led.read_digests())
        first_anchor = head_anchor(led)
        compact(led)
        with ContextStore.open(tmp_path) as s:
            s.prune(all=True)
        second_anchor = head_anchor(led)
        assert compact(led).compacted  # a second generation: both cuts stay provable
        for _first, last, digest in frames:
            assert check_anchor(led, Anchor(last, digest)) is None
        assert check_anchor(led, first_anchor) is None
        assert check_anchor(led, second_anchor) is None
        wrong = Anchor(frames[2][1], bytes(32))
        assert "when the log was compacted" in (check_anchor(led, wrong) or "")
        inside = [f for f in frames if f[1] > f[0]]
        if inside:
            assert check_anchor(led, Anchor(inside[0][0], inside[0][2])) is not None
        assert led.verify().ok
    res = CliRunner().invoke(ctxledger, ["verify", "--root", str(tmp_path), "--anchor",
                                         str(first_anchor)])
    assert res.exit_code == 0 and "matches" in res.stdout


def test_the_cut_is_checked_by_verify(tmp_path: Path) -> None:
    fill(tmp_path, n=3)
    with Ledger.open(log_dir(tmp_path)) as led:
        compact(led)
        base = led.base
    anchors = log_dir(tmp_path) / anchors_name(base)
    data = bytearray(anchors.read_bytes())
    data[-1] ^= 1
    anchors.write_bytes(bytes(data))
    with Ledger.open(log_dir(tmp_path), readonly=True) as led:
        rep = led.verify()
        assert not rep.ok and "anchors" in rep.problems[0].error
        with pytest.raises(Exception, match="anchors file"):
            check_anchor(led, Anchor(1, bytes(32)))


def test_reads_start_at_the_generation(tmp_path: Path) -> None:
    fill(tmp_path, n=3)
    with Ledger.open(log_dir(tmp_path)) as led:
        h = led.head
        compact(led)
        base = led.base
        assert [e.seq for e in led.read(1, base)] == [base]
        assert led.read_raw(h) is None and led.read_raw(1) is None
        assert led.read_raw(base) is not None
        assert led.digest_at(h) is None and led.digest_at(0) is None
        assert led.digest_at(led.head) == led.head_digest
        assert [b.first_seq for b in led.read_batches(2, base + 1)][0] == base
        r = led.append([Event("x.y", None, {"after": True})])
        assert r.first_seq == led.head and r.first_seq > base


def test_kept_batches_keep_their_time_id_and_bytes(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "log", clock=lambda: 1000.0) as led:
        led.append([Event("cache.put", "k" * 64, {"bytes": 1, "packet": {"target": "t"}})])
        led.clock = lambda: 2000.0
        led.append([Event("keep.me", "x", {"f": 1.5, "b": b"\x00\xff", "big": 2**70}),
                    Event("cache.evicted", "k" * 64, {"reason": "manual_prune"})],
                   batch_id="b-1")
        raw_before = [r for b in led.read_raw_batches() for r in b.rows]
        rep = compact(led)
        batches = list(led.read_raw_batches())
        assert [(b.at, b.batch_id, len(b.rows)) for b in batches] == [
            (1000.0, None, 1), (2000.0, "b-1", 1)]
        assert batches[1].rows[0] == raw_before[1]  # copied byte for byte
        ev = list(led.read())[1]
        assert ev.data == {"f": 1.5, "b": b"\x00\xff", "big": 2**70}
        assert rep.plan.dropped == {"cache.put": 1, "cache.evicted": 1}


# --- open handles and writers meet a compaction ---------------------------------------


def test_an_open_store_follows_a_compaction_by_another_handle(tmp_path: Path) -> None:
    fill(tmp_path, n=4)
    with ContextStore.open(tmp_path) as s:
        before = plain(s.list(limit=100))
        with Ledger.open(log_dir(tmp_path)) as led:
            compact(led)
            base = led.base
        assert plain(s.list(limit=100)) == before  # refolded: nothing duplicated or lost
        new = s.put({"target": "w", "summary": "after the cut"})
        assert new.seq > base
        assert s.get(new.cache_key) is not None
        assert len(s.list(limit=100)) == len(before) + 1
    # and a store opened afterwards agrees (its checkpoints predate the cut: rebuilt)
    with ContextStore.open(tmp_path, readonly=True) as s:
        assert len(s.list(limit=100)) == len(before) + 1


def test_a_handle_behind_two_cuts_reloads(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "log", segment_bytes=4096) as a, \
            Ledger.open(tmp_path / "log", segment_bytes=4096) as b:
        for i in range(60):
            a.append([Event("cache.put", f"{i:064x}", {"bytes": 1, "pad": "p" * 200})])
        assert b.head == 60
        for i in range(60, 120):
            a.append([Event("cache.put", f"{i:064x}", {"bytes": 1, "pad": "p" * 200})])
        compact(a)
        a.append([Event("note.x", None, {})])
        compact(a)  # b is behind both cuts; its segments are gone
        assert len(list_all_segments(tmp_path / "log")) == 1
        assert b.head == a.head and b.base == a.base
        assert [e.kind for e in b.read()] == [e.kind for e in a.read()]
        r = b.append([Event("note.y", None, {})])
        assert r.first_seq == a.head and a.verify().ok


def test_writers_wait_for_a_compaction_bounded_by_their_lock_timeout(tmp_path: Path) -> None:
    fill(tmp_path, n=4)
    holding, released = threading.Event(), threading.Event()
    with Ledger.open(log_dir(tmp_path)) as led:
        head = led.head
        plan = plan_compaction(led.read_raw_batches(1, head))

        def slow() -> Iterator[Any]:
            holding.set()
            released.wait(30)
            yield from kept_batches(plan, led.read_raw_batches(1, head))

        outcome: dict[str, Any] = {}

        def writers() -> None:
            holding.wait(30)
            with Ledger.open(log_dir(tmp_path), lock_timeout=0.05) as w:
                try:
                    w.append([Event("x.y", None, {"early": True})])
                except LockTimeout as e:
                    outcome["timeout"] = e
            released.set()
            with Ledger.open(log_dir(tmp_path), lock_timeout=60) as w:
                outcome["receipt"] = w.append([Event("x.y", None, {"waited": True})])

        t = threading.Thread(target=writers)
        t.start()
        written = led.start_generation(head, {}, slow(), at=1.0)
        t.join(60)
        assert isinstance(outcome["timeout"], LockTimeout)  # refused, wrote nothing
        assert outcome["receipt"].first_seq == written.head + 1  # after the new generation
        assert [e.data for e in led.read(written.head + 1)] == [{"waited": True}]
        assert led.verify().ok


def test_leftovers_of_an_older_generation_are_ignored_then_removed(tmp_path: Path) -> None:
    fill(tmp_path, n=3)
    old = {p.name: p.read_bytes() for p in log_dir(tmp_path).glob("*.seg")}
    before = answers(tmp_path)
    with Ledger.open(log_dir(tmp_path)) as led:
        compact(led)
    for name, data in old.items():  # as if the removal had not happened (a crash)
        (log_dir(tmp_path) / name).write_bytes(data)
    with Ledger.open(log_dir(tmp_path), readonly=True) as led:
        rep = led.verify()
        assert rep.ok and rep.stale_segments == len(old)
        assert led.base > 1
    assert answers(tmp_path) == before
    with ContextStore.open(tmp_path) as s:
        s.put({"target": "t", "summary": "more"})
    with Ledger.open(log_dir(tmp_path)) as led:
        compact(led)
        assert led.verify().stale_segments == 0


# --- a failure or a kill at every step ------------------------------------------------

IO_CALLS = ("pwrite", "fsync", "fdatasync", "ftruncate", "replace")


@pytest.fixture
def count_io(monkeypatch: pytest.MonkeyPatch) -> Callable[[int | None], list[str]]:
    """Count ``_osio`` calls; ``fail_at=n`` makes the n-th one raise EIO."""
    calls: list[str] = []
    state: dict[str, int | None] = {"fail_at": None}

    def wrap(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def f(*a: Any, **kw: Any) -> Any:
            calls.append(name)
            if len(calls) == state["fail_at"]:
                raise OSError(errno.EIO, f"injected failure of {name}")
            return real(*a, **kw)
        return f

    for name in IO_CALLS:
        monkeypatch.setattr(_osio, name, wrap(name, getattr(_osio, name)))

    def arm(fail_at: int | None) -> list[str]:
        calls.clear()
        state["fail_at"] = fail_at
        return calls

    return arm


def test_a_failure_at_every_io_call_leaves_one_whole_generation_in_use(
    tmp_path: Path, count_io: Callable[[int | None], list[str]]
) -> None:
    template = tmp_path / "template"
    fill(template, n=4)
    before = answers(template)
    with Ledger.open(log_dir(template), readonly=True) as led:
        new_base = led.head + 1
    probe = tmp_path / "probe"
    shutil.copytree(template, probe)
    with Ledger.open(log_dir(probe)) as led:
        calls = count_io(None)
        compact(led)
        total = list(calls)
    assert {"pwrite", "fsync", "replace"} <= set(total)
    count_io(None)
    outcomes = set()
    for n in range(1, len(total) + 1):
        root = tmp_path / f"run{n}"
        shutil.copytree(template, root)
        with Ledger.open(log_dir(root)) as led:
            count_io(n)
            try:
                compact(led)
                outcomes.add("done")
            except LedgerIOError:
                outcomes.add("failed")
            count_io(None)
        with Ledger.open(log_dir(root)) as led:
            assert led.verify().ok, (n, total[n - 1], led.verify().problems)
            assert led.base in (1, new_base)
            in_use = "new" if led.base > 1 else "old"
        assert answers(root) == before, (n, total[n - 1], in_use)
        with Ledger.open(log_dir(root)) as led:  # and the log takes appends afterwards
            led.append([Event("x.y", None, {"n": n})])
            assert led.verify().ok
    assert "failed" in outcomes


CHILD = """
import sys, time
from eventstore import Ledger
from projections.compaction import compact
led = Ledger.open(sys.argv[1])
print("ready", flush=True)
t = time.perf_counter()
compact(led)
print(time.perf_counter() - t, flush=True)
"""


def _big_store(root: Path) -> None:
    with Ledger.open(log_dir(root), segment_bytes=4096, sync="none") as led:
        for i in range(400):
            led.append([
                Event("cache.put", f"{i % 150:064x}",
                      {"bytes": 1, "packet": {"target": "t", "pad": "p" * 300, "i": i}}),
                Event("task.note", f"t{i % 7}", {"i": i}),
            ])
        led.flush()


def _state(root: Path) -> tuple[Any, ...]:
    with Ledger.open(log_dir(root), readonly=True) as led:
        events = [(e.kind, e.key, e.data) for e in led.read() if e.kind != COMPACTED]
        kept = [e for e in events if e[0] != "cache.put"]
        live: dict[str, Any] = {}
        for kind, key, data in events:
            if kind == "cache.put":
                live[key or ""] = data
        return tuple(kept), tuple(sorted(live.items(), key=lambda kv: kv[0]))


def test_sigkill_at_random_points_leaves_one_whole_generation_in_use(tmp_path: Path) -> None:
    template = tmp_path / "template"
    (template / ".ctxledger").mkdir(parents=True)
    _big_store(template)
    want = _state(template)
    with Ledger.open(log_dir(template), readonly=True) as led:
        want_base = led.head + 1
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rng = random.Random(14)
    duration = None
    for round_ in range(25):
        root = tmp_path / f"r{round_}"
        shutil.copytree(template, root)
        p = subprocess.Popen([sys.executable, "-c", CHILD, str(log_dir(root))],
                             stdout=subprocess.PIPE, text=True, env=env)
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
        if duration is None:  # the first round runs to the end, to learn how long it takes
            duration = float(p.stdout.readline())
            p.wait(60)
        else:
            time.sleep(rng.uniform(0, duration * 1.2))
            p.send_signal(signal.SIGKILL)
            p.wait(60)
        p.stdout.close()
        with Ledger.open(log_dir(root)) as led:
            rep = led.verify()
            assert rep.ok, (round_, rep.problems)
            assert led.base in (1, want_base)
        assert _state(root) == want, round_
        with Ledger.open(log_dir(root)) as led:
            compact(led)  # finishes what was cut short (and removes its left-overs)
            assert led.verify().ok and led.verify().stale_segments == 0
        assert _state(root) == want


# --- the plan, as a property ----------------------------------------------------------

OPS = st.lists(
    st.tuples(st.sampled_from(["put", "evict", "bad", "files", "other"]), st.integers(0, 5)),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(OPS, st.integers(1, 4))
def test_the_plan_keeps_exactly_what_the_cache_holds(ops: list[tuple[str, int]], per: int) -> None:
    log = MemoryLog()
    batch: list[Event] = []
    for kind, k in ops:
        key = f"{k:064x}"
        if kind == "put":
            batch.append(Event("cache.put", key, {"bytes": 1, "packet": {"target": "t", "k": k}}))
            batch.append(Event("cache.files", key, {"files": [], "complete": True}))
        elif kind == "evict":
            batch.append(Event("cache.evicted", key, {"reason": "manual_prune"}))
        elif kind == "bad":
            batch.append(Event("cache.put", key, {"nonsense": 1}))
        elif kind == "files":
            batch.append(Event("cache.files", key, {"files": [], "complete": False}))
        else:
            batch.append(Event("task.note", key, {"k": k}))
        if len(batch) >= per:
            log.append(batch)
            batch = []
    if batch:
        log.append(batch)
    events = list(log.read())
    raw = [RawBatch(b.first_seq, b.at, b.batch_id,
                    tuple(encode_row([e.kind, e.key, e.data]) for e in b.events))
           for b in log.read_batches()]
    plan = plan_compaction(raw)
    kept = [e for e in events if e.seq in plan.keep]
    full, part = CacheState(), CacheState()
    for e in events:
        full.apply(e)
    for i, e in enumerate(kept):
        part.apply(Event(e.kind, e.key, e.data, seq=i + 1, at=e.at))
    def strip(snap: dict[str, Any]) -> dict[str, Any]:
        return {k: v[1:] for k, v in snap["entries"].items()}  # without the seq

    assert strip(part.snapshot()) == strip(full.snapshot())
    notes = [e for e in events if e.kind == "task.note"]
    assert notes == [e for e in kept if e.kind == "task.note"]
    assert plan.kept == len(kept) and plan.events == len(events)


# --- the command ----------------------------------------------------------------------


def test_compact_command_and_storage_live_fraction(tmp_path: Path) -> None:
    fill(tmp_path, n=4)
    run = CliRunner().invoke
    dry = run(ctxledger, ["compact", "--root", str(tmp_path), "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    doc = json.loads(dry.stdout)
    assert doc["dry_run"] and not doc["compacted"] and 0 < doc["live_fraction"] < 1
    stor = json.loads(run(ctxledger, ["storage", "--root", str(tmp_path), "--json"]).stdout)
    assert stor["logs"]["project"]["live_fraction"] == doc["live_fraction"]
    human = run(ctxledger, ["compact", "--root", str(tmp_path)])
    assert human.exit_code == 0 and human.stdout.startswith("compacted: ")
    again = run(ctxledger, ["compact", "--root", str(tmp_path)])
    assert again.stdout.startswith("nothing to compact: ")
    stor = json.loads(run(ctxledger, ["storage", "--root", str(tmp_path), "--json"]).stdout)
    assert stor["logs"]["project"]["live_fraction"] == 1.0
    assert stor["logs"]["project"]["base_seq"] == doc["head_seq"] + 1
    # the checkpoints were written afresh: a reader loads them, it does not refold
    assert {v["loaded_from"] for v in stor["views"].values()} == {"primary"}


def test_compact_in_a_real_process(tmp_path: Path) -> None:
    fill(tmp_path, n=3)
    before = answers(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-m", "cli", "compact", "--root", str(tmp_path),
                        "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["compacted"] and p.stderr == ""  # no bar: not a terminal
    assert answers(tmp_path) == before
    v = subprocess.run([sys.executable, "-m", "cli", "verify", "--root", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert v.returncode == 0 and "generation from seq" in v.stdout


def test_progress_bars_go_to_stderr_only_for_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cli.progress

    fill(tmp_path, n=3)
    run = CliRunner().invoke
    (tmp_path / "x.jsonl").write_text(run(ctxledger, ["log", "export", "--root",
                                                     str(tmp_path)]).stdout)
    plain_out = run(ctxledger, ["compact", "--root", str(tmp_path), "--dry-run"])
    assert plain_out.stderr == ""  # CliRunner's stderr is no terminal: no bar
    monkeypatch.setattr(cli.progress, "show_progress", lambda ctx: not ctx.json)
    for argv, label in [
        (["compact", "--dry-run"], "compacting"),
        (["verify"], "verifying"),
        (["salvage"], "salvaging"),
        (["log", "export"], "exporting"),
        (["rebuild"], "rebuilding"),
    ]:
        res = run(ctxledger, [*argv, "--root", str(tmp_path)])
        assert res.exit_code == 0, res.output
        assert label in res.stderr and label not in res.stdout, argv
    b = tmp_path / "b"
    assert run(ctxledger, ["init", "--root", str(b)]).exit_code == 0
    res = run(ctxledger, ["log", "import", "--root", str(b), str(tmp_path / "x.jsonl")])
    assert res.exit_code == 0 and "importing" in res.stderr
    quiet = run(ctxledger, ["compact", "--root", str(tmp_path), "--dry-run", "--json"])
    assert quiet.stderr == ""  # never with --json


def test_log_tail_follow_prints_a_cut_as_its_marker_only(tmp_path: Path) -> None:
    from cli.log import follow_log

    with Ledger.open(tmp_path / "log") as led:
        led.append([Event("cache.put", "a" * 64, {"bytes": 1, "packet": {"target": "t"}})])
        led.append([Event("task.note", "t", {"i": 1})])
        follow = follow_log(led, led.head, 0.01)
        led.append([Event("task.note", "t", {"i": 2})])
        assert next(follow).data == {"i": 2}
        led.append([Event("cache.evicted", "a" * 64, {"reason": "manual_prune"})])
        assert next(follow).kind == "cache.evicted"
        compact(led)
        led.append([Event("task.note", "t", {"i": 3})])
        marker = next(follow)
        assert marker.kind == COMPACTED and marker.data["kept_events"] == 2
        after = next(follow)  # the two copied task notes are not printed again
        assert after.data == {"i": 3} and after.seq == led.head


def test_an_empty_last_segment_does_not_block_a_compaction(tmp_path: Path) -> None:
    from eventstore.segments import create_segment

    fill(tmp_path, n=3)
    before = answers(tmp_path)
    with Ledger.open(log_dir(tmp_path)) as led:
        head, digest = led.head, led.head_digest
        # a roll whose first frame never came: a segment with a header and no frame
        create_segment(log_dir(tmp_path), head + 1, digest, 4096, True)
    with Ledger.open(log_dir(tmp_path)) as led:
        assert led.head == head
        assert compact(led).compacted and led.base == head + 1 and led.verify().ok
    assert answers(tmp_path) == before


def test_followers_notice_a_cut_by_its_seal_and_writers_by_the_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eventstore import ledger, tip

    monkeypatch.setattr(tip, "GEN_CHECK_INTERVAL", 1e9)  # no timed look: only the seal
    with Ledger.open(tmp_path / "log") as a, Ledger.open(tmp_path / "log") as reader, \
            Ledger.open(tmp_path / "log") as writer:
        a.append([Event("cache.put", "a" * 64, {"bytes": 1, "packet": {"target": "t"}})])
        a.append([Event("task.note", "t", {"i": 1})])
        writer.append([Event("task.note", "t", {"i": 2})])
        assert reader.head == writer.head == 3
        compact(a)
        a.append([Event("task.note", "t", {"i": 3})])
        assert reader.head == a.head and reader.base == a.base  # the seal told it
        # a compaction that died between its commit and its seal: writers still learn
        # of it from the lock file, so nothing they append goes to the old generation
        monkeypatch.setattr(ledger, "seal_segment", lambda fd, off, base: None)
        a.append([Event("cache.evicted", "a" * 64, {"reason": "manual_prune"})])
        writer.append([Event("task.note", "t", {"i": 4})])
        compact(a)
        r = writer.append([Event("task.note", "t", {"i": 5})])
        assert r.first_seq == a.head and writer.base == a.base
        assert [e.data.get("i") for e in a.read()][-1] == 5 and a.verify().ok


APPENDER = """
import sys
from eventstore import Event, Ledger
led = Ledger.open(sys.argv[1], lock_timeout=60, segment_bytes=4096)
for i in range(int(sys.argv[2])):
    led.append([Event("task.note", "t", {"i": i}),
                Event("cache.put", f"{i % 5:064x}", {"bytes": 1, "packet": {"target": "t"}})])
    print(i, flush=True)
"""


def test_appends_from_another_process_survive_concurrent_compactions(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with Ledger.open(log) as led:
        led.append([Event("task.note", "t", {"i": -1})])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen([sys.executable, "-c", APPENDER, str(log), "150"],
                         stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout is not None
    acked = []
    with Ledger.open(log) as led:
        for line in p.stdout:
            acked.append(int(line))
            if len(acked) % 25 == 0:
                try:
                    compact(led)  # while the child keeps appending
                except HeadMismatchError:
                    pass  # it appended through every attempt: refused, nothing written
        p.wait(60)
        compact(led)
        notes = [e.data["i"] for e in led.read() if e.kind == "task.note"]
        assert notes == [-1, *acked] and acked == list(range(150))
        live = [e.key or "" for e in led.read() if e.kind == "cache.put"]
        assert sorted(live) == sorted({f"{i % 5:064x}" for i in range(150)})
        assert led.verify().ok
    assert p.returncode == 0


def test_calibration_samples_beyond_the_views_retention_are_dropped(tmp_path: Path) -> None:
    from projections.calibration import MAX_SAMPLES, Calibration

    home = tmp_path / "home"
    cal = Calibration(home)
    for i in range(MAX_SAMPLES + 7):
        cal.record("p", "m", 100, 100 + i % 13)
    cal.record("q", "m", 100, 150)
    before = (cal.profile("p", "m"), cal.profile("q", "m"))
    log = cal.log_dir
    cal.close()
    with Ledger.open(log) as led:
        rep = compact(led)
        assert rep.plan.dropped == {"calibration.sample": 7}
    cal = Calibration(home, readonly=True)
    after = (cal.profile("p", "m"), cal.profile("q", "m"))
    cal.close()
    assert plain(after) == plain(before)


@pytest.mark.parametrize("who", ["this handle", "another handle"])
def test_a_flush_after_a_compaction_removed_unsynced_segments(tmp_path: Path, who: str) -> None:
    """sync="none": segments this writer rolled past wait for flush(); a compaction (its
    own, or another handle's) removes them once their frames are durable in the new
    generation, so the flush has nothing left to do there (it used to fail: ENOENT)."""
    log_dir = tmp_path / "log"
    packet = {"target": "t", "summary": "the same packet, put again and again"}
    row = ("cache.put", None, {"packet": packet})
    with Ledger.open(log_dir, sync="none", segment_bytes=4096) as led:
        for _ in range(60):  # rolls: several segments left unsynced
            led.append([Event(*row)])
        assert len(list_all_segments(log_dir)) > 2
        if who == "this handle":
            assert compact(led).compacted
        else:
            with Ledger.open(log_dir) as other:
                assert compact(other).compacted
        led.flush()  # nothing unsynced is left anywhere it could reach
        r = led.append([Event(*row)])
        led.flush()
    with Ledger.open(log_dir, readonly=True) as ro:
        assert ro.verify().ok and ro.head == r.last_seq


def test_a_note_that_resolves_a_question_still_resolves_it_after_compaction(
        tmp_path: Path) -> None:
    """Compaction renumbers the events it keeps: a note's ``resolves`` (seqs of earlier
    questions) must follow, or resolved questions come back open."""
    with ContextStore.open(tmp_path) as s:
        for i in range(6):  # superseded puts: something to drop before the task
            s.put({"target": "t", "summary": "x", "n": i % 2})
        tid = s.tasks.create("t").id
        q1 = s.tasks.note(tid, "question", {"text": "which?"}).last_seq
        q2 = s.tasks.note(tid, "question", {"text": "why?"}).last_seq
        s.tasks.note(tid, "decision", {"text": "this", "resolves": q1})
        s.tasks.note(tid, "evidence", {"text": "that", "resolves": [q2, 999]})
        assert s.tasks.record(tid).open_questions == ()  # type: ignore[union-attr]
        assert compact(s.ledger).compacted
    for _ in range(2):  # the store that did it, then a fresh fold of the new generation
        with ContextStore.open(tmp_path) as s:
            rec = s.tasks.record(tid)
            assert rec is not None and rec.open_questions == ()
            qs = [q["seq"] for q in rec.questions]
            assert [q["resolved_by"] for q in rec.questions] == [qs[1] + 1, qs[1] + 2]
            s.rebuild()


@pytest.mark.parametrize("kind", ["ledger.compacted", "ledger.salvaged"])
def test_a_generation_marker_cannot_be_appended(tmp_path: Path, kind: str) -> None:
    """Markers are written only as a generation's first event: one appended mid-log
    verified, then made every view fail for good (NewGeneration, folded three times)."""
    from eventstore import InvalidEventError

    for log in (None, MemoryLog()):
        root = tmp_path / ("mem" if log else "file")
        with ContextStore.open(root, log=log) as s:
            s.put({"target": "a", "summary": "b"})
            with pytest.raises(InvalidEventError, match="reserved"):
                s.ledger.append([Event(kind, None, {"old_head": 1})])
            s.put({"target": "c", "summary": "d"})
            assert s.ledger.head == 2
    with ContextStore.open(tmp_path / "file") as s:
        assert len(s.list()) == 2
    from eventstore.event import RESERVED_KINDS
    from eventstore.generation import MARKERS
    assert MARKERS == RESERVED_KINDS


def test_log_append_refuses_a_generation_marker_in_one_line(tmp_path: Path) -> None:
    run = CliRunner().invoke
    assert run(ctxledger, ["init", "--root", str(tmp_path)]).exit_code == 0
    res = run(ctxledger, ["log", "append", "--root", str(tmp_path),
                          "--kind", "ledger.compacted", "--data", "{}"])
    assert res.exit_code == 1 and "reserved" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert run(ctxledger, ["store", "list", "--root", str(tmp_path)]).exit_code == 0
