"""Token calibration: the exact math, the fold, the agent log shared by projects, the CLI."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import token_windows

from cli.main import ctxledger
from eventstore import Event, Ledger
from projections import ConfigError, ContextStore, StoreConfig
from projections.calibration import (
    MAX_SAMPLES,
    SAMPLE,
    Calibration,
    CalibrationState,
    Sample,
    profile_of,
    sample_data,
)
from projections.runner import fold
from projections.scope import agent_home

REPO = Path(__file__).resolve().parents[1]


def samples(*pairs: tuple[int, int], first_seq: int = 1) -> list[Sample]:
    """``(estimated, actual)`` pairs as samples at consecutive seqs."""
    return [Sample(first_seq + i, 1000.0 + i, e, a) for i, (e, a) in enumerate(pairs)]


def prof(*pairs: tuple[int, int], window: int = 20) -> Any:
    return profile_of("p", "m", "chars-v1", samples(*pairs), window=window)


# --- the math, by hand ------------------------------------------------------------------------


def test_an_outlier_is_rejected_and_an_even_window_takes_the_mean_of_its_middle_two() -> None:
    # ratios 1.20, 1.21, 1.19, 5.00 -> sorted 1.19 1.20 1.21 5.00
    # median = (1.20 + 1.21) / 2 = 1.205
    # |r - m| = 0.015 0.005 0.005 3.795 -> sorted 0.005 0.005 0.015 3.795; MAD = 0.01
    # cut-off 3 x 1.4826 x 0.01 = 0.044478: 5.00 is out (3.795), the rest in
    # multiplier = median(1.19, 1.20, 1.21) = 1.20
    p = prof((100, 120), (100, 121), (100, 119), (100, 500))
    assert p.median == Fraction(1205, 1000) and p.mad == Fraction(1, 100)
    assert p.accepted == 3 and [(o.seq, o.ratio) for o in p.rejected] == [(4, 5)]
    assert p.exact == Fraction(6, 5) and p.multiplier == 1.2 and p.capacity_multiplier == 1.2


def test_even_window_without_outliers() -> None:
    # ratios 1.0 1.1 1.3 1.4: median (1.1 + 1.3) / 2 = 1.2
    # |r - m| = 0.2 0.1 0.1 0.2 -> MAD = (0.1 + 0.2) / 2 = 0.15; cut-off 0.66717: none out
    p = prof((10, 10), (10, 11), (10, 13), (10, 14))
    assert p.median == Fraction(6, 5) and p.mad == Fraction(3, 20)
    assert p.accepted == 4 and p.rejected == () and p.exact == Fraction(6, 5)


def test_a_ratio_exactly_at_the_cut_off_is_accepted_and_one_past_it_rejected() -> None:
    # ratios 0.9 1.0 1.0 1.1 x (x >= 1.1): median 1.0; |r - m| = 0.1 0 0 0.1 x-1 -> MAD 0.1
    # cut-off 3 x 1.4826 x 0.1 = 0.44478: x = 1.44478 is in (not past it), 1.44479 is out
    base = ((100_000, 90_000), (100_000, 100_000), (100_000, 100_000), (100_000, 110_000))
    at = prof(*base, (100_000, 144_478))
    assert at.mad == Fraction(1, 10) and at.rejected == () and at.accepted == 5
    past = prof(*base, (100_000, 144_479))
    assert [o.seq for o in past.rejected] == [5] and past.accepted == 4
    assert past.exact == 1  # median of 0.9 1.0 1.0 1.1


def test_mad_zero_rejects_every_ratio_off_the_median() -> None:
    # ratios 1 1 1 2: median (1 + 1) / 2 = 1; |r - m| = 0 0 0 1 -> MAD = (0 + 0) / 2 = 0
    # cut-off 3 x 1.4826 x 0 = 0: 2 is out (|2 - 1| = 1 > 0); three accepted, multiplier 1
    p = prof((10, 10), (10, 10), (20, 20), (10, 20))
    assert p.mad == 0 and [o.seq for o in p.rejected] == [4]
    assert p.accepted == 3 and p.exact == 1
    # ratios 1 1 3: median 1, MAD 0, 3 is out: two accepted, no multiplier
    p = prof((10, 10), (7, 7), (10, 30))
    assert p.mad == 0 and p.accepted == 2 and p.exact is None and p.multiplier is None


def test_no_multiplier_until_three_accepted() -> None:
    two = prof((10, 15), (20, 30))
    assert two.accepted == 2 and two.multiplier is None and two.capacity_multiplier == 1.0
    three = prof((10, 15), (20, 30), (2, 3))
    assert three.accepted == 3 and three.exact == Fraction(3, 2)
    assert prof().median is None and prof().multiplier is None and prof().used == 0


def test_capacity_is_at_least_one_and_exact() -> None:
    # 25 x 1.2 is 30.000000000000004 in floats (ceil 31); exactly it is 30
    p = prof((10, 12), (10, 12), (10, 12))
    assert p.tokens(25) == 30 and p.tokens(9) == 11  # ceil(10.8)
    assert p.estimator_budget(100) == 83  # floor(100 / 1.2)
    under = prof((10, 5), (10, 5), (10, 5))  # multiplier 0.5: estimates run high
    assert under.multiplier == 0.5 and under.capacity_multiplier == 1.0
    assert under.tokens(10) == 10 and under.estimator_budget(100) == 100


def test_only_the_newest_window_counts() -> None:
    # 5 old samples at ratio 4, then 20 at ratios 1, 2, 1, 2, ...
    old = [(10, 40)] * 5
    new = [(10, 10), (10, 20)] * 10
    # window 20: ten 1s and ten 2s -> median 1.5, every |r - m| = 0.5, MAD 0.5: all in
    assert prof(*old, *new).exact == Fraction(3, 2)
    # window 25: sorted 1 x10, 2 x10, 4 x5 -> the 13th is 2; |r - m| = 1 x10, 0 x10, 2 x5
    # -> MAD = the 13th of 0 x10, 1 x10, 2 x5 = 1; cut-off 4.4478: all in; median 2
    whole = prof(*old, *new, window=25)
    assert whole.used == 25 and whole.accepted == 25 and whole.exact == 2
    three = prof((1, 5), (1, 5), (1, 5), (1, 1), (1, 1), (1, 1), window=3)
    assert three.used == 3 and three.exact == 1 and three.samples == 6


@settings(max_examples=200, deadline=None)
@given(token_windows, st.randoms(use_true_random=False), st.integers(1, 25))
def test_permuting_samples_inside_the_window_never_changes_the_profile(
    pairs: list[tuple[int, int]], rnd: random.Random, window: int
) -> None:
    base = prof(*pairs, window=window)
    cut = max(0, len(pairs) - window)
    inside = pairs[cut:]
    rnd.shuffle(inside)
    moved = prof(*pairs[:cut], *inside, window=window)
    assert (moved.exact, moved.median, moved.mad, moved.accepted) == \
        (base.exact, base.median, base.mad, base.accepted)
    assert sorted(o.ratio for o in moved.rejected) == sorted(o.ratio for o in base.rejected)
    # the order the samples are handed over in is never what decides the window
    assert profile_of("p", "m", "chars-v1", reversed(samples(*pairs)), window=window) == base


# --- the event and the fold ---------------------------------------------------------------


@pytest.mark.parametrize(("kw", "field"), [
    ({"provider": ""}, "provider"),
    ({"provider": "x" * 201}, "provider"),
    ({"model": "m\x1b[2J"}, "model"),
    ({"model": "m\x85"}, "model"),
    ({"estimator": 5}, "estimator"),
    ({"estimated": 0}, "estimated"),
    ({"estimated": True}, "estimated"),
    ({"estimated": 1.5}, "estimated"),
    ({"actual": -3}, "actual"),
    ({"actual": 2**63}, "actual"),
    ({"input": -1}, "input"),
    ({"cache_read": False}, "cache_read"),
    ({"cache_write": "3"}, "cache_write"),
])
def test_the_writer_refuses_a_bad_field_by_name(kw: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {"provider": "p", "model": "m", "estimated": 10, "actual": 12, **kw}
    with pytest.raises(ValueError, match=f"^{field} "):
        sample_data(**args)
    home = agent_home()
    with Calibration(home) as cal, pytest.raises(ValueError):
        cal.record(**args)
    assert not home.exists()  # refused before anything was created


def test_the_fold_skips_malformed_events() -> None:
    home = agent_home()
    good = sample_data("p", "m", 10, 12)
    bad: list[Any] = [
        {**good, "estimated": True}, {**good, "estimated": 0}, {**good, "actual": 2**64},
        {**good, "provider": ""}, {**good, "model": "\x00"}, {k: v for k, v in good.items()
                                                           if k != "model"},
        {**good, "cache_read": -1}, {**good, "input": 1.0}, {"provider": ["p"]}, {},
    ]
    with Ledger.open(home / "log") as led:
        led.append([Event(SAMPLE, None, good)])
        led.append([Event(SAMPLE, "any key", d) for d in bad])
        led.append([Event("task.created", "t", {"title": "not ours"}),
                    Event(SAMPLE, None, {**good, "extra": 1}),
                    Event(SAMPLE, None, {**good, "input": 4, "cache_read": 8})])
    with Calibration(home, readonly=True) as cal:
        st_ = cal.state()
        assert st_.skipped_bad == len(bad) and st_.seq == len(bad) + 4
        kept = st_.samples[("p", "m", "chars-v1")]
        assert [s.seq for s in kept] == [1, len(bad) + 3, len(bad) + 4]
        assert (kept[2].input, kept[2].cache_read, kept[2].cache_write) == (4, 8, None)


def test_retention_keeps_the_newest_200_per_profile() -> None:
    st_ = CalibrationState()
    for seq in range(1, MAX_SAMPLES + 6):
        st_.apply(Event(SAMPLE, None, sample_data("p", "m", seq, seq), seq=seq, at=float(seq)))
    st_.apply(Event(SAMPLE, None, sample_data("q", "m", 1, 1), seq=500, at=1.0))
    kept = st_.samples[("p", "m", "chars-v1")]
    assert len(kept) == MAX_SAMPLES and kept[0].seq == 6 and kept[-1].seq == MAX_SAMPLES + 5
    assert len(st_.samples[("q", "m", "chars-v1")]) == 1
    st_.apply(Event(SAMPLE, None, sample_data("q", "m", 1, 1), seq=500, at=1.0))  # replayed
    assert len(st_.samples[("q", "m", "chars-v1")]) == 1


def test_checkpoints_round_trip_and_rebuild_equals_the_incremental_state() -> None:
    home = agent_home()
    rnd = random.Random(7)
    with Calibration(home) as cal:
        for i in range(30):
            cal.record(f"p{i % 3}", "m", rnd.randint(1, 100), rnd.randint(1, 100),
                       cache_write=i if i % 2 else None)
        live = cal.state()
        blob = live.to_bytes()
        assert CalibrationState.from_bytes(blob).to_bytes() == blob
    with Ledger.open(home / "log", readonly=True) as led:
        fresh = CalibrationState()
        fold(led, [fresh], 1)
    assert fresh.to_bytes() == blob and fresh.snapshot() == {
        "seq": 30, "profiles": 3, "samples": 30, "skipped_bad": 0}
    with Calibration(home, readonly=True) as cal:
        assert cal.state().to_bytes() == blob
        assert cal._runner is not None and cal._runner.views["calibration"].loaded_from == "primary"
        assert [p.samples for p in cal.profiles()] == [10, 10, 10]


def test_a_reader_creates_nothing_and_a_store_that_never_asks_never_opens_the_agent_log(
    tmp_path: Path,
) -> None:
    home = agent_home()
    with Calibration(home, readonly=True) as cal:
        assert cal.profiles() == [] and cal.multiplier("p", "m") is None
    with ContextStore.open(tmp_path / "a") as store:
        store.put({"target": "t", "summary": "auth gap"})
        assert store.recall("auth")[0].budget_estimate["calibrated"] is False
    with ContextStore.open(tmp_path / "a", readonly=True) as store:
        assert store.calibration.profiles() == []
    with ContextStore.open(tmp_path / "a") as store:  # writable, but only a record creates
        hit = store.recall("auth", provider="p", model="m")[0]
        assert hit.budget_estimate["calibrated"] is False and store.calibration.profiles() == []
    assert not home.exists()


def test_a_provider_name_is_data_never_a_path(tmp_path: Path) -> None:
    home = agent_home()
    with Calibration(home) as cal:
        cal.record("../../escape", "/etc/passwd", 10, 10)
        assert cal.profile("../../escape", "/etc/passwd").samples == 1
    assert sorted(p.name for p in home.iterdir()) == ["checkpoints", "log"]
    assert not (home.parent.parent / "escape").exists()


def test_directories_are_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        with Calibration(tmp_path / "h") as cal:
            cal.record("p", "m", 1, 1)
    finally:
        os.umask(old)
    for d in ("h", "h/log", "h/checkpoints"):
        assert (tmp_path / d).stat().st_mode & 0o777 == 0o700, d
    for f in (tmp_path / "h").rglob("*"):
        if f.is_file():
            assert f.stat().st_mode & 0o077 == 0, f


# --- shared by every project ----------------------------------------------------------------


def test_a_sample_learned_in_one_project_serves_another(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    packet = {"target": "t", "summary": "parse the auth header " * 3}
    with ContextStore.open(b) as store:
        store.put(packet)
        before = store.recall("auth", provider="anthropic", model="claude")[0].budget_estimate
    assert before["calibrated"] is False and before["multiplier"] == 1.0
    with ContextStore.open(a) as store:
        for est, act in ((100, 150), (200, 300), (10, 15)):
            store.calibration.record("anthropic", "claude", est, act)
    with ContextStore.open(b, readonly=True) as store:
        assert store.calibration.multiplier("anthropic", "claude") == 1.5
        hit = store.recall("auth", provider="anthropic", model="claude")[0]
        plain = store.recall("auth")[0]
    est = plain.budget_estimate["est_tokens"]
    assert plain.budget_estimate == {**before, "est_tokens": est}  # uncalibrated: as before
    assert hit.budget_estimate == {"est_tokens": -(-est * 3 // 2), "est_bytes": before["est_bytes"],
                                   "estimator": "chars-v1", "multiplier": 1.5, "calibrated": True}
    assert est == -(-before["est_bytes"] // 4)


def test_recall_takes_provider_and_model_from_config(tmp_path: Path) -> None:
    root = tmp_path / "r"
    (root / ".ctxledger").mkdir(parents=True)
    (root / ".ctxledger" / "config.toml").write_text(
        '[recall]\nprovider = "openai"\nmodel = "gpt"\n[calibration]\nwindow = 3\n')
    with ContextStore.open(root) as store:
        store.put({"target": "t", "summary": "auth"})
        for act in (40, 40, 40, 10):  # window 3: the newest three, 4 4 1 -> MAD 0, 1 out
            store.calibration.record("openai", "gpt", 10, act)
        assert store.calibration.profile("openai", "gpt").accepted == 2
        assert store.recall("auth")[0].budget_estimate["calibrated"] is False
        for _ in range(3):  # the newest three: 4 4 4
            store.calibration.record("openai", "gpt", 10, 40)
        assert store.recall("auth")[0].budget_estimate["multiplier"] == 4.0
        # an argument beats the config; the config fills in the one not given
        assert store.recall("auth", model="other")[0].budget_estimate["calibrated"] is False
    cfg = StoreConfig.load(root / ".ctxledger" / "config.toml")
    assert (cfg.recall_provider, cfg.recall_model, cfg.calibration_window) == ("openai", "gpt", 3)


def test_one_of_provider_and_model_is_refused(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path / "r") as store:
        with pytest.raises(ValueError, match="both a provider and a model"):
            store.recall("auth", provider="openai")
        with pytest.raises(ValueError, match="^model "):
            store.recall("auth", provider="openai", model="")
    assert not agent_home().exists()


@pytest.mark.parametrize("text", [
    "[calibration]\nwindow = 0\n", "[calibration]\nwindow = 201\n",
    "[calibration]\nwindow = true\n", "[recall]\nprovider = 5\n",
    '[recall]\nmodel = "a\\u001bb"\n', '[recall]\nmodel = ""\n', "[recall]\nmodle = 'x'\n",
])
def test_bad_settings_are_refused(tmp_path: Path, text: str) -> None:
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(ConfigError):
        StoreConfig.load(tmp_path / "config.toml")


WRITER = """
import sys
from projections import ContextStore
root, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with ContextStore.open(root) as store:
    for i in range(1, n + 1):
        print(store.calibration.record(who, "m", i, i + 1), i, flush=True)
