"""The fold runner on its own: a toy view over a real log, a log that records its
reads, and a clock stepped by hand.

What a view folds, when a checkpoint is due and what a load refuses are seen
through the store elsewhere (test_folds.py); here each rule is pinned at its
boundary, which mutation testing found the store-level tests left loose
(docs/reliability.md): the progress steps of a fold, the watermark rules of the
generation markers, the retries when the log moves to a new generation, each
refusal of a checkpoint word for word, which views a checkpoint writes and
which files it leaves, and the debounce's clock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import attrs
import cbor2
import pytest

from eventstore import Event, GenerationChangedError, Ledger, LedgerIOError, LogBackend
from eventstore.generation import COMPACTED
from projections.checkpoints import CheckpointDir
from projections.runner import (
    FOLD_RETRIES,
    NewGeneration,
    Projection,
    Runner,
    fold,
    generation_events,
)


@attrs.define
class Seen:
    """A state that keeps the seqs it folded (apply is a no-op at or below seq)."""

    seq: int = 0
    seqs: list[int] = attrs.field(factory=list)

    def apply(self, event: Event) -> None:
        if event.seq > self.seq:
            self.seq = event.seq
            self.seqs.append(event.seq)

    def to_bytes(self) -> bytes:
        return cbor2.dumps([self.seq, self.seqs])

    def snapshot(self) -> dict[str, Any]:
        return {"seq": self.seq, "seqs": list(self.seqs)}


def decode(body: bytes | memoryview) -> Seen:
    if bytes(body) == b"no":
        raise ValueError("no")
    seq, seqs = cbor2.loads(bytes(body))
    return Seen(seq, seqs)


SEEN = Projection("seen", 1, Seen, decode)


def seqs_of(state: object) -> list[int]:
    return cast(Seen, state).seqs
OTHER = Projection("other", 1, Seen, decode)


class SpyLog:
    """A log that records each read, and can fail the next ``fail`` reads as if a
    compaction removed a segment under them, or give ``short`` reads one event short."""

    def __init__(self, led: Ledger) -> None:
        self.led = led
        self.reads: list[tuple[int, int | None]] = []
        self.fail = 0
        self.short = 0

    @property
    def head(self) -> int:
        return self.led.head

    def digest_at(self, seq: int) -> bytes | None:
        return self.led.digest_at(seq)

    def read(self, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Event]:
        self.reads.append((from_seq, to_seq))
        if self.fail:
            self.fail -= 1
            raise GenerationChangedError("000001.seg")
        if self.short:
            self.short -= 1
            return self.led.read(from_seq, (self.led.head if to_seq is None else to_seq) - 1)
        return self.led.read(from_seq, to_seq)


class Clock:
    """Monotonic seconds, moved by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class SlowDir(CheckpointDir):
    """Each checkpoint write takes ``took`` seconds of ``clock``."""

    def __init__(self, path: Path, clock: Clock, took: float) -> None:
        super().__init__(path, readonly=False)
        self.clock, self.took, self.writes = clock, took, 0

    def write(self, *args: Any, **kw: Any) -> None:
        self.clock.t += self.took
        self.writes += 1
        super().write(*args, **kw)


def log_of(tmp_path: Path, n: int, *, one_batch: bool = False) -> Ledger:
    """A log of ``n`` events, a batch each (a checkpoint's watermark must end a batch)."""
    led = Ledger.open(tmp_path / "log")
    events = [Event("a.a", None, {"i": i}) for i in range(n)]
    for batch in ([events] if one_batch and n else [[e] for e in events]):
        led.append(batch)
    return led


def runner_of(led: Ledger, tmp_path: Path, *projections: Projection, **kw: Any) -> Runner:
    ckdir = kw.pop("ckdir", None) or CheckpointDir(tmp_path / "ck", readonly=False)
    return Runner(cast(LogBackend, led), ckdir, list(projections or [SEEN]), **kw)


