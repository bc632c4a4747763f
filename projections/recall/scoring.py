"""Exact scoring: resolving query terms, term frequencies, BM25 sums, validity, order.

Functions over a read-only :class:`~projections.recall.index.RecallIndex`. Every
strategy (:mod:`.strategies`, :mod:`.maxscore`) scores its candidates with
:func:`exact_np` or :func:`exact_py`, which do the same float64 arithmetic in
the same order, so scores are bit-identical whichever path found a doc.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import TYPE_CHECKING, Any

import numpy as np

from .arrays import EMPTY_I, Member, isin_sorted
from .constants import K1, B
from .normalize import enc

if TYPE_CHECKING:
    from .index import RecallIndex

K1P1 = K1 + 1.0


class Term:
    """One distinct query token, resolved against the index for one search."""

    __slots__ = ("tok", "idf", "ub", "big", "mid", "s0", "s", "e", "dd", "dt", "ddict", "df")

    def __init__(self, tok: str) -> None:
        self.tok = tok
        self.idf = 0.0
        self.ub = 0.0
        self.big = -1  # index of a big base term, else -1
        self.mid = -1  # index of a small base term's impact order, else -1
        self.s0 = 0  # start of the term's postings in post_doc
        self.s = self.e = 0  # live range in post_doc (small base term)
        self.dd: np.ndarray = EMPTY_I  # live delta docs, sorted
        self.dt: np.ndarray = EMPTY_I
        self.ddict: dict[int, int] | None = None
        self.df = 0  # base postings in range (an upper bound of live ones)


class Unit:
    """A MaxScore unit: a term, or the part of its docs with tf = 1 ("lo") or tf >= 2."""

    __slots__ = ("j", "t", "kind", "ub", "n")

    def __init__(self, j: int, t: Term, kind: str, ub: float, n: int) -> None:
        self.j, self.t, self.kind, self.ub, self.n = j, t, kind, ub, n


NO_KINDS: dict[str, Any] = {k: frozenset() for k in ("path", "sym", "test", "task")}


class QueryState:
    """Everything one search needs, resolved once."""

    __slots__ = ("terms", "avgdl", "la", "i0", "lo", "hi", "since", "until", "boost",
                 "kind_docs", "rules", "restrict", "task_docs", "ntok", "_barr",
                 "filter_rules", "matched", "_idf")

    # set by RecallIndex._ranked right after construction (declared here for the
    # type checker; bare annotations create no class attributes, so the slots stay
    # the only storage)
    avgdl: float
    la: float | None  # live_after
    i0: int  # first base doc id not expired
    lo: int  # base doc id range [lo, hi) allowed by since/until
    hi: int
    since: float | None
    until: float | None
    ntok: int  # distinct query tokens (matched or not)

    def __init__(self) -> None:
        self.matched = True  # rankers report each hit's matched tokens (search needs them)
        self.terms: list[Term] = []
        self.boost: dict[int, float] = {}
        self.kind_docs: dict[str, Any] = NO_KINDS  # replaced on the first match
        self.filter_rules = False
        self.rules: list[tuple[str, str, int]] = []
        self.restrict: np.ndarray | None = None
        self.task_docs: np.ndarray | None = None
        self._barr: tuple[np.ndarray, np.ndarray] | None = None
        self._idf: np.ndarray | None = None

    def idf_row(self) -> np.ndarray:
        """The terms' idf as a row (float64)."""
        if self._idf is None:
            self._idf = np.array([t.idf for t in self.terms], dtype=np.float64)
        return self._idf

    def boost_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The boosted docs (sorted) and their total boosts."""
        if self._barr is None:
            n = len(self.boost)
            d = np.fromiter(self.boost.keys(), dtype=np.int64, count=n)
            v = np.fromiter(self.boost.values(), dtype=np.float64, count=n)
            o = np.argsort(d)
            self._barr = (d[o], v[o])
        return self._barr


def resolve(ix: RecallIndex, tok: str, q: QueryState, N: int) -> Term | None:
    """Live postings, idf and score upper bound of one query token (None: absent)."""
    tid = ix._terms.find(enc(tok))
    if tid < 0 and not (ix._dpost and tok in ix._dpost):
        return None  # in no doc (the common miss: no Term is made)
    t = Term(tok)
    i0 = q.i0
    n_live = 0
    post = ix._post
    if tid >= 0:
        b = ix._big.get(tid)
        if b is not None:
            t.big = b
            off = ix._imp.off
            df = off[b + 1] - off[b]
            if i0:
                df -= int(np.count_nonzero(ix._rows[b][:i0]))
            t.df = df
            n_live = df
            if ix._removed:
                r = ix._removed_sorted()
                r = r[r >= i0]
                n_live -= int(np.count_nonzero(ix._rows[b][r]))
        else:
            s, e = post.off_mv[tid], post.off_mv[tid + 1]
            t.s0 = s
            t.mid = ix._midmap.get(tid, -1)
            if i0:
                s = bisect_left(post.doc_mv, i0, s, e)
            t.s, t.e = s, e
            t.df = n_live = e - s
            if ix._removed and e > s:
                r = ix._removed_sorted()
                r = r[r >= i0]
                if len(r):
                    P = post.doc[s:e]
                    j = np.minimum(np.searchsorted(P, r), len(P) - 1)
                    n_live -= int(np.count_nonzero(P[j] == r))
    if ix._dpost:
        d = ix._dpost.get(tok)
        if d:
            dd, dt = ix._delta_arrays(tok)
            if q.la is not None:
                m = ix._created[dd] >= q.la
                dd, dt = dd[m], dt[m]
            t.dd, t.dt = dd, dt
            n_live += len(dd)
    if n_live <= 0:
        return None
    t.idf = math.log(1.0 + (N - n_live + 0.5) / (n_live + 0.5))
    if tid >= 0 and t.df:
        # the stored bound is for the build's avgdl; a longer average only raises
        # the factor, by at most avgdl / build avgdl
        t.ub = t.idf * post.ub_mv[tid] * max(1.0, q.avgdl / post.ub_avgdl) * (
            1.0 + 1e-6) + 1e-12
    return t


def tf_np(ix: RecallIndex, t: Term, D: np.ndarray, delta: bool = True) -> np.ndarray:
    """tf of term ``t`` for sorted docs ``D`` (int64; 0 where absent or out of range)."""
    nb = ix._nb
    if t.big >= 0:
        if len(D) and int(D[-1]) < nb:
            got: np.ndarray = ix._rows[t.big][D].astype(np.int64)
            return got
        out = np.zeros(len(D), dtype=np.int64)
        inb = D < nb
        out[inb] = ix._rows[t.big][D[inb]]
    else:
        out = np.zeros(len(D), dtype=np.int64)
        if t.e > t.s and len(D):
            P = ix._post.doc[t.s : t.e]
            j = P.searchsorted(D)
            np.minimum(j, len(P) - 1, out=j)
            hit = P[j] == D
            out[hit] = ix._post.tf[t.s + j[hit]]
    if delta and len(t.dd) and len(D):
        j = t.dd.searchsorted(D)
        np.minimum(j, len(t.dd) - 1, out=j)
        hit = t.dd[j] == D
        out[hit] = t.dt[j[hit]]
    return out


def tf_py(ix: RecallIndex, t: Term, d: int) -> int:
    if d >= ix._nb:
        if t.ddict is None:
            t.ddict = dict(zip(t.dd.tolist(), t.dt.tolist(), strict=True))
        return t.ddict.get(d, 0)
    if t.big >= 0:
        tf: int = ix._rowmv[t.big][d]
        return tf
    if t.e > t.s:
        pd = ix._post.doc_mv
        j = bisect_left(pd, d, t.s, t.e)
        if j < t.e and pd[j] == d:
            tf = ix._post.tf_mv[j]
            return tf
    return 0


def tf_matrix(ix: RecallIndex, q: QueryState, D: np.ndarray) -> np.ndarray:
    """tf matrix (docs x query terms, int64) of sorted docs ``D``.

    The small terms' positions are found with one searchsorted each and then
    checked and read in one go for all of them (few numpy calls per query).
    """
    terms = q.terms
    S = len(D)
    tfm = np.zeros((S, len(terms)), dtype=np.int64)
    if not S or not terms:
        return tfm
    nb = ix._nb
    nbase = S if D[-1] < nb else int(D.searchsorted(nb))
    Db = D if nbase == S else D[:nbase]
    if nbase:
        pdoc = ix._post.doc
        cols: list[int] = []
        small: list[Term] = []
        for j, t in enumerate(terms):
            if t.big >= 0:
                tfm[:nbase, j] = ix._rows[t.big][Db]
            elif t.e > t.s:
                cols.append(j)
                small.append(t)
        if cols:
            P = np.empty((len(cols), nbase), dtype=np.int64)
            ends = np.empty((len(cols), 1), dtype=np.int64)
            for i, t in enumerate(small):
                P[i] = pdoc[t.s : t.e].searchsorted(Db)
                P[i] += t.s
                ends[i, 0] = t.e - 1
            np.minimum(P, ends, out=P)
            got = np.where(pdoc[P] == Db, ix._post.tf[P], 0)
            if len(cols) == len(terms):
                tfm[:nbase] = got.T
            else:
                tfm[:nbase, cols] = got.T
    if nbase < S:
        Dd = D[nbase:]
        for j, t in enumerate(terms):
            if len(t.dd):
                k = t.dd.searchsorted(Dd)
                np.minimum(k, len(t.dd) - 1, out=k)
                hit = t.dd[k] == Dd
                col = tfm[nbase:, j]
                col[hit] = t.dt[k[hit]]
    return tfm


def exact_np(ix: RecallIndex, q: QueryState, D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact scores (BM25 in query-token order, then boosts) and tf matrix of sorted ``D``.

    Each doc's sum runs over the terms in query-token order (a running sum
    along the row: ``cumsum``), a term with tf = 0 adding exactly 0.0 — the
    same arithmetic as :func:`exact_py`, so scores are bit-identical.
    """
    tfm = tf_matrix(ix, q, D)
    if len(D) and q.terms:
        F = tfm.astype(np.float64)
        nrm = length_norm(ix, q, D)
        C = q.idf_row() * (F * K1P1) / (F + nrm.reshape(-1, 1))
        score = np.cumsum(C, axis=1)[:, -1].copy()
    else:
        score = np.zeros(len(D), dtype=np.float64)
    if len(D) and q.boost:
        bd, bv = q.boost_arrays()
        j = bd.searchsorted(D)
        np.minimum(j, len(bd) - 1, out=j)
        hit = bd[j] == D
        score[hit] += bv[j[hit]]
    return score, tfm


