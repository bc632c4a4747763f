"""The packet cache as a fold: which packets are live, where their bodies are.

The view keeps no packet bodies (the log has them): per entry only the key,
the seq of its ``cache.put``, its time, target and size. Entries folded from a
checkpoint sit in flat sorted columns viewed in place in the checkpoint's
bytes (read into memory, or mapped by the CLI's read commands; no parsing,
about 60 bytes an entry); entries changed since sit in a small dict on top.
Compacting merges the two, which is what a checkpoint stores. A lookup by
key is a binary search in plain Python, so ``store get`` never imports numpy;
bulk work (list, prune, stats, compaction) uses numpy views of the same bytes.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING, Any

import attrs
import cbor2

from eventstore import Event, LedgerError

if TYPE_CHECKING:
    import numpy as np

NAME = "cache"
VERSION = 2
_LEN = struct.Struct("<I")
_SMALL = 20_000  # entries below which compaction stays in plain Python
# base columns in checkpoint order: (name, struct format, numpy dtype, item size)
_COLUMNS = (
    ("keys", "B", "S32", 32),
    ("seqs", "q", "<i8", 8),
    ("created", "d", "<f8", 8),
    ("nbytes", "q", "<i8", 8),
    ("tids", "i", "<i4", 4),
)
PUT = "cache.put"
EVICTED = "cache.evicted"
FILES = "cache.files"
"""A put's file fingerprints (projections/fingerprints.py): known here, folded there."""
EVICTION_REASONS = ("expired_ttl", "manual_prune", "corrupt_load_recovery")
MIN_KEY_PREFIX = 8
"""Fewest hex digits a cache_key prefix may have: 8 (32 bits) keep a prefix of a
live key unique in all but huge stores, and short enough to type."""
_HEX = frozenset("0123456789abcdef")


