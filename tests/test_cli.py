"""The CLI contract: commands, JSON shapes, exit codes, and that bad input touches nothing.

Most tests go through click's CliRunner (fast, in process); the ones about the
real process boundary (exit codes, stderr, Ctrl-C, a closed pipe, the console
script) run ``python -m cli`` in a subprocess.
"""

from __future__ import annotations

import json
import math
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import cbor2
import click
import pytest
from cli_walk import walk
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import COMMANDS, CtxGroup, ctxledger
from cli.options import STORE_DIR, store_options
from cli.output import dumps, to_jsonable
from eventstore import Event, Ledger
from tests.procs import sigint_default

REPO = Path(__file__).resolve().parents[1]
VERIFY_KEYS = {"ok", "events", "frames", "head_seq", "problems"}


# --- helpers ------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may see a caller's CTXLEDGER_ROOT or write into the checkout."""
    monkeypatch.delenv("CTXLEDGER_ROOT", raising=False)
    monkeypatch.delenv("CTXLEDGER_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)


def cli(*args: str, input: str | bytes | None = None, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(ctxledger, list(args), input=input, env=env)


def proc_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CTXLEDGER_") or k == "CTXLEDGER_HOME"}  # (conftest's own home)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def sh(
    *args: str, input: bytes | None = None, cmd: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a real process (``python -m cli`` unless ``cmd`` says otherwise)."""
    argv = (cmd or [sys.executable, "-m", "cli"]) + list(args)
    return subprocess.run(
        argv,
        input=input.decode() if input else None,
        capture_output=True,
        text=True,
        env=proc_env(),
        timeout=60,
    )


def one_json(text: str) -> Any:
    """Exactly one strict JSON document (no NaN, nothing after it)."""

    def reject(name: str) -> Any:
        raise ValueError(f"non-JSON constant {name}")

    return json.loads(text, parse_constant=reject)


def one_error_line(stderr: str) -> str:
    lines = stderr.strip("\n").splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under the store (and the root itself), by relative path."""
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An initialised store with three events."""
    r = tmp_path / "proj"
    assert cli("init", "--root", str(r)).exit_code == 0
    for kind, key, data in [
        ("task.created", "t1", {"title": "x"}),
        ("task.note", "t1", {"n": 1}),
        ("cache.put", None, {"target": "a.b"}),
    ]:
        args = ["log", "append", "--root", str(r), "--kind", kind, "--data", json.dumps(data)]
        res = cli(*args, *(["--key", key] if key else []))
        assert res.exit_code == 0, res.output
    return r


def log_dir(root: Path) -> Path:
    return root / STORE_DIR / "log"


def segment(root: Path) -> Path:
    segs = sorted(log_dir(root).glob("*.seg"))
    assert segs
    return segs[-1]


# --- init ---------------------------------------------------------------------------


def test_init_creates_layout_and_is_idempotent(tmp_path: Path) -> None:
    r = tmp_path / "new" / "project"  # a root that does not exist yet is created
    first = cli("init", "--root", str(r), "--json")
    assert first.exit_code == 0, first.output
    doc = one_json(first.stdout)
    assert doc == {"root": str(r), "store": str(r / STORE_DIR), "created": True,
                   "storage_scope": "project", "scope_reason": "default",
                   "project_id": doc["project_id"]}
    assert re.fullmatch(r"[0-9a-f]{32}", doc["project_id"])
    for sub in ("log", "checkpoints", "artifacts"):
        assert (r / STORE_DIR / sub).is_dir()
    assert (r / STORE_DIR / ".gitignore").read_text().splitlines()[-1] == "*"
    before = snapshot(r)
    again = cli("init", "--root", str(r), "--json")
    assert again.exit_code == 0 and one_json(again.stdout)["created"] is False
    assert snapshot(r) == before
    human = cli("init", "--root", str(r))
    assert human.exit_code == 0 and str(r / STORE_DIR) in human.stdout


def test_root_defaults_to_cwd_then_env_and_flag_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli("init").exit_code == 0
    assert (tmp_path / STORE_DIR / "log").is_dir()
    other = tmp_path / "other"
    res = cli("init", "--json", env={"CTXLEDGER_ROOT": str(other)})
    assert one_json(res.stdout)["store"] == str(other / STORE_DIR)
    third = tmp_path / "third"
    res = cli("init", "--json", "--root", str(third), env={"CTXLEDGER_ROOT": str(other)})
    assert one_json(res.stdout)["root"] == str(third)


def test_root_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    res = cli("log", "show", "--root", str(f))
    assert res.exit_code == 2
    one_error_line(res.stderr)


# --- log append / show / tail -------------------------------------------------------


def test_append_prints_receipt_and_show_round_trips(root: Path) -> None:
    res = cli(
        "log",
        "append",
        "--root",
        str(root),
        "--kind",
        "k.v",
        "--key",
        "x",
        "--data",
        '{"a": [1, 2.5, "é"], "b": null}',
        "--json",
    )
    assert res.exit_code == 0, res.output
    receipt = one_json(res.stdout)
    assert set(receipt) == {"first_seq", "last_seq", "at"}
    assert receipt["first_seq"] == receipt["last_seq"] == 4
    shown = one_json(cli("log", "show", "--root", str(root), "--from", "4", "--json").stdout)
    assert shown == {
        "events": [
            {
                "seq": 4,
                "kind": "k.v",
                "key": "x",
                "at": receipt["at"],
                "data": {"a": [1, 2.5, "é"], "b": None},
            }
        ]
    }


def test_append_reads_data_from_stdin_and_file(root: Path, tmp_path: Path) -> None:
    res = cli(
        "log",
        "append",
        "--root",
        str(root),
        "--kind",
        "s",
        "--data",
        "-",
        "--json",
        input='{"from": "stdin"}',
    )
    assert res.exit_code == 0, res.output
    f = tmp_path / "data.json"
    f.write_text('{"from": "file"}')
    res = cli("log", "append", "--root", str(root), "--kind", "f", "--data", f"@{f}")
    assert res.exit_code == 0, res.output
    assert "appended seq 5" in res.stdout
    events = one_json(cli("log", "show", "--root", str(root), "--from", "4", "--json").stdout)
    assert [e["data"] for e in events["events"]] == [{"from": "stdin"}, {"from": "file"}]


def test_append_expected_head_and_batch_id(root: Path) -> None:
    base = ["log", "append", "--root", str(root), "--kind", "x", "--data", "{}"]
    ok = cli(*base, "--expected-head", "3", "--json")
    assert ok.exit_code == 0 and one_json(ok.stdout)["first_seq"] == 4
    before = snapshot(root)
    stale = cli(*base, "--expected-head", "3")
    assert stale.exit_code == 1
    assert "expected log head 3" in one_error_line(stale.stderr)
    assert snapshot(root) == before

    first = one_json(cli(*base, "--batch-id", "b-1", "--json").stdout)
    assert first["duplicate"] is False and first["batch_id"] == "b-1"
    before = snapshot(root)
    retry = one_json(cli(*base, "--batch-id", "b-1", "--json").stdout)
    assert retry["duplicate"] is True
    assert (retry["first_seq"], retry["last_seq"]) == (first["first_seq"], first["last_seq"])
    assert snapshot(root) == before
    assert "nothing written" in cli(*base, "--batch-id", "b-1").stdout


def test_show_filters(root: Path) -> None:
    def seqs(*args: str) -> list[int]:
        res = cli("log", "show", "--root", str(root), "--json", *args)
        assert res.exit_code == 0, res.output
        return [e["seq"] for e in one_json(res.stdout)["events"]]

    assert seqs() == [1, 2, 3]
    assert seqs("--from", "2") == [2, 3]
    assert seqs("--to", "2") == [1, 2]
    assert seqs("--from", "2", "--to", "2") == [2]
    assert seqs("--kind", "task.note") == [2]
    assert seqs("--key", "t1") == [1, 2]
    assert seqs("--key", "t1", "--limit", "1") == [1]
    assert seqs("--from", "99") == []
    assert seqs("--limit", "0") == []


def test_show_human_form_is_one_line_per_event(root: Path) -> None:
    res = cli("log", "show", "--root", str(root))
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    assert len(lines) == 3
    seq, at, kind, key, data = lines[0].split(maxsplit=4)
    assert (seq, kind, key, data) == ("1", "task.created", "t1", '{"title":"x"}')
    assert at.endswith("Z") and "T" in at
    assert lines[2].split()[3] == "-"  # null key


def test_tail_prints_newest(root: Path) -> None:
    with Ledger.open(log_dir(root), sync="none") as led:
        led.append([Event("bulk", None, {"i": i}) for i in range(20)])
    res = cli("log", "tail", "--root", str(root), "--json")
    assert [e["seq"] for e in one_json(res.stdout)["events"]] == list(range(14, 24))
    res = cli("log", "tail", "--root", str(root), "-n", "2", "--json")
    assert [e["seq"] for e in one_json(res.stdout)["events"]] == [22, 23]
    assert one_json(cli("log", "tail", "--root", str(root), "-n", "0", "--json").stdout) == {
        "events": []
    }
    assert len(cli("log", "tail", "--root", str(root), "-n", "3").stdout.splitlines()) == 3


def test_tail_on_empty_store(tmp_path: Path) -> None:
    cli("init")
    assert one_json(cli("log", "tail", "--json").stdout) == {"events": []}
    assert cli("log", "show").stdout == ""


class LineReader:
    """Lines of a child's stdout, read on a thread so a test can wait with a timeout."""

    def __init__(self, stream: Any) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Any) -> None:
        for line in stream:
            self.lines.put(line)

    def take(self, n: int, timeout: float = 20.0) -> list[str]:
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            try:
                out.append(self.lines.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
        return out


@pytest.mark.parametrize("as_json", [True, False], ids=["jsonl", "text"])
def test_tail_follow_streams_new_events_until_ctrl_c(root: Path, as_json: bool) -> None:
    argv = [
        sys.executable,
        "-m",
        "cli",
        "log",
        "tail",
        "--root",
        str(root),
        "-n",
        "1",
        "--follow",
        "--interval",
        "0.02",
    ] + (["--json"] if as_json else [])
    p = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=proc_env(),
        preexec_fn=sigint_default,
    )
    reader = LineReader(p.stdout)
    try:
        assert len(reader.take(1)) == 1  # the newest event, then it waits
        with Ledger.open(log_dir(root)) as led:
            led.append([Event("later.one", "k", {"b": b"\x01"})])
            led.append([Event("later.two", None, {}), Event("later.three", None, {})])
        lines = reader.take(3)
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=20)  # a child that ignores the signal fails the test, not hangs it
        finally:
            if p.poll() is None:
                p.kill()
        assert p.stderr is not None
        err = p.stderr.read()
    assert p.returncode == 130
    assert "Traceback" not in err and err.strip() == ""
    assert len(lines) == 3
    if as_json:
        docs = [one_json(line) for line in lines]
        assert [d["seq"] for d in docs] == [4, 5, 6]
        assert docs[0]["data"] == {"b": {"$bytes": "01"}}
    else:
        assert [line.split()[2] for line in lines] == ["later.one", "later.two", "later.three"]


