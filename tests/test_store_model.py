"""ContextStore against a plain in-memory model (hypothesis stateful test).

Random put / put_many (with duplicates, which refresh created_at) / invalid
puts / prune / get / list / stats / clock moves / reopen / checkpoint /
garbled or deleted checkpoint files / crashes / read-only looks / a second
writer: the store must always answer exactly as the model.

Time: the store decides expiry with the clock we give it (``self.now``); an
entry's created_at is the ``at`` the log assigned to its put, read back from the
log by seq (the float, exactly). Clock moves put the expiry horizon
(``now - ttl``) before, after, on, or between known created_at values, so TTL
decisions are exercised at their boundaries, with the same float arithmetic the
store uses (``created > now - ttl`` is live).
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import pytest
from cache_strategies import TARGETS, flip_byte, packets, tree_bytes
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from eventstore import LedgerError
from projections import (
    CacheEntry,
    ContextStore,
    EntrySummary,
    InvalidPacketError,
    PruneResult,
    cache_key_of,
    canonical_bytes,
    store_dir,
)
from projections.cache import EVICTION_REASONS

TTL = 1000
CONFIG = f"""
[cache]
ttl_seconds = {TTL}

[checkpoint]
every_events = 4
every_seconds = 1e9
"""


@attrs.define
class Entry:
    packet: dict[str, Any]
    seq: int
    created: float
    nbytes: int
    metadata: dict[str, Any] | None


def reorder(pkt: dict[str, Any], rnd: random.Random) -> dict[str, Any]:
    items = list(pkt.items())
    rnd.shuffle(items)
    return dict(items)


metadatas = st.none() | st.dictionaries(
    st.sampled_from(["who", "why", "tokens"]), st.text(max_size=4) | st.integers(0, 99), max_size=2
)
list_targets = st.sampled_from((None, *TARGETS, "no.such.target"))
BAD = [
    ["not", "a", "packet"],
    {"summary": "no target"},
    {"target": ""},
    {"target": 3},
    {"target": "t", "paths": "x"},
    {"target": "t", "payload": {"x": object()}},
]


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="ctxledger-model-"))
        store_dir(self.root).mkdir()
        (store_dir(self.root) / "config.toml").write_text(CONFIG)
        self.now = time.time()
        self.entries: dict[str, Entry] = {}
        self.head = 0
        self.evictions = {r: 0 for r in EVICTION_REASONS}
        self.known: list[dict[str, Any]] = []
        self.created_seen: list[float] = []
        self.garbled: set[bytes] = set()
        self.store = self.open()

    # --- plumbing ----------------------------------------------------------------------------

    @property
    def cdir(self) -> Path:
        return store_dir(self.root) / "checkpoints"

    def clock(self) -> float:
        return self.now

    def open(self, readonly: bool = False) -> ContextStore:
        expected = self.expected_load()
        store = ContextStore.open(self.root, clock=self.clock, readonly=readonly)
        view = store.stats()["views"]["cache"]
        assert (view["loaded_from"], len(view["fallback_reasons"])) == expected, view
        for reason in view["fallback_reasons"]:
            assert reason.startswith(
                (
                    "primary: checksum mismatch",
                    "backup: checksum mismatch",
                    "primary: not a checkpoint",
                    "backup: not a checkpoint",
                )
            )
        return store

    def file_state(self, name: str) -> str:
        try:
            raw = (self.cdir / name).read_bytes()
        except FileNotFoundError:
            return "absent"
        return "bad" if raw in self.garbled else "good"

    def expected_load(self) -> tuple[str, int]:
        """What loading the checkpoints must do: where from, and how many refused.

        The backup is only looked at when the primary is refused or missing.
        """
        p, b = self.file_state("cache.ckpt"), self.file_state("cache.ckpt.bak")
        if p == "good":
            return "primary", 0
        bad = [p, b].count("bad")
        if b == "good":
            return "backup", bad
        return ("rebuild" if bad else "empty"), bad

    def live(self) -> dict[str, Entry]:
        horizon = self.now - TTL
        return {k: e for k, e in self.entries.items() if e.created > horizon}

    def horizons(self) -> list[float]:
        """Interesting values for ``now - ttl``: on, between and around created_at values."""
        ts = sorted(set(self.created_seen))
        hs = [self.now - TTL, time.time() - TTL]
        if ts:
            hs += [ts[0] - 10 * TTL, ts[-1] + 10 * TTL, *ts]
            hs += [(a + b) / 2 for a, b in zip(ts, ts[1:], strict=False)]
        return hs

    def note_put(
        self, pkt: dict[str, Any], meta: dict[str, Any] | None, res: Any, expected_seq: int
    ) -> None:
        key = cache_key_of(canonical_bytes(pkt))
        assert res.cache_key == key
        assert res.seq == expected_seq
        ev = next(self.store.ledger.read(res.seq, res.seq))
        assert (ev.kind, ev.key, ev.seq) == ("cache.put", key, res.seq)
        assert ev.data["packet"] == pkt
        assert int(ev.at) == res.created_at_unix
        if self.created_seen:
            assert ev.at >= max(self.created_seen), "the log's time went backwards"
        self.created_seen.append(ev.at)
        self.entries[key] = Entry(pkt, res.seq, ev.at, len(canonical_bytes(pkt)), meta or None)
        if pkt not in self.known:
            self.known.append(pkt)

    def close_store(self) -> None:
        self.store.close()

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # --- writes -------------------------------------------------------------------------------

    @rule(pkt=packets(), meta=metadatas)
    def put(self, pkt: dict[str, Any], meta: dict[str, Any] | None) -> None:
        res = self.store.put(pkt, metadata=meta)
        self.head += 1
        self.note_put(pkt, meta, res, self.head)

    @precondition(lambda self: self.known)
    @rule(data=st.data())
    def put_again(self, data: st.DataObject) -> None:
        """The same packet (keys in another order): same key, created_at refreshed."""
        pkt = data.draw(st.sampled_from(self.known))
        again = reorder(pkt, random.Random(data.draw(st.integers(0, 99))))
        res = self.store.put(again)
        self.head += 1
        self.note_put(pkt, None, res, self.head)

    @rule(new=st.lists(packets(), max_size=4), data=st.data())
    def put_many(self, new: list[dict[str, Any]], data: st.DataObject) -> None:
        old = data.draw(st.lists(st.sampled_from(self.known), max_size=3)) if self.known else []
        dups = data.draw(st.lists(st.sampled_from(new), max_size=2)) if new else []
        batch = new + old + dups
        random.Random(data.draw(st.integers(0, 99))).shuffle(batch)
        results = self.store.put_many(batch)
        assert len(results) == len(batch)
        assert len({r.created_at_unix for r in results}) <= 1
        for pkt, res in zip(batch, results, strict=True):
            self.head += 1
            self.note_put(pkt, None, res, self.head)
        if results:
            ats = {e.at for e in self.store.ledger.read(results[0].seq, results[-1].seq)}
            assert len(ats) == 1, "one batch, one time"

    @rule(good=st.lists(packets(), max_size=3), bad=st.sampled_from(BAD), where=st.integers(0, 3))
    def put_invalid(self, good: list[dict[str, Any]], bad: Any, where: int) -> None:
        batch: list[Any] = list(good)
        batch.insert(min(where, len(batch)), bad)
        with pytest.raises(InvalidPacketError):
            self.store.put_many(batch)
        with pytest.raises(InvalidPacketError):
            self.store.put(bad)
        assert self.store.ledger.head == self.head

    @rule()
    def prune_all(self) -> None:
        res = self.store.prune(all=True)
        n = len(self.entries)
        assert res == PruneResult(n, 0, {"manual_prune": n} if n else {})
        self.check_tombstones(set(self.entries), "manual_prune")
        self.evictions["manual_prune"] += n
        self.head += n
        self.entries.clear()

    def check_tombstones(self, keys: set[str], reason: str) -> None:
        """One cache.evicted per removed entry, with its reason, in one batch after head."""
        got = list(self.store.ledger.read(self.head + 1))
        assert len(got) == len(keys)
        assert {e.key for e in got} == keys
        assert all((e.kind, dict(e.data)) == ("cache.evicted", {"reason": reason}) for e in got)
        assert len({e.at for e in got}) <= 1

    @rule(data=st.data())
    def prune_ttl(self, data: st.DataObject) -> None:
        how = data.draw(st.sampled_from(["config", "horizon", "zero", "invalid"]))
        ttl: float | None
        if how == "config":
            ttl = None
        elif how == "zero":
            ttl = 0.0
        elif how == "invalid":
            ttl = data.draw(st.sampled_from([-1.0, float("nan"), float("inf"), float("-inf")]))
        else:
            ttl = self.now - data.draw(st.sampled_from(self.horizons()))
        if ttl is not None and not (ttl >= 0 and ttl != float("inf")):
            with pytest.raises(ValueError):
                self.store.prune(ttl=ttl)
            assert self.store.ledger.head == self.head
            return
        horizon = self.now - (TTL if ttl is None else ttl)
        gone = [k for k, e in self.entries.items() if e.created <= horizon]
        res = self.store.prune(ttl=ttl)
        self.check_tombstones(set(gone), "expired_ttl")
        for k in gone:
            del self.entries[k]
        n = len(gone)
        assert res == PruneResult(n, len(self.live()), {"expired_ttl": n} if n else {})
        self.evictions["expired_ttl"] += n
        self.head += n

    # --- reads --------------------------------------------------------------------------------

    @rule(data=st.data())
    def get(self, data: st.DataObject) -> None:
        keys = [*self.entries, *(cache_key_of(canonical_bytes(p)) for p in self.known)]
        key = data.draw(st.sampled_from(keys) if keys else st.just("0" * 64))
        if data.draw(st.booleans()):
            key = data.draw(st.sampled_from(["", "xyz", "0" * 64, key.upper(), key[:-1]]))
        got = self.store.get(key)
        e = self.live().get(key.lower())  # hex digits in either case name the same key
        if e is None:
            assert got is None
            return
        meta = dict(e.metadata or {})
        meta.setdefault("seq", e.seq)
        meta.setdefault("bytes", e.nbytes)
        assert got == CacheEntry(key.lower(), e.packet["target"], int(e.created), e.packet, meta)

    def expected_list(
        self, target: str | None, since: float | None, until: float | None, offset: int, limit: int
    ) -> list[EntrySummary]:
        rows = [
            (k, e)
            for k, e in self.live().items()
            if (target is None or e.packet["target"] == target)
            and (since is None or e.created >= since)
            and (until is None or e.created <= until)
        ]
        rows.sort(key=lambda kv: (-kv[1].created, kv[0]))
        return [
            EntrySummary(
                k, e.packet["target"], int(e.created), int(e.created + TTL), e.seq, e.nbytes
            )
            for k, e in rows[offset : offset + limit]
        ]

    @rule(tgt=list_targets, data=st.data(), offset=st.integers(0, 4), limit=st.integers(0, 6))
    def list_entries(self, tgt: str | None, data: st.DataObject, offset: int, limit: int) -> None:
        bounds = st.none() | st.sampled_from(self.horizons())
        since, until = data.draw(bounds), data.draw(bounds)
        got = self.store.list(target=tgt, since=since, until=until, offset=offset, limit=limit)
        assert got == self.expected_list(tgt, since, until, offset, limit)

    @rule()
    def list_everything(self) -> None:
        assert self.store.list(limit=10**6) == self.expected_list(None, None, None, 0, 10**6)

    @rule(data=st.data())
    def move_clock(self, data: st.DataObject) -> None:
        self.now = data.draw(st.sampled_from(self.horizons())) + TTL

    # --- lifecycle and damage ------------------------------------------------------------------

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = self.open()

    @rule()
    def checkpoint(self) -> None:
        path = self.cdir / "cache.ckpt"
        before = path.read_bytes() if path.exists() else None
        self.store.checkpoint()
        # an unchanged view may skip the write (it cannot know its file was damaged since)
        assert (
            self.file_state("cache.ckpt") == "good"
            or (path.exists() and path.read_bytes() == before)
            or (before is None and not path.exists())
        )

    @rule(which=st.sampled_from(["cache.ckpt", "cache.ckpt.bak", "both"]), offset=st.integers())
    def garble_checkpoint(self, which: str, offset: int) -> None:
        for name in ["cache.ckpt", "cache.ckpt.bak"] if which == "both" else [which]:
            path = self.cdir / name
            # never garble twice: a second flip of the same byte would repair the file
            if path.exists() and path.stat().st_size and self.file_state(name) == "good":
                self.garbled.add(flip_byte(path, offset))

    @rule(whole_dir=st.booleans())
    def delete_checkpoints(self, whole_dir: bool) -> None:
        if whole_dir:  # the directory itself, while the store is open
            shutil.rmtree(self.cdir, ignore_errors=True)
        else:
            for name in ("cache.ckpt", "cache.ckpt.bak"):
                (self.cdir / name).unlink(missing_ok=True)

    @rule(how=st.sampled_from(["drop_fds", "abandon"]))
    def crash(self, how: str) -> None:
        """The process dies: no checkpoint on the way out, nothing acknowledged lost."""
        if how == "drop_fds":
            self.store.ledger.close()
            self.store = self.open()
        else:  # a new process opens the store while the old one still holds it
            old = self.store
            self.store = self.open()
            old.ledger.close()

    @rule(pkt=packets(), crash_it=st.booleans())
    def another_writer(self, pkt: dict[str, Any], crash_it: bool) -> None:
        """A second handle (another process) appends; ours must see it."""
        other = ContextStore.open(self.root, clock=self.clock)
        res = other.put(pkt)
        self.head += 1
        self.note_put(pkt, None, res, self.head)
        if crash_it:
            other.ledger.close()
        else:
            other.close()

    @rule()
    def readonly_look(self) -> None:
        before = tree_bytes(self.root)
        ro = self.open(readonly=True)
        try:
            assert ro.list(limit=10**6) == self.expected_list(None, None, None, 0, 10**6)
            self.check_stats(ro)
            with pytest.raises(LedgerError):
                ro.put({"target": "t"})
        finally:
            ro.close()
        assert tree_bytes(self.root) == before

    # --- always ----------------------------------------------------------------------------------

    def check_stats(self, store: ContextStore) -> None:
        st_ = store.stats()
        live = self.live()
        created = [e.created for e in live.values()]
        assert st_["entries"] == len(live)
        assert st_["expired_pending_prune"] == len(self.entries) - len(live)
        assert st_["oldest_created_at_unix"] == (int(min(created)) if created else None)
        assert st_["newest_created_at_unix"] == (int(max(created)) if created else None)
        assert st_["evictions"] == self.evictions
        assert st_["head_seq"] == self.head
        assert st_["ttl_seconds"] == TTL
        assert st_["skipped_unknown_events"] == 0 and st_["skipped_bad_events"] == 0

    @invariant()
    def stats_match(self) -> None:
        self.check_stats(self.store)


StoreMachine.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestStoreModel = StoreMachine.TestCase


# --- concurrency the machine above cannot interleave ---------------------------------------------


def test_prune_never_tombstones_an_entry_refreshed_meanwhile(tmp_path: Path) -> None:
    store_dir(tmp_path).mkdir()
    (store_dir(tmp_path) / "config.toml").write_text(CONFIG)
    now = [0.0]
    store = ContextStore.open(tmp_path, clock=lambda: now[0])
    other = ContextStore.open(tmp_path, clock=lambda: now[0])
    try:
        pkt = {"target": "t", "summary": "refreshed by another process"}
        first = store.put(pkt)
        t0 = next(store.ledger.read(first.seq, first.seq)).at
        now[0] = t0 + TTL + 0.5  # the first put has expired
        real_append = store.ledger.append
        refreshed = []

        def append_after_a_refresh(events: Any, **kw: Any) -> Any:
            if not refreshed:
                other.ledger.clock = lambda: t0 + 1.0  # the refresh is after the horizon: live
                refreshed.append(other.put(pkt))
            return real_append(events, **kw)

        store.ledger.append = append_after_a_refresh  # type: ignore[method-assign]
        store.prune()
        store.ledger.append = real_append  # type: ignore[method-assign]
        at = next(store.ledger.read(refreshed[0].seq, refreshed[0].seq)).at
        assert at > now[0] - TTL  # the refresh is live by the store's own rule
        assert store.get(first.cache_key) is not None
    finally:
        store.close()
        other.close()