Row = tuple[int, float, int, int]  # (seq, created_at, target_id, nbytes)
_ROW_FIELD = {"seqs": 0, "created": 1, "tids": 2, "nbytes": 3}  # column -> its place in a Row
_ROW_DTYPE = [("seq", "<i8"), ("created", "<f8"), ("tid", "<i4"), ("nbytes", "<i8")]


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
        self._n = 0  # entries in the base columns
        self._base: dict[str, memoryview] = {name: memoryview(b"") for name, *_ in _COLUMNS}
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
        elif kind != FILES:
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
        i = find_key(self._base["keys"], self._n, key)
        if i >= 0:
            b = self._base
            return (b["seqs"][i], b["created"][i], b["tids"][i], b["nbytes"][i])
        return None

    def _base_np(self) -> tuple[np.ndarray, ...]:
        """The base columns as numpy arrays over the same bytes (no copy)."""
        import numpy as np

        return tuple(
            np.frombuffer(self._base[name], dtype=dt)  # (an empty buffer: an empty array)
            for name, _f, dt, _s in _COLUMNS
        )

    def keys_with_prefix(self, prefix: str, live_after: float | None) -> list[str]:
        """The cache_keys (hex, sorted) that start with ``prefix`` (from :func:`key_prefix`)
        and were created after ``live_after``: a bisection into the sorted base
        keys, a walk over the few that match, and the delta."""
        lo = bytes.fromhex(prefix.ljust(64, "0"))
        hi = bytes.fromhex(prefix.ljust(64, "f"))  # "F" would do as well: an equivalent mutant
        found: list[bytes] = []
        keys = _KeySeq(self._base["keys"], self._n)
        created = self._base["created"]
        i = bisect_left(keys, lo)
        while i < self._n and (k := keys[i]) <= hi:
            if k not in self.delta and (live_after is None or created[i] > live_after):
                found.append(k)
            i += 1
        for k, row in self.delta.items():
            if row is not None and lo <= k <= hi and (live_after is None or row[1] > live_after):
                found.append(k)
        return sorted(k.hex() for k in found)

    def get(self, cache_key: str) -> EntryRef | None:
        key = _key_bytes(cache_key)
        row = None if key is None else self.row(key)
        return None if row is None else self._ref(key, row)  # type: ignore[arg-type]

    def _ref(self, key: bytes, row: Row) -> EntryRef:
        return EntryRef(key.ljust(32, b"\0").hex(), row[0], row[1], self._target(row[2]), row[3])

    def _target(self, tid: int) -> str:
        """The target numbered ``tid``. Only a checkpoint can hold a number with no
        target (damaged under a right checksum, or forged): an error that says what to
        do, not an IndexError (checked here, where it costs nothing, not for every row
        when a checkpoint loads)."""
        if 0 <= tid < len(self.targets):
            return self.targets[tid]
        raise LedgerError(
            f"the cache view names target #{tid}, which it does not hold: its checkpoint "
            "is damaged or forged; run `ctxledger rebuild`"
        )

    def live_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """All entries as columns (keys, seqs, created, tids, nbytes), delta applied."""
        import numpy as np

        keys, seqs, created, nbytes, tids = self._base_np()
        if not self.delta:
            return keys, seqs, created, tids, nbytes
        # (dtype=None for the keys is an equivalent mutant: numpy makes 32-byte keys S32)
        dkeys = np.array(list(self.delta), dtype="S32")
        keep = ~np.isin(keys, dkeys)
        live = [k for k, r in self.delta.items() if r is not None]
        nk = np.array(live, dtype="S32")
        # one C-level conversion of the row tuples (a structured array keeps the ints exact)
        rows = np.array([r for r in self.delta.values() if r is not None], dtype=_ROW_DTYPE)
        return (
            np.concatenate([keys[keep], nk]),
            np.concatenate([seqs[keep], rows["seq"]]),
            np.concatenate([created[keep], rows["created"]]),
            np.concatenate([tids[keep], rows["tid"]]),
            np.concatenate([nbytes[keep], rows["nbytes"]]),
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
        cols, order = self._matching(live_after, target, since, until)
        for i in order:
            yield self._column_ref(cols, i)

    def select_page(
        self,
        offset: int,
        limit: int,
        *,
        live_after: float | None,
        target: str | None = None,
        since: float | None = None,
        until: float | None = None,
        exclude: Collection[str] | None = None,
    ) -> tuple[list[EntryRef], int]:
        """``select``'s entries ``offset`` to ``offset + limit``, and how many match in all;
        ``exclude``: cache_keys left out of both (superseded entries, say)."""
        cols, order = self._matching(live_after, target, since, until)
        if exclude:
            import numpy as np

            # (no dtype: equivalent mutants, numpy makes S32 of 32-byte strings itself)
            drop = np.array([bytes.fromhex(k) for k in exclude], dtype="S32")
            order = order[~np.isin(cols[0][order], drop)]
        return [self._column_ref(cols, i) for i in order[offset : offset + limit]], len(order)

    def _matching(
        self,
        live_after: float | None,
        target: str | None,
        since: float | None,
        until: float | None,
    ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """The live columns and the indexes of the entries that match, in listing order."""
        import numpy as np

        cols = self.live_columns()
        keys, _seqs, created, tids, _nbytes = cols
        mask = np.ones(len(keys), dtype=bool)
        if live_after is not None:
            mask &= created > live_after  # (= for &=: equivalent, the first filter)
        if since is not None:
            mask &= created >= since
        if until is not None:
            mask &= created <= until
        if target is not None:
            tid = self.target_ix.get(target)
            if tid is None:
                return cols, np.zeros(0, dtype=np.intp)
            mask &= tids == tid
        idx = np.nonzero(mask)[0]
        return cols, idx[np.lexsort((keys[idx], -created[idx]))]

    def _column_ref(self, cols: tuple[np.ndarray, ...], i: int) -> EntryRef:
        keys, seqs, created, tids, nbytes = cols
        return self._ref(
            bytes(keys[i]), (int(seqs[i]), float(created[i]), int(tids[i]), int(nbytes[i]))
        )

    def count(self, live_after: float | None) -> tuple[int, float | None, float | None]:
        _k, _s, created, _t, _n = self.live_columns()
        if live_after is not None:
            created = created[created > live_after]
        if not len(created):
            return 0, None, None
        return int(len(created)), float(created.min()), float(created.max())

    # --- checkpoints ----------------------------------------------------------------

    def compact(self) -> None:
        """Merge the delta into new sorted base columns (numpy only for big states)."""
        if self._n + len(self.delta) < _SMALL:  # (either path gives the same columns: a
            self._compact_small()                # `-` or `<=` here is an equivalent mutant)
            return
        import numpy as np

        keys, seqs, created, tids, nbytes = self.live_columns()
        order = np.argsort(keys)  # the keys are distinct: any sort gives this order
        cols = {
            "keys": keys[order],
            "seqs": seqs[order],
            "created": created[order],
            "nbytes": nbytes[order],
            "tids": tids[order],
        }
        self._n = len(order)
        self._base = {
            name: _cast(memoryview(cols[name].astype(dt).tobytes()), fmt)
            for name, fmt, dt, _s in _COLUMNS
        }
        self.delta = {}

    def _compact_small(self) -> None:
        """The same merge in plain Python: importing numpy costs more than it saves here."""
        b = self._base
        keys = b["keys"]
        rows: dict[bytes, Row] = {
            bytes(keys[i * 32 : i * 32 + 32]): (b["seqs"][i], b["created"][i], b["tids"][i],
                                                b["nbytes"][i])
            for i in range(self._n)
        }
        for k, r in self.delta.items():
            if r is None:
                rows.pop(k, None)
            else:
                rows[k] = r
        order = sorted(rows)
        self._n = len(order)
        self._base = {"keys": memoryview(b"".join(order))}
        for name, fmt, _dt, _s in _COLUMNS[1:]:
            field = _ROW_FIELD[name]
            self._base[name] = memoryview(array(fmt, [rows[k][field] for k in order]))
        self.delta = {}

    def to_bytes(self) -> bytes:
        """u32 length, CBOR of the small tables, padding to 8, then the raw columns."""
        self.compact()
        meta = cbor2.dumps(
            {
                "seq": self.seq,
                "n": self._n,
                "targets": self.targets,
                "evictions": self.evictions,
                "skipped_unknown": self.skipped_unknown,
                "skipped_bad": self.skipped_bad,
            }
        )
        head = _LEN.pack(len(meta)) + meta
        head += bytes(-len(head) % 8)
        return head + b"".join(self._base[name] for name, *_ in _COLUMNS)  # (their raw bytes)

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> CacheState:
        """Zero-copy: the columns stay views of ``data`` (a checkpoint's bytes, read or mapped)."""
        view = memoryview(data)
        (mlen,) = _LEN.unpack_from(view, 0)  # (the 0 left out: equivalent, the default)
        # (4 : 5 + mlen, an equivalent mutant: cbor2 reads the one item, not the byte after)
        doc: dict[str, Any] = cbor2.loads(bytes(view[4 : 4 + mlen]))
        st = cls()
        st.seq, st._n = int(doc["seq"]), int(doc["n"])
        st.targets = list(doc["targets"])
        st.target_ix = {t: i for i, t in enumerate(st.targets)}
        st.evictions = dict(doc["evictions"])
        st.skipped_unknown, st.skipped_bad = int(doc["skipped_unknown"]), int(doc["skipped_bad"])
        off = 4 + mlen + (-(4 + mlen) % 8)
        for name, fmt, _dt, size in _COLUMNS:
            end = off + st._n * size
            if end > len(view):
                raise ValueError("cache checkpoint is shorter than its columns")
            st._base[name] = _cast(view[off:end], fmt)
            off = end
        if off != len(view):
            raise ValueError("cache checkpoint has trailing bytes")
        return st

    def snapshot(self) -> dict[str, Any]:
        """A plain, comparable picture of the state (for tests and replay reports)."""
        keys, seqs, created, tids, nbytes = self.live_columns()
        entries = {
            bytes(k).ljust(32, b"\0").hex(): (int(s), float(c), self._target(int(t)), int(n))
            # (strict off, equivalent mutants: the five columns are built together)
            for k, s, c, t, n in zip(keys, seqs, created, tids, nbytes, strict=True)
        }
        return {
            "seq": self.seq,
            "entries": entries,
            "evictions": dict(self.evictions),
            "skipped_unknown": self.skipped_unknown,
            "skipped_bad": self.skipped_bad,
        }


def parse_put(event: Event) -> tuple[bytes, str, int] | None:
    """``(key, target, nbytes)`` of a usable ``cache.put``, or None for a malformed one.

    Every view that follows the cache's events should decide with this (and
    :func:`parse_evict`), so that no view holds an entry the cache does not.
    """
    key = _key_bytes(event.key)
    data = event.data
    packet = data.get("packet") if isinstance(data, dict) else None
    target = packet.get("target") if isinstance(packet, dict) else None
    # (else 1: an equivalent mutant, a put whose data is no map has no target either)
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


class _KeySeq:
    """The sorted 32-byte keys of the base, as a sequence ``bisect`` can search."""

    __slots__ = ("_buf", "_n")

    def __init__(self, buf: memoryview, n: int) -> None:
        self._buf, self._n = buf, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> bytes:
        return bytes(self._buf[i * 32 : i * 32 + 32])


def find_key(buf: memoryview, n: int, key: bytes) -> int:
    """Index of ``key`` among the ``n`` sorted 32-byte keys in ``buf``, or -1.

    Cache keys are blake3 digests, so they are spread evenly: interpolation
    finds the neighbourhood of a key in a few probes where a binary search
    takes ~18 at 200k entries, each probe a slice in Python. It narrows
    ``[lo, hi)`` while it gains, then bisects what is left: always correct,
    merely slower for skewed keys. :func:`find_key_plain` is the plain twin a
    property test holds it equal to.

    The answer is the final bisection's, over ``[lo, hi)``, which holds the key
    whenever the buffer does; the probes only narrow it. Mutants that change how
    the probes are placed or when they stop, without moving ``lo`` past the key or
    ``hi`` before it, give the same answers, only after other probes, as do those
    that give the bisection ``hi`` another way (``len(keys)`` is ``hi``): they are
    listed as equivalent (.ci/mutants-equivalent). The clamp of ``m`` and the
    "let the bisection decide" test never bind (a <= want < b holds throughout);
    they stay as guards.
    """
    lo, hi = 0, n
    want = int.from_bytes(key[:8], "big")
    a, b = 0, 1 << 64  # bounds of the first 8 bytes of keys in [lo, hi)
    for _probe in range(6):
        if hi - lo <= 16:
            break
        m = lo + (want - a) * (hi - lo) // (b - a) if b > a else lo
        m = min(max(m, lo), hi - 1)
        probe = bytes(buf[m * 32 : m * 32 + 32])
        if probe < key:
            lo, a = m + 1, int.from_bytes(probe[:8], "big")
        elif probe > key:
            hi, b = m, int.from_bytes(probe[:8], "big") + 1
        else:
            return m
        if want < a or want >= b:
            break  # (keys sharing their first 8 bytes) let the bisection decide
    keys = _KeySeq(buf, hi)
    i = bisect_left(keys, key, lo, hi)
    return i if i < hi and keys[i] == key else -1


def find_key_plain(buf: memoryview, n: int, key: bytes) -> int:
    """:func:`find_key` as a plain binary search (the oracle of its test)."""
    keys = _KeySeq(buf, n)
    i = bisect_left(keys, key)
    return i if i < n and keys[i] == key else -1


def _cast(view: memoryview, fmt: str) -> memoryview:
    # (equivalent mutants: "B" cast through "B" or "b" anyway; the same bytes, read alike)
    return view if fmt == "B" else view.cast("B").cast(fmt)  # type: ignore[call-overload]


def key_prefix(text: str) -> str:
    """``text`` as a cache_key prefix: lowercase hex, 8 to 64 digits, else ValueError."""
    want = text.strip().lower()
    if not want or not set(want) <= _HEX:
        raise ValueError(f"{text!r} is not a cache_key (hex digits)")
    if len(want) > 64:
        raise ValueError(f"a cache_key has 64 hex digits, not {len(want)}")
    if len(want) < MIN_KEY_PREFIX:
        raise ValueError(
            f"a cache_key prefix needs at least {MIN_KEY_PREFIX} hex digits, not {len(want)}"
        )
    return want


def _key_bytes(key: object) -> bytes | None:
    """The 32 bytes of a 64-hex-digit key (either case), or None."""
    if type(key) is not str or len(key) != 64:
        return None
    try:
        raw = bytes.fromhex(key)
    except ValueError:
        return None
    # bytes.fromhex skips whitespace: "ab...  cd" would give fewer than 32 bytes
    return raw if len(raw) == 32 else None
