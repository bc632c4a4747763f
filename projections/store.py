"""ContextStore: the agent-facing API over one project's ledger and its views."""

from __future__ import annotations

import builtins
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import blake3
import cbor2

from eventstore import (
    CorruptLogError,
    Event,
    HeadMismatchError,
    Ledger,
    LedgerError,
    LedgerIOError,
    LogBackend,
    StoreNotFoundError,
    private,
)

from . import cache, scope
from . import fingerprints as fingerprints_view
from . import handoffs as handoffs_view
from . import memory as memory_view
from . import tasks as tasks_view
from .answers import (
    AmbiguousKeyError,
    CacheEntry,
    EntryPage,
    EntrySummary,
    PruneResult,
    PutResult,
    UnknownKeyError,
    seq_at,
)
from .cache import CacheState, EntryRef, key_prefix
from .checkpoints import CheckpointDir
from .config import StoreConfig
from .freshness import Freshness
from .logs import LogChoice, log_choice, open_log
from .packet import (
    cache_key_of,
    canonical_bytes,
    check_packet_full,
    packet_data,
    verbatim_packet,
)
from .recall.constants import CHECKPOINT_VERSION as RECALL_VERSION
from .runner import Progress, Projection, Runner, State, fold, paused_gc
from .scope import STORE_DIR as STORE_DIR
from .scope import Layout
from .store_artifacts import Artifacts
from .store_recall import RECALL_NAME, Recalling
from .storedir import GITIGNORE as GITIGNORE  # (re-exported: older code imports them here)
from .storedir import init_layout, open_layout, require_store
from .storedir import init_store as init_store
from .storedir import store_dir as store_dir
from .storedir import store_exists as store_exists
from .task_api import Agent, Tasks

if TYPE_CHECKING:
    from .calibration import Calibration
    from .recall_view import RecallState

CACHE = Projection(cache.NAME, cache.VERSION, CacheState, CacheState.from_bytes)


def _recall_new() -> RecallState:
    from .recall_view import RecallState  # numpy and the index load only when recall is used

    return RecallState()


def _recall_decode(data: bytes | memoryview) -> RecallState:
    from .recall_view import RecallState

    return RecallState.from_bytes(data)


RECALL = Projection(RECALL_NAME, RECALL_VERSION, _recall_new, _recall_decode)
TASKS = Projection(tasks_view.NAME, tasks_view.VERSION, tasks_view.TaskState,
                   tasks_view.TaskState.from_bytes)
HANDOFFS = Projection(handoffs_view.NAME, handoffs_view.VERSION, handoffs_view.HandoffState,
                      handoffs_view.HandoffState.from_bytes)
FINGERPRINTS = Projection(fingerprints_view.NAME, fingerprints_view.VERSION,
                          fingerprints_view.FingerprintState,
                          fingerprints_view.FingerprintState.from_bytes)
MEMORY = Projection(memory_view.NAME, memory_view.VERSION, memory_view.MemoryState,
                    memory_view.MemoryState.from_bytes)


def projections() -> list[Projection]:
    """Every view the store keeps, in fold order."""
    return [CACHE, RECALL, TASKS, HANDOFFS, FINGERPRINTS, MEMORY]


def _packet_matches(ev: Event, key: bytes) -> bool:
    """Does the event's packet, encoded canonically, hash to ``key``?"""
    packet = ev.data.get("packet") if isinstance(ev.data, dict) else None
    if not isinstance(packet, dict):
        return False
    try:
        return blake3.blake3(canonical_bytes(packet)).digest() == key
    except LedgerError:
        return False


