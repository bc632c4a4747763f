"""CLI of the views: store put/get/list/prune/stats, recall, replay, rebuild, checkpoint, demo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cli.main import ctxledger

REPO = Path(__file__).resolve().parents[1]
PACKET = {
    "target": "diffy.analyze",
    "summary": "coverage gap in auth",
    "paths": ["src/auth.rs"],
    "symbols": ["AuthService"],
    "tests": ["test_login"],
    "task_ids": ["task-123"],
    "packet_types": ["coverage"],
    "payload": {"note": "tokens expire"},
}


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CTXLEDGER_ROOT", raising=False)
    monkeypatch.setenv("CTXLEDGER_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def cli(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(ctxledger, list(args), input=input)


def ok_json(*args: str, input: str | None = None) -> Any:
    r = cli(*args, "--json", input=input)
    assert r.exit_code == 0, (r.output, r.stderr)
    assert r.stderr == ""  # no progress bar or chatter outside a terminal
    return json.loads(r.stdout)


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "proj"
    assert cli("init", "--root", str(r)).exit_code == 0
    return r


def test_put_get_list_stats_round_trip(root: Path, tmp_path: Path) -> None:
    f = tmp_path / "p.json"
    f.write_text(json.dumps(PACKET))
    put = ok_json("store", "put", str(f), "--root", str(root))
    assert set(put) >= {"cache_key", "seq"} and len(put["cache_key"]) == 64 and put["seq"] == 1
    again = ok_json(
        "store", "put", "--root", str(root), input=json.dumps(dict(reversed(PACKET.items())))
    )
    assert again["cache_key"] == put["cache_key"] and again["seq"] == 2  # key order does not matter
    got = ok_json("store", "get", "--key", put["cache_key"], "--root", str(root))
    assert got["body"] == PACKET and got["target"] == "diffy.analyze"
    assert set(got) == {"cache_key", "target", "created_at_unix", "body", "metadata", "freshness"}
    listed = ok_json("store", "list", "--root", str(root))["entries"]
    assert [e["cache_key"] for e in listed] == [put["cache_key"]]
    assert ok_json("store", "list", "--target", "nope", "--root", str(root))["entries"] == []
    assert ok_json("store", "list", "--as-of", "0", "--root", str(root))["entries"] == []
    stats = ok_json("store", "stats", "--root", str(root))
    assert stats["entries"] == 1 and stats["head_seq"] == 2
    for k in ("oldest_created_at_unix", "newest_created_at_unix", "evictions"):
        assert k in stats


def test_prune_all_and_ttl(root: Path) -> None:
    for i in range(3):
        ok_json(
            "store", "put", "--root", str(root), input=json.dumps({**PACKET, "summary": f"s{i}"})
        )
    assert ok_json("store", "prune", "--root", str(root)) == {
        "removed": 0,
        "remaining": 3,
        "reasons": {},
    }
    r = ok_json("store", "prune", "--ttl", "0", "--root", str(root))
    assert r == {"removed": 3, "remaining": 0, "reasons": {"expired_ttl": 3}}
    ok_json("store", "put", "--root", str(root), input=json.dumps(PACKET))
    r = ok_json("store", "prune", "--all", "--root", str(root))
    assert r == {"removed": 1, "remaining": 0, "reasons": {"manual_prune": 1}}
    ev = ok_json("store", "stats", "--root", str(root))["evictions"]
    assert ev["expired_ttl"] == 3 and ev["manual_prune"] == 1


@pytest.mark.parametrize(
    "payload, needle, code",
    [
        ("{not json", "not valid JSON", 2),  # not JSON: a usage error, like --data
        ('{"target": "t", "x": 1e999}', "out of range", 2),
        ('{"target": "t", "x": Infinity}', "Infinity", 2),
        ('{"target": "t", "target": "u"}', "duplicate key", 2),
        ("[1, 2]", "must be a JSON object", 1),  # JSON, but not a packet: the library's rules
        ('{"summary": "no target"}', "target", 1),
        ('{"target": ""}', "target", 1),
        ('{"target": "t", "paths": "src/a.rs"}', "paths", 1),
    ],
)
def test_bad_packets_are_one_line_and_touch_nothing(
    root: Path, payload: str, needle: str, code: int
) -> None:
    before = snapshot(root)
    r = cli("store", "put", "--root", str(root), input=payload)
    assert r.exit_code == code
    assert r.stdout == "" and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert snapshot(root) == before


def test_oversized_packet_refused(root: Path) -> None:
    (root / ".ctxledger" / "config.toml").write_text("[store]\nmax_packet_bytes = 100\n")
    before = snapshot(root)
    r = cli("store", "put", "--root", str(root), input=json.dumps({**PACKET, "summary": "x" * 200}))
    assert r.exit_code == 1 and "limit" in r.stderr
    assert snapshot(root) == before


def test_missing_store_and_missing_key(tmp_path: Path, root: Path) -> None:
    r = cli("store", "list", "--root", str(tmp_path / "nowhere"))
    assert r.exit_code == 1 and "ctxledger init" in r.stderr
    assert not (tmp_path / "nowhere").exists()
    r = cli("store", "get", "--key", "ab" * 32, "--root", str(root))
    assert r.exit_code == 1 and "no live entry" in r.stderr


def test_read_commands_write_nothing(root: Path) -> None:
    ok_json("store", "put", "--root", str(root), input=json.dumps(PACKET))
    before = snapshot(root)
    for args in (
        ["store", "list"],
        ["store", "stats"],
        ["recall", "-q", "auth"],
        ["replay"],
        ["verify"],
    ):
        assert cli(*args, "--root", str(root)).exit_code == 0
    assert snapshot(root) == before


def test_read_commands_map_checkpoints_and_write_commands_read_them(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cli.views
    from projections import ContextStore

    opened: list[tuple[bool, bool]] = []
    real = ContextStore.open

    def spy(*args: Any, **kw: Any) -> ContextStore:
        opened.append((kw.get("readonly", False), kw.get("map_checkpoints", False)))
        return real(*args, **kw)

    monkeypatch.setattr(cli.views.ContextStore, "open", spy)
    ok_json("store", "put", "--root", str(root), input=json.dumps(PACKET))
    key = ok_json("store", "list", "--root", str(root))["entries"][0]["cache_key"]
    for args in (["store", "get", "--key", key], ["store", "stats"], ["recall", "-q", "auth"]):
        ok_json(*args, "--root", str(root))
    ok_json("store", "prune", "--all", "--root", str(root))
    assert opened == [(False, False)] + [(True, True)] * 4 + [(False, False)]


def test_console_entry_keeps_openblas_to_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.main import main

    def exit_(code: int) -> None:  # main ends with os._exit; keep this test process alive
        raise SystemExit(code)

    monkeypatch.setattr(os, "_exit", exit_)
    for preset, want in ((None, "1"), ("4", "4")):  # the caller's own setting wins
        if preset is None:
            monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
        else:
            monkeypatch.setenv("OPENBLAS_NUM_THREADS", preset)
        with pytest.raises(SystemExit) as e:
            main(["--version"])
        assert e.value.code == 0
        assert os.environ["OPENBLAS_NUM_THREADS"] == want


def test_console_entry_exit_codes_and_output_in_a_real_process(root: Path) -> None:
    """main() ends with os._exit: output still flushed, codes as documented."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CTXLEDGER_") or k == "CTXLEDGER_HOME"}
    env["PYTHONPATH"] = str(REPO)
    ok_json("store", "put", "--root", str(root), input=json.dumps(PACKET))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", *args, "--root", str(root)],
                              capture_output=True, text=True, env=env, timeout=60)

    p = run("recall", "-q", "auth", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["hits"], p.stderr
    p = run("store", "get", "--key", "0" * 64)
    assert (p.returncode, p.stdout) == (1, "") and p.stderr.startswith("error: no live entry")
    p = run("recall", "--limit", "-1", "-q", "x")
    assert p.returncode == 2 and p.stderr.startswith("error: ")


def test_recall_command_choices_are_the_engines() -> None:
    import cli.recall
    from projections.memory import MEMORY_KINDS
    from projections.memory_rank import MODES

    assert cli.recall.MODES == MODES and cli.recall.MEMORY_KINDS == MEMORY_KINDS


def test_recall_json_and_usage_errors(root: Path) -> None:
    ok_json("store", "put", "--root", str(root), input=json.dumps(PACKET))
    ok_json(
        "store",
        "put",
        "--root",
        str(root),
        input=json.dumps({"target": "other", "summary": "unrelated words", "paths": ["docs/x.md"]}),
    )
    hits = ok_json("recall", "--query", "auth coverage", "--root", str(root))["hits"]
    assert hits and hits[0]["target"] == "diffy.analyze" and "bm25_text" in hits[0]["match_reasons"]
    for k in (
        "cache_key",
        "score",
        "summary",
        "snippet",
        "matched_tokens",
        "matched_paths",
        "matched_symbols",
        "packet_types",
        "task_ids",
        "budget_estimate",
        "created_at_unix",
        "age_secs",
    ):
        assert k in hits[0]
    sym = ok_json("recall", "-q", "AuthService", "--root", str(root))["hits"]
    assert "symbol_match" in sym[0]["match_reasons"]
    only = ok_json("recall", "--task", "task-123", "--scope", "task-only", "--root", str(root))[
        "hits"
    ]
    assert [h["target"] for h in only] == ["diffy.analyze"]
    for bad in (["--scope", "bogus", "-q", "x"], ["--limit", "-1", "-q", "x"], ["-q", ""]):
        r = cli("recall", *bad, "--root", str(root))
        assert r.exit_code == 2, bad
        assert len(r.stderr.strip().splitlines()) == 1


def test_replay_rebuild_checkpoint(root: Path) -> None:
    for i in range(5):
        ok_json(
            "store", "put", "--root", str(root), input=json.dumps({**PACKET, "summary": f"s{i}"})
        )
    rep = ok_json("replay", "--root", str(root))
    assert rep["events"] == 5 and rep["views"]["cache"]["entries"] == 5
    assert ok_json("replay", "--until", "2", "--root", str(root))["views"]["cache"]["entries"] == 2
    r = cli("replay", "--until", "yesterday", "--root", str(root))
    assert r.exit_code == 2
    reb = ok_json("rebuild", "--root", str(root))
    assert reb["events"] == 5
    assert set(reb["projections"]) == {"cache", "recall", "tasks", "handoffs", "fingerprints",
                                       "memory"}
    assert cli("rebuild", "--projection", "nope", "--root", str(root)).exit_code == 2
    ck = ok_json("checkpoint", "--root", str(root))
    assert ck["head_seq"] == 5


def test_garbled_checkpoints_answer_identically(root: Path) -> None:
    # exact scores: without the recency term, which moves with the clock between the runs
    (root / ".ctxledger" / "config.toml").write_text("[recall]\nrecency_weight = 0\n")
    for i in range(4):
        ok_json(
            "store",
            "put",
            "--root",
            str(root),
            input=json.dumps({**PACKET, "summary": f"auth {i}"}),
        )
    ok_json("checkpoint", "--root", str(root))
    want = ok_json("recall", "-q", "auth", "--root", str(root))
    for ck in (root / ".ctxledger" / "checkpoints").glob("*.ckpt*"):
        data = bytearray(ck.read_bytes())
        data[len(data) // 2] ^= 0xFF
        ck.write_bytes(bytes(data))
    got = ok_json("recall", "-q", "auth", "--root", str(root))
    for a, b in zip(want["hits"], got["hits"], strict=True):
        assert a["cache_key"] == b["cache_key"] and a["score"] == b["score"]
    stats = ok_json("store", "stats", "--root", str(root))
    assert stats["checkpoint_fallbacks"] >= 2


def test_demo_in_a_given_root(tmp_path: Path) -> None:
    out = ok_json("demo", "--packets", "300", "--root", str(tmp_path / "d"))
    assert out["ingest"]["packets"] == 300 and out["verify"]["ok"] is True
    assert out["stats"]["entries"] == 300 and out["get"]["body"]["target"].startswith("stdlib.")
    assert out["recall"]["hits"]
    task = out["task"]
    assert task["task"]["state"] == "completed" and task["record"]["files"]
    assert task["record"]["open_questions"] == [] and task["handoff"]["task_id"] == \
        task["task"]["id"]
    assert out["stats"]["tasks"]["completed"] == 1


def test_demo_default_store_in_a_real_process(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CTXLEDGER_") or k == "CTXLEDGER_HOME"}
    env["CTXLEDGER_HOME"] = str(tmp_path / "home")
    env["PYTHONPATH"] = str(REPO)
    for _ in range(2):  # the second run starts the demo store afresh
        p = subprocess.run(
            [sys.executable, "-m", "cli", "demo", "--packets", "200"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            cwd=tmp_path,
        )
        assert p.returncode == 0, p.stderr
        assert "verify     ok" in p.stdout and p.stderr == ""
    store = tmp_path / "home" / "demo" / ".ctxledger"
    assert store.is_dir()
    p = subprocess.run(
        [sys.executable, "-m", "cli", "store", "stats", "--json", "--root", str(store.parent)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert json.loads(p.stdout)["entries"] == 200


def test_keys_from_store_list_work_in_store_get(root: Path) -> None:
    put = ok_json("store", "put", "--root", str(root), input=json.dumps(PACKET))
    listed = cli("store", "list", "--root", str(root))
    short = listed.stdout.splitlines()[1].split()[0]
    assert len(short) == 16 and put["cache_key"].startswith(short)
    for key in (short, short[:8], put["cache_key"], put["cache_key"].upper()):
        assert ok_json("store", "get", "--key", key, "--root", str(root))["body"] == PACKET
    r = cli("store", "get", "--key", "abc", "--root", str(root))
    assert r.exit_code == 2 and "at least 8" in r.stderr
    absent = "f" * 8 if not short.startswith("f" * 8) else "0" * 8
    r = cli("store", "get", "--key", absent, "--root", str(root))
    assert r.exit_code == 1 and "no live entry" in r.stderr


def test_an_ambiguous_prefix_lists_the_candidates(root: Path) -> None:
    from eventstore import Event, Ledger

    keys = ["abcdef01" + c * 56 for c in "12"]
    with Ledger.open(root / ".ctxledger" / "log") as led:  # keys chosen to share 8 digits
        led.append([Event("cache.put", k, {"packet": {"target": "t"}, "bytes": 1}) for k in keys])
    r = cli("store", "get", "--key", "abcdef01", "--root", str(root))
    assert r.exit_code == 1 and r.stdout == ""
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "ambiguous" in line
    assert keys[0] in line and keys[1] in line


def test_list_json_says_when_the_page_was_cut(root: Path) -> None:
    for i in range(3):
        packet = json.dumps({**PACKET, "summary": str(i)})
        ok_json("store", "put", "--root", str(root), input=packet)
    page = ok_json("store", "list", "--limit", "2", "--root", str(root))
    assert len(page["entries"]) == 2 and page["total"] == 3 and page["next_offset"] == 2
    rest = ok_json("store", "list", "--offset", "2", "--root", str(root))
    assert len(rest["entries"]) == 1 and rest["next_offset"] is None
    human = cli("store", "list", "--limit", "2", "--root", str(root)).stdout
    assert human.splitlines()[-1] == "(2 of 3; --offset 2 for more)"


def test_root_and_json_before_the_command(root: Path, tmp_path: Path) -> None:
    ok_json("store", "put", "--root", str(root), input=json.dumps(PACKET))
    want = ok_json("store", "list", "--root", str(root))
    for argv in (
        ["--json", "--root", str(root), "store", "list"],
        ["--json", "store", "--root", str(root), "list"],
        ["store", "--json", "list", "--root", str(root)],
        ["--root", str(tmp_path / "elsewhere"), "store", "list", "--json", "--root", str(root)],
    ):
        r = cli(*argv)
        assert r.exit_code == 0, (argv, r.output)
        assert json.loads(r.stdout) == want, argv
    r = cli("--root", str(tmp_path / "nowhere"), "log", "show")
    assert r.exit_code == 1 and "no ctxledger store" in r.stderr


def test_as_of_past_the_head_and_bad_times_are_usage_errors(root: Path) -> None:
    ok_json("store", "put", "--root", str(root), input=json.dumps(PACKET))
    for argv, option, why in [
        (["store", "list", "--as-of", "99"], "--as-of", "past the head (seq 1)"),
        (["replay", "--until", "99"], "--until", "past the head (seq 1)"),
        (["recall", "-q", "auth", "--as-of", "99"], "--as-of", "past the head (seq 1)"),
        (["store", "list", "--as-of", "@-5"], "--as-of", "before 1970"),
        (["replay", "--until", "@-5"], "--until", "before 1970"),
        (["store", "list", "--since", "@nan"], "--since", "finite"),
        (["store", "prune", "--ttl", "nan"], "--ttl", "not a duration"),
        (["store", "prune", "--ttl", "inf"], "--ttl", "not a duration"),
        (["store", "list", "--as-of", "@99999999999"], "--as-of", "in the future"),
    ]:
        r = cli(*argv, "--root", str(root))
        assert r.exit_code == 2, (argv, r.output)
        assert f"'{option}'" in r.stderr and why in r.stderr, (argv, r.stderr)
    assert ok_json("store", "list", "--as-of", "1", "--root", str(root))["total"] == 1
    assert ok_json("store", "list", "--since", "1h", "--root", str(root))["total"] == 1
    assert ok_json("store", "list", "--since", "2000000000", "--root", str(root))["total"] == 0


def test_rebuild_help_lists_the_projections() -> None:
    from projections.store import projections

    out = cli("rebuild", "--help").stdout
    names = [p.name for p in projections()]
    assert all(n in out for n in names) and "|".join(names) in out.replace(" ", "")