# --- verify -------------------------------------------------------------------------


def test_verify_ok(root: Path) -> None:
    res = cli("verify", "--root", str(root), "--json")
    assert res.exit_code == 0
    doc = one_json(res.stdout)
    assert VERIFY_KEYS <= set(doc)
    with Ledger.open(log_dir(root), readonly=True) as led:
        assert doc == {**led.verify().to_json(), "warnings": []}
    assert doc["ok"] is True and doc["events"] == 3 and doc["head_seq"] == 3
    assert doc["problems"] == []
    human = cli("verify", "--root", str(root))
    assert human.exit_code == 0 and human.stdout.startswith("ok:")


def _corrupt_first_frame(root: Path) -> None:
    seg = segment(root)
    data = bytearray(seg.read_bytes())
    data[64 + 56 + 3] ^= 0x01  # a payload byte of frame 1; frames 2 and 3 still valid
    seg.write_bytes(bytes(data))


def test_verify_reports_corruption_and_exits_1(root: Path) -> None:
    _corrupt_first_frame(root)
    before = snapshot(root)
    res = cli("verify", "--root", str(root), "--json")
    assert res.exit_code == 1
    doc = one_json(res.stdout)
    assert VERIFY_KEYS <= set(doc) and doc["ok"] is False
    assert doc["problems"] and set(doc["problems"][0]) == {"segment", "offset", "error"}
    assert doc["problems"][0]["segment"] == segment(root).name
    one_error_line(res.stderr)
    human = cli("verify", "--root", str(root))
    assert human.exit_code == 1 and human.stdout.startswith("FAILED")
    assert snapshot(root) == before  # verify never repairs