def exact_py(ix: RecallIndex, q: QueryState, d: int) -> tuple[float, list[str]]:
    """Exact score and matched tokens of one doc (same arithmetic as :func:`exact_np`)."""
    score = 0.0
    matched = []
    nrm = K1 * (1.0 - B + B * (ix._dl_mv[d] / q.avgdl))
    for t in q.terms:
        tf = tf_py(ix, t, d)
        if tf:
            score += t.idf * (tf * K1P1) / (tf + nrm)
            matched.append(t.tok)
    b = q.boost.get(d)
    if b:
        score += b
    return score, matched


def length_norm(ix: RecallIndex, q: QueryState, D: np.ndarray) -> np.ndarray:
    """``K1·(1 − b + b·dl/avgdl)`` of docs ``D`` (the same arithmetic everywhere).

    When two searches in a row use the same avgdl on an unchanged index, the
    whole per-doc array is computed once and kept (gathers instead of four
    array operations per use).
    """
    c = ix._nrmc
    key = (q.avgdl, ix._version, ix._n)
    if c is not None and c[0] == key:
        cached: np.ndarray = c[1][D]
        return cached
    if ix._nrm_last == key and ix._n:
        arr: np.ndarray = K1 * (1.0 - B + B * (ix._dl[: ix._n] / q.avgdl))
        ix._nrmc = (key, arr)
        got: np.ndarray = arr[D]
        return got
    ix._nrm_last = key
    norm: np.ndarray = K1 * (1.0 - B + B * (ix._dl[D] / q.avgdl))
    return norm