def checkpoint_at(led: Ledger, tmp_path: Path, seq: int, name: str = "seen") -> None:
    """A good checkpoint of ``name`` folded to ``seq`` (the old primary becomes the backup)."""
    st = Seen()
    fold(led, [st], 1, seq)
    ck = CheckpointDir(tmp_path / "ck", readonly=False)
    digest = led.digest_at(seq)
    assert digest is not None
    ck.write(name, 1, seq, digest, st.to_bytes())


def files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "ck").iterdir())


# -- fold ------------------------------------------------------------------------------


@pytest.mark.parametrize("nstates", [1, 2, 3])
def test_a_fold_counts_what_it_read_and_reports_progress_in_steps_of_1024(
    tmp_path: Path, nstates: int
) -> None:
    with log_of(tmp_path, 2500, one_batch=True) as led:
        states = [Seen() for _ in range(nstates)]
        calls: list[int] = []
        assert fold(led, list(states), 1, None, calls.append) == 2500
        assert calls == [1024, 1024, 452]
        assert all(s.seqs == list(range(1, 2501)) for s in states)
        calls.clear()
        assert fold(led, [Seen() for _ in range(nstates)], 1, 1024, calls.append) == 1024
        assert calls == [1024]  # a whole step, and no empty report after it
        part = [Seen() for _ in range(nstates)]
        assert fold(led, list(part), 3, 7, calls.append) == 5
        assert calls == [1024, 5] and all(s.seqs == [3, 4, 5, 6, 7] for s in part)
        # no progress callback; a state that has some events already still counts them read
        ahead = Seen(seq=2400)
        assert fold(led, [ahead, *[Seen(seq=2300) for _ in range(nstates - 1)]], 2301) == 200
        assert ahead.seqs == list(range(2401, 2501))


def test_a_project_fold_applies_that_projects_events_and_only_moves_past_the_others(
    tmp_path: Path,
) -> None:
    with Ledger.open(tmp_path / "log") as led:
        led.append([Event("a.a", None, {"project": p, "i": i})
                    for i, p in enumerate(["p", "q", "p", "q", "q"])])
        for project, want in ((None, [1, 2, 3, 4, 5]), ("p", [1, 3]), ("q", [2, 4, 5])):
            a, b = Seen(), Seen()
            assert fold(led, [a, b], 1, None, None, project) == len(want)
            assert a.seqs == b.seqs == want and a.seq == b.seq == 5


def marker(seq: int) -> Event:
    return Event(COMPACTED, None, {}, seq=seq)


def test_a_generation_marker_only_moves_watermarks_up_to_itself() -> None:
    at_marker, fresh, past = Seen(seq=5), Seen(seq=0), Seen(seq=9)
    events = [marker(5), Event("a.a", None, {}, seq=6)]
    out = list(generation_events(events, [at_marker, fresh, past]))
    assert [e.seq for e in out] == [6]  # the marker itself is no event of the view
    assert (at_marker.seq, fresh.seq, past.seq) == (5, 5, 9)


@pytest.mark.parametrize("seq", [1, 2])
def test_a_state_folded_before_a_generation_marker_must_start_again(seq: int) -> None:
    with pytest.raises(NewGeneration) as e:
        list(generation_events([marker(3)], [Seen(), Seen(seq=seq)]))
    assert e.value.args == (3,)


# -- the retries of a fold that meets a new generation ---------------------------------


def test_a_view_whose_log_moves_on_mid_fold_is_folded_afresh(tmp_path: Path) -> None:
    with log_of(tmp_path, 10) as led:
        checkpoint_at(led, tmp_path, 4)
        checkpoint_at(led, tmp_path, 6)
        spy = SpyLog(led)
        spy.fail = FOLD_RETRIES
        runner = Runner(cast(LogBackend, spy), CheckpointDir(tmp_path / "ck", readonly=False),
                        [SEEN])
        v = runner.view("seen")
        assert spy.reads == [(7, None), (1, None), (1, None)]
        assert v.state.seq == 10 and cast(Seen, v.state).seqs == list(range(1, 11))
        assert (v.loaded_from, v.checkpointed_seq, v.stale) == ("rebuild", 0,
                                                                {"primary", "backup"})
        # neither file may survive as the backup of the new checkpoint
        assert runner.checkpoint() == 1
        assert files(tmp_path) == ["seen.ckpt"]
        assert CheckpointDir(tmp_path / "ck", readonly=True).peek_seq("seen") == 10