def test_reads_fail_closed_on_mid_log_corruption(root: Path) -> None:
    _corrupt_first_frame(root)
    before = snapshot(root)
    for args in (["log", "show"], ["log", "show", "--json"], ["log", "tail", "--json"]):
        res = cli(*args, "--root", str(root))
        assert res.exit_code == 1, args
        line = one_error_line(res.stderr)
        assert segment(root).name in line and "byte" in line
    res = cli("log", "append", "--root", str(root), "--kind", "x", "--data", "{}")
    assert res.exit_code == 1
    one_error_line(res.stderr)
    assert snapshot(root) == before


def test_torn_tail_is_served_as_prefix_and_readers_never_repair(root: Path) -> None:
    seg = segment(root)
    seg.write_bytes(seg.read_bytes() + b"CTXF" + b"\x07" * 30)  # a torn, half-written frame
    before = snapshot(root)
    res = cli("log", "show", "--root", str(root), "--json")
    assert res.exit_code == 0
    assert [e["seq"] for e in one_json(res.stdout)["events"]] == [1, 2, 3]
    ver = cli("verify", "--root", str(root), "--json")
    assert ver.exit_code == 1 and "torn" in one_json(ver.stdout)["problems"][0]["error"]
    assert snapshot(root) == before
    # the writer repairs it on the next append
    assert cli("log", "append", "--root", str(root), "--kind", "x", "--data", "{}").exit_code == 0
    assert cli("verify", "--root", str(root)).exit_code == 0


