"""A corpus of bad input for every command, through a real ``python -m cli`` process.

Each case must end with its documented exit code (2 for a usage error, 1 for
input the library refuses), exactly one ``error: ...`` line on stderr with no
raw control character in it, nothing on stdout, no traceback and no "internal
error" -- and not a byte of the store changed (failure rule 6). Which classes
of input a command must be tried with follows from its parameters, so a new
command cannot join without its cases.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from cli_walk import leaf_paths, unsafe_chars, walk

from cli.inputs import Duration, JsonInput, TimeParam
from projections import ContextStore

REPO = Path(__file__).resolve().parents[1]
UP = "../" * 40  # enough to climb to / from any working directory
PASSWD = UP + "etc/passwd"  # a file, not a directory, wherever we are
LONG = "x" * 5000  # a path component far past NAME_MAX
BIG = str(10**30)  # past every 64-bit option
CLASSES = ("json", "types", "huge", "utf8", "control", "traversal", "nonfinite", "negative")

Arg = str | bytes


def case(cls: str, path: str, *argv: Arg, stdin: bytes | None = None, code: int = 2) -> object:
    """One run: ``path`` names the command (``"store put"``); ``R`` in argv is the root."""
    assert cls in CLASSES
    words = tuple(path.split())
    shown = " ".join(a if isinstance(a, str) else repr(a) for a in argv)[:60]
    return pytest.param(cls, words, list(argv), stdin, code, id=f"{cls}: {path} {shown}")


R = "R"  # replaced by the store's root
DATA = ["--kind", "x.y", "--data", "{}"]
K = "k1"  # a running task in the store
DEEP = '{"a": ' + "[" * 250 + "]" * 250 + "}"
TASK_CASES = [
    # --- malformed JSON ----------------------------------------------------------------------
    case("json", "task note", "--root", R, K, "--type", "other", "--data", '{"a":'),
    case("json", "task complete", "--root", R, K, "--result", "-", stdin=b'{"a": 1, "a": 2}'),
    case("json", "agent bootstrap", "--root", R, stdin=b'{"goal": '),
    case("json", "agent handoff", "R/bad.json", "--root", R),
    # --- wrong types, missing values ------------------------------------------------------
    case("types", "task create", "--root", R),  # --title is required
    case("types", "task start", "--root", R),  # ID is required
    case("types", "task note", "--root", R, K, "--type", "bogus"),
    case("types", "task progress", "--root", R, K, "--fraction", "half"),
    case("types", "task cancel", "--root", R, K, "--force=yes"),
    case("types", "task complete", "--root", R, K, "--result", "[1]"),
    case("types", "task fail", "--root", R, K),  # --reason is required
    case("types", "task release", "--root", R, K, "extra"),
    case("types", "task list", "--root", R, "--state", "bogus"),
    case("types", "task show", "--root", R),
    case("types", "task history", "--root", R, K, "extra"),
    case("types", "task export", "--root", R),
    case("types", "task watch", "--root", R, "--interval", "x"),
    case("types", "agent bootstrap", "--root", R, stdin=b"[1, 2]"),  # JSON, not an object
    case("types", "agent handoff", "--root", R, stdin=b'"text"'),
    case("types", "agent consume", "--root", R),
    case("types", "agent show", "--root", R, "--history=1"),
    # --- huge values ------------------------------------------------------------------------
    case("huge", "task create", "--root", R, "--title", "x" * 5000),
    case("huge", "task start", "--root", R, "a" * 5000),
    case("huge", "task note", "--root", R, K, "--type", "other", "--data", DEEP),
    case("huge", "task progress", "--root", R, K, "--message", "x" * 5000),
    case("huge", "task cancel", "--root", R, K, "--reason", "x" * 5000),
    case("huge", "task complete", "--root", R, K, "--result", DEEP),
    case("huge", "task fail", "--root", R, K, "--reason", "x" * 5000),
    case("huge", "task release", "--root", R, "a" * 200),
    case("huge", "task list", "--root", R, "--as-of", BIG),
    case("huge", "task show", "--root", R, K, "--as-of", BIG),
    case("huge", "task history", "--root", R, "a" * 5000),
    case("huge", "task export", "--root", R, "a" * 5000),
    case("huge", "task watch", "--root", R, "--interval", BIG),
    case("huge", "agent bootstrap", "--root", R, "--task", "a" * 5000, stdin=b"{}"),
    case("huge", "agent handoff", "--root", R, "--task", "a" * 5000, stdin=b"{}"),
    case("huge", "agent consume", "--root", R, "h" * 5000),
    case("huge", "agent show", "--root", R, "--task", "a" * 5000),
    # --- invalid UTF-8 ----------------------------------------------------------------------
    case("utf8", "task create", "--root", R, "--title", b"t\xff"),
    case("utf8", "task start", "--root", R, b"k\xff"),
    case("utf8", "task note", "--root", R, K, "--type", "other", "--data", b'{"a": "\xff"}'),
    case("utf8", "task progress", "--root", R, K, "--message", b"\xfe"),
    case("utf8", "task cancel", "--root", R, K, "--reason", b"\xff"),
    case("utf8", "task complete", "--root", R, K, "--result", "-", stdin=b'{"a": "\xc3"}'),
    case("utf8", "task fail", "--root", R, K, "--reason", b"\xff"),
    case("utf8", "task release", "--root", R, b"\xff"),
    case("utf8", "task list", "--root", R, "--label", b"\xff"),
    case("utf8", "task show", "--root", R, b"\xffk"),
    case("utf8", "task history", "--root", R, b"\xff"),
    case("utf8", "task export", "--root", R, b"\xff"),
    case("utf8", "task watch", "--root", R, b"\xff"),
    case("utf8", "agent bootstrap", "--root", R, stdin=b'{"a": "\xc3"}'),
    case("utf8", "agent handoff", "--root", R, "--task", b"\xff", stdin=b"{}"),
    case("utf8", "agent consume", "--root", R, b"\xff"),
    case("utf8", "agent show", "--root", R, "--task", b"\xff"),
    # --- control characters -----------------------------------------------------------------
    case("control", "task create", "--root", R, "--title", "x", "--id", "\x1b[2J"),
    case("control", "task start", "--root", R, "\x1b[2J"),
    case("control", "task note", "--root", R, K, "--type", "\x1b"),
    case("control", "task progress", "--root", R, K, "--fraction", "\x07"),
    case("control", "task cancel", "--root", R, "k\u202e1"),
    case("control", "task complete", "--root", R, K, "--result", '{"a": "\x07"}'),  # raw in JSON
    case("control", "task fail", "--root", R, "\x1b]0;x\x07", "--reason", "r"),
    case("control", "task release", "--root", R, "\x01"),
    case("control", "task list", "--root", R, "--state", "\x1b"),
    case("control", "task show", "--root", R, "\x9b1"),
    case("control", "task history", "--root", R, "\x7f"),
    case("control", "task export", "--root", R, "\x1b[2J"),
    case("control", "task watch", "--root", R, "--interval", "\x1b"),
    case("control", "agent bootstrap", "--root", R, stdin=b'{"t": "\x1b"}'),
    case("control", "agent handoff", "--root", R, "--task", "\u202e", stdin=b"{}"),
    case("control", "agent consume", "--root", R, "\x1b[2J"),
    case("control", "agent show", "--root", R, "--as-of", "\x1b"),
    # --- path traversal ---------------------------------------------------------------------
    *(case("traversal", path, "--root", PASSWD, *args) for path, args in (
        ("task create", ["--title", "t"]), ("task start", [K]), ("task note", [K, "--type",
         "other"]), ("task progress", [K]), ("task cancel", [K]), ("task complete", [K]),
        ("task fail", [K, "--reason", "r"]), ("task release", [K]), ("task list", []),
        ("task show", [K]), ("task history", [K]), ("task export", [K]), ("task watch", []),
        ("agent handoff", []), ("agent consume", ["h-1"]), ("agent show", []))),
    case("traversal", "agent bootstrap", PASSWD, "--root", R),  # a readable file, not JSON
    case("traversal", "task start", "--root", R, "../../etc/passwd"),
    # --- NaN and infinities -------------------------------------------------------------------
    case("nonfinite", "task note", "--root", R, K, "--type", "other", "--data", '{"a": NaN}'),
    case("nonfinite", "task complete", "--root", R, K, "--result", '{"a": 1e999}'),
    case("nonfinite", "task progress", "--root", R, K, "--fraction", "nan"),
    case("nonfinite", "task list", "--root", R, "--as-of", "@nan"),
    case("nonfinite", "task show", "--root", R, K, "--as-of", "@inf"),
    case("nonfinite", "task watch", "--root", R, "--interval", "inf"),
    case("nonfinite", "agent bootstrap", "--root", R, stdin=b'{"a": NaN}'),
    case("nonfinite", "agent handoff", "--root", R, stdin=b'{"a": -Infinity}'),
    case("nonfinite", "agent show", "--root", R, "--as-of", "@inf"),
    # --- negative numbers, seqs that are not there --------------------------------------------
    case("negative", "task progress", "--root", R, K, "--fraction", "-0.5"),
    case("negative", "task list", "--root", R, "--as-of", "@-5"),
    case("negative", "task show", "--root", R, K, "--as-of", "999"),  # past the head
    case("negative", "task watch", "--root", R, "--interval", "-1"),
    case("negative", "agent show", "--root", R, "--as-of", "999"),
]
CAL = ["--provider", "p", "--model", "m"]
CALIBRATION_CASES = [  # (nothing may reach the agent home: the test checks it stays absent)
    case("types", "calibration record", "--root", R, *CAL, "--estimated", "ten", "--actual", "1"),
    case("types", "calibration record", "--root", R, *CAL, "--estimated", "true",
         "--actual", "1"),  # bool-like
    case("types", "calibration record", "--root", R, *CAL, "--estimated", "1.5", "--actual", "1"),
    case("types", "calibration record", "--root", R, *CAL, "--estimated", "1_000",
         "--actual", "1"),
    case("types", "calibration record", "--root", R, *CAL, "--estimated", "\u0661",
         "--actual", "1"),  # an Arabic-Indic digit one: only ASCII digits are numbers
    case("types", "calibration record", "--root", R, "--model", "m", "--estimated", "1",
         "--actual", "1"),  # --provider is required
    case("types", "calibration record", "--root", R, *CAL, "--estimated", "5", "--actual", "0"),
    case("types", "calibration record", "--root", R, "--provider", "", "--model", "m",
         "--estimated", "5", "--actual", "5"),
    case("types", "calibration show", "--root", R, "--provider", "p"),  # without --model
    case("types", "calibration show", "--root", R, "--window", "0"),
    case("huge", "calibration record", "--root", R, *CAL, "--estimated", BIG, "--actual", "1"),
    case("huge", "calibration record", "--root", R, *CAL, "--estimated", "1",
         "--actual", str(2**63)),
    case("huge", "calibration record", "--root", R, "--provider", "p" * 201, "--model", "m",
         "--estimated", "1", "--actual", "1"),
    case("huge", "calibration show", "--root", R, "--window", BIG),
    case("huge", "calibration show", "--root", R, "--provider", "p", "--model", "m" * 5000),
    case("utf8", "calibration record", "--root", R, "--provider", b"p\xff", "--model", "m",
         "--estimated", "1", "--actual", "1"),
    case("utf8", "calibration record", "--root", R, *CAL, "--estimated", b"1\xff",
         "--actual", "1"),
    case("utf8", "calibration show", "--root", R, "--provider", b"\xff", "--model", "m"),
    case("control", "calibration record", "--root", R, "--provider", "p", "--model",
         "m\x1b[2J", "--estimated", "1", "--actual", "1"),
    case("control", "calibration record", "--root", R, *CAL, "--estimator", "c\x07",
         "--estimated", "1", "--actual", "1"),
    case("control", "calibration record", "--root", R, *CAL, "--estimated", "\x1b",
         "--actual", "1"),
    case("control", "calibration show", "--root", R, "--provider", "\x9b1", "--model", "m"),
    case("nonfinite", "calibration record", "--root", R, *CAL, "--estimated", "inf",
         "--actual", "1"),
    case("nonfinite", "calibration record", "--root", R, *CAL, "--estimated", "1",
         "--actual", "nan"),
    case("nonfinite", "calibration show", "--root", R, "--window", "inf"),
    case("negative", "calibration record", "--root", R, *CAL, "--estimated", "0",
         "--actual", "1"),
    case("negative", "calibration record", "--root", R, *CAL, "--estimated", "-5",
         "--actual", "1"),
    case("negative", "calibration record", "--root", R, *CAL, "--estimated", "1",
         "--actual", "1", "--cache-read", "-1"),
    case("negative", "calibration show", "--root", R, "--window", "-1"),
    # calibration ignores --root (its samples are the agent's), so a root that is a file is
    # no error of its own; these fail for their other bad value, and write nothing there
    case("types", "recall", "--root", R, "-q", "x", "--provider", "p"),  # without --model
    case("control", "recall", "--root", R, "-q", "x", "--provider", "p", "--model", "m\x1b[2J"),
    case("huge", "recall", "--root", R, "-q", "x", "--provider", "p" * 201, "--model", "m"),
    case("traversal", "calibration record", "--root", PASSWD, "--provider", "../../etc",
         "--model", "passwd", "--estimated", "1", "--actual", "-1"),
    case("traversal", "calibration show", "--root", PASSWD, "--provider", "../../etc"),
]
MEMORY_CASES = [  # issue 13: the memory fields of a packet, the memory options of recall/list
    case("types", "store put", "--root", R, stdin=b'{"target": "t", "memory_kind": "note"}',
         code=1),
    case("types", "store put", "--root", R, stdin=b'{"target": "t", "source_tier": "gold"}',
         code=1),
    case("types", "store put", "--root", R, stdin=b'{"target": "t", "dedupe_key": 5}', code=1),
    case("types", "store put", "--root", R, stdin=b'{"target": "t", "dedupe_key": " "}',
         code=1),
    case("types", "store put", "--root", R, stdin=b'{"target": "t", "superseded": "yes"}',
         code=1),
    case("huge", "store put", "--root", R,
         stdin=b'{"target": "t", "dedupe_key": "' + b"k" * 513 + b'"}', code=1),
    case("types", "recall", "--root", R, "-q", "x", "--mode", "bogus"),
    case("types", "recall", "--root", R, "-q", "x", "--kind", "note"),
    case("types", "recall", "--root", R, "-q", "x", "--include-superseded=yes"),
    case("types", "store list", "--root", R, "--include-superseded=1"),
    case("control", "recall", "--root", R, "-q", "x", "--kind", "brief\x1b[2J"),
    case("utf8", "recall", "--root", R, "-q", "x", "--mode", b"auto\xff"),
]
MCP_CASES = [  # (a root with a store would serve: every case fails before that)
    case("types", "mcp", "--root", R, "--bogus"),
    case("types", "mcp", "--root", R, "serve-it"),  # no such subcommand
    case("huge", "mcp", "--root", f"R/{LONG}", code=1),
    case("control", "mcp", "--root", "R/\x1b]0;owned\x07", code=1),  # no store there
    case("traversal", "mcp", "--root", PASSWD),
    case("types", "mcp config", "--root", R, "--client", "bogus"),
    case("huge", "mcp config", "--root", f"R/{LONG}", code=1),
    case("utf8", "mcp config", "--root", R, "--client", b"claude\xff"),
    case("utf8", "checkpoint", "--root", R, "--storage-scope", b"agent\xff"),
    case("utf8", "init", "--root", R, "--storage-scope", b"project\xff"),
    case("utf8", "log head", "--root", R, "--storage-scope", b"\xffagent"),
    case("utf8", "mcp", "--root", R, "--storage-scope", b"agent\xff"),
    case("utf8", "store stats", "--root", R, "--storage-scope", b"agent\xc3"),
    case("types", "store stats", "--root", R, "--storage-scope", "everywhere"),
    case("types", "storage", "--root", R, "extra"),
    case("huge", "storage", "--root", f"R/{LONG}", code=1),
    case("control", "storage", "--root", R, "--storage-scope", "\u202eagent"),
    case("traversal", "storage", "--root", PASSWD),
    case("utf8", "storage", "--root", R, "--storage-scope", b"agent\xff"),
    case("types", "init", "--root", R, "--storage-scope", "Agent"),
    case("control", "mcp config", "--root", R, "--client", "\x1b[2J"),
    case("traversal", "mcp config", "--root", PASSWD),
]
H = "a" * 64  # a well-formed handle no artifact has
ARTIFACT_CASES = [
    case("types", "artifact show", "--root", R),  # HANDLE is required
    case("types", "artifact show", "--root", R, H, "extra"),
    case("types", "artifact show", "--root", R, H, "--json=handle"),  # only store get has modes
    case("types", "artifact gc", "--root", R, "--dry-run=yes"),
    case("types", "store get", "--root", R, "--key", "abcdef01", "--json=foo"),
    case("types", "store get", "--root", R, "--key", "abcdef01", "--json", "handles"),
    case("types", "store get", "--root", R, "--key", "0" * 64, "--json=handle", code=1),  # none
    case("huge", "artifact show", "--root", R, "a" * 5000),
    case("huge", "artifact gc", "--root", f"R/{LONG}", code=1),
    case("utf8", "artifact show", "--root", R, b"\xff" * 64),
    case("utf8", "artifact gc", "--root", R, "--storage-scope", b"agent\xff"),
    case("control", "artifact show", "--root", R, "\x1b[2J" + "a" * 60),
    case("control", "artifact gc", "--root", "R/\x1b]0;owned\x07", code=1),  # no store there
    # a handle becomes a file name: nothing but 64 hex digits gets near one
    *(case("traversal", "artifact show", "--root", R, h) for h in (
        "../x", "..", "/etc/passwd", PASSWD, "a/b", "%2e%2e", "\u0663" * 64, "\uff10" * 64,
        "a" * 63, "a" * 65, "", " " + "a" * 64, "a" * 62 + "/.", "./" + "a" * 62)),
    case("traversal", "artifact show", "--root", PASSWD, H),
    case("traversal", "artifact gc", "--root", PASSWD),
    case("negative", "artifact show", "--root", R, H, code=1),  # well formed, but not there
]
CASES = [
    # --- malformed JSON, in options, files and stdin -------------------------------------
    case("json", "log append", "--root", R, "--kind", "x.y", "--data", '{"a":'),
    case("json", "log append", "--root", R, "--kind", "x.y", "--data", "-",
         stdin=b'{"a": 1, "a": 2}'),
    case("json", "log append", "--root", R, "--kind", "x.y", "--data", "@R/bad.json"),
    case("json", "store put", "--root", R, stdin=b'{"target": "t",'),
    case("json", "store put", "R/bad.json", "--root", R),
    # --- wrong types, unknown options, missing values -------------------------------------
    case("types", "init", "--root", R, "--json=yes"),
    case("types", "verify", "--root", R, "--bogus"),
    case("types", "log append", "--root", R, "--kind", "x.y", "--data", "[1, 2]"),
    case("types", "log append", "--root", R, *DATA, "--expected-head", "abc"),
    case("types", "log show", "--root", R, "--from", "abc"),
    case("types", "log tail", "--root", R, "-n", "x"),
    case("types", "store put", "--root", R, stdin=b"[1, 2]", code=1),  # JSON, not a packet
    case("types", "store put", "--root", R, stdin=b'{"target": 5}', code=1),
    case("types", "store get", "--root", R),  # --key is required
    case("types", "store list", "--root", R, "--limit", "ten"),
    case("types", "store prune", "--root", R, "--ttl", "1x"),
    case("types", "store stats", "--root", R, "extra"),
    case("types", "recall", "--root", R, "-q", "x", "--scope", "bogus"),
    case("types", "recall", "--root", R, "--scope", "task-only"),  # needs --task
    case("types", "replay", "--root", R, "--until", "yesterday"),
    case("types", "rebuild", "--root", R, "--projection", "nope"),
    case("types", "checkpoint", "--root", R, "--json=1"),
    case("types", "demo", "--root", R, "--packets", "many"),
    # --- huge values ------------------------------------------------------------------------
    case("huge", "init", "--root", f"R/{LONG}", code=1),  # the OS refuses the name
    case("huge", "verify", "--root", f"R/{LONG}", code=1),
    case("huge", "log append", "--root", R, "--kind", "x.y", "--key", "k" * 2000, "--data", "{}",
         code=1),
    case("huge", "log append", "--root", R, "--kind", "x.y", "--data",
         '{"a": ' + "[" * 250 + "]" * 250 + "}"),
    case("huge", "log show", "--root", R, "--from", BIG),
    case("huge", "log tail", "--root", R, "-n", BIG),
    case("huge", "store put", "--root", R,
         stdin=json.dumps({"target": "t", "summary": "x" * 5000}).encode(), code=1),
    case("huge", "store get", "--root", R, "--key", "a" * 100),
    case("huge", "store list", "--root", R, "--offset", BIG),
    case("huge", "store prune", "--root", R, "--ttl", "9" * 400 + "s"),
    case("huge", "store stats", "--root", f"R/{LONG}", code=1),
    case("huge", "recall", "--root", R, "-q", "x", "--limit", BIG),
    case("huge", "replay", "--root", R, "--until", BIG),
    case("huge", "rebuild", "--root", f"R/{LONG}", code=1),
    case("huge", "checkpoint", "--root", f"R/{LONG}", code=1),
    case("huge", "demo", "--root", R, "--packets", "10000000"),
    # --- invalid UTF-8, in arguments and on stdin ----------------------------------------------
    case("utf8", "log append", "--root", R, "--kind", b"x.\xff", "--data", "{}"),
    case("utf8", "log append", "--root", R, "--kind", "x.y", "--data", b'{"a": "\xff"}'),
    case("utf8", "log append", "--root", R, "--kind", "x.y", "--data", "-",
         stdin=b'{"a": "\xc3"}'),
    case("utf8", "log show", "--root", R, "--key", b"\xfe\xff"),
    case("utf8", "log tail", "--root", R, "--interval", b"\xff"),
    case("utf8", "store put", "--root", R, stdin=b"\xff\xfe{}"),
    case("utf8", "store get", "--root", R, "--key", b"\xffabcdef01"),
    case("utf8", "store list", "--root", R, "--target", b"t\xff"),
    case("utf8", "store prune", "--root", R, "--ttl", b"1\xff"),
    case("utf8", "recall", "--root", R, "-q", b"auth \xff"),
    case("utf8", "replay", "--root", R, "--until", b"@1\xff"),
    case("utf8", "rebuild", "--root", R, "--projection", b"cache\xff"),
    case("utf8", "demo", "--root", R, "--query", b"\xff"),
    case("utf8", "verify", "--root", b"R/\xff", code=1),  # a path need not be UTF-8: no store
    # --- control characters -------------------------------------------------------------------
    case("control", "init", "--root", "/etc/passwd/\x1b[2J", code=1),  # not a directory
    case("control", "verify", "--root", "R/\x1b]0;owned\x07", code=1),
    case("control", "log append", "--root", R, "--kind", "a\x1b[2J", "--data", "{}", code=1),
    case("control", "log show", "--root", R, "--from", "\x1b[1"),
    case("control", "log tail", "--root", R, "-n", "\x07"),
    case("control", "store put", "--root", R, stdin=b'{"target": "t\x1b[2J"}'),  # raw in JSON
    case("control", "store get", "--root", R, "--key", "\x1b[2J\u202e"),
    case("control", "store list", "--root", R, "--since", "\x1b[2J"),
    case("control", "store prune", "--root", R, "--ttl", "\u202e5"),
    case("control", "store stats", "--root", "R/\u202eevil", code=1),
    case("control", "recall", "--root", R, "-q", "x", "--scope", "\x1b"),
    case("control", "replay", "--root", R, "--until", "\x9b1"),
    case("control", "rebuild", "--root", R, "--projection", "cache\r"),
    case("control", "checkpoint", "--root", "R/\x7f", code=1),
    case("control", "demo", "--root", R, "--packets", "\x1b"),
    case("control", "store list", "--root", R, "--bogus\x1b[2J"),  # an unknown option, quoted
    # --- path traversal: roots that are files, keys and files named by ../ ----------------------
    case("traversal", "init", "--root", PASSWD),
    case("traversal", "verify", "--root", PASSWD),
    case("traversal", "log append", "--root", PASSWD, *DATA),
    case("traversal", "log append", "--root", R, "--kind", "x.y", "--data", f"@{PASSWD}"),
    case("traversal", "log show", "--root", PASSWD),
    case("traversal", "log tail", "--root", PASSWD),
    case("traversal", "store put", PASSWD, "--root", R),  # a readable file, but not JSON
    case("traversal", "store get", "--root", R, "--key", "../../etc/passwd"),
    case("traversal", "store list", "--root", PASSWD),
    case("traversal", "store prune", "--root", PASSWD),
    case("traversal", "store stats", "--root", PASSWD),
    case("traversal", "recall", "--root", PASSWD, "-q", "x"),
    case("traversal", "replay", "--root", PASSWD),
    case("traversal", "rebuild", "--root", PASSWD),
    case("traversal", "checkpoint", "--root", PASSWD),
    case("traversal", "demo", "--root", PASSWD),
    # --- NaN and infinities ---------------------------------------------------------------------
    case("nonfinite", "log append", "--root", R, "--kind", "x.y", "--data", '{"a": NaN}'),
    case("nonfinite", "log append", "--root", R, "--kind", "x.y", "--data", '{"a": 1e999}'),
    case("nonfinite", "log show", "--root", R, "--from", "nan"),
    case("nonfinite", "log tail", "--root", R, "--interval", "inf"),
    case("nonfinite", "store put", "--root", R, stdin=b'{"target": "t", "x": Infinity}'),
    case("nonfinite", "store list", "--root", R, "--as-of", "@nan"),
    case("nonfinite", "store list", "--root", R, "--since", "@inf"),
    case("nonfinite", "store prune", "--root", R, "--ttl", "nan"),
    case("nonfinite", "store prune", "--root", R, "--ttl", "inf"),
    case("nonfinite", "recall", "--root", R, "-q", "x", "--until", "@-inf"),
    case("nonfinite", "replay", "--root", R, "--until", "@inf"),
    case("nonfinite", "demo", "--root", R, "--packets", "inf"),
    # --- negative numbers, and seqs that are not there -------------------------------------------
    case("negative", "log append", "--root", R, *DATA, "--expected-head", "-1"),
    case("negative", "log show", "--root", R, "--limit", "-5"),
    case("negative", "log show", "--root", R, "--from", "3", "--to", "2"),
    case("negative", "log tail", "--root", R, "-n", "-1"),
    case("negative", "store get", "--root", R, "--key", "-1"),
    case("negative", "store list", "--root", R, "--offset", "-1"),
    case("negative", "store list", "--root", R, "--as-of", "@-5"),
    case("negative", "store list", "--root", R, "--as-of", "999"),  # past the head
    case("negative", "store prune", "--root", R, "--ttl", "-5"),
    case("negative", "recall", "--root", R, "-q", "x", "--limit", "-1"),
    case("negative", "recall", "--root", R, "-q", "x", "--as-of", "999"),
    case("negative", "recall", "--root", R, "-q", "x", "--budget-tokens", "-5"),
    case("negative", "recall", "--root", R, "-q", "x", "--budget-tokens", "0"),
    case("types", "recall", "--root", R, "-q", "x", "--budget-tokens", "1e3"),
    case("types", "recall", "--root", R, "-q", "x", "--budget-tokens", "12.5"),
    case("types", "recall", "--root", R, "-q", "x", "--fresh-only=yes"),
    case("huge", "recall", "--root", R, "-q", "x", "--budget-tokens", BIG),
    case("nonfinite", "recall", "--root", R, "-q", "x", "--budget-tokens", "inf"),
    case("utf8", "recall", "--root", R, "-q", "x", "--budget-tokens", b"1\xff"),
    case("negative", "replay", "--root", R, "--until", "@-5"),
    case("negative", "demo", "--root", R, "--packets", "-3"),
    *TASK_CASES,
    *MCP_CASES,
    *MEMORY_CASES,
    *ARTIFACT_CASES,
    *CALIBRATION_CASES,
    case("types", "log head", "--root", R, "extra"),
    case("huge", "log head", "--root", f"R/{LONG}", code=1),
    case("control", "log head", "--root", "R/\x1b[2J", code=1),  # no store there
    case("traversal", "log head", "--root", PASSWD),
    case("types", "log export", "--root", R, "--from", "one"),
    case("types", "log export", "--root", R, "--from", "5", "--to", "2"),
    case("huge", "log export", "--root", R, "--to", BIG),
    case("nonfinite", "log export", "--root", R, "--from", "inf"),
    case("negative", "log export", "--root", R, "--from", "-1"),
    case("utf8", "log export", "--root", R, "--kind", b"a.\xff"),
    case("control", "log export", "--root", "R/\x1b[2J", code=1),
    case("traversal", "log export", "--root", PASSWD),
    case("types", "log mirror", "--root", R),  # --to is required
    case("types", "log mirror", "--root", R, "--to", "kafka"),
    case("types", "log mirror", "--root", R, "--to", "jetstream", "--to-stream", "a.b"),
    case("types", "log mirror", "--root", R, "--to", "jetstream", "--to-servers", "http://x"),
    case("huge", "log mirror", "--root", R, "--to", "jetstream", "--to-replicas", BIG),
    case("negative", "log mirror", "--root", R, "--to", "jetstream", "--to-replicas", "-1"),
    case("nonfinite", "log mirror", "--root", R, "--to", "jetstream", "--to-replicas", "nan"),
    case("utf8", "log mirror", "--root", R, "--to", "jetstream", "--to-stream", b"a\xff"),
    case("control", "log mirror", "--root", R, "--to", "jetstream", "--to-servers",
         "nats://\x1b[2J:4222"),
    case("traversal", "log mirror", "--root", R, "--to", "file", "--to-dir", PASSWD),
    case("types", "log import", "--root", R),  # FILE is required
    case("types", "log import", "--root", R, "R/bad.json", code=1),  # not an export
    case("huge", "log import", "--root", R, f"R/{LONG}"),
    case("control", "log import", "--root", R, "R/\x1b[2J"),  # no such file
    case("utf8", "log import", "--root", R, "R/bad.json", "--storage-scope", b"agent\xff"),
    case("traversal", "log import", "--root", R, PASSWD, code=1),  # read, refused, nothing written
    case("types", "salvage", "--root", R, "extra"),
    case("huge", "salvage", "--root", f"R/{LONG}", code=1),
    case("control", "salvage", "--root", "R/\x1b[2J", code=1),  # no store there
    case("traversal", "salvage", "--root", PASSWD),
    case("utf8", "salvage", "--root", R, "--storage-scope", b"agent\xff"),
    case("types", "compact", "--root", R, "extra"),
    case("types", "compact", "--root", R, "--dry-run=maybe"),
    case("huge", "compact", "--root", f"R/{LONG}", code=1),
    case("control", "compact", "--root", "R/\x1b[2J", code=1),  # no store there
    case("traversal", "compact", "--root", PASSWD),
    case("utf8", "compact", "--root", R, "--storage-scope", b"agent\xff"),
    case("types", "verify", "--root", R, "--anchor", "12"),  # no digest
    case("control", "verify", "--root", R, "--anchor", "1:\x1b[2J"),
    case("utf8", "verify", "--root", R, "--anchor", b"1:\xff"),
]


def _needs(cmd: click.Command) -> set[str]:
    """The classes a command must be tried with, from what its parameters take."""
    need = {"types", "huge", "control", "traversal"}  # every command takes --root and options
    for p in cmd.params:
        t = p.type
        if isinstance(t, JsonInput):
            need |= {"json", "nonfinite"}
        if (isinstance(p, click.Option) and p.is_flag) or isinstance(t, click.Path):
            continue  # (a path need not be UTF-8: a file name is bytes)
        need.add("utf8")  # any text or number a person types
        numeric = (click.types.IntParamType, click.types.FloatParamType, Duration, TimeParam)
        if isinstance(t, numeric):
            need |= {"nonfinite", "negative"}
    return need


def test_every_command_is_tried_with_every_class_it_takes() -> None:
    have = {(c.values[0], c.values[1]) for c in CASES}  # type: ignore[attr-defined]
    commands = dict(walk())
    missing = [
        (cls, " ".join(path))
        for path in sorted(leaf_paths())
        for cls in sorted(_needs(commands[path]))
        if (cls, path) not in have
    ]
    assert not missing, f"add bad-input cases for {missing}"


def _digest(root: Path) -> dict[str, str]:
    """Every file under the store, by path: its bytes' hash (the log, the checkpoints...)."""
    store = root / ".ctxledger"
    return {
        str(p.relative_to(store)): hashlib.blake2b(p.read_bytes()).hexdigest()
        for p in sorted(store.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def store_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad-input")
    (root / ".ctxledger").mkdir()
    (root / ".ctxledger" / "config.toml").write_text("[store]\nmax_packet_bytes = 4096\n")
    with ContextStore.open(root) as store:
        puts = store.put_many([{"target": "t", "summary": f"auth {i}"} for i in range(3)])
        store.write_artifact(puts[0].cache_key)  # an artifact no failing command may touch
        store.tasks.create("a running task", id=K)
        store.tasks.start(K)
        store.checkpoint()
    (root / "bad.json").write_text('{"target": ')
    return root


def _argv(root: Path, argv: list[Arg]) -> list[bytes]:
    r = os.fsencode(root)
    out = []
    for a in argv:
        b = os.fsencode(a) if isinstance(a, str) else a
        out.append(r if b == b"R" else r + b[1:] if b.startswith(b"R/") else
                   b.replace(b"@R/", b"@" + r + b"/"))
    return out


@pytest.mark.parametrize(("cls", "path", "argv", "stdin", "code"), CASES)
def test_bad_input(
    store_root: Path, cls: str, path: tuple[str, ...], argv: list[Arg], stdin: bytes | None,
    code: int,
) -> None:
    if "/etc/passwd" in str(argv) and not Path("/etc/passwd").is_file():
        pytest.skip("needs /etc/passwd")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CTXLEDGER_") or k == "CTXLEDGER_HOME"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["CTXLEDGER_HOME"] = str(store_root / "home")  # (demo without --root stays in here)
    before = _digest(store_root)
    p = subprocess.run(
        [os.fsencode(sys.executable), b"-m", b"cli", *path_bytes(path), *_argv(store_root, argv)],
        input=stdin or b"",
        capture_output=True,
        env=env,
        cwd=store_root,
        timeout=60,
    )
    err = p.stderr.decode("utf-8")  # the error line itself must be UTF-8 text
    assert p.returncode == code, err
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and "internal error" not in err, err
    assert not unsafe_chars(err), (unsafe_chars(err), err)
    assert p.stdout == b""
    assert _digest(store_root) == before
    assert not (store_root / "home").exists()


def path_bytes(path: tuple[str, ...]) -> list[bytes]:
    return [w.encode() for w in path]
