"""The store as MCP tools and resources, served over stdio.

A thin layer: each tool validates its arguments (pydantic, from the type
hints, strictly; unknown arguments are refused), calls the library, and returns the
library's answer in its ``to_json()`` shape. Nothing here decides anything
the library decides.

**One caller at a time.** ``ContextStore`` is not thread-safe, and the SDK
runs a *sync* tool on a worker thread, concurrently with others. So every
tool is an ``async`` function that calls the library directly on the event
loop's thread: requests are answered one after another, each as fast as the
library answers it in process (no thread hop per call).

**Follows the log.** Every read of the library catches up with what other
processes (the CLI, other agents) appended, so their writes show up in the
next answer. Every write is the library's: a tool returns only once its
append returned, durable under the store's sync mode (``always`` by default).

**Errors.** Malformed arguments (the SDK's validation) and the library's
refusals (``ValueError``, ``LedgerError``: a bad id, an unknown task, a
refused transition, a packet the store refuses) come back as tool errors
(``is_error``), with the library's message; nothing was written. A resource
that does not exist is a protocol error (``-32602``).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Annotated, Any, Literal, cast

import anyio
import click
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.server.stdio import stdio_server
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ConfigDict, Field

from cli.core import verify_document
from cli.inputs import MAX_INT, SEQ_OR_TIME, TIME
from cli.output import dumps, to_jsonable
from eventstore import Anchor, LedgerError
from projections import ContextStore
from projections.recall import RecallQuery
from projections.task_api import Handoff, TaskInfo, UnknownTaskError

from . import schema as S
from .stdio import loop_stdio

log = logging.getLogger("ctxledger.mcp")

NAME = "ctxledger"
DEBUG_ENV = "CTXLEDGER_DEBUG"  # as for the CLI: set, and the server logs every request

INSTRUCTIONS = """\
ctxledger is this project's memory: what earlier agent runs learned (cached
packets), the tasks they worked on, and what they left for the next run.
Before re-deriving something, `recall` it (free text, file paths, symbols,
test names); `get` a hit's cache_key for the whole packet. Cache what you
learn with `put`. Work in tasks: `task_create`, `task_start`, `task_note`
(decisions, questions, files read and edited), then `task_complete` or
`task_fail`. At the start of a run read `latest_handoff`; at the end write a
`handoff` for the next one. Every write is durable when the tool returns.
"""

# --- argument types: each carries the description a model reads ---------------------------

Scope = Literal["global", "task-first", "task-only"]
Mode = Literal["auto", "conceptual", "telemetry"]
MemoryKind = Literal["brief", "handoff", "recommended_action", "evidence", "tool_trace",
                     "focus_inference", "state_write", "other"]
IncludeSuperseded = Annotated[bool, Field(description=(
    "Also return packets a newer packet with the same dedupe_key replaced, or that marked "
    "themselves superseded (flagged: 'superseded' in match_reasons, superseded_by)."))]
NoteType = Literal["decision", "question", "intention", "evidence", "file_read", "file_edit",
                   "tool_call", "other"]
StateFilter = Literal["unknown", "created", "running", "completed", "failed", "cancelled",
                      "quarantined"]

Time = Annotated[float | str | None, Field(
    description="A point in time: unix seconds (a number), or text: ISO-8601 "
                "('2026-11-30T12:00:00Z'), '@UNIX', or a duration ago ('30m', '24h', '7d').")]
AsOf = Annotated[int | str | None, Field(
    description="Answer as the store stood then: a log seq (an integer; 0 is the empty log) or "
                "a time (ISO-8601, '@UNIX', or a duration ago like '24h'). Omit for now.")]
TaskId = Annotated[str, Field(description="A task id: 1-128 of A-Z a-z 0-9 . _ : -, starting "
                                          "with a letter or digit (generated ones look like "
                                          "t-01jf...).")]
OptTaskId = Annotated[str | None, Field(description="A task id, or omit.")]
Payload = Annotated[dict[str, Any], Field(description="A JSON object: whatever the next reader "
                                                      "needs (goals, state, next steps, ...).")]
Limit = Annotated[int, Field(ge=0, le=MAX_INT, description="At most this many hits.")]


def time_arg(name: str, value: float | str | None) -> float | None:
    """Unix seconds of a ``Time`` argument, by the CLI's rules (``cli.inputs``: finite,
    1970 to 9999), or ValueError naming the argument."""
    if value is None:
        return None
    text = value if isinstance(value, str) else f"@{value!r}"
    try:
        return float(TIME.convert(text, None, None))
    except click.BadParameter as e:
        raise ValueError(f"{name}: {e.message}") from None


def as_of_arg(value: int | str | None) -> int | float | None:
    """A seq (int; the library refuses one past the head) or a time not in the future."""
    if value is None or isinstance(value, int):
        return value
    try:
        got: int | float = SEQ_OR_TIME.convert(value, None, None)
    except click.BadParameter as e:
        raise ValueError(f"as_of: {e.message}") from None
    return got


def _task(t: TaskInfo) -> S.Task:
    # a result or note appended by another tool may hold any value CBOR can (bytes, NaN):
    # the CLI's --json wrappers (docs/cli.md) keep every answer strict JSON
    return cast(S.Task, to_jsonable(t.to_json()))


def _handoff(h: Handoff) -> S.Handoff:
    return cast(S.Handoff, to_jsonable(h.to_json()))


def task_document(
    store: ContextStore, task_id: str, *, as_of: int | float | None, history: bool
) -> S.TaskShow:
    """``{"task", "record", "history"}`` of one task (``history`` None unless asked for):
    the ``task_show`` tool's answer and the ``ctxledger://task/{id}`` resource."""
    info = store.tasks.get(task_id, as_of=as_of)
    record = store.tasks.record(task_id, as_of=as_of)
    if info is None or record is None:
        raise UnknownTaskError(task_id)
    events = store.tasks.history(task_id, as_of=as_of) if history else None
    return cast(S.TaskShow, to_jsonable({"task": info, "record": record, "history": events}))