# --- bad input ----------------------------------------------------------------------

BAD_INPUTS: list[tuple[str, list[str], int]] = [
    ("invalid-json", ["log", "append", "--kind", "x", "--data", "{bad"], 2),
    ("nan-is-not-json", ["log", "append", "--kind", "x", "--data", '{"a": NaN}'], 2),
    ("data-array", ["log", "append", "--kind", "x", "--data", "[1]"], 2),
    ("data-string", ["log", "append", "--kind", "x", "--data", '"s"'], 2),
    ("data-null", ["log", "append", "--kind", "x", "--data", "null"], 2),
    (
        "data-too-deep",
        ["log", "append", "--kind", "x", "--data", '{"a":' + "[" * 300 + "]" * 300 + "}"],
        2,
    ),
    ("data-missing", ["log", "append", "--kind", "x"], 2),
    ("data-file-missing", ["log", "append", "--kind", "x", "--data", "@/nonexistent/file.json"], 2),
    ("empty-kind", ["log", "append", "--kind", "", "--data", "{}"], 1),
    ("invalid-kind", ["log", "append", "--kind", "a b", "--data", "{}"], 1),
    ("kind-trailing-dot", ["log", "append", "--kind", "task.", "--data", "{}"], 1),
    ("empty-batch-id", ["log", "append", "--kind", "x", "--data", "{}", "--batch-id", ""], 1),
    (
        "negative-expected-head",
        ["log", "append", "--kind", "x", "--data", "{}", "--expected-head", "-1"],
        2,
    ),
    ("negative-from", ["log", "show", "--from", "-1"], 2),
    ("zero-from", ["log", "show", "--from", "0"], 2),
    ("to-before-from", ["log", "show", "--from", "3", "--to", "2"], 2),
    ("negative-limit", ["log", "show", "--limit", "-5"], 2),
    ("not-a-number", ["log", "show", "--from", "abc"], 2),
    ("negative-tail", ["log", "tail", "-n", "-1"], 2),
    ("unknown-option", ["log", "show", "--bogus"], 2),
    ("unknown-command", ["bogus"], 2),
]


