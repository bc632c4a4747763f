"""Exact boundaries that random tests hit only by chance: each test here kills a
one-line mutant that survived the whole suite once (a flipped comparison, a dropped check).

- the frame header's crc field is checked: a flipped bit in it (which no digest
  covers) fails verify, reads and writers at that frame;
- ``get``, ``list`` and ``recall`` expire an entry exactly ``ttl`` seconds after it
  was put (``created + ttl <= now`` is expired);
- ``list(since=, until=)`` are inclusive at both ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from eventstore import CorruptLogError, Event, Ledger
from eventstore.frame import SEGMENT_HEADER_SIZE
from projections import ContextStore, StoreConfig

TTL = 100.0


def test_a_flipped_bit_in_a_frame_header_crc_fails_closed(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with Ledger.open(log) as led:
        for i in range(3):
            led.append([Event("x.y", f"k{i}", {"i": i})])
    seg = next(log.glob("*.seg"))
    raw = bytearray(seg.read_bytes())
    raw[SEGMENT_HEADER_SIZE + 4] ^= 0x01  # frame 1's hcrc field: outside every digest
    seg.write_bytes(bytes(raw))
    with Ledger.open(log, readonly=True) as ro:
        report = ro.verify()
        assert not report.ok
        assert [p.offset for p in report.problems] == [SEGMENT_HEADER_SIZE]
        with pytest.raises(CorruptLogError):
            list(ro.read())
    with pytest.raises(CorruptLogError):  # a writer never appends behind the damage
        with Ledger.open(log) as led:
            led.append([Event("x.y", "after", {})])
    assert seg.read_bytes() == bytes(raw)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def clocked_store(tmp_path: Path, clock: Clock, ttl: float = TTL) -> Iterator[ContextStore]:
    """A store whose log and views both read ``clock`` (puts are stamped with it)."""
    with Ledger.open(tmp_path / ".ctxledger" / "log", clock=clock) as log, \
            ContextStore.open(tmp_path, config=StoreConfig(ttl_seconds=ttl), clock=clock,
                              log=log) as store:
        yield store


def test_an_entry_expires_exactly_ttl_seconds_after_its_put(tmp_path: Path) -> None:
    clock = Clock()
    clock.now = 1000.0  # (now - ttl) is then exactly the put's time: the edge itself
    with clocked_store(tmp_path, clock) as store:
        key = store.put({"target": "t", "summary": "edge"}).cache_key
        assert next(iter(store.ledger.read(1, 1))).at == 1000.0
        clock.now = 1000.0 + TTL
        assert store.get(key) is None and store.list() == []  # at the edge: expired
        assert store.list_page().total == 0 and store.stats()["entries"] == 0
        assert store.recall("edge") == []  # recall agrees (it once said live here)
        clock.now = 1000.0 + TTL - 0.001  # just before it: live
        assert store.get(key) is not None and [e.cache_key for e in store.list()] == [key]
        assert store.stats()["entries"] == 1
        assert [h.cache_key for h in store.recall("edge")] == [key]


def test_recall_with_superseded_entries_expires_exactly_ttl_seconds_after_the_put(
    tmp_path: Path,
) -> None:
    """The same edge when memory ranking judges supersession (two puts, one dedupe key)."""
    clock = Clock()
    clock.now = 1000.0
    with clocked_store(tmp_path, clock) as store:
        old = store.put({"target": "t", "summary": "edge v1", "dedupe_key": "d"}).cache_key
        clock.now = 1050.0
        new = store.put({"target": "t", "summary": "edge v2", "dedupe_key": "d"}).cache_key

        def recalled() -> list[tuple[str, str | None]]:
            hits = store.recall("edge", include_superseded=True)
            return sorted((h.cache_key, h.superseded_by) for h in hits)

        clock.now = 1000.0 + TTL - 0.001  # both live, the first superseded by the second
        assert recalled() == sorted([(old, new), (new, None)])
        clock.now = 1000.0 + TTL  # the first at its edge: expired
        assert store.get(old) is None and recalled() == [(new, None)]
        clock.now = 1050.0 + TTL - 0.001
        assert recalled() == [(new, None)]
        clock.now = 1050.0 + TTL  # the second at its edge
        assert store.get(new) is None and recalled() == []


def test_list_since_and_until_are_inclusive(tmp_path: Path) -> None:
    clock = Clock()
    clock.now = 1000.0
    with clocked_store(tmp_path, clock, ttl=1e9) as store:
        keys = []
        for i in range(3):  # the log stamps each batch with the clock: 1000, 2000, 3000
            keys.append(store.put({"target": "t", "summary": f"p{i}"}).cache_key)
            clock.now += 1000.0
        ats = [e.at for e in store.ledger.read(1, 3)]
        assert ats == [1000.0, 2000.0, 3000.0]
        listed = store.list(since=ats[1])
        assert {e.cache_key for e in listed} == set(keys[1:])  # the one at `since` is in
        assert {e.cache_key for e in store.list(until=ats[1])} == set(keys[:2])
        assert {e.cache_key for e in store.list(since=ats[1], until=ats[1])} == {keys[1]}
        assert store.list(since=ats[2] + 1e-3) == [] and store.list(until=ats[0] - 1e-3) == []


def test_prune_takes_an_entry_exactly_ttl_seconds_old_and_not_one_a_moment_younger(
    tmp_path: Path,
) -> None:
    """prune agrees with get at the edge: ``ttl`` seconds after its put an entry is
    expired and pruned; a moment before, it stays. Its report counts what it did."""
    clock = Clock()
    clock.now = 1000.0
    with clocked_store(tmp_path, clock) as store:
        old = store.put({"target": "t", "summary": "old"}).cache_key
        clock.now = 1000.0 + TTL / 2
        young = store.put({"target": "u", "summary": "young"}).cache_key
        clock.now = 1000.0 + TTL - 0.001
        res = store.prune()
        assert (res.removed, res.remaining, res.reasons) == (0, 2, {})
        clock.now = 1000.0 + TTL  # the edge itself for ``old``
        res = store.prune(ttl=10 * TTL)  # prunes nothing; ``old`` is expired all the same
        assert (res.removed, res.remaining, res.reasons) == (0, 1, {})
        res = store.prune()
        assert (res.removed, res.remaining, res.reasons) == (1, 1, {"expired_ttl": 1})
        assert store.get(old) is None and store.get(young) is not None
        # an explicit ttl: the same edge, measured from now
        res = store.prune(ttl=TTL / 2)
        assert (res.removed, res.remaining, res.reasons) == (1, 0, {"expired_ttl": 1})
        for bad in (-1.0, float("nan"), float("inf")):
            with pytest.raises(ValueError) as info:
                store.prune(ttl=bad)
            assert str(info.value) == "ttl must be a non-negative number of seconds"


def test_prune_decides_again_when_the_log_moves_and_gives_up_after_100_tries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eventstore import HeadMismatchError, LedgerError

    clock = Clock()
    clock.now = 1000.0
    with clocked_store(tmp_path, clock) as store:
        store.put({"target": "t", "summary": "old"})
        clock.now = 1000.0 + TTL
        tries: list[int | None] = []

        def moved(events: list[Event], *a: object, expected_head: int | None = None,
                  **k: object) -> None:
            tries.append(expected_head)
            raise HeadMismatchError(expected_head or 0, (expected_head or 0) + 1)

        monkeypatch.setattr(store, "_append", moved)
        with pytest.raises(LedgerError) as info:
            store.prune()
        assert str(info.value) == "prune gave up: the log kept moving under it (100 attempts)"
        assert tries == [1] * 100
        monkeypatch.undo()
        assert store.prune().removed == 1  # the log still: done at the first try