# --- registration ------------------------------------------------------------------------


def _tool(
    fn: Callable[..., Any], name: str, *, read_only: bool, idempotent: bool = False
) -> Tool:
    """``fn`` as an MCP tool: async on the loop (see the module docstring), refusals as tool
    errors, unknown arguments refused, its answer typed by ``fn``'s return annotation."""
    sig = inspect.signature(fn, eval_str=True)

    @functools.wraps(fn)
    async def call(**kwargs: Any) -> CallToolResult:
        try:
            doc = fn(**kwargs)
        except (ValueError, LedgerError) as e:  # the library's refusal: nothing was written
            raise ToolError(str(e)) from e
        # what a model reads when its client shows the text, not the structure: compact
        # JSON (the SDK's own text is indented: a quarter more tokens for a recall)
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              structured_content=doc)

    # the SDK validates the structured content against the TypedDict of ``fn``
    call.__signature__ = sig.replace(  # type: ignore[attr-defined]
        return_annotation=Annotated[CallToolResult, sig.return_annotation])
    tool = Tool.from_function(
        call,
        name=name,
        annotations=ToolAnnotations(read_only_hint=read_only, destructive_hint=False,
                                    idempotent_hint=read_only or idempotent,
                                    open_world_hint=False),
        structured_output=True,
    )
    # a misspelt argument (``limt``, ``forse``) must not silently take its default, nor
    # ``true`` pass for 1 or ``"5"`` for 5: one argument, one meaning (as the CLI's JSON)
    base = tool.fn_metadata.arg_model
    strict: type[ArgModelBase] = type(base.__name__, (base,), {
        "model_config": ConfigDict(extra="forbid", strict=True, arbitrary_types_allowed=True),
        "__module__": __name__,
    })
    tool.fn_metadata.arg_model = strict
    tool.parameters = strict.model_json_schema(by_alias=True)
    out = tool.fn_metadata.output_schema
    assert out is not None and "output_schema" not in tool.__dict__  # not cached yet
    tool.fn_metadata.output_schema = merge_type_unions(inline_refs(out))
    return tool


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with each ``$ref`` into ``$defs`` replaced by the definition itself.

    The same schema, cheaper to check: a client validating every answer against
    it (the ``mcp`` package's uses jsonschema) resolves no references
    (docs/benchmarks.md, "MCP"). The answers' types are not recursive, so the
    inlining ends.
    """
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                siblings = {k: walk(v) for k, v in node.items() if k != "$ref"}
                return {**walk(defs[ref.removeprefix("#/$defs/")]), **siblings}
            return {k: walk(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return cast("dict[str, Any]", walk(schema))


def merge_type_unions(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with each ``anyOf`` of bare types (``str | None``) as one ``type`` list.

    ``{"anyOf": [{"type": "string"}, {"type": "null"}]}`` and ``{"type":
    ["string", "null"]}`` accept exactly the same values (JSON Schema, "type");
    the second is one keyword to check instead of a sub-schema per
    alternative, for a client that validates every answer. Only alternatives
    that say nothing but their type are merged.
    """

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items()}
        alts = out.get("anyOf")
        if ("type" not in out and isinstance(alts, list) and len(alts) > 1
                and all(isinstance(a, dict) and a.keys() == {"type"}
                        and isinstance(a["type"], str) for a in alts)):
            del out["anyOf"]
            out["type"] = [a["type"] for a in alts]
        return out

    return cast("dict[str, Any]", walk(schema))


