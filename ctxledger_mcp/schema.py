"""What the MCP tools return: one TypedDict per answer, so each tool publishes an output schema.

The shapes are the library's own ``to_json()`` forms (the same keys ``--json``
prints), so a client compares an MCP answer with the library's or the CLI's
field for field. ``typing_extensions.TypedDict``: pydantic reads it on Python
3.11 (``typing.TypedDict`` there lacks what it needs). Field descriptions are
written for the model reading the schema.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

JSON = Annotated[Any, Field(description="Any JSON value, as it was stored.")]
UnixTime = Annotated[float, Field(description="Unix seconds (UTC).")]


# --- the packet cache -------------------------------------------------------------------


class Budget(TypedDict):
    """What reading the whole packet would cost."""

    est_tokens: Annotated[int, Field(description="Estimated tokens: chars-v1 (bytes / 4, "
                                                 "rounded up), times `multiplier` rounded up "
                                                 "when calibrated.")]
    est_bytes: Annotated[int, Field(description="Size of the packet's canonical encoding.")]
    estimator: Annotated[str, Field(description="The estimator: chars-v1.")]
    multiplier: Annotated[float, Field(description="The calibration factor applied (at least "
                                                   "1; 1.0 when uncalibrated).")]
    calibrated: Annotated[bool, Field(description="True when the provider/model's calibration "
                                                  "profile scaled est_tokens.")]


class Freshness(TypedDict):
    """Whether the packet's files are still as they were when it was put."""

    state: Annotated[str, Field(description="fresh (every fingerprinted file unchanged), stale "
                                            "(one changed or is gone: re-check before relying "
                                            "on it) or unknown (nothing to check, or a bound "
                                            "was hit).")]
    changed_paths: Annotated[list[str], Field(description="Paths whose content changed (or "
                                                          "that now lead out of the project).")]
    missing_paths: Annotated[list[str], Field(description="Paths that no longer exist.")]


class Hit(TypedDict):
    """One ranked recall answer: enough to decide whether to `get` the whole packet."""

    cache_key: Annotated[str, Field(description="The packet's key: pass it to `get`.")]
    target: Annotated[str, Field(description="The reducer target that produced the packet.")]
    score: Annotated[float, Field(description="Rank score (BM25 plus structured boosts, "
                                              "plus the source-tier and recency adjustments); "
                                              "higher is better, comparable within one answer.")]
    summary: Annotated[str, Field(description="The packet's summary.")]
    snippet: Annotated[str, Field(description="Up to 240 characters of the packet's text "
                                              "around the matched words.")]
    matched_tokens: Annotated[list[str], Field(description="Query terms found in the packet.")]
    matched_paths: Annotated[list[str], Field(description="Packet paths the query matched.")]
    matched_symbols: Annotated[list[str], Field(description="Packet symbols the query "
                                                            "matched.")]
    match_reasons: Annotated[list[str], Field(description=(
        "Why it matched and how it was scored: bm25_text, path_match, symbol_match, "
        "test_match, task_match, curated_memory, telemetry, recency, superseded."))]
    packet_types: list[str]
    task_ids: Annotated[list[str], Field(description="Tasks the packet belongs to.")]
    budget_estimate: Budget
    created_at_unix: UnixTime
    age_secs: Annotated[float, Field(description="Seconds since it was cached.")]
    memory_kind: Annotated[str | None, Field(description="The packet's memory_kind, if any.")]
    source_tier: Annotated[str | None, Field(description="curated, telemetry, or null.")]
    superseded_by: Annotated[str | None, Field(description="With include_superseded: the "
                                                           "newer packet that replaced this "
                                                           "one (null: current or "
                                                           "self-marked).")]
    freshness: NotRequired[Annotated[Freshness, Field(description="Absent when the store has "
                                                                  "no project root on disk.")]]


class Omitted(TypedDict):
    cache_key: str
    est_tokens: int
    score: float