def valid_np(ix: RecallIndex, q: QueryState, D: np.ndarray, exclude: np.ndarray | None
             ) -> np.ndarray | None:
    """Mask of the valid docs of ``D`` (None: all of them)."""
    m: np.ndarray | None = None
    if not len(D):
        return m
    # (i0 == 0 and no delta: nothing has expired, the mask would be all true: mutants
    # that apply it anyway, `i0 >= 0` or `_n >= _nb`, are equivalent)
    if q.la is not None and (q.i0 > 0 or ix._n > ix._nb):
        m = ix._created[D] >= q.la
    if ix._alive is not None:
        a = ix._alive[D] != 0
        m = a if m is None else (m & a)
    if q.since is not None:
        a = ix._created[D] >= q.since
        m = a if m is None else (m & a)
    if q.until is not None:
        a = ix._created[D] <= q.until
        m = a if m is None else (m & a)
    if q.restrict is not None:
        a = isin_sorted(D, q.restrict)
        m = a if m is None else (m & a)
    if exclude is not None:
        a = ~isin_sorted(D, exclude)
        m = a if m is None else (m & a)
    return m


def valid_fn(ix: RecallIndex, q: QueryState, exclude: np.ndarray | None) -> Any:
    """A per-doc validity test in plain Python (for tiny sets)."""
    cr = ix._created_mv
    alive = ix._alive_mv
    la, since, until = q.la, q.since, q.until
    if la is not None and q.i0 == 0 and ix._n == ix._nb:
        # (``la is None and``: an equivalent mutant; with nothing expired the time
        # check never fails)
        la = None  # nothing has expired
    rs = None if q.restrict is None else Member(q.restrict, ix._n)
    ex = None if exclude is None else Member(exclude, ix._n)
    if alive is None and la is None and since is None and until is None and rs is None \
            and ex is None:
        return None

    def ok(d: int) -> bool:
        if alive is not None and not alive[d]:
            return False
        if la is not None or since is not None or until is not None:
            c = cr[d]
            if (la is not None and c < la) or (since is not None and c < since) or (
                    until is not None and c > until):
                return False
        if rs is not None and d not in rs:
            return False
        return ex is None or d not in ex

    return ok


