"""The CLI over a JetStream log: choosing the backend, storage, verify, export, mirror.

A store whose config says ``backend = "jetstream"`` is used exactly as a file
store is; ``--backend``/``--servers`` say the same on the command line. The
commands that work on files (compact, salvage, log import) refuse it in one
line, and ``log mirror`` moves a log between the two backends.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cli.main import ctxledger

pytest.importorskip("nats", reason="nats-py is not installed (pip install '.[test]')")

REPO = Path(__file__).resolve().parents[1]
_n = itertools.count()


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CTXLEDGER_ROOT", raising=False)
    monkeypatch.setenv("CTXLEDGER_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def cli(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(ctxledger, list(args), input=input)


def ok(*args: str, input: str | None = None) -> Result:
    r = cli(*args, input=input)
    assert r.exit_code == 0, (r.output, r.stderr)
    return r


@pytest.fixture
def js_root(tmp_path: Path, nats_cluster: Any) -> Path:
    """A project whose config keeps its log in a fresh R3 stream of the cluster."""
    root = tmp_path / "proj"
    (root / ".ctxledger").mkdir(parents=True)
    stream = f"C{os.getpid()}_{next(_n)}"
    (root / ".ctxledger" / "config.toml").write_text(
        f'[storage]\nbackend = "jetstream"\nservers = {json.dumps(nats_cluster.urls)}\n'
        f'stream = "{stream}"\nreplicas = 3\n')
    os.chmod(root / ".ctxledger" / "config.toml", 0o600)
    return root


def test_a_store_on_jetstream_works_as_a_file_store(js_root: Path) -> None:
    r = str(js_root)
    first = json.loads(ok("init", "--root", r, "--json").stdout)
    assert first["created"] and first["log"]["backend"] == "jetstream"
    assert not json.loads(ok("init", "--root", r, "--json").stdout)["created"]
    assert "log in jetstream stream" in ok("init", "--root", r).stdout
    assert not (js_root / ".ctxledger" / "log").exists()  # no file log beside the stream
    ok("store", "put", "--root", r, input=json.dumps(
        {"target": "t", "summary": "flaky login test", "paths": ["src/login.py"]}))
    ok("log", "append", "--root", r, "--kind", "task.created", "--key", "t1",
       "--data", '{"title": "fix login"}')
    hits = json.loads(ok("recall", "-q", "login", "--root", r, "--json").stdout)
    assert hits["hits"] and hits["hits"][0]["target"] == "t"
    assert "task.created" in ok("log", "show", "--root", r).stdout
    v = json.loads(ok("verify", "--root", r, "--json").stdout)
    assert v["ok"] and v["head_seq"] == 2
    st = json.loads(ok("storage", "--root", r, "--json").stdout)
    log = st["logs"]["project"]
    assert (log["backend"], log["replicas"], log["stream_replicas"], log["head_seq"]) == (
        "jetstream", 3, 3, 2)
    assert log["leader"] and len(log["peers"]) == 2
    assert "jetstream stream" in ok("storage", "--root", r).stdout
    head = json.loads(ok("log", "head", "--root", r, "--json").stdout)
    assert ok("verify", "--root", r, "--anchor", f"{head['seq']}:{head['digest']}")


def test_file_commands_refuse_a_jetstream_log(js_root: Path) -> None:
    r = str(js_root)
    ok("init", "--root", r)
    for args in (["compact"], ["salvage"]):
        res = cli(*args, "--root", r)
        assert res.exit_code == 1 and "works on the file log" in res.stderr, res.output
        assert "Traceback" not in res.output


def test_mirror_file_to_jetstream_and_back_byte_for_byte(tmp_path: Path, nats_cluster: Any
                                                         ) -> None:
    src = tmp_path / "src"
    ok("init", "--root", str(src))
    for i in range(5):
        ok("log", "append", "--root", str(src), "--kind", "test.ev", "--data", f'{{"i": {i}}}')
    export = ok("log", "export", "--root", str(src)).stdout
    stream = f"M{os.getpid()}_{next(_n)}"
    urls = ",".join(nats_cluster.urls)
    to_js = ["log", "mirror", "--root", str(src), "--to", "jetstream", "--to-servers", urls,
             "--to-stream", stream, "--to-replicas", "3", "--json"]
    first = json.loads(ok(*to_js).stdout)
    assert (first["copied_events"], first["already_there"]) == (5, 0)
    ok("log", "append", "--root", str(src), "--kind", "test.ev", "--data", '{"i": 5}')
    again = json.loads(ok(*to_js).stdout)  # catches up
    assert (again["copied_events"], again["already_there"]) == (1, 5)
    js = ["--backend", "jetstream", "--servers", urls]
    other = tmp_path / "other"
    other.mkdir()
    (other / ".ctxledger").mkdir()
    (other / ".ctxledger" / "config.toml").write_text(f'[storage]\nstream = "{stream}"\n')
    os.chmod(other / ".ctxledger" / "config.toml", 0o600)
    via_js = ok(*js, "log", "export", "--root", str(other)).stdout
    assert via_js == ok("log", "export", "--root", str(src)).stdout
    assert via_js.startswith(export)
    back = tmp_path / "back"
    ok(*js, "log", "mirror", "--root", str(other), "--to", "file", "--to-dir", str(back))
    res = cli(*js, "log", "mirror", "--root", str(other), "--to", "file", "--to-dir", str(back))
    assert res.exit_code == 1 and "not empty" in res.stderr
    ok("init", "--root", str(tmp_path / "copy"))
    os.rmdir(tmp_path / "copy" / ".ctxledger" / "log")
    os.rename(back, tmp_path / "copy" / ".ctxledger" / "log")
    assert ok("log", "export", "--root", str(tmp_path / "copy")).stdout == via_js
    # a stream holding another history is refused, nothing written
    res = cli("log", "mirror", "--root", str(tmp_path / "copy"), "--to", "jetstream",
              "--to-servers", urls, "--to-stream", stream)
    assert res.exit_code == 0  # the same history: nothing to copy
    diverged = tmp_path / "diverged"
    ok("init", "--root", str(diverged))
    ok("log", "append", "--root", str(diverged), "--kind", "other.ev", "--data", "{}")
    res = cli("log", "mirror", "--root", str(diverged), "--to", "jetstream",
              "--to-servers", urls, "--to-stream", stream)
    assert res.exit_code == 1 and "not this log's first ones" in res.stderr


def test_bad_backend_options_are_one_line_errors(tmp_path: Path) -> None:
    r = str(tmp_path / "p")
    ok("init", "--root", r)
    res = cli("log", "show", "--root", r, "--backend", "jetstream")
    assert res.exit_code == 1 and "needs its servers" in res.stderr
    res = cli("log", "show", "--root", r, "--backend", "jetstream", "--servers", "http://x")
    assert res.exit_code == 2 and "not a NATS URL" in res.stderr
    res = cli("log", "show", "--root", r, "--backend", "kafka")
    assert res.exit_code == 2
    res = cli("log", "mirror", "--root", r, "--to", "file")
    assert res.exit_code == 2 and "--to-dir" in res.stderr
    (tmp_path / "p" / ".ctxledger" / "config.toml").write_text('[storage]\nreplicas = 9\n')
    res = cli("log", "show", "--root", r)
    assert res.exit_code == 1 and "replicas must be an integer from 1 to 5" in res.stderr


def test_unreachable_servers_fail_in_one_line(tmp_path: Path) -> None:
    """A real process: a clear error, exit 1, no traceback, within the connect timeout."""
    env = {**os.environ, "CTXLEDGER_HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, "-m", "cli", "--root", str(tmp_path), "--backend", "jetstream",
         "--servers", "nats://127.0.0.1:9", "log", "show"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    assert out.returncode == 1, out
    assert out.stderr.startswith("error: cannot connect to NATS at nats://127.0.0.1:9")
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1


def test_verify_reports_on_a_damaged_stream(js_root: Path, nats_cluster: Any) -> None:
    """A stream holding a message no writer writes still opens for verify, which
    reports it (exit 1) instead of failing before it can look."""
    from eventstore.jetstream.client import Connection
    from eventstore.jetstream.messages import ATTEMPT

    r = str(js_root)
    ok("init", "--root", r)
    ok("log", "append", "--root", r, "--kind", "test.ev", "--data", "{}")
    st = json.loads(ok("storage", "--root", r, "--json").stdout)["logs"]["project"]
    conn = Connection(list(nats_cluster.urls), connect_timeout=5.0, request_timeout=5.0)
    try:
        info = conn.stream_state(st["stream"])
        conn.publish(info.subjects[0][:-2] + ".batch", b"junk", {ATTEMPT: "x"}, 1)
    finally:
        conn.close()
    res = cli("verify", "--root", r, "--json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert not doc["ok"] and doc["problems"][0]["segment"].endswith("message 2")
    res = cli("log", "show", "--root", r)
    assert res.exit_code == 1 and "corrupt log" in res.stderr and "Traceback" not in res.output


def test_storage_of_a_stream_not_made_yet(js_root: Path) -> None:
    doc = json.loads(ok("storage", "--root", str(js_root), "--json").stdout)
    assert doc["logs"]["project"]["exists"] is False and doc["views"] == {}
    assert "(not created yet)" in ok("storage", "--root", str(js_root)).stdout
    res = cli("--backend", "jetstream", "--servers", "foo bar", "storage", "--root",
              str(js_root))
    assert res.exit_code == 2 and "not a URL" in res.stderr


def test_only_init_makes_the_stream(js_root: Path) -> None:
    """A mistyped stream or server must not start an empty team log."""
    r = str(js_root)
    res = cli("log", "append", "--root", r, "--kind", "x.y", "--data", "{}")
    assert res.exit_code == 1 and "run `ctxledger init` first" in res.stderr
    assert json.loads(ok("storage", "--root", r, "--json").stdout)["logs"]["project"][
        "exists"] is False


def test_mirror_keeps_a_batch_id_the_file_log_holds_twice(tmp_path: Path, nats_cluster: Any
                                                         ) -> None:
    """The file log remembers batch ids for a window of frames, so one may come back
    later; a mirror copies both batches as they are."""
    from eventstore import Event, Ledger
    from eventstore.jetstream import JetStreamLog
    from eventstore.mirror import mirror_to_stream

    with Ledger.open(tmp_path / "log", batch_window=2) as led:
        led.append([Event("a")], batch_id="again")
        for i in range(3):
            led.append([Event("b", None, {"i": i})])
        assert not led.append([Event("c")], batch_id="again").duplicate
        stream = f"D{os.getpid()}_{next(_n)}"
        with JetStreamLog(list(nats_cluster.urls), stream, prefix=f"ctx.{stream}",
                          replicas=3) as js:
            done = mirror_to_stream(led, js)
            assert done.copied_batches == 5 and js.head_digest == led.head_digest
            assert list(js.export_lines()) == list(led.export_lines())


def test_two_streams_of_one_project_on_one_cluster(tmp_path: Path, nats_cluster: Any) -> None:
    src = tmp_path / "src"
    ok("init", "--root", str(src))
    ok("log", "append", "--root", str(src), "--kind", "test.ev", "--data", "{}")
    urls = ",".join(nats_cluster.urls)
    for name in ("A", "B"):
        stream = f"{name}{os.getpid()}_{next(_n)}"
        doc = json.loads(ok("log", "mirror", "--root", str(src), "--to", "jetstream",
                            "--to-servers", urls, "--to-stream", stream, "--json").stdout)
        assert doc["copied_events"] == 1
