"""Human output never hands a terminal a raw control or bidi character (failure rule 7).

A store full of hostile strings (ESC sequences that clear the screen or retitle
the window, BEL, NUL, DEL, C1, bidi overrides, newlines) is put through every
command's human output, error lines included; ``--json`` keeps them exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_walk import leaf_paths, unsafe_chars
from click.testing import CliRunner, Result

from cli.main import ctxledger
from cli.output import safe
from eventstore import Event, Ledger

HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x00\x7f\x9b\u202e\u2066\u200f\u2028\u061c\ttab\nnl\r"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CTXLEDGER_ROOT", raising=False)
    monkeypatch.setenv("CTXLEDGER_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def run(*args: str, input: str | None = None) -> Result:
    # color=True: click would otherwise strip CSI sequences itself and hide a raw ESC
    return CliRunner().invoke(ctxledger, list(args), input=input, color=True)


PACKET = {
    "target": f"t{HOSTILE}",
    "summary": f"auth {HOSTILE} gap",
    "paths": [f"src/{HOSTILE}.py"],
    "symbols": [f"Sym{HOSTILE}"],
    "tests": [f"test_{HOSTILE}"],
    "task_ids": [f"task{HOSTILE}"],
    "packet_types": [f"kind{HOSTILE}"],
    "payload": {HOSTILE: HOSTILE},
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root\x1b[2J\u202e\x07"  # a hostile directory name: paths are printed too
    assert run("init", "--root", str(r)).exit_code == 0
    put = run("store", "put", "--root", str(r), "--json", input=json.dumps(PACKET))
    assert put.exit_code == 0, put.output
    key = json.loads(put.stdout)["cache_key"]
    other = run("store", "put", "--root", str(r), "--json",
                input=json.dumps({**PACKET, "summary": "other"}))
    gone = json.loads(other.stdout)["cache_key"]
    with Ledger.open(r / ".ctxledger" / "log") as led:  # a stored eviction reason, printed by stats
        led.append([Event("cache.evicted", gone, {"reason": f"why{HOSTILE}"})])
    (r / "key").write_text(key)
    ref = run("store", "get", "--root", str(r), "--key", key, "--json=handle")
    assert ref.exit_code == 0, ref.output
    (r / "handle").write_text(json.loads(ref.stdout)["handle"])
    # a file gc must leave alone, and name when it says so
    (r / ".ctxledger" / "artifacts" / f"x{HOSTILE.replace(chr(0), '')}").write_text("x")
    return r


def invocations(r: Path) -> list[tuple[tuple[str, ...], list[str], str | None]]:
    """``(command path, argv, stdin)``: every command, with hostile input where it takes any."""
    R = ["--root", str(r)]
    key = (r / "key").read_text()
    data = json.dumps({"v": HOSTILE, HOSTILE: [HOSTILE]})
    append = ["log", "append", *R, "--kind", "x.y", "--key", HOSTILE, "--data", data,
              "--batch-id", f"b{HOSTILE}"]
    mirror = ["log", "mirror", *R, "--to", "file", "--to-dir",
              str(r / f"copy{HOSTILE.replace(chr(0), '')}")]
    return [
        (("init",), ["init", *R], None),
        (("log", "append"), append, None),
        (("log", "append"), append, None),  # the duplicate's message quotes the batch id
        (("log", "show"), ["log", "show", *R], None),
        (("log", "show"), ["log", "show", *R, "--kind", f"k{HOSTILE}"], None),  # refused kind
        (("log", "tail"), ["log", "tail", *R], None),
        (("store", "put"), ["store", "put", *R], json.dumps({**PACKET, "summary": "third"})),
        (("store", "put"), ["store", "put", *R], json.dumps({"target": 1, HOSTILE: 2})),
        (("store", "get"), ["store", "get", *R, "--key", key], None),
        (("store", "get"), ["store", "get", *R, "--key", HOSTILE], None),
        (("store", "list"), ["store", "list", *R], None),
        (("store", "list"), ["store", "list", *R, "--since", HOSTILE], None),
        (("store", "stats"), ["store", "stats", *R], None),
        (("artifact", "show"), ["artifact", "show", *R, (r / "handle").read_text()], None),
        (("artifact", "show"), ["artifact", "show", *R, HOSTILE.replace("\x00", "")], None),
        (("artifact", "gc"), ["artifact", "gc", *R, "--dry-run"], None),
        (("storage",), ["storage", *R], None),  # the hostile root is printed, and mode warnings
        (("storage",), ["storage", *R, "--storage-scope", "agent"], None),
        (("recall",), ["recall", *R, "-q", f"auth {HOSTILE}"], None),
        (("recall",), ["recall", *R, "-q", "auth", "--scope", HOSTILE], None),
        (("recall",), ["recall", *R, "-q", "auth", "--budget-tokens", "3", "--fresh-only"], None),
        (("recall",), ["recall", *R, "-q", "auth", "--mode", HOSTILE], None),
        (("recall",), ["recall", *R, "-q", "auth", "--kind", HOSTILE, "--include-superseded"],
         None),
        (("store", "list"), ["store", "list", *R, "--include-superseded"], None),
        (("replay",), ["replay", *R], None),
        (("rebuild",), ["rebuild", *R], None),
        (("rebuild",), ["rebuild", *R, "--projection", HOSTILE], None),
        (("checkpoint",), ["checkpoint", *R], None),
        (("verify",), ["verify", *R], None),
        (("log", "export"), ["log", "export", *R], None),
        (("log", "export"), ["log", "export", *R, "--kind", f"k{HOSTILE}"], None),
        (("log", "import"), ["log", "import", *R, str(r / "key")], None),  # refused
        (("log", "mirror"), mirror, None),  # the copy's hostile path, printed
        (("log", "mirror"), mirror, None),  # refused: the copy is not empty, and named
        (("salvage",), ["salvage", *R], None),  # nothing to salvage
        (("compact",), ["compact", *R, "--dry-run"], None),
        (("compact",), ["compact", *R], None),  # live entries, tasks and the handle survive
        (("verify",), ["verify", *R], None),
        (("verify",), ["verify", *R, "--anchor", f"1:{HOSTILE}"], None),
        (("log", "head"), ["log", "head", *R], None),
        (("demo",), ["demo", *R, "--packets", "20", "--query", HOSTILE], None),
        (("store", "prune"), ["store", "prune", *R, "--all"], None),
        ((), ["store", HOSTILE], None),  # an unknown command is quoted back
        # no store there, so nothing is served (argv cannot carry NUL: not in the path)
        (("mcp",), ["mcp", "--root", str(r / HOSTILE.replace("\x00", ""))], None),
        (("mcp", "config"), ["mcp", "config", *R], None),
        (("mcp", "config"), ["mcp", "config", *R, "--client", HOSTILE], None),
        *task_invocations(R, data),
        *calibration_invocations(R),
    ]


Run = tuple[tuple[str, ...], list[str], str | None]


def task_invocations(R: list[str], data: str) -> list[Run]:
    """Tasks and handoffs with hostile titles, labels, notes, reasons and payloads."""
    t = ["h1"]
    path = json.dumps({"path": f"src/{HOSTILE}.py"})
    return [
        (("task", "create"), ["task", "create", *R, "--title", f"t{HOSTILE}", "--label",
                              f"l{HOSTILE}", "--id", *t], None),
        (("task", "create"), ["task", "create", *R, "--title", "x", "--id", HOSTILE], None),
        (("task", "start"), ["task", "start", *R, *t], None),
        (("task", "note"), ["task", "note", *R, *t, "--type", "decision", "--data", data], None),
        (("task", "note"), ["task", "note", *R, *t, "--type", "file_edit", "--data", path], None),
        (("task", "progress"), ["task", "progress", *R, *t, "--message", HOSTILE], None),
        (("task", "cancel"), ["task", "cancel", *R, *t, "--reason", HOSTILE], None),
        (("task", "fail"), ["task", "fail", *R, *t, "--reason", HOSTILE], None),
        (("task", "show"), ["task", "show", *R, *t], None),
        (("task", "list"), ["task", "list", *R], None),
        (("task", "history"), ["task", "history", *R, *t], None),
        (("task", "export"), ["task", "export", *R, *t], None),
        (("task", "complete"), ["task", "complete", *R, *t], None),  # refused: already failed
        (("task", "release"), ["task", "release", *R, HOSTILE], None),
        (("task", "watch"), ["task", "watch", *R, "--interval", HOSTILE], None),
        (("agent", "bootstrap"), ["agent", "bootstrap", *R], json.dumps({"goal": HOSTILE})),
        (("agent", "handoff"), ["agent", "handoff", *R, "--task", *t],
         json.dumps({"next": HOSTILE, HOSTILE: 1})),
        (("agent", "show"), ["agent", "show", *R], None),
        (("agent", "show"), ["agent", "show", *R, "--history"], None),
        (("agent", "consume"), ["agent", "consume", *R, HOSTILE], None),
    ]


BIDI = "p\u202eevil\u202c\u2066x\u2069\u200f\u2028\u061c"
"""A name the writer accepts (no control character) that a terminal would still reorder."""


def calibration_invocations(R: list[str]) -> list[Run]:
    """A sample whose provider and model reorder text, names with control characters
    (refused, and quoted in the error), and both shown."""
    rec = ["--estimated", "10", "--actual", "12"]
    return [
        *((("calibration", "record"), ["calibration", "record", *R, "--provider", BIDI,
                                       "--model", f"m{BIDI}", *rec], None) for _ in range(3)),
        (("calibration", "record"), ["calibration", "record", *R, "--provider", HOSTILE,
                                     "--model", "m", *rec], None),
        (("calibration", "show"), ["calibration", "show", *R], None),
        (("calibration", "show"), ["calibration", "show", *R, "--provider", BIDI,
                                   "--model", f"m{BIDI}"], None),
        (("calibration", "show"), ["calibration", "show", *R, "--provider", HOSTILE,
                                   "--model", HOSTILE], None),
    ]


def test_a_hostile_calibration_name_is_printed_escaped(root: Path) -> None:
    for _ in range(3):
        res = run("calibration", "record", "--provider", BIDI, "--model", f"m{BIDI}",
                  "--estimated", "10", "--actual", "12")
        assert res.exit_code == 0, res.output
    shown = run("calibration", "show")
    assert shown.exit_code == 0 and not unsafe_chars(shown.stdout)
    assert shown.stdout.splitlines()[0] == f"{safe(BIDI)} / m{safe(BIDI)} / chars-v1"
    assert len(shown.stdout.splitlines()) == 4  # the profile's own lines, none added
    doc = json.loads(run("calibration", "show", "--json").stdout)
    assert doc["profiles"][0]["provider"] == BIDI and doc["profiles"][0]["multiplier"] == 1.2
    refused = run("calibration", "record", "--provider", HOSTILE, "--model", "m",
                  "--estimated", "1", "--actual", "1")
    assert refused.exit_code == 2 and refused.stdout == ""
    assert refused.stderr.startswith("error: provider must not contain control characters")


def test_every_command_is_exercised(root: Path) -> None:
    covered = {path for path, _argv, _stdin in invocations(root)}
    assert leaf_paths() <= covered, f"add a hostile invocation for {leaf_paths() - covered}"


def test_no_raw_control_or_bidi_character_reaches_a_terminal(root: Path) -> None:
    for _path, argv, stdin in invocations(root):
        res = run(*argv, input=stdin)
        printed = res.stdout + res.stderr
        assert not unsafe_chars(printed), (argv, unsafe_chars(printed), printed)
        assert "Traceback" not in printed and "internal error" not in printed, (argv, printed)
        if res.exit_code:
            assert len(res.stderr.strip("\n").splitlines()) == 1, (argv, res.stderr)


def test_a_hostile_field_cannot_add_a_row(root: Path) -> None:
    listed = run("store", "list", "--root", str(root))
    assert listed.exit_code == 0
    assert len(listed.stdout.splitlines()) == 1 + 1  # header + the one live entry
    shown = run("log", "show", "--root", str(root))
    assert len(shown.stdout.splitlines()) == 3  # three events
    hits = run("recall", "--root", str(root), "-q", "auth")
    assert len(hits.stdout.splitlines()) == 2, hits.stdout


def test_json_output_is_exact_and_ascii(root: Path) -> None:
    for args in (["store", "list"], ["log", "show"], ["recall", "-q", "auth"]):
        res = run(*args, "--root", str(root), "--json")
        assert res.exit_code == 0 and res.stdout.isascii(), args
        assert not unsafe_chars(res.stdout.rstrip("\n")), args
    entries = json.loads(run("store", "list", "--root", str(root), "--json").stdout)["entries"]
    assert entries[0]["target"] == PACKET["target"]
    key = (root / "key").read_text()
    got = json.loads(run("store", "get", "--root", str(root), "--key", key, "--json").stdout)
    assert got["body"] == PACKET
    shown = run("artifact", "show", "--root", str(root), (root / "handle").read_text(), "--json")
    assert shown.exit_code == 0 and shown.stdout.isascii()
    assert json.loads(shown.stdout) == got


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain text, é ✓", "plain text, é ✓"),
        ("\x1b[2J", "\\x1b[2J"),
        ("a\tb\nc\rd", "a\\tb\\nc\\rd"),
        ("\x00\x7f\x85\x9b", "\\x00\\x7f\\x85\\x9b"),
        ("\u202eevil\u202c \u2066x\u2069", "\\u202eevil\\u202c \\u2066x\\u2069"),
        ("\u200e\u200f\u061c\u2028\u2029", "\\u200e\\u200f\\u061c\\u2028\\u2029"),
        ("\udcff", "\\udcff"),
        ("back\\slash", "back\\slash"),
    ],
)
def test_safe_escapes_visibly(raw: str, shown: str) -> None:
    assert safe(raw) == shown
    assert safe(shown) == shown  # escaping twice changes nothing more
    assert not unsafe_chars(safe(raw))


def test_safe_multiline_keeps_only_newlines() -> None:
    assert safe("a\x1b\nb\tc", multiline=True) == "a\\x1b\nb\\tc"