class BudgetReport(TypedDict):
    """How budget_tokens was spent."""

    limit: Annotated[int, Field(description="The budget_tokens asked for.")]
    used: Annotated[int, Field(description="Sum of the returned hits' est_tokens (<= limit).")]
    omitted: Annotated[list[Omitted], Field(description="Ranked hits that did not fit, in rank "
                                                        "order: `get` one if you need it.")]
    overflow: Annotated[bool, Field(description="True when any hit was omitted.")]


class RecallResult(TypedDict):
    hits: Annotated[list[Hit], Field(description="Best first; empty when nothing matched.")]
    budget: NotRequired[Annotated[BudgetReport, Field(description="Only with budget_tokens.")]]


class PutResult(TypedDict):
    cache_key: Annotated[str, Field(description="blake3 of the packet's canonical encoding: "
                                                "the same packet always gets the same key.")]
    seq: Annotated[int, Field(description="Log position of the write (durable when returned).")]
    created_at_unix: Annotated[int, Field(description="When it was cached (unix seconds).")]


class Entry(TypedDict):
    """One live cache entry with its packet."""

    cache_key: str
    target: str
    created_at_unix: int
    body: Annotated[dict[str, Any], Field(description="The packet as it was put.")]
    metadata: Annotated[dict[str, Any], Field(description="seq and bytes of its write, and "
                                                          "any metadata put with it.")]
    freshness: NotRequired[Freshness]


class EntrySummary(TypedDict):
    cache_key: str
    target: str
    created_at_unix: int
    expires_at_unix: Annotated[int, Field(description="When the TTL expires it.")]
    seq: int
    bytes: Annotated[int, Field(description="Size of the packet's canonical encoding.")]
    memory_kind: str | None
    source_tier: Annotated[str | None, Field(description="curated, telemetry, or null.")]
    superseded: Annotated[bool, Field(description="Replaced by a newer packet of its "
                                                  "dedupe_key, or self-marked (listed only "
                                                  "with include_superseded).")]
    superseded_by: Annotated[str | None, Field(description="The newer packet that replaced "
                                                           "it (null: current or "
                                                           "self-marked).")]


class EntryPage(TypedDict):
    entries: Annotated[list[EntrySummary], Field(description="Newest first, without bodies.")]
    total: Annotated[int, Field(description="How many entries matched the filters in all.")]
    next_offset: Annotated[int | None, Field(description="`offset` of the next page; null "
                                                         "when this page holds the last entry.")]


class ViewStats(TypedDict):
    watermark_seq: Annotated[int, Field(description="The last seq folded into the view.")]
    loaded_from: Annotated[str, Field(description="primary, backup, rebuild or empty.")]
    checkpoint_fallbacks: int
    fallback_reasons: list[str]


class Stats(TypedDict):
    entries: Annotated[int, Field(description="Live cache entries.")]
    expired_pending_prune: int
    oldest_created_at_unix: int | None
    newest_created_at_unix: int | None
    ttl_seconds: float
    evictions: Annotated[dict[str, int], Field(description="Evicted entries by reason.")]
    skipped_unknown_events: int
    skipped_bad_events: int
    head_seq: Annotated[int, Field(description="The log's last seq.")]
    tasks: Annotated[dict[str, int], Field(description="Tasks per state, and how many are "
                                                       "quarantined.")]
    checkpoint_fallbacks: int
    checkpoint_error: str | None
    views: Annotated[dict[str, ViewStats], Field(description="Per view: cache, recall, tasks, "
                                                             "fingerprints, "
                                                             "handoffs.")]
    warnings: Annotated[list[str], Field(description="Store paths other users can read.")]


# --- tasks ---------------------------------------------------------------------------------


class Quarantine(TypedDict):
    seq: Annotated[int, Field(description="The event that broke the state machine.")]
    kind: str
    reason: str
    at: UnixTime


class Progress(TypedDict):
    message: str | None
    fraction: float | None
    at: UnixTime