def test_a_log_that_keeps_moving_on_is_an_error_not_a_loop(tmp_path: Path) -> None:
    with log_of(tmp_path, 3) as led:
        spy = SpyLog(led)
        spy.fail = FOLD_RETRIES + 1
        runner = Runner(cast(LogBackend, spy), CheckpointDir(tmp_path / "ck", readonly=False),
                        [SEEN])
        with pytest.raises(GenerationChangedError):
            runner.view("seen")
        assert len(spy.reads) == FOLD_RETRIES + 1


# -- loading a view: each refusal ------------------------------------------------------


def write_raw(tmp_path: Path, version: int, seq: int, digest: bytes, body: bytes) -> None:
    CheckpointDir(tmp_path / "ck", readonly=False).write("seen", version, seq, digest, body)


def load(led: Ledger, tmp_path: Path) -> tuple[Any, SpyLog]:
    spy = SpyLog(led)
    runner = Runner(cast(LogBackend, spy), CheckpointDir(tmp_path / "ck", readonly=False),
                    [SEEN])
    return runner.view("seen"), spy


def test_a_view_without_checkpoints_is_empty_and_folds_the_log(tmp_path: Path) -> None:
    with log_of(tmp_path, 3) as led:
        v, spy = load(led, tmp_path)
        assert (v.loaded_from, v.refused, v.stale, v.checkpointed_seq) == ("empty", [], set(), 0)
        assert v.state.seqs == [1, 2, 3] and spy.reads == [(1, None)]


def test_a_checkpoint_at_the_head_is_taken_without_reading_the_log(tmp_path: Path) -> None:
    with log_of(tmp_path, 5) as led:
        checkpoint_at(led, tmp_path, 5)
        v, spy = load(led, tmp_path)
        assert (v.loaded_from, v.refused, v.checkpointed_seq) == ("primary", [], 5)
        assert v.state.seqs == [1, 2, 3, 4, 5] and spy.reads == []


def test_a_checkpoint_behind_the_head_folds_only_the_events_after_it(tmp_path: Path) -> None:
    with log_of(tmp_path, 5) as led:
        checkpoint_at(led, tmp_path, 2)
        v, spy = load(led, tmp_path)
        progress: list[int] = []
        again = Runner(cast(LogBackend, led), CheckpointDir(tmp_path / "ck", readonly=True),
                       [SEEN]).view("seen", progress.append)
        assert spy.reads == [(3, None)] and v.state.seqs == [1, 2, 3, 4, 5]
        assert progress == [3] and seqs_of(again.state) == [1, 2, 3, 4, 5]


def good(led: Ledger, seq: int) -> tuple[int, bytes, bytes]:
    st = Seen()
    fold(led, [st], 1, seq)
    digest = led.digest_at(seq)
    assert digest is not None
    return seq, digest, st.to_bytes()


@pytest.mark.parametrize("case", ["version", "beyond", "digest", "undecodable", "watermark"])
def test_each_refused_primary_says_why_and_the_backup_serves(tmp_path: Path, case: str) -> None:
    with log_of(tmp_path, 6) as led:
        write_raw(tmp_path, 1, *good(led, 3))  # becomes the backup
        seq, digest, body = good(led, 5)
        version, why = 1, ""
        if case == "version":
            version, why = 2, "primary: version 2, expected 1"
        elif case == "beyond":
            seq, why = 7, "primary: watermark seq 7 is not in this log"
        elif case == "digest":
            digest, why = bytes(32), "primary: watermark seq 5 is not in this log"
        elif case == "undecodable":
            body, why = b"no", "primary: body does not decode (ValueError)"
        else:
            body, why = good(led, 4)[2], "primary: body folded to seq 4, header says 5"
        write_raw(tmp_path, version, seq, digest, body)
        v, spy = load(led, tmp_path)
        assert (v.loaded_from, v.refused, v.stale, v.checkpointed_seq) == (
            "backup", [why], {"primary"}, 3)
        assert v.state.seqs == [1, 2, 3, 4, 5, 6] and spy.reads == [(4, None)]


