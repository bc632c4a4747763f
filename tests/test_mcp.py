"""``ctxledger mcp`` through a real MCP stdio client (the ``mcp`` package's), against the library.

Each test spawns ``python -m cli mcp --root ...`` (the console script's code)
as an MCP client does, and compares what the tools and resources answer with
what ``ContextStore`` answers in this process on the same store: the same
keys, scores and fields. Malformed arguments must come back as tool errors
that write nothing; another process's writes must show up in the next answer;
SIGTERM and stdin EOF must close the store (checkpoints at the head); kill -9
must lose no write whose result the client received. Without the ``mcp``
package these are skipped; CI installs it (``.ci/run``).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar, get_args

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import json_values

from cli.core import verify_document
from cli.main import ctxledger
from cli.output import dumps, to_jsonable
from projections import ContextStore
from projections.checkpoints import CheckpointDir
from projections.corpus import stdlib_packets
from projections.recall import RecallHit
from projections.tasks import NOTE_TYPES, STATES

try:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from ctxledger_mcp import server as mcp_server
except ImportError:  # the extra is not installed: only the tests that need no server run
    HAVE_MCP = False
else:
    HAVE_MCP = True

needs_mcp = pytest.mark.skipif(
    not HAVE_MCP, reason="the mcp extra is not installed (pip install 'ctxledger[mcp]')"
)

REPO = Path(__file__).resolve().parents[1]
ENV = {"PYTHONPATH": str(REPO)}  # the client passes only these (and HOME, PATH, ...)
R = TypeVar("R")

TOOLS = {"recall", "put", "get", "list", "stats", "task_create", "task_start", "task_note",
         "task_progress", "task_complete", "task_fail", "task_cancel", "task_list", "task_show",
         "handoff", "bootstrap", "latest_handoff", "consume_handoff", "verify"}
READ_ONLY = {"recall", "get", "list", "stats", "task_list", "task_show", "latest_handoff",
             "verify"}
RUNNING = "run-1"  # a running task in every store


def server_args(root: Path) -> list[str]:
    return ["-m", "cli", "mcp", "--root", str(root)]


def session(root: Path, body: Callable[[Any], Awaitable[R]], errlog: Any = None,
            command: tuple[str, list[str], dict[str, str]] | None = None) -> R:
    """Run ``body(client)`` against a server spawned on ``root``, as an MCP client does."""
    exe, args, env = command or (sys.executable, server_args(root), ENV)
    params = StdioServerParameters(command=exe, args=args, env=env)

    async def main() -> R:
        transport = stdio_client(params, errlog=errlog or sys.stderr)
        async with Client(transport) as client:
            return await body(client)

    return anyio.run(main)


async def call(client: Any, name: str, **args: Any) -> Any:
    """A tool's structured answer; a tool error fails the test. The text beside it (what a
    client that shows no structure hands the model) is the same document."""
    r = await client.call_tool(name, args)
    assert not r.is_error, (name, args, r.content)
    assert [c.type for c in r.content] == ["text"]
    assert json.loads(r.content[0].text) == r.structured_content
    return r.structured_content


MEMORY_PACKETS = [  # memory fields: kinds, tiers, a dedupe pair (the second put supersedes)
    {"target": "mcp.mem", "summary": "decimal rounding rule", "memory_kind": "brief",
     "source_tier": "curated", "dedupe_key": "decimal-rule"},
    {"target": "mcp.mem", "summary": "decimal rounding rule, revised", "memory_kind": "brief",
     "source_tier": "curated", "dedupe_key": "decimal-rule"},
    {"target": "mcp.mem", "summary": "decimal trace of a run", "memory_kind": "tool_trace",
     "source_tier": "telemetry"},
    {"target": "mcp.mem", "summary": "decimal evidence", "memory_kind": "evidence",
     "superseded": True},
]


def make_store(root: Path, n: int = 300) -> Path:
    with ContextStore.open(root) as st:
        st.put_many(stdlib_packets(n, seed=0))
        st.put_many(MEMORY_PACKETS)
        st.tasks.create("a running task", id=RUNNING, labels=["mcp"])
        st.tasks.start(RUNNING)
        st.tasks.note(RUNNING, "question", {"text": "which token?"})
        st.agent.handoff({"next": "carry on"})
    return root


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_store(tmp_path / "project")


def lib(root: Path) -> ContextStore:
    return ContextStore.open(root, readonly=True)


def plain(obj: Any) -> Any:
    """What a library answer looks like once it has been through JSON."""
    return json.loads(dumps(to_jsonable(obj)))


QUERIES: list[dict[str, Any]] = [  # every option recall has; all but one find something
    {"query": "parse header"},
    {"query": "test_parse", "limit": 3},
    {"query": "Lib/json/decoder.py"},
    {"query": "decoder.py"},
    {"query": "Decimal"},
    {"query": "stdlib", "limit": 20},
    {"query": "zqxjkvbw"},  # in no packet
    {"query": "", "target": "stdlib._markupbase"},
    {"query": "feature", "task_id": "task-776", "scope": "task-first"},
    {"query": "", "task_id": "task-776", "scope": "task-only"},
    {"query": "decimal", "packet_types": ["coverage"]},
    {"query": "release", "path_filters": ["Lib/__future__.py"]},
    {"query": "release", "symbol_filters": ["_Feature"]},
    {"query": "decimal context", "since": "7d", "until": "@9999999999"},
    {"query": "decimal", "as_of": 100},
    {"query": "decimal", "mode": "telemetry"},
    {"query": "decimal", "mode": "conceptual", "kinds": ["brief", "tool_trace"]},
    {"query": "decimal", "include_superseded": True, "kinds": ["brief", "evidence"]},
]


def library_recall(store: ContextStore, q: dict[str, Any]) -> list[RecallHit]:
    kw = {k: v for k, v in q.items() if k != "query"}
    for name in ("since", "until"):
        if name in kw:
            kw[name] = mcp_server.time_arg(name, kw[name])
    if "as_of" in kw:
        kw["as_of"] = mcp_server.as_of_arg(kw["as_of"])
    return store.recall(q["query"], **kw)


def assert_same_hits(got: dict[str, Any], want: list[RecallHit]) -> None:
    hits = got["hits"]
    assert [h["cache_key"] for h in hits] == [h.cache_key for h in want]
    for g, w in zip(hits, want, strict=True):
        wj = plain(w)
        assert g.keys() == wj.keys()
        assert g["age_secs"] >= 0
        # the recency term moves with the clock (w / 86400 = 2.9e-6 a second at most): the
        # two answers were seconds apart
        assert g["score"] == pytest.approx(wj["score"], rel=0, abs=1e-3)
        assert {k: v for k, v in g.items() if k not in ("age_secs", "score")} == \
            {k: v for k, v in wj.items() if k not in ("age_secs", "score")}


# --- the tools and resources, each against the library ------------------------------------


@needs_mcp
def test_every_tool_and_resource_answers_as_the_library_does(root: Path) -> None:
    packet = {"target": "mcp.test", "summary": "a packet put over MCP", "paths": ["src/m.py"],
              "task_ids": [RUNNING], "payload": {"n": 1}}

    async def body(c: Any) -> None:
        listed = (await c.list_tools()).tools
        assert {t.name for t in listed} == TOOLS
        for t in listed:  # written for a model; strict inputs; a typed answer
            assert t.description and len(t.description) > 40, t.name
            assert t.input_schema["additionalProperties"] is False, t.name
            assert t.output_schema and t.output_schema["type"] == "object", t.name
            assert "$ref" not in json.dumps(t.output_schema), t.name  # inlined
            merged = mcp_server.merge_type_unions(t.output_schema)
            assert merged == t.output_schema, t.name  # bare type unions merged
            assert t.annotations.read_only_hint is (t.name in READ_ONLY), t.name
            for p, schema in t.input_schema["properties"].items():
                assert schema.get("description"), (t.name, p)
        resources = {str(r.uri) for r in (await c.list_resources()).resources}
        assert resources == {"ctxledger://handoff/latest", "ctxledger://stats"}
        templates = (await c.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["ctxledger://task/{id}"]

        with lib(root) as st:
            found = 0
            for q in QUERIES:
                want = library_recall(st, q)
                assert_same_hits(await call(c, "recall", **q), want)
                found += bool(want)
            assert found == len(QUERIES) - 1  # the comparisons compare hits, not nothing

            put = await call(c, "put", packet=packet, metadata={"by": "mcp"})
            assert put == _put_result(st, put["cache_key"])
            got = await call(c, "get", key=put["cache_key"][:12])
            assert got == plain(st.get(put["cache_key"]))
            assert got["body"] == packet and got["metadata"]["by"] == "mcp"
            page = await call(c, "list", limit=5, offset=1)
            assert page == plain(st.list_page(limit=5, offset=1))
            assert await call(c, "list", target="mcp.test") == plain(
                st.list_page(target="mcp.test"))
            assert await call(c, "list", as_of=50, limit=3) == plain(
                st.list_page(as_of=50, limit=3))
            assert await call(c, "list", target="mcp.mem", include_superseded=True) == plain(
                st.list_page(target="mcp.mem", include_superseded=True))
            assert len((await call(c, "list", target="mcp.mem"))["entries"]) == 2
            stats = await call(c, "stats")
            mine = st.stats()
            assert stats.keys() == mine.keys()
            for k in ("entries", "head_seq", "tasks", "evictions", "ttl_seconds", "warnings"):
                assert stats[k] == mine[k], k

            t = await call(c, "task_create", title="work over MCP", labels=["mcp"], id="m-1",
                           parent=RUNNING)
            assert t == plain(st.tasks.get("m-1"))
            assert t["state"] == "created" and t["parent"] == RUNNING
            assert await call(c, "task_start", id="m-1") == plain(st.tasks.get("m-1"))
            q = await call(c, "task_note", id="m-1", type="question", data={"text": "why?"})
            assert q == plain(st.tasks.get("m-1"))
            d = await call(c, "task_note", id="m-1", type="decision",
                           data={"text": "because", "resolves": q["last_seq"]})
            assert d["notes"] == {"question": 1, "decision": 1}
            await call(c, "task_note", id="m-1", type="file_edit", data={"path": "src/m.py"})
            p = await call(c, "task_progress", id="m-1", message="half", fraction=0.5)
            assert p == plain(st.tasks.get("m-1")) and p["progress"]["fraction"] == 0.5
            done = await call(c, "task_complete", id="m-1", result={"pr": 7})
            assert done == plain(st.tasks.get("m-1")) and done["result"] == {"pr": 7}
            for tid, tool, args, state in (("m-2", "task_fail", {"reason": "no"}, "failed"),
                                           ("m-3", "task_cancel", {"force": True}, "cancelled")):
                await call(c, "task_create", title=tid, id=tid)
                await call(c, "task_start", id=tid)
                ended = await call(c, tool, id=tid, **args)
                assert ended == plain(st.tasks.get(tid)) and ended["state"] == state
            asked = await call(c, "task_cancel", id=RUNNING, reason="enough")
            assert asked["cancel_requested"] and asked["state"] == "running"

            assert await call(c, "task_list") == {"tasks": plain(st.tasks.list())}
            assert await call(c, "task_list", state="running", label="mcp") == \
                {"tasks": plain(st.tasks.list(state="running", label="mcp"))}
            assert await call(c, "task_list", parent=RUNNING, as_of=q["last_seq"]) == \
                {"tasks": plain(st.tasks.list(parent=RUNNING, as_of=q["last_seq"]))}
            shown = await call(c, "task_show", id="m-1", history=True)
            assert shown == plain({"task": st.tasks.get("m-1"), "record": st.tasks.record("m-1"),
                                   "history": st.tasks.history("m-1")})
            assert shown["record"]["open_questions"] == []
            edit_seq = shown["history"][4]["seq"]  # created, started, two notes, the edit
            assert shown["record"]["files"] == {"src/m.py": {"read": 0, "edit": 1,
                                                             "last_seq": edit_seq}}
            assert (await call(c, "task_show", id="m-1"))["history"] is None

            h = await call(c, "handoff", payload={"next": "review"}, task_id="m-1")
            assert h == plain(st.agent.get(h["id"]))
            b = await call(c, "bootstrap", payload={"goal": "g"})
            assert b == plain(st.agent.get(b["id"])) and b["kind"] == "bootstrap"
            latest = await call(c, "latest_handoff", task_id="m-1")
            assert latest == {"handoff": plain(st.agent.latest_handoff("m-1"))}
            overall = await call(c, "latest_handoff")
            assert overall == {"handoff": plain(st.agent.latest_handoff())}
            used = await call(c, "consume_handoff", id=h["id"], by="run-2")
            assert used == plain(st.agent.get(h["id"])) and used["resume_count"] == 1
            assert await call(c, "latest_handoff", as_of=1) == {"handoff": None}

            v = await call(c, "verify")
            assert v == plain(verify_document(st.ledger, st.path, None)[1]) and v["ok"]
            head = st.ledger.head
            anchor = f"{head}:{st.ledger.digest_at(head).hex()}"  # type: ignore[union-attr]
            va = await call(c, "verify", anchor=anchor)
            assert va["ok"] and va["anchor"]["ok"]
            wrong = await call(c, "verify", anchor=f"{head}:{'0' * 64}")
            assert wrong["ok"] is False and wrong["anchor"]["error"]

            task_doc = await c.read_resource("ctxledger://task/m-1")
            assert task_doc.contents[0].mime_type == "application/json"
            assert json.loads(task_doc.contents[0].text) == plain(
                {"task": st.tasks.get("m-1"), "record": st.tasks.record("m-1"),
                 "history": st.tasks.history("m-1")})
            latest_doc = await c.read_resource("ctxledger://handoff/latest")
            assert json.loads(latest_doc.contents[0].text) == \
                {"handoff": plain(st.agent.latest_handoff())}
            stats_doc = json.loads((await c.read_resource("ctxledger://stats")).contents[0].text)
            assert stats_doc["head_seq"] == st.ledger.head
            for uri in ("ctxledger://task/no-such", "ctxledger://task/%1B%5B2J"):
                with pytest.raises(Exception, match="no task|is not an id"):
                    await c.read_resource(uri)

    session(root, body)


def _put_result(st: ContextStore, key: str) -> dict[str, Any]:
    """What the library says about the entry ``put`` just wrote."""
    entry = st.get(key)
    assert entry is not None
    return {"cache_key": key, "seq": entry.metadata["seq"],
            "created_at_unix": entry.created_at_unix}


def test_the_server_spells_the_library_constants_out() -> None:
    if not HAVE_MCP:
        pytest.skip("the mcp extra is not installed (pip install 'ctxledger[mcp]')")
    from projections.memory import MEMORY_KINDS
    from projections.memory_rank import MODES
    from projections.recall import SCOPES

    assert get_args(mcp_server.NoteType) == NOTE_TYPES
    assert get_args(mcp_server.StateFilter) == (*STATES, "quarantined")
    assert get_args(mcp_server.Scope) == SCOPES
    assert get_args(mcp_server.Mode) == MODES
    assert get_args(mcp_server.MemoryKind) == MEMORY_KINDS


# --- bad input -------------------------------------------------------------------------------


NOT_ID = "is not an id"
BAD: list[tuple[str, dict[str, Any], str]] = [  # tool, arguments, what the error must say
    ("recall", {"query": "x", "limt": 3}, "Extra inputs are not permitted"),  # not ignored
    ("recall", {"query": 5}, "valid string"),
    ("recall", {"query": "x", "limit": -1}, "greater than or equal to 0"),
    ("recall", {"query": "x", "limit": True}, "valid integer"),  # strict: not 1
    ("recall", {"query": "x", "limit": 2**63}, "less than or equal to"),
    ("recall", {"query": "x", "as_of": True}, "valid integer"),
    ("recall", {"query": "x", "since": False}, "valid number"),
    ("recall", {"query": "x", "scope": "bogus"}, "task-first"),
    ("recall", {"query": "x", "mode": "bogus"}, "conceptual"),
    ("recall", {"query": "x", "kinds": ["bogus"]}, "tool_trace"),
    ("list", {"include_superseded": "yes"}, "valid boolean"),
    ("recall", {"scope": "task-only"}, "needs a task id"),  # the library's rule
    ("recall", {"query": " ".join(f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(65))},
     "distinct terms"),
    ("recall", {"query": "y" * 5000}, "at most 4096"),
    ("recall", {"query": "x", "since": "yesterday"}, "since: 'yesterday' is not a time"),
    ("recall", {"query": "x", "until": 1e300}, "until:"),
    ("recall", {"query": "x", "as_of": 10**9}, "past the head"),
    ("recall", {"query": "x", "as_of": "2999-01-01"}, "in the future"),
    ("recall", {"query": "x", "budget_tokens": 0}, "greater than or equal to 1"),
    ("recall", {"query": "x", "budget_tokens": True}, "valid integer"),
    ("recall", {"query": "x", "budget_tokens": 2**63}, "less than or equal to"),
    ("recall", {"query": "x", "fresh_only": 1}, "valid boolean"),
    ("put", {"packet": {"summary": "no target"}}, "target"),
    ("put", {"packet": {"target": "t", "paths": "not a list"}}, "paths"),
    ("put", {"packet": [1, 2]}, "valid dictionary"),
    ("put", {}, "Field required"),
    ("get", {"key": "abc"}, "8"),
    ("get", {"key": "0" * 64}, "no live entry"),
    ("get", {"key": "../../etc/passwd"}, "hex"),
    ("list", {"offset": -1}, "greater than or equal to 0"),
    ("list", {"limit": "5"}, "valid integer"),  # strict: not 5
    ("list", {"since": "@nan"}, "since:"),
    ("stats", {"verbose": True}, "Extra inputs are not permitted"),
    ("task_create", {"title": ""}, "title must be"),
    ("task_create", {"title": "x", "id": "../etc"}, NOT_ID),
    ("task_create", {"title": "x", "parent": "no-such-task"}, "no parent task with id"),
    ("task_create", {"title": "x", "id": RUNNING}, "already exists"),
    ("task_create", {"title": "x", "labels": ["x" * 101]}, "labels must be"),
    ("task_start", {"id": "no-such-task"}, "no task with id no-such-task"),
    ("task_start", {"id": RUNNING}, f"cannot start task {RUNNING}"),
    ("task_start", {"id": "\x1b[2J"}, NOT_ID),
    ("task_note", {"id": RUNNING, "type": "bogus"}, "'decision'"),
    ("task_note", {"id": RUNNING, "type": "file_read", "data": {}}, "needs data with"),
    ("task_note", {"type": "other"}, "Field required"),
    ("task_progress", {"id": RUNNING, "fraction": 2}, "less than or equal to 1"),
    ("task_complete", {"id": "no-such-task"}, "no task with id"),
    ("task_fail", {"id": RUNNING}, "Field required"),
    ("task_fail", {"id": RUNNING, "reason": ""}, "a failure needs a reason"),
    ("task_cancel", {"id": RUNNING, "force": "maybe"}, "valid boolean"),
    ("task_cancel", {"id": RUNNING, "force": 1}, "valid boolean"),
    ("task_list", {"state": "bogus"}, "quarantined"),
    ("task_list", {"as_of": -1}, "negative"),
    ("task_show", {"id": "no-such-task"}, "no task with id"),
    ("handoff", {"payload": "text"}, "valid dictionary"),
    ("handoff", {"payload": {}, "task_id": "no-such-task"}, "no task with id"),
    ("bootstrap", {"payload": {"a": 1}, "task_id": "\u202e"}, NOT_ID),
    ("latest_handoff", {"as_of": "soon"}, "as_of:"),
    ("consume_handoff", {"id": "h-nope"}, "no handoff with id h-nope"),
    ("verify", {"anchor": "12"}, "is not an anchor"),
    ("no_such_tool", {}, "Unknown tool"),
]


@needs_mcp
def test_malformed_arguments_are_tool_errors_and_write_nothing(root: Path) -> None:
    with lib(root) as st:
        head = st.ledger.head

    async def body(c: Any) -> None:
        for name, args, says in BAD:
            r = await c.call_tool(name, args)
            assert r.is_error, (name, args, r.structured_content)
            text = r.content[0].text
            assert says in text and "Traceback" not in text, (name, args, text)
        # still serving, and nothing was written
        assert (await call(c, "stats"))["head_seq"] == head

    session(root, body)
    with lib(root) as st:
        assert st.ledger.head == head


# --- following the log ---------------------------------------------------------------------


def cli(root: Path, *args: str, stdin: str | None = None) -> Any:
    """A second process: the CLI, as another agent or a person would run it."""
    p = subprocess.run([sys.executable, "-m", "cli", *args, "--root", str(root), "--json"],
                       input=(stdin or "").encode(), capture_output=True, env={**os.environ, **ENV},
                       timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return json.loads(p.stdout)


@needs_mcp
def test_writes_by_another_process_show_in_the_next_answer(root: Path) -> None:
    word = "quuxplorator"

    async def body(c: Any) -> None:
        assert (await call(c, "recall", query=word))["hits"] == []
        put = cli(root, "store", "put",
                  stdin=json.dumps({"target": "cli.side", "summary": f"the {word} finding"}))
        hits = (await call(c, "recall", query=word))["hits"]
        assert [h["cache_key"] for h in hits] == [put["cache_key"]]
        assert (await call(c, "get", key=put["cache_key"]))["body"]["summary"] == \
            f"the {word} finding"
        cli(root, "task", "create", "--title", "from the CLI", "--id", "cli-1")
        assert (await call(c, "task_show", id="cli-1"))["task"]["state"] == "created"
        await call(c, "task_start", id="cli-1")  # and the other way round
        assert cli(root, "task", "show", "cli-1")["task"]["state"] == "running"
        cli(root, "task", "complete", "cli-1")
        refused = await c.call_tool("task_complete", {"id": "cli-1"})
        assert refused.is_error and "already completed" in refused.content[0].text

    session(root, body)


@needs_mcp
def test_recall_budget_and_fresh_only_answer_as_the_library_does(root: Path) -> None:
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "fresh.py").write_text("x = 1\n")
    (root / "src" / "stale.py").write_text("y = 1\n")
    with ContextStore.open(root) as st:
        st.put_many([{"target": "fr.test", "summary": f"budgetword {name}",
                      "paths": [f"src/{name}.py"]} for name in ("fresh", "stale")])
    (root / "src" / "stale.py").write_text("y = 2, changed\n")
    q: dict[str, Any] = {"query": "budgetword decimal", "limit": 6}

    async def body(c: Any) -> None:
        with lib(root) as st:
            for extra in ({}, {"budget_tokens": 40}, {"budget_tokens": 1}, {"fresh_only": True},
                          {"fresh_only": True, "budget_tokens": 10**6}):
                got = await call(c, "recall", **q, **extra)
                want = st.recall_answer(q["query"], limit=6, **extra)
                assert_same_hits(got, list(want.hits))
                assert got.get("budget") == (None if want.budget is None
                                             else plain(want.budget))
                states = {h["freshness"]["state"] for h in got["hits"]}
                if not extra:
                    assert states == {"fresh", "stale", "unknown"}
                if extra.get("fresh_only"):
                    assert states == {"fresh", "unknown"}
            got = await call(c, "recall", **q, budget_tokens=1)
            assert got["hits"] == [] and got["budget"]["overflow"]
            assert len(got["budget"]["omitted"]) == 6

    session(root, body)


@needs_mcp
def test_recall_with_a_provider_and_model_is_calibrated_from_the_agent_log(root: Path) -> None:
    from projections.scope import agent_home

    home = agent_home()  # (the client passes no CTXLEDGER_HOME of its own: give it the test's)
    command = (sys.executable, server_args(root), {**ENV, "CTXLEDGER_HOME": str(home)})
    q = {"query": "parse header", "limit": 3}

    async def body(c: Any) -> None:
        plain = (await call(c, "recall", **q, provider="anthropic", model="claude"))["hits"]
        assert plain and all(not h["budget_estimate"]["calibrated"] for h in plain)
        cli(root, "calibration", "record", "--provider", "anthropic", "--model", "claude",
            "--estimated", "10", "--actual", "13")  # another process, another day
        for _ in range(2):
            cli(root, "calibration", "record", "--provider", "anthropic", "--model", "claude",
                "--estimated", "20", "--actual", "26")
        got = await call(c, "recall", **q, provider="anthropic", model="claude")
        with ContextStore.open(root, readonly=True, home=home) as st:
            want = st.recall(q["query"], limit=3, provider="anthropic", model="claude")
        assert_same_hits(got, want)
        budget = got["hits"][0]["budget_estimate"]
        assert budget["calibrated"] and budget["multiplier"] == 1.3
        chars_v1 = (budget["est_bytes"] + 3) // 4  # ceil(bytes / 4)
        assert budget["est_tokens"] == (chars_v1 * 13 + 9) // 10  # ceil(chars_v1 x 1.3)
        refused = await c.call_tool("recall", {**q, "provider": "anthropic"})
        assert refused.is_error and "both a provider and a model" in refused.content[0].text

    session(root, body, command=command)


@needs_mcp
def test_200_sequential_recalls_through_the_configured_command(root: Path) -> None:
    """The server `mcp config` describes starts, and answers 200 recalls in a row."""
    res = CliRunner().invoke(ctxledger, ["mcp", "config", "--root", str(root)])
    assert res.exit_code == 0, res.output
    snippet = json.loads(res.stdout)
    with lib(root) as st:
        want = [library_recall(st, q) for q in QUERIES]

    async def body(c: Any) -> int:
        n = 0
        for i in range(200):
            q = QUERIES[i % len(QUERIES)]
            assert_same_hits(await call(c, "recall", **q), want[i % len(QUERIES)])
            n += 1
        return n

    env = {**snippet["env"], **ENV} if snippet["command"] == sys.executable else snippet["env"]
    assert session(root, body, command=(snippet["command"], snippet["args"], env)) == 200


# --- lifecycle -------------------------------------------------------------------------------


def checkpoint_seqs(root: Path) -> dict[str, int | None]:
    ck = CheckpointDir(root / ".ctxledger" / "checkpoints", readonly=True)
    try:
        return {name: ck.peek_seq(name) for name in ("cache", "recall", "tasks", "handoffs")}
    finally:
        ck.close()


def server_pid(errlog: Any) -> int:
    errlog.flush()
    text = Path(errlog.name).read_text()
    m = re.search(r"ctxledger mcp: serving .* over stdio \(pid (\d+)\)", text)
    assert m, text
    return int(m.group(1))


def close_writes_every_checkpoint(root: Path) -> None:
    """close_lag = 1: a clean close then writes every view that moved (the default leaves
    a checkpoint fewer than 256 events behind), which is what these tests look for."""
    cfg = root / ".ctxledger" / "config.toml"
    cfg.write_text((cfg.read_text() if cfg.exists() else "") + "\n[checkpoint]\nclose_lag = 1\n")


@needs_mcp
def test_sigterm_closes_the_store_and_exits_0(root: Path) -> None:
    close_writes_every_checkpoint(root)
    shell = ('"$0" -m cli mcp --root "$1"; echo "server exited $?" >&2')
    command = ("/bin/sh", ["-c", shell, sys.executable, str(root)], ENV)
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as errlog:

        async def body(c: Any) -> int:
            await call(c, "put", packet={"target": "t", "summary": "before the signal"})
            t = await call(c, "task_note", id=RUNNING, type="evidence", data={"x": 1})
            os.kill(server_pid(errlog), signal.SIGTERM)
            return int(t["last_seq"])

        last = session(root, body, errlog=errlog, command=command)
        text = Path(errlog.name).read_text()
    assert "server exited 0" in text and "Traceback" not in text, text
    assert checkpoint_seqs(root) == dict.fromkeys(("cache", "recall", "tasks", "handoffs"), last)


RAW_MESSAGES = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize",
     "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
     "params": {"name": "task_note", "arguments": {"id": RUNNING, "type": "other"}}},
    {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
     "params": {"name": "recall", "arguments": {"query": "parse", "limit": 2}}},
]


def raw_over_pipes(root: Path) -> tuple[list[str], int, str]:
    """Each request written once the answer to the one before it was read (a client's way)."""
    p = subprocess.Popen([sys.executable, *server_args(root)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, **ENV})
    assert p.stdin and p.stdout and p.stderr
    lines: list[str] = []
    try:
        for m in RAW_MESSAGES:
            p.stdin.write((json.dumps(m) + "\n").encode())
            p.stdin.flush()
            while "id" in m and not any(f'"id":{m["id"]},' in x for x in lines):
                lines.append(p.stdout.readline().decode())  # the answer, before the next
        rest, err = p.communicate(timeout=60)  # closes stdin: EOF, the server closes the store
    finally:
        p.kill()
    return lines + rest.decode().splitlines(keepends=True), p.returncode, err.decode()


def raw_from_file(root: Path) -> tuple[list[str], int, str]:
    """stdin a regular file, stdout a file: not pipes, so the SDK's own transport serves."""
    with tempfile.TemporaryFile() as fin, tempfile.TemporaryFile() as fout:
        fin.write("".join(json.dumps(m) + "\n" for m in RAW_MESSAGES).encode())
        fin.seek(0)
        p = subprocess.run([sys.executable, *server_args(root)], stdin=fin, stdout=fout,
                           stderr=subprocess.PIPE, env={**os.environ, **ENV}, timeout=60)
        fout.seek(0)
        return fout.read().decode().splitlines(keepends=True), p.returncode, p.stderr.decode()


@needs_mcp
def test_stdin_eof_closes_the_store_and_stdout_is_only_protocol(root: Path) -> None:
    """Raw JSON-RPC over pipes (the loop transport): every stdout line is a protocol message."""
    close_writes_every_checkpoint(root)
    lines, code, err = raw_over_pipes(root)
    assert code == 0, err
    assert all(x.endswith("\n") and json.loads(x)["jsonrpc"] == "2.0" for x in lines), lines
    answers = {m["id"]: m for m in map(json.loads, lines) if "id" in m}
    assert set(answers) == {1, 2, 3}
    note = answers[2]["result"]["structuredContent"]
    assert not answers[2]["result"]["isError"] and note["notes"]["other"] == 1
    assert len(answers[3]["result"]["structuredContent"]["hits"]) == 2
    assert checkpoint_seqs(root) == dict.fromkeys(("cache", "recall", "tasks", "handoffs"),
                                                  note["last_seq"])
    assert err.startswith("ctxledger mcp: serving ") and "Traceback" not in err


@needs_mcp
def test_a_client_that_stops_reading_is_a_clean_stop(root: Path) -> None:
    """The client closes its end of stdout (it went away): no error, the store closed."""
    close_writes_every_checkpoint(root)
    p = subprocess.Popen([sys.executable, *server_args(root)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, **ENV})
    assert p.stdin and p.stdout and p.stderr
    try:
        p.stdin.write((json.dumps(RAW_MESSAGES[0]) + "\n").encode())
        p.stdin.flush()
        assert json.loads(p.stdout.readline())["id"] == 1
        p.stdout.close()  # nobody reads the answers from now on
        for m in RAW_MESSAGES[1:3]:  # a task_note whose answer has nowhere to go
            p.stdin.write((json.dumps(m) + "\n").encode())
        p.stdin.close()
        code, err = p.wait(timeout=60), p.stderr.read().decode()
    finally:
        p.kill()
    assert code == 0 and "error" not in err, err
    with lib(root) as st:
        head = st.ledger.head
    assert checkpoint_seqs(root) == dict.fromkeys(("cache", "recall", "tasks", "handoffs"), head)


@needs_mcp
def test_stdin_from_a_file_is_served_by_the_sdk_transport(root: Path) -> None:
    """Not a pipe: the SDK's threaded transport. EOF comes at once, so the server may stop
    before it answers every request (as the SDK does); what it writes is protocol only."""
    lines, code, err = raw_from_file(root)
    assert code == 0, err
    assert all(x.endswith("\n") and json.loads(x)["jsonrpc"] == "2.0" for x in lines), lines
    answers = {m["id"]: m for m in map(json.loads, lines) if "id" in m}
    assert 1 in answers and set(answers) <= {1, 2, 3}
    assert answers[1]["result"]["serverInfo"]["name"] == "ctxledger"
    assert "Traceback" not in err


JSON_TYPES = ["string", "number", "integer", "boolean", "null", "array", "object"]


@needs_mcp
@settings(max_examples=300, deadline=None)
@given(alts=st.lists(st.sampled_from(JSON_TYPES), min_size=2, max_size=4, unique=True),
       value=json_values)
def test_merged_type_unions_accept_exactly_what_any_of_did(alts: list[str], value: Any) -> None:
    import jsonschema

    union = {"anyOf": [{"type": t} for t in alts], "description": "d"}
    schema = {"type": "object", "properties": {"f": union, "g": {"type": "array", "items": union}}}
    merged = mcp_server.merge_type_unions(schema)
    assert merged["properties"]["f"] == {"type": alts, "description": "d"}
    for doc in ({"f": value}, {"g": [value, value]}):
        old = jsonschema.Draft202012Validator(schema).is_valid(doc)
        assert jsonschema.Draft202012Validator(merged).is_valid(doc) is old, (alts, doc)


@needs_mcp
def test_unions_of_more_than_bare_types_are_left_alone() -> None:
    for union in ({"anyOf": [{"type": "string", "minLength": 1}, {"type": "null"}]},
                  {"anyOf": [{"type": "string"}], "type": "string"},
                  {"anyOf": [{"type": "string"}, {"$ref": "#/x"}]}):
        schema = {"properties": {"f": union}}
        assert mcp_server.merge_type_unions(schema) == schema


LOOP_STDIO_CHILD = """
import asyncio, os, sys
from ctxledger_mcp.stdio import loop_stdio

async def main():
    async with loop_stdio() as pipes:
        assert pipes is not None, "pipes expected"
        reader, writer = pipes
        print("stray print")  # a library writing to stdout while serving
        os.write(1, b"stray write\\n")
        async for line in reader:
            await writer.write("echo " + line)
            await writer.flush()
    print("after: stdout again")

asyncio.run(main())
"""


@needs_mcp
def test_loop_stdio_owns_the_wire_and_gives_it_back() -> None:
    """Over pipes, stray output while serving goes to stderr; stdout is restored after."""
    p = subprocess.run([sys.executable, "-c", LOOP_STDIO_CHILD], input=b"one\n\xff two\n",
                       capture_output=True, env={**os.environ, **ENV}, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode() == "echo one\necho \ufffd two\nafter: stdout again\n"
    assert p.stderr.decode().split() == ["stray", "print", "stray", "write"]


@needs_mcp
def test_kill_9_during_writes_loses_nothing_acknowledged(root: Path) -> None:
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as errlog:

        async def body(c: Any) -> tuple[list[str], list[int]]:
            keys: list[str] = []
            notes: list[int] = []
            pid = server_pid(errlog)
            going = anyio.Event()

            async def killer() -> None:  # once writes flow, kill while one is in flight
                await going.wait()
                await anyio.sleep(random.Random(9).uniform(0, 0.002))
                os.kill(pid, signal.SIGKILL)

            async with anyio.create_task_group() as tg:
                tg.start_soon(killer)
                try:
                    for i in range(100_000):  # until the kill ends the session
                        r = await c.call_tool("put", {"packet": {"target": "k9", "summary":
                                                                 f"write {i}"}})
                        keys.append(r.structured_content["cache_key"])
                        r = await c.call_tool("task_note", {"id": RUNNING, "type": "evidence",
                                                            "data": {"i": i}})
                        notes.append(r.structured_content["last_seq"])
                        if len(notes) == 20:
                            going.set()
                except Exception:  # the connection died under a call: that one was not acked
                    pass
            return keys, notes

        keys, notes = session(root, body, errlog=errlog)
    assert len(keys) >= 20
    with lib(root) as st:
        # the only damage a kill can leave is a torn final frame, never acknowledged
        assert all("torn" in p.error for p in st.ledger.verify().problems)
        assert all(st.get(k) is not None for k in keys)
        seqs = {e.seq for e in st.tasks.history(RUNNING)}
        assert set(notes) <= seqs


# --- without the extra; the config snippet ----------------------------------------------------


def without_mcp(*argv: str) -> subprocess.CompletedProcess[bytes]:
    """``ctxledger ARGV`` in a process where ``import mcp`` fails, as without the extra."""
    code = f"import sys; sys.modules['mcp'] = None; from cli.main import main; main({argv!r})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60,
                          env={**os.environ, **ENV})


def test_without_the_mcp_package_it_says_how_to_install_it(root: Path) -> None:
    p = without_mcp("mcp", "--root", str(root))
    assert p.returncode == 1 and p.stdout == b""
    lines = p.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "pip install 'ctxledger[mcp]'" in lines[0]
    # what needs no server works all the same
    assert without_mcp("mcp", "--help").returncode == 0
    p = without_mcp("mcp", "config", "--root", str(root))
    assert p.returncode == 0 and json.loads(p.stdout)["args"][-1] == str(root)


@pytest.mark.parametrize("client", ["generic", "claude", "cursor"])
def test_config_names_an_absolute_command_for_this_store(root: Path, client: str) -> None:
    res = CliRunner().invoke(ctxledger, ["mcp", "config", "--root", str(root), "--client", client])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    if client == "generic":
        server = doc
    else:
        assert list(doc) == ["mcpServers"] and list(doc["mcpServers"]) == ["ctxledger"]
        server = doc["mcpServers"]["ctxledger"]
    assert server.get("type") == (None if client == "cursor" else "stdio")
    assert os.path.isabs(server["command"]) and os.access(server["command"], os.X_OK)
    assert server["args"][-3:] == ["mcp", "--root", str(root.resolve())]
    assert isinstance(server["env"], dict)


def test_config_falls_back_to_the_interpreter(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    from cli import mcp as cli_mcp

    bare = tmp_path / "bin" / "python3"
    bare.parent.mkdir()
    bare.symlink_to(sys.executable)  # a Python with no ctxledger script beside it
    monkeypatch.setattr(sys, "executable", str(bare))
    cmd = cli_mcp.server_command("/some/root")
    assert cmd["command"] == str(bare)  # not resolved: a venv's python is a symlink
    assert cmd["args"] == ["-m", "cli", "mcp", "--root", "/some/root"]
    monkeypatch.setattr(cli_mcp, "_installed", lambda: False)
    assert cli_mcp.server_command("/r")["env"] == {"PYTHONPATH": str(REPO)}


def test_config_needs_a_store(tmp_path: Path) -> None:
    res = CliRunner().invoke(ctxledger, ["mcp", "config", "--root", str(tmp_path / "none")])
    assert res.exit_code == 1 and "no ctxledger store" in res.stderr


def test_config_carries_the_backend_options() -> None:
    """A store chosen with --backend/--servers is the one the configured server opens."""
    from cli import mcp as cli_mcp

    cmd = cli_mcp.server_command("/r", None, None, "jetstream", ("nats://a:1", "nats://b:2"))
    args = cmd["args"][cmd["args"].index("mcp"):]
    assert args == ["mcp", "--root", "/r", "--backend", "jetstream", "--servers", "nats://a:1",
                    "--servers", "nats://b:2"]
