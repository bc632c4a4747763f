"""Compaction: which events the views still need, and the new generation that keeps them.

The plan is pure (:func:`plan_compaction`: batches in, a set of seqs out); the
log's own I/O shell (:meth:`eventstore.Ledger.start_generation`) writes the new
generation. What is dropped (docs/operations.md, "Compaction"):

- a ``cache.put`` that is not the put of a live entry (a later put of the same
  key superseded it, an eviction removed it, or the cache refused it as
  malformed), and the ``cache.files`` of such puts;
- every ``cache.evicted`` (what it removed is dropped with it);
- ``calibration.sample`` events older than a profile's newest ``MAX_SAMPLES``
  (200): the calibration view keeps no more (the retention);
- the ``ledger.compacted`` marker of the previous generation (the new one
  records the whole chain through its anchors file).

Everything else is kept in its original order, batch by batch, with each
batch's ``at`` and ``batch_id``: task and handoff events, recent samples, unknown
kinds, and the live entries with their fingerprints. Each view folds the kept
events to the same answers: the cache, recall, memory and fingerprints views
follow ``cache.put``/``cache.evicted`` by the cache's own rules
(:func:`~projections.cache.parse_put`), and nothing else is touched. In agent
scope (one log, many projects) the live entries are found per project, so
every project's needs are kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs
import cbor2

from eventstore import Event, HeadMismatchError, Ledger
from eventstore.frame import encode_row
from eventstore.generation import MARKERS, RawRows
from eventstore.records import RawBatch

from .cache import EVICTED, FILES, PUT, CacheState
from .calibration import MAX_SAMPLES, SAMPLE, data_error
from .tasks import NOTE, resolved_seqs

Progress = Callable[[int], None]


@attrs.define
class Plan:
    """What compaction of a log up to ``head`` keeps (``events`` and the byte counts
    leave out the previous ``ledger.compacted`` marker, which is never kept)."""

    base: int
    head: int
    keep: set[int]
    events: int = 0
    bytes_total: int = 0
    bytes_kept: int = 0
    dropped: dict[str, int] = attrs.field(factory=dict)
    first_at: float | None = None  # ``at`` of the first kept batch
    last_at: float = 0.0

    @property
    def kept(self) -> int:
        return len(self.keep)

    @property
    def live_fraction(self) -> float:
        """Bytes of the events kept over the bytes of all events (1.0: nothing to drop)."""
        return self.bytes_kept / self.bytes_total if self.bytes_total else 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "base_seq": self.base,
            "head_seq": self.head,
            "events": self.events,
            "kept_events": self.kept,
            "dropped_events": self.events - self.kept,
            "dropped_by_kind": dict(sorted(self.dropped.items())),
            "event_bytes": self.bytes_total,
            "kept_bytes": self.bytes_kept,
            "live_fraction": round(self.live_fraction, 4),
        }


def _decode(row: bytes, seq: int, at: float) -> Event | None:
    try:
        obj = cbor2.loads(row)
    except Exception:
        return None
    if not (type(obj) is list and len(obj) == 3 and isinstance(obj[0], str)):
        return None
    return Event(obj[0], obj[1], obj[2], seq=seq, at=at)


def plan_compaction(batches: Iterable[RawBatch], progress: Progress | None = None) -> Plan:
    """Fold ``batches`` (the whole current generation) and decide what to keep."""
    caches: dict[Any, CacheState] = {}  # per project (None: project scope)
    files: list[tuple[int, int, Any, str | None]] = []  # (seq, batch, project, key) of cache.files
    put_batch: dict[int, int] = {}  # seq of a cache.put -> first seq of its batch
    sizes: dict[int, int] = {}
    samples: dict[tuple[Any, Any, Any], list[tuple[int, int]]] = {}  # profile -> (seq, size)
    plan = Plan(base=0, head=0, keep=set())
    for b in batches:
        if not plan.base:
            plan.base = b.first_seq
        if plan.first_at is None:
            plan.first_at = b.at
        plan.last_at = b.at
        for i, row in enumerate(b.rows):
            seq = b.first_seq + i
            plan.head = seq
            ev = _decode(row, seq, b.at)
            kind = ev.kind if ev is not None else ""
            if kind in MARKERS:
                # the previous generation's marker: format overhead, not content (the new
                # marker and anchors file cover it); not counted, never kept
                continue
            plan.events += 1
            plan.bytes_total += len(row)
            data = ev.data if ev is not None and isinstance(ev.data, dict) else {}
            if ev is not None and kind in (PUT, EVICTED):
                project = data.get("project")
                st = caches.get(project)
                if st is None:
                    st = caches[project] = CacheState()
                st.apply(ev)
                if kind == PUT:
                    put_batch[seq] = b.first_seq
                    sizes[seq] = len(row)
                continue
            if ev is not None and kind == FILES:
                files.append((seq, b.first_seq, data.get("project"), ev.key))
                sizes[seq] = len(row)
                continue
            if ev is not None and kind == SAMPLE and data_error(data) is None:
                profile = (data["provider"], data["model"], data["estimator"])
                samples.setdefault(profile, []).append((seq, len(row)))
            plan.keep.add(seq)
            plan.bytes_kept += len(row)
        if progress is not None:
            progress(len(b.rows))
    kinds: dict[str, int] = {PUT: len(put_batch), FILES: len(files)}
    kinds[EVICTED] = plan.events - plan.kept - kinds[PUT] - kinds[FILES]
    live: dict[tuple[Any, Any], int] = {}  # (project, key hex) -> seq of the live put
    for project, st in caches.items():
        keys, seqs, _created, _tids, _nbytes = st.live_columns()
        for k, s in zip(keys, seqs, strict=True):
            live[(project, bytes(k).hex())] = int(s)
    for s in live.values():
        plan.keep.add(s)
        plan.bytes_kept += sizes[s]
    for seq, batch, project, key in files:
        s = live.get((project, key))
        if s is not None and put_batch[s] == batch and seq > s:
            plan.keep.add(seq)
            plan.bytes_kept += sizes[seq]
            kinds[FILES] -= 1
    kinds[PUT] -= len(live)
    kinds[SAMPLE] = 0
    for rows in samples.values():  # the calibration view keeps a profile's newest only
        for seq, size in rows[:-MAX_SAMPLES]:
            plan.keep.discard(seq)
            plan.bytes_kept -= size
            kinds[SAMPLE] += 1
    plan.dropped = {k: n for k, n in kinds.items() if n}
    return plan


def kept_batches(plan: Plan, batches: Iterable[RawBatch]) -> Iterator[RawRows]:
    """The kept events, batch by batch as they were, each with its ``at`` and id.

    The new generation renumbers them (its marker is ``head + 1``, the kept events
    follow in order), so a ``task.note``'s ``resolves`` (seqs of earlier questions)
    is rewritten to the new seqs of the events it names; every other row is copied
    byte for byte."""
    new_seq = {s: plan.head + 2 + i for i, s in enumerate(sorted(plan.keep))}
    for b in batches:
        rows = [renumber_row(r, new_seq) for i, r in enumerate(b.rows)
                if b.first_seq + i in plan.keep]
        if rows:
            yield b.at, b.batch_id, rows


def renumber_row(row: bytes, new_seq: Mapping[int, int]) -> bytes:
    """``row`` with the seqs its note's ``resolves`` names moved to ``new_seq`` (seqs
    not kept stay as they were: they named no question before either). Compaction
    and salvage (``Ledger.salvage(rewrite=...)``) both renumber what they keep."""
    if NOTE.encode() not in row or b"resolves" not in row:
        return row
    try:
        obj = cbor2.loads(row)
    except Exception:
        return row
    if not (type(obj) is list and len(obj) == 3 and obj[0] == NOTE
            and isinstance(obj[2], dict) and isinstance(obj[2].get("data"), dict)):
        return row
    body = obj[2]["data"]
    wanted = body.get("resolves")
    if resolved_seqs(wanted) is None:
        return row
    if isinstance(wanted, list):
        moved: Any = [new_seq.get(v, v) for v in wanted]
    else:
        moved = new_seq.get(wanted, wanted)
    if moved == wanted:
        return row
    body["resolves"] = moved
    return encode_row(obj)


@attrs.frozen
class CompactReport:
    plan: Plan
    dry_run: bool
    compacted: bool
    new_base: int | None = None
    new_head: int | None = None
    segment_bytes: int | None = None
    removed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dry_run": self.dry_run, "compacted": self.compacted}
        out.update(self.plan.to_json())
        out["removed_files"] = len(self.removed)
        if self.compacted:
            out.update({"new_base_seq": self.new_base, "new_head_seq": self.new_head,
                        "new_segment_bytes": self.segment_bytes})
        return out


def compact(
    ledger: Ledger,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.time,
    attempts: int = 3,
) -> CompactReport:
    """Plan, and unless ``dry_run``, write the new generation (docs/operations.md).

    Planning reads the log without the lock; the write checks that no batch
    came in meanwhile (else it plans again, up to ``attempts`` times) and holds
    the writer lock from that check to the commit. Nothing to drop: no new
    generation (``compacted`` false).
    """
    for attempt in range(attempts):
        head = ledger.head
        plan = plan_compaction(ledger.read_raw_batches(1, head), progress)
        if dry_run:
            return CompactReport(plan, True, False)
        if plan.events == 0 or plan.kept == plan.events:
            # nothing to drop: no new generation, only what a crash may have left
            return CompactReport(plan, False, False, removed=tuple(ledger.remove_leftovers()))
        info = {"kept_events": plan.kept, "dropped_events": plan.events - plan.kept,
                "compacted_at": clock()}
        at = plan.first_at if plan.kept else plan.last_at
        try:
            written = ledger.start_generation(
                head, info, kept_batches(plan, ledger.read_raw_batches(1, head)),
                at=at if at is not None else clock(),
            )
        except HeadMismatchError:
            if attempt == attempts - 1:
                raise
            continue
        return CompactReport(plan, False, True, written.base, written.head, written.size,
                             tuple(written.removed))
    raise AssertionError("unreachable")