def test_both_checkpoints_refused_is_a_rebuild_of_both(tmp_path: Path) -> None:
    with log_of(tmp_path, 6) as led:
        seq, digest, body = good(led, 3)
        write_raw(tmp_path, 2, seq, digest, body)
        write_raw(tmp_path, 1, seq, bytes(32), body)
        v, spy = load(led, tmp_path)
        assert v.refused == ["primary: watermark seq 3 is not in this log",
                             "backup: version 2, expected 1"]
        assert (v.loaded_from, v.stale, v.checkpointed_seq) == (
            "rebuild", {"primary", "backup"}, 0)
        assert v.state.seqs == [1, 2, 3, 4, 5, 6] and spy.reads == [(1, None)]


# -- catching up -----------------------------------------------------------------------


def test_catch_up_folds_from_the_lowest_watermark_and_counts_what_it_read(
    tmp_path: Path,
) -> None:
    with log_of(tmp_path, 4) as led:
        spy = SpyLog(led)
        runner = Runner(cast(LogBackend, spy), CheckpointDir(tmp_path / "ck", readonly=False),
                        [SEEN, OTHER])
        assert runner.catch_up() == 0 and spy.reads == []  # no view loaded: nothing to do
        runner.view("seen")
        led.append([Event("a.a", None, {}) for _ in range(3)])  # another writer: 5..7
        runner.view("other")  # folded to 7 as it loads
        spy.reads.clear()
        assert runner.catch_up(until=4) == 0 and spy.reads == []  # both are there already
        progress: list[int] = []
        assert runner.catch_up(progress.append, until=6) == 2
        assert spy.reads == [(5, 6)] and progress == [2]
        assert runner.state("seen").seq == 6 and runner.state("other").seq == 7
        assert runner.catch_up() == 1 and spy.reads[-1] == (7, None)
        assert seqs_of(runner.state("seen")) == list(range(1, 8))
        spy.reads.clear()
        assert runner.catch_up() == 0 and spy.reads == []  # at the head: no read at all
        assert runner.catch_up(until=3) == 0 and spy.reads == []


def test_a_batch_the_log_gives_back_short_is_read_again_whole(tmp_path: Path) -> None:
    with log_of(tmp_path, 2) as led:
        spy = SpyLog(led)
        runner = Runner(cast(LogBackend, spy), CheckpointDir(tmp_path / "ck", readonly=False),
                        [SEEN])
        runner.view("seen")
        spy.reads.clear()
        led.append([Event("a.a", None, {}) for _ in range(3)])  # another writer: 3..5
        rows: list[tuple[str, str | None, Any]] = [("a.a", None, {})]
        r = led.append([Event(*row) for row in rows])  # ours: 6
        spy.short = 1  # the catch-up up to our batch stops at 4, not 5
        runner.fold_own(rows, r.first_seq, r.at, 0)
        assert spy.reads == [(3, 5), (5, None)]
        assert seqs_of(runner.state("seen")) == [1, 2, 3, 4, 5, 6]


# -- writing checkpoints ---------------------------------------------------------------


def test_checkpoint_writes_the_views_that_moved_and_says_how_many(tmp_path: Path) -> None:
    with log_of(tmp_path, 3) as led:
        checkpoint_at(led, tmp_path, 3)
        checkpoint_at(led, tmp_path, 3, "other")
        runner = runner_of(led, tmp_path, SEEN, OTHER)
        assert runner.checkpoint_error is None
        runner.load_all()
        assert runner.checkpoint() == 0  # neither moved
        assert runner.checkpoint(force=True) == 2
        led.append([Event("a.a", None, {})])  # one event moves the second view only
        runner.views["other"].state.apply(next(iter(led.read(4))))
        assert runner.checkpoint() == 1
        assert [v.checkpointed_seq for v in runner.views.values()] == [3, 4]
        assert [v.loaded_from for v in runner.views.values()] == ["primary", "primary"]
        assert runner.checkpoint() == 0 and runner.checkpoint_error is None
        assert files(tmp_path) == ["other.ckpt", "other.ckpt.bak", "seen.ckpt", "seen.ckpt.bak"]