def best(ix: RecallIndex, items: list[Any], k: int) -> list[Any]:
    """The best ``k`` of ranked items: score desc, newest, then cache_key."""
    if len(items) <= 1:
        return items[:k]
    nb = ix._nb
    if all(x[1] < nb for x in items):
        items.sort(key=lambda x: (-x[0], -x[1]))  # base ids follow (created, -key)
        return items[:k]
    cr = ix._created_mv
    items.sort(key=lambda x: (-x[0], -cr[x[1]]))
    out: list[Any] = []
    i = 0
    while i < len(items) and len(out) < k:
        j = i + 1
        while j < len(items) and items[j][0] == items[i][0] and cr[items[j][1]] == cr[
                items[i][1]]:
            j += 1
        group = items[i:j]
        if len(group) > 1:
            group.sort(key=lambda x: ix._key_of(x[1]))
        out.extend(group)
        i = j
    return out[:k]


def top_np(ix: RecallIndex, q: QueryState, D: np.ndarray, sc: np.ndarray, k: int,
            tfm: np.ndarray | None = None) -> list[Any]:
    """Best ``k`` of numpy candidates (score desc, newest, cache_key)."""
    n = len(D)
    if n == 0 or k <= 0:
        return []
    if n <= k + 8:
        sel = None
        items = list(zip(sc.tolist(), D.tolist(), range(n), strict=True))
    elif n > k:
        kth = np.partition(sc, n - k)[n - k]
        sel = np.flatnonzero(sc >= kth)
        if len(sel) > 4 * k + 64:
            # a big tie at the k-th score: the newest of the tied win
            gt = sel[sc[sel] > kth]
            eq = sel[sc[sel] == kth]
            need = k - len(gt)
            ce = ix._created[D[eq]]
            kc = np.partition(ce, len(ce) - need)[len(ce) - need]
            sel = np.concatenate((gt, eq[ce >= kc]))
    else:
        sel = np.arange(n)
    if sel is not None:
        items = list(zip(sc[sel].tolist(), D[sel].tolist(), sel.tolist(), strict=True))
    top = best(ix, items, k)
    if tfm is None or not q.matched:
        return [(x[0], x[1], None) for x in top]
    rows = tfm[[x[2] for x in top]].tolist()
    toks = [t.tok for t in q.terms]
    return [(x[0], x[1], [tok for tok, tf in zip(toks, row, strict=True) if tf])
            for x, row in zip(top, rows, strict=True)]


def kth(part: np.ndarray, valid: np.ndarray | None, k: int) -> float:
    """The k-th largest of the valid partial scores (-inf: fewer than k)."""
    vp = part if valid is None else part[valid]
    if len(vp) < k:
        return -math.inf
    return float(np.partition(vp, len(vp) - k)[len(vp) - k])
