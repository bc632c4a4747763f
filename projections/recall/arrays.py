"""Array helpers of the recall index: scalar views, hash tables, sorted-set algebra.

Pure functions over numpy arrays (no index state); each is the one place its
trick lives, with the reason next to it.
"""

from __future__ import annotations

import gc
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from zlib import crc32

import numpy as np

I32 = np.int32
I64 = np.int64
U8 = np.uint8

EMPTY_I = np.zeros(0, dtype=np.int64)
EMPTY_F = np.zeros(0, dtype=np.float64)


def mview(a: np.ndarray) -> memoryview[Any]:
    """A memoryview for fast scalar reads of a 1-d array, also when it is unaligned
    (an index inside a larger mapped file need not start on an aligned offset).

    Its items are Python ints or floats, following ``a``'s dtype (``Any``: the
    segment arrays are not typed by dtype).
    """
    # numpy's stubs declare ndarray.__buffer__ only for Python >= 3.12 (the dunder
    # is new there), but ndarray implements the buffer protocol on every version
    m: memoryview[Any] = memoryview(a)  # type: ignore[arg-type]
    if m.format[:1] in "=<>!@" and m.format != "B":
        # typeshed's cast() takes only literal format codes; a numeric dtype's char
        # (the only dtypes indexed here) is a valid struct format code
        m = m.cast("B").cast(a.dtype.char)  # type: ignore[arg-type]
    return m


class HashTable:
    """Read-only view of a :func:`segment.build_hash` table (no dict is built)."""

    __slots__ = ("h", "mask", "off", "blob")

    def __init__(self, h: np.ndarray, off: np.ndarray, blob: np.ndarray) -> None:
        self.h = mview(h) if len(h) else mview(np.full(8, -1, np.int32))
        self.mask = len(self.h) - 1
        self.off = mview(off)
        self.blob = mview(blob)

    def find(self, key: bytes) -> int:
        h, off, blob, mask = self.h, self.off, self.blob, self.mask
        n = len(key)
        pos = crc32(key) & mask
        while True:
            i: int = h[pos]
            if i < 0:
                return -1
            s = off[i]
            if off[i + 1] - s == n and blob[s : s + n] == key:
                return i
            pos = (pos + 1) & mask


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic GC during a bulk build: it allocates millions of acyclic
    objects, and collections of the caller's large heap would dominate."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class Member:
    """Membership in a sorted doc array: a bitmap when large, a set when small."""

    __slots__ = ("s", "m")

    def __init__(self, docs: np.ndarray, n: int) -> None:
        if len(docs) <= 256:
            self.s: set[int] | None = set(docs.tolist())
            self.m = None
        else:
            self.s = None
            mark = np.zeros(max(n, 1), dtype=np.uint8)
            mark[docs] = 1
            # see mview: numpy's stubs gate ndarray.__buffer__ on Python >= 3.12
            self.m = memoryview(mark)  # type: ignore[arg-type]

    def __contains__(self, d: object) -> bool:
        if self.s is not None:
            return d in self.s
        assert self.m is not None and isinstance(d, int)
        return bool(self.m[d])


def sorted_unique(x: np.ndarray, copy: bool = True) -> np.ndarray:
    """Sorted distinct values of an int array: ``np.unique`` without its Python layers
    (numpy 2.4's ``np.unique`` imports ``numpy.ma`` on first use: a cold query would
    pay for it; docs/recall.md, "Measurements", has the figure).
    ``copy=False``: ``x`` is int64 and the caller's own, sorted in place."""
    x = x.astype(np.int64, copy=copy)  # sorted in place
    if len(x) < 2:
        return x
    x.sort()
    keep = np.empty(len(x), dtype=np.bool_)
    keep[0] = True
    np.not_equal(x[1:], x[:-1], out=keep[1:])
    return x[keep]


def uniq(docs: list[int]) -> np.ndarray:
    if not docs:
        return EMPTY_I
    return sorted_unique(np.array(docs, dtype=np.int64), copy=False)


def isin_sorted(D: np.ndarray, R: np.ndarray) -> np.ndarray:
    """Mask of ``D`` entries present in sorted unique ``R``."""
    if not len(R) or not len(D):
        return np.zeros(len(D), dtype=bool)
    j = R.searchsorted(D)
    np.minimum(j, len(R) - 1, out=j)
    hit: np.ndarray = R[j] == D
    return hit