def test_an_empty_view_is_not_checkpointed_unless_forced(tmp_path: Path) -> None:
    with log_of(tmp_path, 0) as led:
        runner = runner_of(led, tmp_path, SEEN, OTHER)
        runner.load_all()
        assert runner.checkpoint() == 0 and not (tmp_path / "ck").exists()
        led.append([Event("a.a", None, {})])
        runner.views["other"].state.apply(next(iter(led.read(1))))
        assert runner.checkpoint() == 1 and files(tmp_path) == ["other.ckpt"]


def test_a_view_loaded_from_the_backup_is_written_only_when_it_moves(tmp_path: Path) -> None:
    with log_of(tmp_path, 4) as led:
        checkpoint_at(led, tmp_path, 2)
        checkpoint_at(led, tmp_path, 4)
        (tmp_path / "ck" / "seen.ckpt").unlink()  # lost, not refused: nothing is stale
        runner = runner_of(led, tmp_path)
        v = runner.view("seen")
        assert (v.loaded_from, v.stale) == ("backup", set())
        v.checkpointed_seq = 4  # as if the backup were at the head
        assert runner.checkpoint() == 0


def test_a_refused_checkpoint_is_rewritten_even_if_the_view_did_not_move(
    tmp_path: Path,
) -> None:
    with log_of(tmp_path, 4) as led:
        write_raw(tmp_path, 1, *good(led, 4))
        write_raw(tmp_path, 1, 4, bytes(32), good(led, 4)[2])  # primary: wrong digest
        runner = runner_of(led, tmp_path)
        v = runner.view("seen")
        assert (v.loaded_from, v.stale, v.checkpointed_seq) == ("backup", {"primary"}, 4)
        assert runner.checkpoint() == 1 and v.stale == set()
        assert runner_of(led, tmp_path).view("seen").loaded_from == "primary"


def test_a_mid_batch_watermark_is_not_checkpointed(tmp_path: Path) -> None:
    with log_of(tmp_path, 0) as led:
        led.append([Event("a.a", None, {}) for _ in range(3)])
        runner = runner_of(led, tmp_path, SEEN, OTHER)
        runner.load_all()
        st = Seen()
        fold(led, [st], 1, 2)  # seq 2 is inside the batch: the log keeps no digest of it
        runner.views["seen"].state = st
        assert runner.checkpoint() == 1 and files(tmp_path) == ["other.ckpt"]


# -- closing ---------------------------------------------------------------------------


def test_close_on_an_empty_log_loads_nothing(tmp_path: Path) -> None:
    with log_of(tmp_path, 0) as led:
        runner = runner_of(led, tmp_path)
        assert runner.close_checkpoint() == 0 and runner.views == {}


@pytest.mark.parametrize("lag", [3, 4])
def test_close_writes_the_views_close_lag_behind_or_without_a_checkpoint(
    tmp_path: Path, lag: int
) -> None:
    with log_of(tmp_path, 10) as led:
        checkpoint_at(led, tmp_path, 10 - lag)
        runner = runner_of(led, tmp_path, SEEN, OTHER, close_lag=4)
        # "other" has no checkpoint: always written; "seen" once it lags close_lag
        assert runner.close_checkpoint() == (2 if lag == 4 else 1)
        assert sorted(runner.views) == (["other", "seen"] if lag == 4 else ["other"])
        assert CheckpointDir(tmp_path / "ck", readonly=True).peek_seq("seen") == (
            10 if lag == 4 else 10 - lag)


# -- the debounce, by a clock stepped by hand --------------------------------------------


@contextlib.contextmanager
def debounced(tmp_path: Path, took: float, **kw: Any) -> Iterator[tuple[Ledger, Runner, SlowDir,
                                                                     Clock]]:
    """A runner over an empty log with its views loaded, its clock stepped by hand, each
    checkpoint write taking ``took`` seconds of it."""
    clock = Clock()
    with log_of(tmp_path, 0) as led:
        ck = SlowDir(tmp_path / "ck", clock, took)
        runner = runner_of(led, tmp_path, ckdir=ck, clock=clock, **kw)
        runner.load_all()
        yield led, runner, ck, clock


