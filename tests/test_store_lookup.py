"""Finding entries the way people name them: key prefixes, pages, as-of bounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eventstore import Event, MemoryLog
from projections import (
    AmbiguousKeyError,
    AsOfError,
    ContextStore,
    StoreConfig,
    UnknownKeyError,
    replay,
)
from projections.answers import seq_at
from projections.cache import MIN_KEY_PREFIX, CacheState, key_prefix

TTL = 100.0
CFG = StoreConfig(ttl_seconds=TTL, checkpoint_every_events=10**9, checkpoint_every_seconds=1e9)

# keys chosen to share prefixes (the cache view takes a cache.put's key as given)
K_A1 = "abcdef01" + "1" * 56
K_A2 = "abcdef01" + "2" * 56
K_A3 = "abcdef0f" + "3" * 56
K_B = "0123456789" + "0" * 54
K_OLD = "abcdef01" + "9" * 56  # put early: expired by the time we look


def put(key: str, target: str = "t") -> Event:
    return Event("cache.put", key, {"packet": {"target": target}, "bytes": 1})


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def stores(tmp_path: Path, log: MemoryLog, clock: Clock) -> ContextStore:
    return ContextStore.open(tmp_path, log=log, clock=clock, config=CFG)


@pytest.fixture
def log() -> Any:
    times = iter(float(t) for t in range(1000, 10**6))
    with MemoryLog(clock=lambda: next(times)) as log:
        yield log


def test_prefixes_resolve_from_checkpointed_columns_and_the_delta(
    tmp_path: Path, log: MemoryLog
) -> None:
    log.append([put(K_OLD)])
    clock = Clock(1000.0)
    log.append([put(K_A1), put(K_B)])
    with stores(tmp_path, log, clock) as store:
        store.checkpoint()  # K_A1, K_B and K_OLD now sit in the sorted base columns
    log.append([put(K_A2), put(K_A3)])  # ... K_A2 and K_A3 in the delta
    clock.now = 1001.0 + TTL - 0.5  # K_OLD (at 1000) expired; the rest (at >= 1001) live
    with stores(tmp_path, log, clock) as store:
        assert store.stats()["views"]["cache"]["loaded_from"] == "primary"
        assert store.resolve_key(K_B[:8]) == K_B
        assert store.resolve_key(K_B.upper()) == K_B  # either case, whole key
        assert store.resolve_key("abcdef0f") == K_A3
        assert store.resolve_key(K_A1[:16]) == K_A1
        with pytest.raises(AmbiguousKeyError) as e:
            store.resolve_key("abcdef01")  # K_A1 (base), K_A2 (delta); K_OLD has expired
        assert e.value.candidates == [K_A1, K_A2]
        assert K_A1 in str(e.value) and K_A2 in str(e.value) and K_OLD not in str(e.value)
        with pytest.raises(ValueError, match="at least 8"):
            store.resolve_key("abcdef0")
    with stores(tmp_path, log, clock) as store:
        with pytest.raises(UnknownKeyError, match="no live entry"):
            store.resolve_key("ffffffff")
        with pytest.raises(UnknownKeyError):
            store.resolve_key(K_OLD)  # expired
        log.append([Event("cache.evicted", K_A2, {"reason": "manual_prune"})])
        assert store.resolve_key("abcdef01") == K_A1  # the tombstone hides K_A2


def test_resolve_key_validates_the_prefix_itself(tmp_path: Path, log: MemoryLog) -> None:
    with stores(tmp_path, log, Clock(0.0)) as store:
        for bad in ("", "abc", "abcdef0", "../../etc/passwd", "abcdefgh", "a" * 65):
            with pytest.raises(ValueError):
                store.resolve_key(bad)


def test_key_prefix_rule() -> None:
    assert MIN_KEY_PREFIX == 8
    assert key_prefix(" ABCDEF01 ") == "abcdef01"
    assert key_prefix("a" * 64) == "a" * 64
    for bad in ("abcdef0", "abcdef0g", "a" * 65, "\u0661" * 8, "0x123456"):
        with pytest.raises(ValueError):
            key_prefix(bad)


def test_keys_with_prefix_matches_a_scan() -> None:
    """The bisection over the sorted base equals a plain scan of every key."""
    import random

    rng = random.Random(5)
    keys = sorted({"".join(rng.choice("0123456789abcdef") for _ in range(64)) for _ in range(400)})
    keys += ["abcdef01" + k[8:] for k in keys[:30]]  # a crowd under one prefix
    state = CacheState()
    for seq, k in enumerate(keys, 1):
        state.apply(Event("cache.put", k, {"packet": {"target": "t"}, "bytes": 1}, seq=seq, at=1.0))
    half = CacheState.from_bytes(state.to_bytes())  # all in the base columns
    for seq, k in enumerate(keys[:50], len(keys) + 1):  # and some refreshed into the delta
        half.apply(Event("cache.put", k, {"packet": {"target": "t"}, "bytes": 1}, seq=seq, at=2.0))
    for prefix in ["abcdef01", "abcdef012", "00000000", "ffffffff", *(k[:9] for k in keys[::37])]:
        want = sorted(k for k in set(keys) if k.startswith(prefix))
        assert half.keys_with_prefix(prefix, None) == want, prefix
        assert half.keys_with_prefix(prefix, 1.5) == sorted(
            k for k in set(keys[:50]) if k.startswith(prefix)
        )


def test_list_page_says_when_it_was_cut(tmp_path: Path, log: MemoryLog) -> None:
    log.append([put(f"{i:064x}") for i in range(1, 6)])
    with stores(tmp_path, log, Clock(1000.0)) as store:
        page = store.list_page(limit=2)
        assert (len(page.entries), page.total, page.next_offset) == (2, 5, 2)
        page = store.list_page(offset=4, limit=2)
        assert (len(page.entries), page.total, page.next_offset) == (1, 5, None)
        assert store.list_page(limit=5).next_offset is None
        assert store.list_page(offset=9).entries == [] and store.list_page(offset=9).total == 5
        assert store.list_page(target="nope").to_json() == {
            "entries": [], "total": 0, "next_offset": None,
        }
        assert store.list(offset=1, limit=3) == store.list_page(offset=1, limit=3).entries


def test_as_of_must_name_a_state_of_this_log(tmp_path: Path, log: MemoryLog) -> None:
    log.append([put(K_A1)])
    log.append([put(K_B)])
    assert seq_at(log, 0) == 0 and seq_at(log, 2) == 2
    assert seq_at(log, 1000.0) == 1 and seq_at(log, 10.0**9) == 2  # times: at or before
    for bad in (3, -1, float("nan"), float("inf"), -0.5, True, "1"):
        with pytest.raises(AsOfError):
            seq_at(log, bad)  # type: ignore[arg-type]
    with pytest.raises(AsOfError, match=r"seq 3 is past the head \(seq 2\)"):
        with stores(tmp_path, log, Clock(1000.0)) as store:
            store.list(as_of=3)


def test_replay_until_past_the_head_is_refused(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path) as store:
        store.put({"target": "t"})
    assert replay(tmp_path, until=1)["until_seq"] == 1
    with pytest.raises(AsOfError, match="past the head"):
        replay(tmp_path, until=2)