def merge(lists: list[tuple[np.ndarray, np.ndarray, bool]]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`union` of (docs, values, sorted and distinct) lists; two sorted lists,
    one of them short, are merged by binary search instead of a sort.

    Each doc has at most one value per list, so with two lists a sum has at most
    two terms: the same value in either order.
    """
    if len(lists) == 2 and lists[0][2] and lists[1][2]:
        (ad, av, _), (bd, bv, _) = lists
        if len(ad) < len(bd):
            ad, av, bd, bv = bd, bv, ad, av
        if len(bd) <= 64 and len(ad):
            ad = ad.astype(np.int64, copy=False)
            bd = bd.astype(np.int64, copy=False)
            j = ad.searchsorted(bd)
            jc = np.minimum(j, len(ad) - 1)
            found = ad[jc] == bd
            v = av.astype(np.float64)  # a copy
            bv = bv.astype(np.float64, copy=False)
            if found.all():
                v[j] += bv
                return ad, v
            v[j[found]] += bv[found]
            miss = ~found
            jm = j[miss]
            return np.insert(ad, jm, bd[miss]), np.insert(v, jm, bv[miss])
    return union([(d, v) for d, v, _ in lists])


def union(lists: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Union of (docs, values) lists with summed values: (sorted unique docs, sums).

    A stable sort (timsort) merges the already sorted runs in linear time.
    """
    if len(lists) == 1:
        d, v = lists[0]
        if len(d) < 2 or bool((d[1:] > d[:-1]).all()):
            return d.astype(np.int64, copy=False), v.astype(np.float64, copy=False)
    d = np.concatenate([x[0] for x in lists]).astype(np.int64, copy=False)
    v = np.concatenate([x[1] for x in lists]).astype(np.float64, copy=False)
    o = np.argsort(d, kind="stable")
    d, v = d[o], v[o]
    first = np.empty(len(d), dtype=bool)
    first[:1] = True
    np.not_equal(d[1:], d[:-1], out=first[1:])
    if bool(first.all()):
        return d, v
    starts = np.flatnonzero(first)
    return d[starts], np.add.reduceat(v, starts)


# ---------------------------------------------------------------- building arrays
def off_dtype(maxval: int) -> Any:
    return np.uint32 if maxval < (1 << 32) else I64


def uint_dtype(maxval: int) -> Any:
    if maxval < (1 << 8):
        return np.uint8
    if maxval < (1 << 16):
        return np.uint16
    if maxval < (1 << 32):
        return np.uint32
    return np.uint64


def offsets(lens: np.ndarray) -> np.ndarray:
    """CSR offsets (n+1) of the given lengths, in the narrowest offset dtype."""
    off = np.zeros(len(lens) + 1, dtype=I64)
    if len(lens):
        np.cumsum(lens, out=off[1:])
    return off.astype(off_dtype(int(off[-1])))


def strings_blob(items: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenation + offsets (n+1)."""
    lens = np.fromiter(map(len, items), dtype=I64, count=len(items))
    return np.frombuffer(b"".join(items), dtype=U8), offsets(lens)


def gather_ranges(off: np.ndarray, data: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Concatenate ``data[off[i]:off[i+1]]`` for each i in ``ids``."""
    if len(ids) == 0:
        return data[:0]
    if len(ids) == 1:
        i = int(ids[0])
        return data[int(off[i]) : int(off[i + 1])]
    starts = off[ids].astype(I64)
    lens = off[ids + 1].astype(I64) - starts
    total = int(lens.sum())
    if total == 0:
        return data[:0]
    csum = np.cumsum(lens)
    idx = np.repeat(starts - (csum - lens), lens) + np.arange(total, dtype=I64)
    return data[idx]


def build_hash(items: Sequence[bytes]) -> np.ndarray:
    """Open-addressing table (linear probing, load <= 0.8) of item ids keyed by crc32."""
    n = len(items)
    size = 8
    while size < n + n // 4 + 1:
        size <<= 1
    mask = size - 1
    table = np.full(size, -1, dtype=I32)
    if n == 0:
        return table
    pos = np.fromiter(map(zlib.crc32, items), dtype=np.uint32, count=n).astype(I64) & mask
    pending = np.arange(n, dtype=I64)
    while len(pending):
        empty = table[pos] == -1
        idx = np.flatnonzero(empty)
        if len(idx):
            u, first = _first_of_each(pos[idx])
            winners = idx[first]
            table[u] = pending[winners]
            placed = np.zeros(len(pending), dtype=bool)
            placed[winners] = True
            keep = ~placed
            pending = pending[keep]
            pos = pos[keep]
        pos = (pos + 1) & mask
    return table


def _first_of_each(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values of ``x`` (ints in [0, 2**32)) and the index of each one's
    first occurrence: ``np.unique(x, return_index=True)`` with one plain sort of
    ``value << 32 | index`` (no stable argsort)."""
    key = (x.astype(np.uint64) << np.uint64(32)) | np.arange(len(x), dtype=np.uint64)
    key.sort()
    hi = key >> np.uint64(32)
    first = np.empty(len(key), dtype=bool)
    first[:1] = True
    np.not_equal(hi[1:], hi[:-1], out=first[1:])
    key = key[first]
    return (key >> np.uint64(32)).view(I64), (key & np.uint64(0xFFFFFFFF)).view(I64)


def sort_pairs(a: np.ndarray, b: np.ndarray, dedupe: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Sort (a, b) int pairs (both < 2**31) by (a, b); optionally drop duplicates."""
    if len(a) == 0:
        return a.astype(I64), b.astype(I64)
    key = (a.astype(np.uint64) << np.uint64(32)) | b.astype(np.uint64)
    key = np.sort(key)
    if dedupe and len(key) > 1:
        keep = np.ones(len(key), dtype=bool)
        keep[1:] = key[1:] != key[:-1]
        key = key[keep]
    return (key >> np.uint64(32)).astype(I64), (key & np.uint64(0xFFFFFFFF)).astype(I64)
