"""Regressions found reviewing issue 12 (scopes, calibration, artifacts, storage)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import cli.task as task_cli
from cli.main import ctxledger
from eventstore import Event, LogBackend
from projections import ContextStore


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "proj-a", tmp_path / "proj-b"
    a.mkdir()
    b.mkdir()
    return a, b


def cli(*args: str, input: str | None = None) -> tuple[int, str, str]:
    r = CliRunner().invoke(ctxledger, list(args), input=input)
    return r.exit_code, r.stdout, r.stderr


def test_task_watch_in_agent_scope_prints_only_this_projects_events(
    roots: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = roots
    A = ("--root", str(a), "--storage-scope", "agent")
    assert cli("init", *A)[0] == 0
    code, out, _ = cli("task", "create", "--title", "mine", "--id", "a-task", "--json", *A)
    assert code == 0, out

    def follow_once(led: LogBackend, after: int, interval: float) -> Iterator[Event]:
        # meanwhile, project B (agent scope too) creates a task and A starts its own
        with ContextStore.open(b, storage_scope="agent") as sb:
            sb.tasks.create("secret of b", id="b-task")
        with ContextStore.open(a, storage_scope="agent") as sa:
            sa.tasks.start("a-task")
        yield from led.read(after + 1, led.head)

    monkeypatch.setattr(task_cli, "follow_log", follow_once)
    code, out, err = cli("task", "watch", "--json", *A)
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["id"], r["kind"]) for r in rows] == [("a-task", "task.started")]
    assert "secret" not in out and "b-task" not in out


def test_log_append_batch_ids_do_not_collide_between_projects(roots: tuple[Path, Path]) -> None:
    a, b = roots
    A = ("--root", str(a), "--storage-scope", "agent")
    B = ("--root", str(b), "--storage-scope", "agent")
    assert cli("init", *A)[0] == 0 and cli("init", *B)[0] == 0
    code, out, err = cli("log", "append", "--kind", "demo.x", "--data", '{"who": "a"}',
                         "--batch-id", "setup-1", "--json", *A)
    assert code == 0 and json.loads(out)["duplicate"] is False, err
    # project b's first append with the same id is its own, and is written
    code, out, err = cli("log", "append", "--kind", "demo.x", "--data", '{"who": "b"}',
                         "--batch-id", "setup-1", "--json", *B)
    assert code == 0, err
    r = json.loads(out)
    assert r["duplicate"] is False and r["batch_id"] == "setup-1"
    code, out, _ = cli("log", "show", "--json", *B)
    assert [e["data"]["who"] for e in json.loads(out)["events"]] == ["b"]
    # a retry in project b is still idempotent, and says so with b's own id
    code, out, err = cli("log", "append", "--kind", "demo.x", "--data", '{"who": "b"}',
                         "--batch-id", "setup-1", "--json", *B)
    assert code == 0 and json.loads(out) == {**r, "duplicate": True}, err
    # an id too long once prefixed is a usage error: one line, nothing written
    head = json.loads(cli("log", "head", "--json", *B)[1])
    code, out, err = cli("log", "append", "--kind", "demo.x", "--data", "{}",
                         "--batch-id", "x" * 190, *B)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "batch" in err, err
    assert json.loads(cli("log", "head", "--json", *B)[1]) == head


def test_a_root_whose_store_dir_is_the_agent_home_is_agent_scope(
    roots: tuple[Path, Path]
) -> None:
    a, b = roots
    home = a / ".ctxledger"  # $CTXLEDGER_HOME inside a project: its store would be the agent log
    with ContextStore.open(b, home=home, storage_scope="agent") as sb:
        sb.put({"target": "t", "summary": "secret of b"})
    with ContextStore.open(a, home=home, storage_scope="project") as sa:
        assert (sa.layout.scope, sa.layout.fallback) == ("agent", True)
        assert sa.list() == []  # b's entries stay b's