class Task(TypedDict):
    """A task in the registry (docs/tasks.md)."""

    id: str
    title: str
    state: Annotated[str, Field(description="created, running, completed, failed, cancelled "
                                            "(or unknown: an id events named but never created).")]
    parent: str | None
    labels: list[str]
    quarantined: Annotated[bool, Field(description="True: a bad event froze the task; every "
                                                   "write but a release is refused.")]
    quarantine: Quarantine | None
    cancel_requested: Annotated[bool, Field(description="Someone asked the running task to "
                                                        "stop: its worker should cancel again "
                                                        "to confirm, or finish.")]
    created_at: float | None
    started_at: float | None
    ended_at: float | None
    updated_at: float | None
    last_seq: Annotated[int, Field(description="Seq of the task's latest event (after a note: "
                                               "the note's seq, which `resolves` can name).")]
    events: int
    held: Annotated[int, Field(description="Events held (not applied) while quarantined.")]
    notes: Annotated[dict[str, int], Field(description="Notes per type.")]
    progress: Progress | None
    reason: Annotated[str | None, Field(description="Why it failed or was cancelled.")]
    result: JSON
    releases: int


class TaskList(TypedDict):
    tasks: Annotated[list[Task], Field(description="Oldest first.")]


class Note(TypedDict):
    seq: int
    at: UnixTime
    data: JSON
    resolved_by: NotRequired[Annotated[int, Field(description="Seq of the note that resolved "
                                                              "this question (absent while "
                                                              "open).")]]


class FileTouch(TypedDict):
    read: int
    edit: int
    last_seq: int


class Record(TypedDict):
    """What the task's notes add up to."""

    id: str
    open_questions: Annotated[list[Note], Field(description="Questions no note resolved yet.")]
    questions: list[Note]
    decisions: list[Note]
    intentions: list[Note]
    evidence: list[Note]
    files: Annotated[dict[str, FileTouch], Field(description="Per path: how often the task "
                                                             "read and edited it.")]


class TaskEvent(TypedDict):
    seq: int
    at: UnixTime
    kind: Annotated[str, Field(description="task.created, task.note, task.completed, ...")]
    data: JSON
    status: Annotated[str, Field(description="applied, quarantined (it broke the state "
                                             "machine) or held (it came while quarantined).")]


class TaskShow(TypedDict):
    task: Task
    record: Record
    history: Annotated[list[TaskEvent] | None, Field(description="Every event naming the task, "
                                                                 "oldest first (only when "
                                                                 "asked for).")]


# --- handoffs and bootstraps --------------------------------------------------------------


class Consumed(TypedDict):
    seq: int
    at: UnixTime
    by: str | None


class Handoff(TypedDict):
    """A bootstrap (the context a run started from) or a handoff (what the next run needs)."""

    id: str
    kind: Annotated[str, Field(description="bootstrap or handoff.")]
    task_id: str | None
    seq: int
    at: UnixTime
    payload: Annotated[dict[str, Any], Field(description="What was recorded.")]
    superseded_by: Annotated[str | None, Field(description="The newer record of the same task "
                                                           "(or store) that replaced it.")]
    resume_count: Annotated[int, Field(description="How many runs consumed it.")]
    consumed: list[Consumed]


class LatestHandoff(TypedDict):
    handoff: Annotated[Handoff | None, Field(description="null when there is none.")]


# --- the log -------------------------------------------------------------------------------


class Problem(TypedDict):
    segment: str
    offset: Annotated[int, Field(description="Byte offset of the bad frame in the segment.")]
    error: str


class AnchorCheck(TypedDict):
    seq: int
    digest: str
    ok: bool
    error: str | None


class Verify(TypedDict):
    ok: Annotated[bool, Field(description="True only when every byte checks out (and the "
                                          "anchor, if given, is confirmed).")]
    events: int
    frames: int
    head_seq: int
    segments: int
    problems: list[Problem]
    anchor: NotRequired[Annotated[AnchorCheck, Field(description="Only when an anchor was "
                                                                 "given.")]]
    warnings: Annotated[list[str], Field(description="Store paths other users can read.")]