@pytest.mark.parametrize("how", ["runner", "process"])
@pytest.mark.parametrize(
    ("args", "code"), [(a, c) for _n, a, c in BAD_INPUTS], ids=[n for n, _a, _c in BAD_INPUTS]
)
def test_bad_input_is_one_line_and_touches_nothing(
    root: Path, how: str, args: list[str], code: int
) -> None:
    before = snapshot(root)
    argv = [*args, "--root", str(root)] if args[0] != "bogus" else args
    if how == "runner":
        res = cli(*argv)
        rc, out, err = res.exit_code, res.stdout, res.stderr
    else:
        p = sh(*argv)
        rc, out, err = p.returncode, p.stdout, p.stderr
    assert rc == code, err
    one_error_line(err)
    assert out == ""
    assert snapshot(root) == before


MISSING_STORE = [
    ["log", "show"],
    ["log", "show", "--json"],
    ["log", "tail"],
    ["log", "tail", "--follow"],
    ["verify", "--json"],
    ["log", "append", "--kind", "x", "--data", "{}"],
]


@pytest.mark.parametrize("args", MISSING_STORE, ids=[" ".join(a) for a in MISSING_STORE])
def test_missing_store_is_one_line_and_creates_nothing(tmp_path: Path, args: list[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    res = cli(*args, "--root", str(empty))
    assert res.exit_code == 1
    line = one_error_line(res.stderr)
    assert line == f"error: no ctxledger store at {empty / STORE_DIR} (run `ctxledger init` first)"
    assert list(empty.iterdir()) == []
    res = cli(*args, "--root", str(tmp_path / "absent"))
    assert res.exit_code == 1 and not (tmp_path / "absent").exists()


# --- rendering of what CBOR holds and JSON does not ---------------------------------


def test_non_json_data_renders_safely(root: Path) -> None:
    weird: dict[Any, Any] = {
        "raw": b"\x00\xff",
        "nan": float("nan"),
        "inf": float("inf"),
        "ninf": float("-inf"),
        1: "int key",
        b"k": "bytes key",
        "tag": cbor2.CBORTag(4242, [1]),
        "set": {2, 1},
        "undef": cbor2.undefined,
        "big": 2**80,
        "ctl": "\x1b[31m\n",
    }
    with Ledger.open(log_dir(root)) as led:
        led.append([Event("odd.data", "line\nbreak", weird)])
    res = cli("log", "show", "--root", str(root), "--from", "4", "--json")
    assert res.exit_code == 0, res.output
    data = one_json(res.stdout)["events"][0]["data"]
    assert data["raw"] == {"$bytes": "00ff"}
    assert (data["nan"], data["inf"], data["ninf"]) == (
        {"$float": "nan"},
        {"$float": "inf"},
        {"$float": "-inf"},
    )
    assert data["1"] == "int key" and data['{"$bytes": "6b"}'] == "bytes key"
    assert data["tag"] == {"$tag": 4242, "value": [1]}
    assert data["set"] == {"$set": [1, 2]} and data["undef"] == {"$undefined": True}
    assert data["big"] == 2**80 and data["ctl"] == "\x1b[31m\n"
    human = cli("log", "show", "--root", str(root), "--from", "4")
    assert human.exit_code == 0 and len(human.stdout.splitlines()) == 1
    assert '"line\\nbreak"' in human.stdout  # a key with a newline cannot break the line
    assert cli("log", "tail", "--root", str(root), "--json").exit_code == 0


def test_to_jsonable_handles_cycles_and_objects() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert to_jsonable({"l": loop}) == {"l": [{"$cycle": True}]}
    shared = [1]
    assert to_jsonable([shared, shared]) == [[1], [1]]  # shared is not a cycle
    assert to_jsonable(object())["$repr"].startswith("<object")
    assert one_json(dumps({"deep": _nest(395)}))  # as deep as the CBOR decoder allows


def test_to_jsonable_of_decimals_fractions_and_dataclasses() -> None:
    """cli.output does not import these modules itself: a value of theirs still renders."""
    import dataclasses
    from decimal import Decimal
    from fractions import Fraction

    @dataclasses.dataclass
    class Point:
        x: int
        y: Decimal

    assert to_jsonable([Decimal("1.10"), Fraction(1, 3), Point(1, Decimal("2"))]) == [
        {"$decimal": "1.10"}, {"$fraction": "1/3"}, {"x": 1, "y": {"$decimal": "2"}},
    ]
    assert to_jsonable(Point)["$repr"].startswith("<class")  # the class itself is no instance


def _nest(depth: int) -> Any:
    obj: Any = 0
    for _ in range(depth):
        obj = {"a": obj}
    return obj


cbor_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
    lambda kids: (
        st.lists(kids, max_size=4)
        | st.dictionaries(st.text() | st.integers() | st.binary(), kids, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(cbor_values)
def test_any_cbor_value_renders_as_strict_json(value: Any) -> None:
    decoded = cbor2.loads(cbor2.dumps({"v": value}))
    doc = one_json(dumps(decoded))
    assert set(doc) == {"v"}
    if isinstance(value, float) and not math.isnan(value) and math.isfinite(value):
        assert doc["v"] == value


# --- the process boundary -----------------------------------------------------------


def test_real_process_round_trip(tmp_path: Path) -> None:
    r = str(tmp_path / "p")
    assert sh("init", "--root", r).returncode == 0
    p = sh(
        "log", "append", "--root", r, "--kind", "a.b", "--data", "-", "--json", input=b'{"x": 1}'
    )
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert one_json(p.stdout)["first_seq"] == 1
    p = sh("log", "show", "--root", r, "--json")
    assert one_json(p.stdout)["events"][0]["data"] == {"x": 1}
    p = sh("verify", "--root", r, "--json")
    assert p.returncode == 0 and one_json(p.stdout)["ok"] is True


def test_closed_stdout_ends_quietly(root: Path) -> None:
    with Ledger.open(log_dir(root), sync="none") as led:
        led.append([Event("bulk", None, {"pad": "x" * 200}) for _ in range(3000)])
    for extra in ([], ["--json"]):
        p = subprocess.Popen(
            [sys.executable, "-m", "cli", "log", "show", "--root", str(root), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=proc_env(),
        )
        assert p.stdout is not None and p.stderr is not None
        p.stdout.read(100)
        p.stdout.close()  # like `| head -c 100`
        err = p.stderr.read().decode()
        p.wait(timeout=30)
        assert err == "", err
        # streamed lines hit EPIPE on a later write: exit 1; one big JSON write may
        # instead end in a short write that CPython reports as success: exit 0
        assert p.returncode == 1 if not extra else p.returncode in (0, 1)


def test_follow_stops_when_the_reader_goes_away(root: Path) -> None:
    argv = [sys.executable, "-m", "cli", "log", "tail", "--root", str(root), "-n", "1", "-f"]
    p = subprocess.Popen(
        [*argv, "--interval", "0.02"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=proc_env(),
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.readline()
    p.stdout.close()  # like `ctxledger log tail -f | head -1`, with no new events coming
    try:
        p.wait(timeout=20)
    finally:
        if p.returncode is None:
            p.kill()
    assert p.returncode == 1 and p.stderr.read() == b""


def console_script() -> str | None:
    """The ``ctxledger`` script of the venv running the tests (it need not be on PATH)."""
    beside = Path(sys.executable).parent / "ctxledger"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("ctxledger")


def test_console_script() -> None:
    exe = console_script()
    if exe is None:
        pytest.skip("no ctxledger console script beside the interpreter or on PATH")
    p = sh("--version", cmd=[exe])
    assert p.returncode == 0 and p.stdout.startswith("ctxledger ")
    p = sh("log", "show", "--root", "/nonexistent/ctxledger-root", cmd=[exe])
    assert p.returncode == 1
    one_error_line(p.stderr)


@pytest.mark.parametrize("args", [[], ["log"]], ids=["ctxledger", "ctxledger log"])
def test_a_bare_group_prints_its_help(args: list[str]) -> None:
    res = cli(*args)
    assert res.exit_code in (0, 2)  # click >= 8.2 treats it as a usage error
    assert "Usage: ctxledger" in res.output and "error:" not in res.output


def test_version() -> None:
    res = cli("--version")
    assert res.exit_code == 0 and res.stdout.startswith("ctxledger ")


# --- the error boundary itself --------------------------------------------------------


def _group_with(callback: Any) -> click.Group:
    grp = CtxGroup(name="ctxledger", lazy={"broken": "cli.no_such_module:cmd"})
    grp.add_command(click.Command("boom", callback=callback, help="Raises."))
    return grp


@pytest.mark.parametrize(
    ("exc", "code", "quiet"),
    [
        (RuntimeError("kaput"), 1, False),
        (KeyboardInterrupt(), 130, True),
        (PermissionError(13, "Permission denied", "/x"), 1, False),
    ],
    ids=["unexpected", "ctrl-c", "oserror"],
)
def test_error_boundary(exc: BaseException, code: int, quiet: bool) -> None:
    def boom() -> None:
        raise exc

    res = CliRunner().invoke(_group_with(boom), ["boom"])
    assert res.exit_code == code
    if quiet:
        assert res.stderr.strip() == ""
    else:
        line = one_error_line(res.stderr)
        assert "kaput" in line or "Permission denied: /x" in line


def test_debug_env_shows_the_traceback() -> None:
    def boom() -> None:
        raise RuntimeError("kaput")

    res = CliRunner().invoke(_group_with(boom), ["boom"], env={"CTXLEDGER_DEBUG": "1"})
    assert isinstance(res.exception, RuntimeError)


def test_a_command_that_cannot_load_does_not_break_help() -> None:
    grp = _group_with(lambda: None)
    res = CliRunner().invoke(grp, ["--help"])
    assert res.exit_code == 0 and "broken" in res.stdout and "unavailable" in res.stdout
    res = CliRunner().invoke(grp, ["broken"])
    assert res.exit_code == 1
    assert "unavailable" in one_error_line(res.stderr)


# --- every command, including ones added later ---------------------------------------


ALL_COMMANDS = list(walk(ctxledger))


def test_every_registered_command_is_walked() -> None:
    top = {path[0] for path, _ in ALL_COMMANDS if path}
    assert top == set(COMMANDS)


@pytest.mark.parametrize(
    ("path", "cmd"), ALL_COMMANDS, ids=[" ".join(p) or "ctxledger" for p, _ in ALL_COMMANDS]
)
def test_every_command_has_help_and_docs(path: tuple[str, ...], cmd: click.Command) -> None:
    assert not getattr(cmd, "unavailable", None), f"{' '.join(path)}: {cmd.unavailable}"  # type: ignore[attr-defined]
    assert (cmd.help or "").strip(), f"{' '.join(path)} has no docstring"
    res = cli(*path, "--help")
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("Usage: ctxledger")
    # every command and group, --root and --json (a group's apply to every command below it)
    opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
    assert {"--root", "--json"} <= opts, f"{' '.join(path)} lacks --root/--json"
    shown = _help_examples(res.stdout)
    assert 1 <= len(shown) <= 3, f"{' '.join(path)}: --help must end with Examples:\n{res.stdout}"
    for line in shown:
        _check_example(line)


def _help_examples(text: str) -> list[str]:
    """The command lines under the last ``Examples:`` heading, which must end the help."""
    lines = text.rstrip("\n").splitlines()
    heads = [i for i, line in enumerate(lines) if line.strip() == "Examples:"]
    if not heads:
        return []
    return [line.strip() for line in lines[heads[-1] + 1 :]]


def _check_example(line: str) -> None:
    """An example runs a real command with options that exist (before or after its name)."""
    if line.startswith("echo "):  # input piped into the command
        line = line.split("| ", 1)[1]
    words = shlex.split(line)
    for sep in ("|", "&&"):  # what the output is piped into, or a second command
        if sep in words:
            words = words[: words.index(sep)]
    assert words[0] == "ctxledger", line
    cmd: click.Command = ctxledger
    takes_value: dict[str, bool] = {}  # option -> whether the next word is its value

    def learn(c: click.Command) -> None:
        for p in c.params:
            if isinstance(p, click.Option):
                # an optional value (store get --json[=MODE]) is given with "=" when at all
                optional = getattr(p, "_flag_needs_value", False)
                takes_value.update(
                    (o, not p.is_flag and not p.count and not optional) for o in p.opts
                )

    learn(cmd)
    rest = iter(words[1:])
    for word in rest:
        if word.startswith("-") and word != "-":
            assert word.split("=")[0] in takes_value, f"{line}: {word} is no option of it"
            if takes_value[word.split("=")[0]] and "=" not in word:
                next(rest)
        elif isinstance(cmd, click.Group):
            sub = cmd.get_command(click.Context(cmd), word)
            assert sub is not None, f"{line}: {word} is no command"
            cmd = sub
            learn(cmd)
    runs = not isinstance(cmd, click.Group) or cmd.invoke_without_command or len(words) == 1
    assert runs, f"{line}: names no command"


def test_store_options_passes_a_ctx_first(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    @click.command("probe")
    @store_options
    @click.option("--n", type=int, default=3)
    def probe(ctx: Any, n: int) -> None:
        """Probe."""
        seen.update(root=ctx.root, json=ctx.json, n=n)
        ctx.emit({"n": n})

    res = CliRunner().invoke(probe, ["--root", str(tmp_path), "--json", "--n", "4"])
    assert res.exit_code == 0 and one_json(res.stdout) == {"n": 4}
    assert seen == {"root": tmp_path, "json": True, "n": 4}


# --- docs/cli.md examples -------------------------------------------------------------

DOCS = REPO / "docs" / "cli.md"


def _doc_examples() -> list[tuple[str, list[str]]]:
    """``$ ctxledger ...`` lines of ```console blocks, each with the output shown under it."""
    examples: list[tuple[str, list[str]]] = []
    in_block = False
    for line in DOCS.read_text().splitlines():
        if line.strip().startswith("```"):
            in_block = line.strip() == "```console"
        elif in_block and line.startswith("$ "):
            examples.append((line[2:], []))
        elif in_block and examples:
            examples[-1][1].append(line)
    return examples


def _normalise(text: str, home: Path) -> str:
    text = text.replace("/home/me", str(home))
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", "<TIME>", text)
    text = re.sub(r'"project_id": "[0-9a-f]{32}"', '"project_id": <ID>', text)
    return re.sub(r'"at": [0-9.e+]+', '"at": <AT>', text)


def test_docs_examples_run_as_shown(tmp_path: Path) -> None:
    examples = _doc_examples()
    assert len(examples) >= 10
    for command, expected in examples:
        argv = shlex.split(command)
        assert argv[0] == "ctxledger", command
        res = cli(*argv[1:])
        assert res.exit_code == 0, f"{command}\n{res.output}"
        want = _normalise("\n".join(expected), tmp_path).rstrip()
        assert _normalise(res.stdout, tmp_path).rstrip() == want, command