def append(led: Ledger, runner: Runner, n: int, nbytes: int = 0) -> None:
    rows: list[tuple[str, str | None, Any]] = [("a.a", None, {"j": j}) for j in range(n)]
    r = led.append([Event(*row) for row in rows])
    runner.fold_own(rows, r.first_seq, r.at, nbytes)
    runner.maybe_checkpoint(r.last_seq)


def test_a_checkpoint_is_due_once_every_seconds_have_passed(tmp_path: Path) -> None:
    with debounced(tmp_path, 0.0, every_events=100, every_seconds=30.0) as (led, runner, ck, clock):
        clock.t += 29.5
        append(led, runner, 1)
        assert ck.writes == 0
        clock.t += 0.5  # exactly every_seconds since the runner started
        append(led, runner, 1)
        assert ck.writes == 1
        clock.t += 30.0
        runner.maybe_checkpoint(led.head)  # nothing new: nothing due
        assert ck.writes == 1


def test_a_slow_checkpoint_is_followed_by_nine_times_as_long_of_appends(
    tmp_path: Path,
) -> None:
    with debounced(tmp_path, 2.0, every_events=2, every_seconds=1e9) as (led, runner, ck, clock):
        append(led, runner, 2)  # due, and no checkpoint yet: written at once
        assert ck.writes == 1
        clock.t += 17.5
        append(led, runner, 2)  # due by events, but the last took 2 s: wait 18 s
        assert ck.writes == 1
        clock.t += 0.5
        append(led, runner, 2)
        assert ck.writes == 2 and runner.views["seen"].checkpointed_seq == 6


def test_a_checkpoint_is_due_once_the_bytes_reach_every_bytes_and_they_start_again(
    tmp_path: Path,
) -> None:
    with debounced(tmp_path, 0.0, every_events=10**6, every_seconds=1e9,
                   every_bytes=10) as (led, runner, ck, _clock):
        append(led, runner, 1, 9)
        assert ck.writes == 0
        append(led, runner, 1, 1)  # 10 bytes in all
        assert ck.writes == 1
        append(led, runner, 1, 9)  # counted afresh from the checkpoint
        assert ck.writes == 1


def test_a_failed_debounced_checkpoint_waits_a_full_period(tmp_path: Path) -> None:
    with debounced(tmp_path, 0.0, every_events=10**6,
                   every_seconds=30.0) as (led, runner, ck, clock):
        ck.path = tmp_path / "file"  # a file where the directory should be: writes fail
        ck.path.write_bytes(b"")
        clock.t += 30.0
        append(led, runner, 1)
        assert runner.checkpoint_error is not None and "cannot write" in runner.checkpoint_error
        ck.path = tmp_path / "ck"
        clock.t += 29.0
        append(led, runner, 1)  # 59 s since the start, 29 since the failure
        assert not (tmp_path / "ck").exists()
        clock.t += 1.0
        append(led, runner, 1)
        assert files(tmp_path) == ["seen.ckpt"] and runner.checkpoint_error is None


def test_the_runner_defaults_are_the_documented_ones(tmp_path: Path) -> None:
    from projections.config import StoreConfig

    with log_of(tmp_path, 0) as led:
        runner = runner_of(led, tmp_path)
        cfg = StoreConfig()
        assert (runner.every_events, runner.every_seconds, runner.close_lag) == (
            cfg.checkpoint_every_events, cfg.checkpoint_every_seconds, cfg.checkpoint_close_lag)
        assert runner.every_bytes == 64 * 1024 * 1024


def test_a_checkpoint_that_cannot_be_written_raises_when_asked_for(tmp_path: Path) -> None:
    with log_of(tmp_path, 2) as led:
        (tmp_path / "ck").write_bytes(b"")  # a file where the directory should be
        runner = runner_of(led, tmp_path)
        runner.view("seen")
        with pytest.raises(LedgerIOError):
            runner.checkpoint()
