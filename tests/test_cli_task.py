"""CLI of tasks and handoffs: every command, its JSON, and bad input (nothing written)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cli.main import ctxledger
from tests.procs import sigint_default

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CTXLEDGER_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)


def cli(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(ctxledger, list(args), input=input)


def ok_json(*args: str, input: str | None = None) -> Any:
    r = cli(*args, "--json", input=input)
    assert r.exit_code == 0, (r.output, r.stderr)
    return json.loads(r.stdout)


def log_bytes(root: Path) -> dict[str, bytes]:
    log = root / ".ctxledger" / "log"
    return {p.name: p.read_bytes() for p in sorted(log.iterdir()) if p.is_file()}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "proj"
    assert cli("init", "--root", str(r)).exit_code == 0
    return r


def test_a_task_from_create_to_complete(root: Path) -> None:
    R = ("--root", str(root))
    made = ok_json("task", "create", "--title", "fix auth", "--label", "auth", "--label", "p1", *R)
    assert set(made) == {"id", "seq"} and made["seq"] == 1
    tid = made["id"]
    assert ok_json("task", "start", tid, *R)["state"] == "running"
    q = ok_json("task", "note", tid, "--type", "question", "--data", '{"text": "why?"}', *R)
    ok_json("task", "note", tid, "--type", "decision",
            "--data", json.dumps({"text": "this", "resolves": q["seq"]}), *R)
    ok_json("task", "note", tid, "--type", "file_edit", "--data", "-", *R,
            input='{"path": "src/auth.rs"}')
    ok_json("task", "progress", tid, "--message", "half", "--fraction", "0.5", *R)
    done = ok_json("task", "complete", tid, "--result", '{"pr": 7}', *R)
    assert done["state"] == "completed"
    listed = ok_json("task", "list", *R)["tasks"]
    assert [t["id"] for t in listed] == [tid] and listed[0]["labels"] == ["auth", "p1"]
    assert ok_json("task", "list", "--state", "running", *R) == {"tasks": []}
    assert ok_json("task", "list", "--label", "p1", *R)["tasks"][0]["id"] == tid
    assert ok_json("task", "list", "--as-of", "2", *R)["tasks"][0]["state"] == "running"
    shown = ok_json("task", "show", tid, *R)
    assert shown["task"]["result"] == {"pr": 7} and shown["task"]["progress"]["fraction"] == 0.5
    assert shown["record"]["open_questions"] == []
    assert shown["record"]["files"] == {"src/auth.rs": {"read": 0, "edit": 1, "last_seq": 5}}
    hist = ok_json("task", "history", tid, *R)["events"]
    assert [e["kind"] for e in hist] == ["task.created", "task.started", "task.note",
                                         "task.note", "task.note", "task.progress",
                                         "task.completed"]
    r = cli("task", "export", tid, *R)
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert r.exit_code == 0 and [x["seq"] for x in lines] == list(range(1, 8))
    assert all(x["id"] == tid and x["status"] == "applied" for x in lines)
    human = cli("task", "show", tid, *R).stdout
    assert "completed" in human and "src/auth.rs" in human
    assert tid in cli("task", "list", *R).stdout


def test_cancel_release_and_handoffs(root: Path) -> None:
    R = ("--root", str(root))
    tid = ok_json("task", "create", "--title", "t", "--id", "t1", *R)["id"]
    assert tid == "t1"
    ok_json("task", "start", tid, *R)
    asked = ok_json("task", "cancel", tid, "--reason", "stop", *R)
    assert asked["state"] == "running" and asked["cancel_requested"]
    assert ok_json("task", "cancel", tid, *R)["state"] == "cancelled"
    h = ok_json("agent", "handoff", "-", "--task", tid, *R, input='{"next": "x"}')
    h2 = ok_json("agent", "handoff", "-", "--task", tid, *R, input='{"next": "y"}')
    boot = root / "boot.json"
    boot.write_text('{"goal": "g"}')
    b = ok_json("agent", "bootstrap", str(boot), *R)
    shown = ok_json("agent", "show", "--task", tid, *R)
    assert shown["handoff"]["id"] == h2["id"] and shown["bootstrap"] is None
    assert ok_json("agent", "show", *R)["bootstrap"]["id"] == b["id"]
    r = cli("agent", "consume", h["id"], *R)
    assert r.exit_code == 1 and f"superseded by {h2['id']}" in r.stderr
    assert ok_json("agent", "consume", h2["id"], "--by", "run2", *R)["resume_count"] == 1
    hist = ok_json("agent", "show", "--history", *R)["history"]
    assert [x["id"] for x in hist] == [h["id"], h2["id"], b["id"]]
    # a quarantine made by another tool, lifted by release
    ok_json("log", "append", "--kind", "task.started", "--key", tid, "--data", "{}", *R)
    q = ok_json("task", "show", tid, *R)["task"]
    assert q["quarantined"] and q["quarantine"]["reason"] == "the task is already cancelled"
    assert ok_json("task", "list", "--state", "quarantined", *R)["tasks"][0]["id"] == tid
    ok_json("task", "release", tid, *R)
    assert not ok_json("task", "show", tid, *R)["task"]["quarantined"]


@pytest.mark.parametrize("args,code,needle", [
    (["task", "start", "nope"], 1, "no task with id nope"),
    (["task", "complete", "known"], 1, "cannot complete task known: the task was never started"),
    (["task", "create", "--title", "again", "--id", "known"], 1, "already exists"),
    (["task", "create", "--title", ""], 2, "title"),
    (["task", "create", "--title", "x", "--id", "../etc"], 2, "not an id"),
    (["task", "create", "--title", "x", "--parent", "nope"], 1, "no parent task"),
    (["task", "note", "known", "--type", "decision", "--data", "{bad"], 2, "not valid JSON"),
    (["task", "note", "known", "--type", "decision", "--data", "[1]"], 2, "JSON object"),
    (["task", "note", "known", "--type", "decision", "--data", '{"x": NaN}'], 2, "JSON"),
    (["task", "note", "known", "--type", "bogus"], 2, "bogus"),
    (["task", "note", "known", "--type", "file_read"], 2, "path"),
    (["task", "fail", "known"], 2, "--reason"),
    (["task", "progress", "known", "--fraction", "2"], 2, "fraction"),
    (["task", "release", "known"], 1, "not quarantined"),
    (["task", "show", "nope"], 1, "no task with id nope"),
    (["task", "history", "nope"], 1, "no task with id nope"),
    (["task", "list", "--state", "bogus"], 2, "bogus"),
    (["agent", "consume", "h-nope"], 1, "no handoff"),
    (["agent", "handoff", "-", "--task", "nope"], 1, "no task with id nope"),
    (["agent", "handoff", "missing.json"], 2, "cannot read"),
])
def test_bad_input_one_line_and_nothing_written(
    root: Path, args: list[str], code: int, needle: str
) -> None:
    made = cli("task", "create", "--title", "k", "--id", "known", "--root", str(root))
    assert made.exit_code == 0
    before = log_bytes(root)
    r = cli(*args, "--root", str(root), input='{"a": 1}')
    assert r.exit_code == code, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr
    assert r.stdout == ""
    assert log_bytes(root) == before


def test_no_store_is_a_clear_error(tmp_path: Path) -> None:
    r = cli("task", "list", "--root", str(tmp_path / "nowhere"))
    assert r.exit_code == 1 and "ctxledger init" in r.stderr


def test_help_of_every_task_and_agent_command() -> None:
    for group, names in (("task", ["create", "start", "note", "progress", "cancel", "complete",
                                   "fail", "release", "list", "show", "history", "export",
                                   "watch"]),
                         ("agent", ["bootstrap", "handoff", "consume", "show"])):
        r = cli(group, "--help")
        assert r.exit_code == 0
        for n in names:
            assert n in r.stdout
            sub = cli(group, n, "--help")
            assert sub.exit_code == 0 and "--root" in sub.stdout and "--json" in sub.stdout


def _cmd() -> list[str]:
    exe = Path(sys.executable).with_name("ctxledger")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "cli"]


def test_watch_follows_task_events_from_another_process(root: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    tid = ok_json("task", "create", "--title", "w", "--id", "w1", "--root", str(root))["id"]
    p = subprocess.Popen([*_cmd(), "task", "watch", "--json", "--interval", "0.02",
                          "--root", str(root)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         preexec_fn=sigint_default)
    try:
        time.sleep(1.0)  # let it start and read the head (what it prints starts after)
        ok_json("task", "start", tid, "--root", str(root))
        ok_json("store", "put", "--root", str(root), input='{"target": "t", "summary": "s"}')
        ok_json("log", "append", "--kind", "task.started", "--key", tid, "--data", "{}",
                "--root", str(root))
        ok_json("log", "append", "--kind", "task.completed", "--key", tid, "--data", "{}",
                "--root", str(root))  # the task is quarantined now: held
        assert p.stdout is not None
        rows = [json.loads(p.stdout.readline()) for _ in range(3)]
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=10)
    assert [(r["kind"], r["status"], r["state"]) for r in rows] == [
        ("task.started", "applied", "running"),
        ("task.started", "quarantined", "running"),
        ("task.completed", "held", "running"),
    ]
    assert p.returncode == 130


def test_log_corruption_fails_closed_for_task_commands(root: Path) -> None:
    R = ("--root", str(root))
    for i in range(3):
        tid = ok_json("task", "create", "--title", f"t{i}", "--id", f"c{i}", *R)["id"]
        ok_json("task", "note", tid, "--type", "decision",
                "--data", json.dumps({"text": "MARKER" + str(i)}), *R)
    seg = next((root / ".ctxledger" / "log").glob("*.seg"))
    raw = bytearray(seg.read_bytes())
    at = raw.index(b"MARKER1")  # inside the payload of a frame in the middle of the log
    raw[at] ^= 0xFF
    seg.write_bytes(bytes(raw))
    r = cli("task", "history", "c1", *R)  # reads that frame: refuses, names where
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1
    assert seg.name in r.stderr, r.stderr
    for ck in (root / ".ctxledger" / "checkpoints").glob("tasks.ckpt*"):
        ck.unlink()
    r = cli("task", "list", *R)  # no checkpoint: the fold reads the damaged frame
    assert r.exit_code == 1 and r.stdout == "" and seg.name in r.stderr
    before = log_bytes(root)
    r = cli("task", "complete", "c2", *R)
    assert r.exit_code == 1 and log_bytes(root) == before