def build_server(store: ContextStore) -> MCPServer[Any]:
    """An MCP server over ``store`` (open, writable): every tool and resource below."""
    tools: list[Tool] = []

    def tool(
        name: str, *, read_only: bool = False, idempotent: bool = False
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def add(fn: Callable[..., Any]) -> Callable[..., Any]:
            tools.append(_tool(fn, name, read_only=read_only, idempotent=idempotent))
            return fn

        return add

    # --- the packet cache ----------------------------------------------------------------

    @tool("recall", read_only=True)
    def recall(
        query: Annotated[str, Field(description=(
            "Free text. Words are matched by BM25; path-like words ('auth/service.rs', "
            "'service.rs') also match packet paths and identifiers ('AuthService', "
            "'parse_header') symbols and test names. May be empty when a filter is given."))] = "",
        limit: Limit = 8,
        since: Time = None,
        until: Time = None,
        target: Annotated[str | None, Field(description=(
            "Only packets of this reducer target."))] = None,
        task_id: Annotated[str | None, Field(description=(
            "The task for scope task-first / task-only."))] = None,
        scope: Annotated[Scope, Field(description=(
            "global: every packet; task-first: the task's packets (task_ids lists it) first, "
            "then the rest; task-only: only the task's."))] = "global",
        packet_types: Annotated[list[str], Field(description=(
            "Only packets of these packet types."))] = [],  # noqa: B006 (the SDK passes every argument)
        path_filters: Annotated[list[str], Field(description=(
            "Only packets touching one of these paths."))] = [],  # noqa: B006
        symbol_filters: Annotated[list[str], Field(description=(
            "Only packets naming one of these symbols."))] = [],  # noqa: B006
        as_of: AsOf = None,
        provider: Annotated[str | None, Field(description=(
            "With model: the provider you are billed by (e.g. 'anthropic'); each hit's "
            "budget_estimate is then scaled by the calibration learned for it."))] = None,
        model: Annotated[str | None, Field(description=(
            "With provider: the model you are billed for."))] = None,
        budget_tokens: Annotated[int | None, Field(ge=1, le=MAX_INT, description=(
            "Only the ranked hits whose budget_estimate.est_tokens fit in this many tokens, "
            "taken greedily in rank order; the answer's budget lists the ones left out."
        ))] = None,
        fresh_only: Annotated[bool, Field(description=(
            "Drop stale hits (a file the packet names changed or is gone since it was put); "
            "fresh and unknown hits stay."))] = False,
        include_superseded: IncludeSuperseded = False,
        mode: Annotated[Mode, Field(description=(
            "Which source tier scores higher: conceptual prefers curated packets (what "
            "agents wrote), telemetry prefers telemetry (what tools emitted); auto is "
            "conceptual unless every kind asked for is tool_trace, focus_inference or "
            "state_write."))] = "auto",
        kinds: Annotated[list[MemoryKind], Field(description=(
            "Only packets of these memory kinds."))] = [],  # noqa: B006
    ) -> S.RecallResult:
        """Find what earlier runs cached about something: call this before re-deriving
        a fact, re-reading a file's history or re-running an analysis. Ranks live packets
        by BM25 over their text plus path, symbol, test and task matches; returns the best
        hits with a snippet each. Query at most 4096 characters and 64 distinct terms."""
        q = RecallQuery(
            query, limit, time_arg("since", since), time_arg("until", until), target, task_id,
            scope, packet_types, path_filters, symbol_filters, mode=mode, kinds=kinds,
            include_superseded=include_superseded, fresh_only=fresh_only, provider=provider,
            model=model, as_of=as_of_arg(as_of))
        answer = store.recall_answer(q, budget_tokens=budget_tokens)
        return cast(S.RecallResult, answer.to_json())

    @tool("put")  # (not idempotent: a re-put restarts the packet's TTL)
    def put(
        packet: Annotated[dict[str, Any], Field(description=(
            "The packet, a JSON object: 'target' (required, a non-empty string: what produced "
            "it, e.g. 'diffy.analyze'), 'summary' (string: what was learned), 'paths', "
            "'symbols', 'tests', 'task_ids', 'packet_types' (lists of strings, all indexed "
            "for recall), 'payload' (any JSON); optional memory fields 'memory_kind' (brief, "
            "handoff, recommended_action, evidence, tool_trace, focus_inference, "
            "state_write, other), 'source_tier' (curated or telemetry), 'dedupe_key' (a "
            "string: a newer packet with the same key replaces this one in recall and list), "
            "'superseded' (true: obsolete). Other keys are kept as they are."))],
        metadata: Annotated[dict[str, Any] | None, Field(description=(
            "Optional JSON object stored beside the packet (not part of its key)."))] = None,
    ) -> S.PutResult:
        """Cache one packet: what you learned, so a later run can recall it instead of
        working it out again. Its key is the hash of its content: putting the same packet
        again refreshes its time (the TTL restarts) and returns the same key."""
        return cast(S.PutResult, store.put(packet, metadata).to_json())

    @tool("get", read_only=True)
    def get(
        key: Annotated[str, Field(description=(
            "A cache_key (64 hex digits) or a unique prefix of at least 8."))],
    ) -> S.Entry:
        """Read one cached packet whole, by the cache_key a recall or list hit gave."""
        full = store.resolve_key(key)
        entry = store.get(full)
        if entry is None:  # expired between the two calls
            raise ValueError(f"no live entry with cache_key {full}")
        return cast(S.Entry, to_jsonable(entry.to_json()))

    @tool("list", read_only=True)
    def list_entries(
        target: Annotated[str | None, Field(description=(
            "Only packets of this reducer target."))] = None,
        since: Time = None,
        until: Time = None,
        offset: Annotated[int, Field(ge=0, le=MAX_INT, description="Skip this many entries.")] = 0,
        limit: Annotated[int, Field(ge=0, le=MAX_INT, description="At most this many "
                                                                  "entries.")] = 100,
        as_of: AsOf = None,
        include_superseded: IncludeSuperseded = False,
    ) -> S.EntryPage:
        """List cached packets, newest first, without their bodies (`get` reads one):
        to see what the store holds, or page through a target's packets."""
        page = store.list_page(target=target, since=time_arg("since", since),
                               until=time_arg("until", until), offset=offset, limit=limit,
                               as_of=as_of_arg(as_of), include_superseded=include_superseded)
        return cast(S.EntryPage, page.to_json())

    @tool("stats", read_only=True)
    def stats() -> S.Stats:
        """Counts of the store: live and expired packets, evictions, tasks per state, the
        log's head seq, how each view was loaded, and warnings about file modes."""
        return cast(S.Stats, store.stats())

    # --- tasks -----------------------------------------------------------------------------

    @tool("task_create")
    def task_create(
        title: Annotated[str, Field(description="What the task is (1-1000 characters).")],
        labels: Annotated[list[str], Field(description=(
            "Labels to filter by later (at most 64, each 1-100 characters)."))] = [],  # noqa: B006
        parent: Annotated[str | None, Field(description=(
            "The task this one is part of (it must exist)."))] = None,
        id: Annotated[str | None, Field(description=(
            "Use this id (1-128 of A-Z a-z 0-9 . _ : -); omit for a generated, "
            "time-sortable one."))] = None,
    ) -> S.Task:
        """Start tracking a piece of work: a new task in state `created`. Returns the
        task; keep its id for the other task tools and for packets' task_ids."""
        return _task(store.tasks.create(title, parent=parent, labels=labels, id=id))

    @tool("task_start")
    def task_start(id: TaskId) -> S.Task:
        """Mark a created task running: call it when you begin the work, so that others
        (task_list) see the task is taken."""
        return _task(store.tasks.start(id))

    @tool("task_note")
    def task_note(
        id: TaskId,
        type: Annotated[NoteType, Field(description=(
            "decision, question, intention, evidence (kept in the task's working record); "
            "file_read, file_edit (data must hold 'path' or 'paths'; counted per file); "
            "tool_call, other (counted)."))],
        data: Annotated[Any, Field(description=(
            "The note, any JSON; e.g. {\"text\": \"use blake3\"}. {\"resolves\": SEQ} (or a "
            "list of seqs) closes the questions noted at those seqs."))] = None,
    ) -> S.Task:
        """Add to a task's working record as you go: decisions and why, open questions,
        what you intend to do, evidence found, files read and edited. The returned
        task's last_seq is this note's seq (what a later note's `resolves` names)."""
        return _task(store.tasks.note(id, type, data))

    @tool("task_progress")
    def task_progress(
        id: TaskId,
        message: Annotated[str | None, Field(description="What is done so far.")] = None,
        fraction: Annotated[float | None, Field(ge=0, le=1, description=(
            "How far along, from 0 to 1."))] = None,
    ) -> S.Task:
        """Report progress on a created or running task (the latest report is kept)."""
        return _task(store.tasks.progress(id, message, fraction))

    @tool("task_complete")
    def task_complete(
        id: TaskId,
        result: Annotated[Any, Field(description="The outcome, any JSON (optional).")] = None,
    ) -> S.Task:
        """Finish a running task successfully, with its outcome (a PR, a summary) as result.
        Completed is final: no later write applies to the task."""
        return _task(store.tasks.complete(id, result))

    @tool("task_fail")
    def task_fail(
        id: TaskId,
        reason: Annotated[str, Field(description="Why it failed (1-4000 characters).")],
    ) -> S.Task:
        """End a running task as failed, saying why (the reason is kept for the next run).
        Failed is final: no later write applies to the task."""
        return _task(store.tasks.fail(id, reason))

    @tool("task_cancel")
    def task_cancel(
        id: TaskId,
        reason: Annotated[str | None, Field(description="Why (optional).")] = None,
        force: Annotated[bool, Field(description=(
            "Cancel a running task at once instead of asking it to stop."))] = False,
    ) -> S.Task:
        """Cancel a task. One not started is cancelled at once; a running one is asked to
        stop (cancel_requested) and is cancelled when cancel is called again (its worker
        confirming) -- or at once with force. A worker that sees cancel_requested on its
        task should stop and call this to confirm."""
        return _task(store.tasks.cancel(id, reason=reason, force=force))

    @tool("task_list", read_only=True)
    def task_list(
        state: Annotated[StateFilter | None, Field(description=(
            "Only tasks in this state; 'quarantined': only quarantined ones."))] = None,
        label: Annotated[str | None, Field(description="Only tasks with this label.")] = None,
        parent: Annotated[str | None, Field(description="Only children of this task.")] = None,
        as_of: AsOf = None,
    ) -> S.TaskList:
        """List tasks, oldest first: what is running, what is left, what another agent is
        on."""
        got = store.tasks.list(state=state, label=label, parent=parent, as_of=as_of_arg(as_of))
        return {"tasks": [_task(t) for t in got]}

    @tool("task_show", read_only=True)
    def task_show(
        id: TaskId,
        history: Annotated[bool, Field(description=(
            "Also return every event of the task, oldest first."))] = False,
        as_of: AsOf = None,
    ) -> S.TaskShow:
        """One task: its state and its working record (open questions, decisions,
        intentions, evidence, files read and edited), and with history its events."""
        return task_document(store, id, as_of=as_of_arg(as_of), history=history)

    # --- handoffs and bootstraps -----------------------------------------------------------

    @tool("handoff")
    def handoff(payload: Payload, task_id: OptTaskId = None) -> S.Handoff:
        """Leave what the next run needs (state, next steps, open threads) before you stop.
        Supersedes the task's previous handoff (or, without a task, the store's)."""
        return _handoff(store.agent.handoff(payload, task_id=task_id))

    @tool("bootstrap")
    def bootstrap(payload: Payload, task_id: OptTaskId = None) -> S.Handoff:
        """Record the context this run started from (goal, inputs, the handoff it resumed),
        so later runs can see what each run was given."""
        return _handoff(store.agent.bootstrap(payload, task_id=task_id))

    @tool("latest_handoff", read_only=True)
    def latest_handoff(
        task_id: Annotated[str | None, Field(description=(
            "The task's latest handoff; omit for the latest one overall (of any task or "
            "none)."))] = None,
        as_of: AsOf = None,
    ) -> S.LatestHandoff:
        """What the previous run left for this one: call at the start of a run. Then
        `consume_handoff` it, so the store counts the resume."""
        h = store.agent.latest_handoff(task_id, as_of=as_of_arg(as_of))
        return {"handoff": None if h is None else _handoff(h)}

    @tool("consume_handoff")
    def consume_handoff(
        id: Annotated[str, Field(description="The handoff's id (h-...).")],
        by: Annotated[str | None, Field(description="Who resumed from it.")] = None,
    ) -> S.Handoff:
        """Mark the current handoff taken up by this run (one resume). A superseded
        handoff is refused, naming the one that replaced it."""
        return _handoff(store.agent.consume_handoff(id, by=by))

    # --- the log -----------------------------------------------------------------------------

    @tool("verify", read_only=True)
    def verify(
        anchor: Annotated[str | None, Field(description=(
            "SEQ:DIGEST from an earlier `ctxledger log head`: also require the log up to SEQ "
            "to be that one."))] = None,
    ) -> S.Verify:
        """Check every byte of the log (checksums, the hash chain, seq continuity): ok is
        true only when it is intact. A failed check is an answer (ok false, the problems
        listed), not an error. Reads the whole log: seconds on a large store."""
        _report, doc, _why = verify_document(store.ledger, store.path,
                                             None if anchor is None else Anchor.parse(anchor))
        return cast(S.Verify, doc)

    server: MCPServer[Any] = MCPServer(
        NAME, instructions=INSTRUCTIONS, version=_version(), tools=tools,
        log_level="DEBUG" if os.environ.get(DEBUG_ENV) else "WARNING",  # on stderr
    )

    # --- resources -----------------------------------------------------------------------

    @server.resource("ctxledger://task/{id}", name="task", mime_type="application/json",
                     description="A task's state, working record and every event of it.")
    async def task_resource(id: str) -> str:
        """``{"task", "record", "history"}`` of one task, as JSON."""
        try:
            return dumps(task_document(store, id, as_of=None, history=True))
        except UnknownTaskError as e:
            raise ResourceNotFoundError(str(e)) from e
        except (ValueError, LedgerError) as e:
            raise ResourceError(str(e)) from e

    @server.resource("ctxledger://handoff/latest", name="latest_handoff",
                     mime_type="application/json",
                     description="The latest handoff of any task (null if none).")
    async def handoff_resource() -> str:
        """``{"handoff": ...}``, as the latest_handoff tool returns it."""
        try:
            h = store.agent.latest_handoff()
        except LedgerError as e:
            raise ResourceError(str(e)) from e
        return dumps({"handoff": h})

    @server.resource("ctxledger://stats", name="stats", mime_type="application/json",
                     description="The store's counts, as the stats tool returns them.")
    async def stats_resource() -> str:
        try:
            return dumps(store.stats())
        except LedgerError as e:
            raise ResourceError(str(e)) from e

    return server


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("ctxledger")
    except metadata.PackageNotFoundError:
        return ""


# --- serving -----------------------------------------------------------------------------

STOP_SIGNALS = {signal.SIGTERM: 0, signal.SIGHUP: 0, signal.SIGINT: 130}
"""Signal -> exit status after the store is closed."""


def serve(store: ContextStore) -> None:
    """Serve ``store`` over stdin/stdout until stdin closes (then return).

    On SIGTERM, SIGHUP or SIGINT the store is closed (checkpoints written) and
    the process exits at once (0; 130 for SIGINT): the transport reads stdin on
    a worker thread that cannot be interrupted, so waiting for it to wind down
    would wait for the client to close stdin. The signal is handled on the
    event loop's thread, between requests, so no library call is cut short;
    an answer not yet written was never acknowledged (its write, if any, is
    durable all the same). The caller closes the store after a normal return.
    Every view is loaded first, so the first request costs what later ones do.
    """
    server = build_server(store)
    anyio.run(_serve, server, store)


async def _serve(server: MCPServer[Any], store: ContextStore) -> None:
    async with anyio.create_task_group() as tg:
        await tg.start(_stop_on_signal, store)  # a signal while loading: a clean close after
        store.runner.load_all()  # every view (and numpy) now, not in the first request's time
        await _run_stdio(server)
        log.info("stdin closed: stopping")
        tg.cancel_scope.cancel()


async def _run_stdio(server: MCPServer[Any]) -> None:
    """The SDK's server over stdio, on loop pipes when stdin/stdout are pipes (stdio.py)."""
    lowlevel = getattr(server, "_lowlevel_server", None)  # no public handle in the SDK
    async with loop_stdio() as pipes:
        if pipes is None or lowlevel is None:
            await server.run_stdio_async()
            return
        async with stdio_server(*pipes) as (read, write):  # type: ignore[arg-type]
            await lowlevel.run(read, write, lowlevel.create_initialization_options())


async def _stop_on_signal(
    store: ContextStore, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        task_status.started()
        async for signum in signals:
            log.info("signal %d: closing the store", signum)
            code = STOP_SIGNALS[signal.Signals(signum)]
            try:
                store.close()
            except Exception:  # exit all the same: nothing acknowledged depends on it
                log.exception("closing the store failed")
                code = 1
            sys.stderr.flush()
            os._exit(code)