"""


def test_two_processes_of_two_projects_lose_no_sample(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    n = 40
    procs = {who: subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / who), who,
                                    str(n)], stdout=subprocess.PIPE, text=True, env=env)
             for who in ("a", "b")}
    acked: dict[int, tuple[str, int]] = {}
    for who, p in procs.items():
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        for line in out.splitlines():
            seq, i = map(int, line.split())
            assert seq not in acked
            acked[seq] = (who, i)
    assert len(acked) == 2 * n
    with Ledger.open(agent_home() / "log", readonly=True) as led:
        logged = {e.seq: e for e in led.read()}
    assert set(logged) == set(acked)
    for seq, (who, i) in acked.items():
        d = logged[seq].data
        assert (logged[seq].kind, d["provider"], d["estimated"], d["actual"]) == \
            (SAMPLE, who, i, i + 1)
    with Calibration(agent_home(), readonly=True) as cal:
        assert [(p.provider, p.samples) for p in cal.profiles()] == [("a", n), ("b", n)]


# --- the CLI --------------------------------------------------------------------------------


def cli(*args: str) -> Any:
    return CliRunner().invoke(ctxledger, list(args))


def test_cli_record_and_show(tmp_path: Path) -> None:
    r = ["--root", str(tmp_path / "a")]
    for est, act in ((100, 130), (100, 130), (100, 131), (100, 900)):
        res = cli("calibration", "record", *r, "--provider", "anthropic", "--model", "claude",
                  "--estimated", str(est), "--actual", str(act), "--cache-read", "0")
        assert res.exit_code == 0, res.output
        assert res.stdout.startswith("seq ")
    res = cli("calibration", "record", "--provider", "openai", "--model", "gpt", "--estimated",
              "3", "--actual", "2", "--estimator", "words-v0", "--json")
    assert json.loads(res.stdout) == {"seq": 5, "provider": "openai", "model": "gpt",
                                      "estimator": "words-v0"}
    doc = json.loads(cli("calibration", "show", "--json").stdout)
    assert [(p["provider"], p["estimator"]) for p in doc["profiles"]] == [
        ("anthropic", "chars-v1"), ("openai", "words-v0")]
    one = json.loads(cli("calibration", "show", "--provider", "anthropic", "--model", "claude",
                         "--json", *r).stdout)["profiles"]
    assert len(one) == 1 and one[0]["multiplier"] == 1.3 and one[0]["rejected"] == [
        {"seq": 4, "ratio": 9.0}]
    text = cli("calibration", "show", "--estimator", "chars-v1").stdout
    assert "anthropic / claude / chars-v1" in text and "outliers: seq 4 (ratio 9)" in text
    assert "openai" not in text
    assert json.loads(cli("calibration", "show", "--provider", "x", "--model", "y",
                          "--json").stdout)["profiles"][0]["samples"] == 0
    assert cli("calibration", "show", "--provider", "x").exit_code == 2
    two = json.loads(cli("calibration", "show", "--window", "1", "--json").stdout)["profiles"]
    assert two[0]["used"] == 1 and two[0]["multiplier"] is None


def test_cli_calibrates_recall_across_roots(tmp_path: Path) -> None:
    """Through real processes: a sample recorded with --root A changes B's recall."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True,
                              text=True, env=env, timeout=60)

    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert run("init", "--root", b).returncode == 0
    p = subprocess.run([sys.executable, "-m", "cli", "store", "put", "--root", b],
                       input=json.dumps({"target": "t", "summary": "auth gap " * 10}),
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    for act in ("200", "200", "200"):
        rec = run("calibration", "record", "--root", a, "--provider", "p", "--model", "m",
                  "--estimated", "100", "--actual", act)
        assert rec.returncode == 0 and rec.stdout.startswith("seq "), rec.stderr
    plain = json.loads(run("recall", "--root", b, "-q", "auth", "--json").stdout)["hits"][0]
    cal = json.loads(run("recall", "--root", b, "-q", "auth", "--json", "--provider", "p",
                         "--model", "m").stdout)["hits"][0]
    est = plain["budget_estimate"]["est_tokens"]
    assert plain["budget_estimate"]["calibrated"] is False
    assert cal["budget_estimate"]["est_tokens"] == 2 * est
    assert cal["budget_estimate"]["multiplier"] == 2.0
    shown = run("calibration", "show", "--root", b, "--json")
    assert json.loads(shown.stdout)["profiles"][0]["samples"] == 3
    bad = run("calibration", "record", "--provider", "p", "--model", "m", "--estimated", "1",
              "--actual", "+5")
    assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.splitlines()) == 1
