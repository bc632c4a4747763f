"""Array helpers of the recall index: scalar views, hash tables, sorted-set algebra.

Pure functions over numpy arrays (no index state); each is the one place its
trick lives, with the reason next to it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from zlib import crc32

import numpy as np

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
    (numpy 2.4's ``np.unique`` imports ``numpy.ma`` on first use, ~14 ms cold).
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
