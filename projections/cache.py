"""The packet cache as a fold: which packets are live, where their bodies are.

The view keeps no packet bodies (the log has them): per entry only the key,
the seq of its ``cache.put``, its time, target and size. Entries folded from a
checkpoint sit in flat sorted numpy columns (loaded without parsing, a few MB
at 200k entries); entries changed since sit in a small dict on top. Compacting
merges the two, which is what a checkpoint stores.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import attrs
import cbor2
import numpy as np

from eventstore import Event

NAME = "cache"
VERSION = 1
PUT = "cache.put"
EVICTED = "cache.evicted"
EVICTION_REASONS = ("expired_ttl", "manual_prune", "corrupt_load_recovery")

_HEX = re.compile(r"[0-9a-fA-F]{64}")

Row = tuple[int, float, int, int]  # (seq, created_at, target_id, nbytes)


@attrs.frozen
class EntryRef:
    cache_key: str
    seq: int
    created_at: float
    target: str
    nbytes: int


class CacheState:
    """Fold state of the cache view; ``apply`` is idempotent below ``seq``."""

    def __init__(self) -> None:
        self.seq = 0
        self.keys = np.zeros(0, dtype="S32")
        self.seqs = np.zeros(0, dtype=np.int64)
        self.created = np.zeros(0, dtype=np.float64)
        self.tids = np.zeros(0, dtype=np.int32)
        self.nbytes = np.zeros(0, dtype=np.int64)
        self.targets: list[str] = []
        self.target_ix: dict[str, int] = {}
        self.delta: dict[bytes, Row | None] = {}
        self.evictions: dict[str, int] = {}
        self.skipped_unknown = 0
        self.skipped_bad = 0

    # --- the fold -------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        if event.seq <= self.seq:
            return  # at or below the watermark: already folded
        self.seq = event.seq
        kind = event.kind
        if kind == PUT:
            self._put(event)
        elif kind == EVICTED:
            self._evict(event)
        else:
            self.skipped_unknown += 1

    def _bad(self) -> None:
        self.skipped_bad += 1
        self.evictions["corrupt_load_recovery"] = self.evictions.get("corrupt_load_recovery", 0) + 1

    def _put(self, event: Event) -> None:
        parsed = parse_put(event)
        if parsed is None:
            self._bad()
            return
        key, target, nbytes = parsed
        tid = self.target_ix.get(target)
        if tid is None:
            tid = self.target_ix[target] = len(self.targets)
            self.targets.append(target)
        self.delta[key] = (event.seq, float(event.at), tid, nbytes)

    def _evict(self, event: Event) -> None:
        parsed = parse_evict(event)
        if parsed is None:
            self.skipped_bad += 1
            return
        key, reason = parsed
        if self.row(key) is None:
            return  # already gone: a repeated tombstone changes nothing
        self.delta[key] = None
        self.evictions[reason] = self.evictions.get(reason, 0) + 1

    # --- queries --------------------------------------------------------------------

    def row(self, key: bytes) -> Row | None:
        if key in self.delta:
            return self.delta[key]
        i = int(np.searchsorted(self.keys, key))
        if i < len(self.keys) and bytes(self.keys[i]).ljust(32, b"\0") == key:
            return (int(self.seqs[i]), float(self.created[i]), int(self.tids[i]), int(self.nbytes[i]))
        return None

    def get(self, cache_key: str) -> EntryRef | None:
        key = _key_bytes(cache_key)
        row = None if key is None else self.row(key)
        return None if row is None else self._ref(key, row)  # type: ignore[arg-type]

    def _ref(self, key: bytes, row: Row) -> EntryRef:
        return EntryRef(key.ljust(32, b"\0").hex(), row[0], row[1], self.targets[row[2]], row[3])

    def live_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """All entries as columns (keys, seqs, created, tids, nbytes), delta applied."""
        if not self.delta:
            return self.keys, self.seqs, self.created, self.tids, self.nbytes
        dkeys = np.array(list(self.delta), dtype="S32")
        keep = ~np.isin(self.keys, dkeys) if len(self.keys) else np.zeros(0, dtype=bool)
        rows = [(k, r) for k, r in self.delta.items() if r is not None]
        nk = np.array([k for k, _ in rows], dtype="S32")
        cols = [np.array([r[i] for _, r in rows], dtype=dt)
                for i, dt in enumerate((np.int64, np.float64, np.int32, np.int64))]
        return (
            np.concatenate([self.keys[keep], nk]),
            np.concatenate([self.seqs[keep], cols[0]]),
            np.concatenate([self.created[keep], cols[1]]),
            np.concatenate([self.tids[keep], cols[2]]),
            np.concatenate([self.nbytes[keep], cols[3]]),
        )

    def select(
        self,
        *,
        live_after: float | None,
        target: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> Iterator[EntryRef]:
        """Entries matching the filters, newest first (ties: cache_key)."""
        keys, seqs, created, tids, nbytes = self.live_columns()
        mask = np.ones(len(keys), dtype=bool)
        if live_after is not None:
            mask &= created > live_after
        if since is not None:
            mask &= created >= since
        if until is not None:
            mask &= created <= until
        if target is not None:
            tid = self.target_ix.get(target)
            if tid is None:
                return
            mask &= tids == tid
        idx = np.nonzero(mask)[0]
        order = idx[np.lexsort((keys[idx], -created[idx]))]
        for i in order:
            yield self._ref(bytes(keys[i]), (int(seqs[i]), float(created[i]), int(tids[i]), int(nbytes[i])))

    def count(self, live_after: float | None) -> tuple[int, float | None, float | None]:
        _k, _s, created, _t, _n = self.live_columns()
        if live_after is not None:
            created = created[created > live_after]
        if not len(created):
            return 0, None, None
        return int(len(created)), float(created.min()), float(created.max())

    # --- checkpoints ----------------------------------------------------------------

    def compact(self) -> None:
        keys, seqs, created, tids, nbytes = self.live_columns()
        order = np.argsort(keys, kind="stable")
        self.keys, self.seqs, self.created = keys[order], seqs[order], created[order]
        self.tids, self.nbytes = tids[order], nbytes[order]
        self.delta = {}

    def to_bytes(self) -> bytes:
        self.compact()
        return cbor2.dumps({
            "seq": self.seq, "targets": self.targets, "evictions": self.evictions,
            "skipped_unknown": self.skipped_unknown, "skipped_bad": self.skipped_bad,
            "keys": self.keys.tobytes(), "seqs": self.seqs.tobytes(),
            "created": self.created.tobytes(), "tids": self.tids.tobytes(),
            "nbytes": self.nbytes.tobytes(),
        })

    @classmethod
    def from_bytes(cls, data: bytes) -> CacheState:
        doc: dict[str, Any] = cbor2.loads(data)
        st = cls()
        st.seq = int(doc["seq"])
        st.targets = list(doc["targets"])
        st.target_ix = {t: i for i, t in enumerate(st.targets)}
        st.evictions = dict(doc["evictions"])
        st.skipped_unknown, st.skipped_bad = int(doc["skipped_unknown"]), int(doc["skipped_bad"])
        st.keys = np.frombuffer(doc["keys"], dtype="S32")
        st.seqs = np.frombuffer(doc["seqs"], dtype=np.int64)
        st.created = np.frombuffer(doc["created"], dtype=np.float64)
        st.tids = np.frombuffer(doc["tids"], dtype=np.int32)
        st.nbytes = np.frombuffer(doc["nbytes"], dtype=np.int64)
        n = len(st.keys)
        if not (len(st.seqs) == len(st.created) == len(st.tids) == len(st.nbytes) == n):
            raise ValueError("cache checkpoint columns disagree in length")
        if n and (int(st.tids.max()) >= len(st.targets) or int(st.seqs.max()) > st.seq):
            raise ValueError("cache checkpoint refers past its own tables")
        return st

    def snapshot(self) -> dict[str, Any]:
        """A plain, comparable picture of the state (for tests and replay reports)."""
        keys, seqs, created, tids, nbytes = self.live_columns()
        entries = {
            bytes(k).ljust(32, b"\0").hex(): (int(s), float(c), self.targets[int(t)], int(n))
            for k, s, c, t, n in zip(keys, seqs, created, tids, nbytes, strict=True)
        }
        return {"seq": self.seq, "entries": entries, "evictions": dict(self.evictions),
                "skipped_unknown": self.skipped_unknown, "skipped_bad": self.skipped_bad}


def parse_put(event: Event) -> tuple[bytes, str, int] | None:
    """``(key, target, nbytes)`` of a usable ``cache.put``, or None for a malformed one.

    Every view that follows the cache's events should decide with this (and
    :func:`parse_evict`), so that no view holds an entry the cache does not.
    """
    key = _key_bytes(event.key)
    data = event.data
    packet = data.get("packet") if isinstance(data, dict) else None
    target = packet.get("target") if isinstance(packet, dict) else None
    nbytes = data.get("bytes", 0) if isinstance(data, dict) else 0
    if key is None or not isinstance(target, str) or not _is_size(nbytes):
        return None
    return key, target, nbytes


def parse_evict(event: Event) -> tuple[bytes, str] | None:
    """``(key, reason)`` of a usable ``cache.evicted``, or None for a malformed one."""
    key = _key_bytes(event.key)
    reason = event.data.get("reason") if isinstance(event.data, dict) else None
    if key is None or not isinstance(reason, str):
        return None
    return key, reason


def _is_size(n: object) -> bool:
    """A byte count the int64 column can hold (not a bool, not negative)."""
    return type(n) is int and 0 <= n < 2**63


def _key_bytes(key: object) -> bytes | None:
    # bytes.fromhex skips whitespace: "ab...  cd" would become a 31-byte key
    if not isinstance(key, str) or len(key) != 64 or not _HEX.fullmatch(key):
        return None
    try:
        return bytes.fromhex(key)
    except ValueError:
        return None