class ContextStore(Recalling, Artifacts):
    """Open with :meth:`open`; close (or use as a context manager) to checkpoint.

    ``readonly`` stores never write anything (no checkpoints either): the CLI's
    read commands use them, so looking never changes a store.

    ``map_checkpoints`` maps checkpoint files instead of reading them (no copy:
    ~35 ms less for a 200k recall checkpoint on a cold start). For short-lived
    processes: a mapped view would change if someone rewrote a checkpoint file
    in place (ctxledger never does), so every read (get, list, recall, stats)
    checks the mapped files before it answers and raises ``LedgerError`` if one
    was; truncating one under the process kills it (SIGBUS). The CLI's read
    commands map; the library default reads.
    """

    def __init__(
        self,
        layout: Layout,
        ledger: LogBackend,
        runner: Runner,
        config: StoreConfig,
        clock: Callable[[], float],
        readonly: bool,
        home: Path | None = None,
    ) -> None:
        self.layout = layout
        """Where this project's context lives and why (project or agent scope)."""
        self.root = layout.root
        self.path = layout.store_dir
        """The store directory whose ``log/`` holds this project's events: the
        project's ``.ctxledger/``, or the agent home in agent scope."""
        self.project_id = layout.project_id
        self._tag = layout.tag  # agent scope: every event we append carries it
        self.ledger = ledger
        self.runner = runner
        self.config = config
        self.clock = clock
        self.readonly = readonly
        self._closed = False
        self._owns_log = True
        self.log_choice = LogChoice("file")
        """Which backend the log is (``projections/logs.py``); a log passed to
        :meth:`open` is named by its class."""
        self.tasks = Tasks(self)
        """The task registry: create, start, note, complete, ... and list, history."""
        self.agent = Agent(self)
        """Bootstraps and handoffs between agent runs."""
        from .scope import agent_home

        self.home = agent_home() if home is None else Path(home)
        """The agent home: its log holds the token calibration every project shares."""
        self._calibration: Calibration | None = None
        self.files_root = fingerprints_view.project_root(layout.canonical, layout.fallback)
        """The project root packets' paths are fingerprinted under and checked against
        (docs/recall.md, "Freshness"); None: no fingerprints, no freshness."""

    @property
    def calibration(self) -> Calibration:
        """Token calibration over the agent home's log, opened on first use (readonly
        when the store is), closed with the store. A store that never asks never opens
        the agent log."""
        if self._calibration is None:
            if self._closed:
                raise LedgerError("store is closed")
            from .calibration import Calibration  # (exact math: fractions loads only here)

            self._calibration = Calibration(
                self.home, readonly=self.readonly, clock=self.clock,
                window=self.config.calibration_window, sync=self.config.sync,
            )
        return self._calibration

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        *,
        readonly: bool = False,
        clock: Callable[[], float] = time.time,
        config: StoreConfig | None = None,
        progress: Progress | None = None,
        map_checkpoints: bool = False,
        log: LogBackend | None = None,
        home: Path | None = None,
        storage_scope: str | None = None,
        backend: str | None = None,
        servers: Sequence[str] = (),
    ) -> ContextStore:
        """The store in force for ``root`` over ``log``: any backend (``MemoryLog()``,
        say), or None for the log the config chooses (``[storage] backend``, which
        ``backend`` and ``servers`` override: the file log unless it says
        ``jetstream``; ``projections/logs.py``).

        Which store is in force (:func:`open_layout`, docs/scopes.md): in project
        scope (the default) ``root/.ctxledger/``; in agent scope (config
        ``[storage] scope = "agent"``, ``storage_scope="agent"``, or a broad
        root such as the home directory) the agent home (``home``, default
        ``$CTXLEDGER_HOME`` or ``~/.ctxledger``), whose log every project in
        agent scope shares, each seeing only its own events. Checkpoints live
        where the layout says whatever the backend; a log passed in stays the
        caller's to close.
        """
        layout, cfg = open_layout(root, home=home, storage_scope=storage_scope, config=config)
        choice = log_choice(layout, cfg, backend=backend, servers=servers)
        file_log = log is None and choice.is_file
        if readonly and file_log:
            require_store(layout)  # (a missing stream is refused by its open)
        if not readonly:
            init_layout(layout, with_log=file_log)
        owned = log is None
        ledger: LogBackend = (
            open_log(layout, choice, readonly=readonly, sync=cfg.sync) if log is None else log
        )
        try:
            runner = Runner(
                ledger,
                CheckpointDir(layout.checkpoints_dir, readonly=readonly, mapped=map_checkpoints,
                              project=layout.tag),
                projections(),
                every_events=cfg.checkpoint_every_events,
                every_seconds=cfg.checkpoint_every_seconds,
                close_lag=cfg.checkpoint_close_lag,
                project=layout.tag,
            )
            if progress is not None:  # the caller wants to watch the views load now
                runner.load_all(progress)
        except BaseException:
            if owned:
                ledger.close()
            raise
        store = cls(layout, ledger, runner, cfg, clock, readonly, layout.home)
        store._owns_log = owned
        store.log_choice = choice if log is None else LogChoice(type(log).__name__)
        return store

    # --- writing --------------------------------------------------------------------

    def put(
        self, packet: Mapping[str, Any], metadata: Mapping[str, Any] | None = None
    ) -> PutResult:
        """Cache one packet (re-putting the same packet refreshes its time)."""
        return self.put_many([packet], [metadata] if metadata is not None else None)[0]

    def put_many(
        self,
        packets: Iterable[Mapping[str, Any]],
        metadata: Iterable[Mapping[str, Any] | None] | None = None,
    ) -> builtins.list[PutResult]:
        """Cache packets as one atomic batch: all of them or, on any error, none.

        Each packet is encoded once (its canonical bytes are both its content
        address and what the log stores) and folded into the views from
        memory once the append is durable: nothing is read back.
        """
        pkts = list(packets)
        metas = list(metadata) if metadata is not None else [None] * len(pkts)
        if len(metas) != len(pkts):
            raise ValueError("metadata must have one entry per packet")
        if not pkts:
            return []
        with paused_gc():  # many short-lived acyclic objects: collections are pure cost
            events: builtins.list[Event] = []
            folded: builtins.list[tuple[str, str | None, Any]] = []
            limit = self.config.max_packet_bytes
            tag = self._tag
            nbytes = 0
            for pkt, meta in zip(pkts, metas, strict=True):
                body, canon, depth = check_packet_full(pkt, limit)
                key = cache_key_of(canon)
                data = packet_data(canon, depth, meta, body, tag)
                events.append(Event(cache.PUT, key, data))
                fdata: dict[str, Any] = {"bytes": len(canon), "packet": body}
                if "metadata" in data:
                    fdata["metadata"] = data["metadata"]
                folded.append((cache.PUT, key, fdata))
                nbytes += len(canon)
            # after the puts, in the same batch: each cache.put row stays verbatim
            files = self._fingerprint_events(events, folded)
            receipt = self._append(events + files, folded + [
                (e.kind, e.key, e.data) for e in files], nbytes=nbytes)
            created = int(receipt.at)
            first = receipt.first_seq
            return [PutResult(e.key, first + i, created) for i, e in enumerate(events)]  # type: ignore[arg-type]

    def _fingerprint_events(
        self, events: builtins.list[Event], folded: builtins.list[tuple[str, str | None, Any]]
    ) -> builtins.list[Event]:
        """One ``cache.files`` event per packet naming a file under the project root
        (:mod:`projections.fingerprints`), the put's hash budget shared by all."""
        root = self.files_root
        if root is None:
            return []
        budget = fingerprints_view.PutBudget()
        out = []
        for ev, (_k, _key, fdata) in zip(events, folded, strict=True):
            paths = fdata["packet"].get("paths")
            if not isinstance(paths, list) or not paths:
                continue
            data = fingerprints_view.fingerprint(root, paths, budget)
            if data is not None:
                out.append(Event(cache.FILES, ev.key, data))
        return out

    def prune(self, all: bool = False, ttl: float | None = None) -> PruneResult:
        """Tombstone expired entries (or every entry with ``all``), one event each."""
        if ttl is not None and (not math.isfinite(ttl) or ttl < 0):
            raise ValueError("ttl must be a non-negative number of seconds")
        now = self.clock()
        horizon = now - (self.config.ttl_seconds if ttl is None else ttl)
        for _attempt in range(100):
            self._sync()
            head = self.ledger.head
            events = []
            for ref in self._cache().select(live_after=None):
                if all:
                    reason = "manual_prune"
                elif ref.created_at <= horizon:
                    reason = "expired_ttl"
                else:
                    continue
                events.append(Event(cache.EVICTED, ref.cache_key, {"reason": reason}))
            try:
                # decided at ``head``: if another process appended since (say, refreshed
                # an entry we would expire), decide again rather than tombstone it
                if events:
                    self._append(events, expected_head=head)
                break
            except HeadMismatchError:
                continue
        else:
            raise LedgerError("prune gave up: the log kept moving under it (100 attempts)")
        reasons: dict[str, int] = {}
        for e in events:
            reasons[e.data["reason"]] = reasons.get(e.data["reason"], 0) + 1
        remaining, _o, _n = self._cache().count(self._live_after())
        return PruneResult(len(events), remaining, reasons)

    def _append(
        self,
        events: list[Event],
        folded: list[tuple[str, str | None, Any]] | None = None,
        expected_head: int | None = None,
        nbytes: int = 0,
    ) -> Any:
        """Append, then fold ``folded`` (the events as the log will give them back;
        default: ``events`` themselves) into the views without reading them back."""
        self._check_writable()
        if self._tag is not None:
            events = [scope.tag_event(e, self._tag) for e in events]
        self.runner.before_append(len(events))
        receipt = self.ledger.append(events, expected_head=expected_head)
        rows = folded if folded is not None else [(e.kind, e.key, e.data) for e in events]
        self.runner.fold_own(rows, receipt.first_seq, receipt.at, nbytes)
        self.runner.maybe_checkpoint(receipt.last_seq)
        return receipt

    def _check_writable(self) -> None:
        if self._closed:
            raise LedgerError("store is closed")
        if self.readonly:
            raise LedgerError("store was opened read-only")

    # --- reading --------------------------------------------------------------------

    def _sync(self) -> None:
        """Fold what other processes appended since we last looked."""
        if self._closed:
            raise LedgerError("store is closed")
        self.runner.catch_up()

    def _check_mapped(self) -> None:
        """Before answering from mapped checkpoints: none was rewritten in place meanwhile."""
        if self.runner.ckdir.mapped:
            self.runner.ckdir.check_unchanged()

    def _cache(self) -> CacheState:
        return self.runner.state(cache.NAME)  # type: ignore[return-value]

    def _live_after(self) -> float:
        return self.clock() - self.config.ttl_seconds

    def _state_as_of(self, as_of: int | float | None, names: list[str]) -> list[State]:
        """The named views now (loaded on demand), or folded afresh up to ``as_of``."""
        if as_of is None:
            self._sync()
            return [self.runner.state(n) for n in names]
        seq = self.seq_for(as_of)
        states = [self.runner.projections[n].new() for n in names]
        fold(self.ledger, states, 1, seq, project=self._tag)
        return states

    def seq_for(self, as_of: int | float) -> int:
        """``as_of`` is a seq (int) or a unix time (float): see :func:`seq_at`."""
        return seq_at(self.ledger, as_of)

    def resolve_key(self, prefix: str) -> str:
        """The cache_key of the one live entry whose key starts with ``prefix``.

        ``prefix`` is 8 to 64 hex digits (either case; else ValueError), so the
        short keys ``store list`` shows can be used as they are. Raises
        :class:`UnknownKeyError` when no live entry matches and
        :class:`AmbiguousKeyError`, listing them, when several do.
        """
        want = key_prefix(prefix)
        self._sync()
        live_after = self._live_after()
        # a whole key: one lookup, not a walk of the delta (a speed-up only: the walk gives
        # the same answer, so mutants that skip this branch are equivalent)
        if len(want) == 64:
            ref = self._cache().get(want)
            found = [want] if ref is not None and ref.created_at > live_after else []
        else:
            found = self._cache().keys_with_prefix(want, live_after)
        self._check_mapped()
        if not found:
            raise UnknownKeyError(want)
        if len(found) > 1:
            raise AmbiguousKeyError(want, found)
        return found[0]

    def get(self, key: str) -> CacheEntry | None:
        """The live entry with this cache_key, or None (expired entries are never returned)."""
        self._sync()
        ref = self._cache().get(key)
        if ref is None or ref.created_at <= self._live_after():
            entry = None
        else:
            fresh = None
            if self.files_root is not None:
                fstate = self.runner.state(fingerprints_view.NAME)
                fresh = self._freshness(fstate, [ref.cache_key])[ref.cache_key]
            entry = self._entry(ref, fresh)
        self._check_mapped()
        return entry

    def _entry(self, ref: EntryRef, freshness: Freshness | None = None) -> CacheEntry:
        packet, raw_meta = self._logged_packet(ref)
        meta = dict(raw_meta) if isinstance(raw_meta, dict) else {}
        meta.setdefault("seq", ref.seq)
        meta.setdefault("bytes", ref.nbytes)
        return CacheEntry(ref.cache_key, ref.target, int(ref.created_at), packet, meta,
                          freshness)

    def _logged_packet(self, ref: EntryRef) -> tuple[dict[str, Any], Any]:
        """``(packet, metadata)`` of the entry's ``cache.put``, authenticated.

        The fast way, a point read (about the cost of the one event, whatever
        its batch): the event's bytes must be exactly the row the store writes
        for this key around packet bytes that hash to the cache_key (so nothing
        in the row is left unchecked); the packet is then decoded from those
        very bytes. Anything else -- an entry with metadata (not covered by the
        content address), a log written before packets were stored verbatim, a
        packet that is not plain JSON, or bytes that fail the check -- is read
        through the chain-verified read, which names damage it finds; a packet
        that still does not match its key is never served.
        """
        stored = self.ledger.read_raw(ref.seq)
        if stored is None:
            raise LedgerError(
                f"entry {ref.cache_key} points at seq {ref.seq}, which the log lacks"
            )
        canon = verbatim_packet(stored.row, ref.cache_key, ref.nbytes, self._tag)
        if canon is not None and blake3.blake3(canon).hexdigest() == ref.cache_key:
            try:
                return cbor2.loads(canon), None
            except Exception:
                pass  # cannot happen for bytes that hash to the key; the slow way decides
        want = bytes.fromhex(ref.cache_key)
        for checked in self.ledger.read(ref.seq, ref.seq):  # verified: raises on damage
            if checked.kind == cache.PUT and _packet_matches(checked, want):
                return checked.data["packet"], checked.data.get("metadata")
        raise LedgerError(
            f"entry {ref.cache_key}: the packet logged at seq {ref.seq} does not "
            "match its cache_key; run `ctxledger verify`"
        )

    def list(
        self,
        target: str | None = None,
        since: float | None = None,
        until: float | None = None,
        offset: int = 0,
        limit: int = 100,
        as_of: int | float | None = None,
        include_superseded: bool = False,
    ) -> list[EntrySummary]:
        """Live entries, newest first, filtered and paged (superseded ones only with
        ``include_superseded``: docs/recall.md, "Memory and scoring")."""
        return self.list_page(target, since, until, offset, limit, as_of,
                              include_superseded).entries

    def list_page(
        self,
        target: str | None = None,
        since: float | None = None,
        until: float | None = None,
        offset: int = 0,
        limit: int = 100,
        as_of: int | float | None = None,
        include_superseded: bool = False,
    ) -> EntryPage:
        """:meth:`list`, saying how many entries matched and whether the page was cut
        (both counting only what the listing returns)."""
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must be non-negative")
        state, mstate = self._state_as_of(as_of, [cache.NAME, memory_view.NAME])
        assert isinstance(state, CacheState) and isinstance(mstate, memory_view.MemoryState)
        ttl = self.config.ttl_seconds
        live_after = self._live_after()
        sup = mstate.superseded_keys(live_after) if mstate.may_supersede() else {}
        refs, total = state.select_page(
            offset, limit, live_after=live_after, target=target, since=since, until=until,
            exclude=None if include_superseded or not sup else sup,
        )
        out = [
            EntrySummary(
                ref.cache_key,
                ref.target,
                int(ref.created_at),
                int(ref.created_at + ttl),
                ref.seq,
                ref.nbytes,
                *memory_view.summary_fields(mstate.info(ref.cache_key), sup.get(ref.cache_key)),
            )
            for ref in refs
        ]
        self._check_mapped()
        end = offset + len(out)
        return EntryPage(out, total, end if end < total else None)

    def stats(self) -> dict[str, Any]:
        self._sync()
        self.runner.load_all()
        st = self._cache()
        live, oldest, newest = st.count(self._live_after())
        total, _o, _n = st.count(None)
        evictions = {r: 0 for r in cache.EVICTION_REASONS}
        evictions.update(st.evictions)
        views = {
            name: {
                "watermark_seq": v.state.seq,
                "loaded_from": v.loaded_from,
                "checkpoint_fallbacks": len(v.refused),
                "fallback_reasons": list(v.refused),
            }
            for name, v in self.runner.views.items()
        }
        self._check_mapped()
        return {
            "entries": live,
            "expired_pending_prune": total - live,
            "oldest_created_at_unix": None if oldest is None else int(oldest),
            "newest_created_at_unix": None if newest is None else int(newest),
            "ttl_seconds": self.config.ttl_seconds,
            "evictions": evictions,
            "skipped_unknown_events": st.skipped_unknown,
            "skipped_bad_events": st.skipped_bad,
            "head_seq": self.ledger.head,
            "tasks": self.tasks.counts(),
            "checkpoint_fallbacks": sum(len(v.refused) for v in self.runner.views.values()),
            "checkpoint_error": self.runner.checkpoint_error,
            "views": views,
            "storage_scope": self.layout.scope,
            "project_id": self.project_id,
            "warnings": private.mode_warnings(self.path),
        }

    # --- maintenance ----------------------------------------------------------------

    def checkpoint(self) -> int:
        """Write every view's checkpoint now (loading views not yet loaded).

        Forced: files damaged or deleted since the store opened are rewritten
        even when no event came in.
        """
        self._check_writable()
        self._sync()
        self.runner.load_all()
        return self.runner.checkpoint(force=True)

    def rebuild(
        self, projection: str | None = None, progress: Progress | None = None
    ) -> dict[str, Any]:
        """Refold views (one or all) from the log in memory, then replace their checkpoints.

        The new state is built first; only when the whole fold succeeded are the
        views swapped and their checkpoints replaced by rename. A log that fails
        closed (``CorruptLogError``) leaves every file byte for byte as it was,
        and this store as it was: the store's own file log is refolded through
        a read-only handle of its own, so the damage it meets does not close
        this store's handle (a read of the damaged range still fails closed).
        """
        self._check_writable()
        known = list(self.runner.projections)
        names = known if projection is None else [projection]
        for name in names:
            if name not in known:
                raise ValueError(f"unknown projection {name!r} (known: {', '.join(known)})")
        start = time.perf_counter()
        if self._owns_log and self.log_choice.is_file:
            with Ledger.open(self.layout.log_dir, readonly=True) as log:
                states, n = self.runner.refold(names, progress, log)  # bulk builds timed too
        else:
            states, n = self.runner.refold(names, progress)
        secs = time.perf_counter() - start
        self.runner.install(states)
        total = time.perf_counter() - start
        return {
            "projections": names,
            "events": n,
            "seconds": round(secs, 4),
            "events_per_second": round(n / secs) if secs > 0 else None,
            "checkpoint_seconds": round(total - secs, 4),
            "head_seq": self.ledger.head,
        }

    def close(self) -> None:
        if self._closed:
            return
        try:
            if not self.readonly:
                try:
                    self.runner.close_checkpoint()
                except (LedgerIOError, CorruptLogError) as e:
                    # checkpoints are disposable: the next open folds from the log (or,
                    # if it is damaged, fails closed there, as reads here already did);
                    # say why in stats, do not fail close
                    self.runner.checkpoint_error = str(e)
        finally:
            self._closed = True
            try:
                if self._calibration is not None:
                    self._calibration.close()
            finally:
                self.runner.ckdir.close()
                if self._owns_log:
                    self.ledger.close()

    def __enter__(self) -> ContextStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def replay(
    root: str | os.PathLike[str],
    until: int | float | None = None,
    progress: Progress | None = None,
    *,
    backend: str | None = None,
    servers: Sequence[str] = (),
    **scope_kw: Any,
) -> dict[str, Any]:
    """Fold the log into fresh in-memory views and report; touches no checkpoint.

    ``scope_kw``: ``home``, ``storage_scope``, as :meth:`ContextStore.open` takes
    them; ``backend`` and ``servers`` too.
    """
    layout, cfg = open_layout(root, **scope_kw)
    choice = log_choice(layout, cfg, backend=backend, servers=servers)
    if choice.is_file and not layout.log_dir.is_dir():
        raise StoreNotFoundError(layout.store_dir)
    with open_log(layout, choice, readonly=True) as led:
        states = [p.new() for p in projections()]
        seq = led.head if until is None else seq_at(led, until)
        start = time.perf_counter()
        n = fold(led, states, 1, seq, progress, project=layout.tag)
        secs = time.perf_counter() - start
        views = {}
        for p, s in zip(projections(), states, strict=True):
            snap = s.snapshot()
            views[p.name] = {
                k: (len(v) if isinstance(v, dict) and k == "entries" else v)
                for k, v in snap.items()
            }
        return {
            "until_seq": seq,
            "events": n,
            "seconds": round(secs, 4),
            "events_per_second": round(n / secs) if secs > 0 else None,
            "views": views,
        }
