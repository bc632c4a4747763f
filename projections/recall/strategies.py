"""Ranking strategies: which docs to score for one query, and when to stop.

Each ``rank_*`` function returns the exact top ``k`` ranked items
``(score, doc, matched tokens or None)`` or None when its shortcut cannot prove
its answer (the caller then runs the next one); :func:`rank` picks them in
turn. docs/recall.md, "Search", describes each; docs/benchmarks.md has what each earns.
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from . import constants
from .arrays import sorted_unique
from .maxscore import rank_maxscore, walk
from .scoring import QueryState, best, exact_np, exact_py, top_np, valid_fn, valid_np

if TYPE_CHECKING:
    from .index import RecallIndex


def rank(ix: RecallIndex, q: QueryState, k: int, exclude: np.ndarray | None) -> list[Any]:
    """Exact top ``k`` ranked items among valid docs that match the query."""
    if k <= 0:
        return []
    terms = q.terms
    if not q.ntok:
        return rank_empty(ix, q, k, exclude)
    if q.restrict is not None and constants.DIRECT_MAX >= 0 and len(q.restrict) <= max(
            constants.DIRECT_MAX, sum(t.df for t in terms) // 8):
        return rank_direct(ix, q, q.restrict, k, exclude)
    sdf = len(q.boost)
    for t in terms:
        sdf += len(t.dd) + (t.df if t.big < 0 else 0)
    if sdf <= constants.TINY:
        got = rank_tiny(ix, q, k, exclude)
        if got is not None:
            return got
    if len(terms) == 2 and min(t.df for t in terms) >= constants.PAIR_MIN:
        got = rank_pair(ix, q, k, exclude)
        if got is not None:
            return got
    elif len(terms) > 2 and sdf >= constants.PAIR_MIN:
        got = rank_multi(ix, q, k, exclude)
        if got is not None:
            return got
    return rank_maxscore(ix, q, k, exclude)


def rank_multi(ix: RecallIndex, q: QueryState, k: int, exclude: np.ndarray | None
              ) -> list[Any] | None:
    """Several terms: score exactly the docs of the rarest terms, the docs having
    two or more of the next small terms, and the boosted docs.

    Any other doc has at most one of those next terms (plus the big and the
    most common small terms, which are not scanned), so its score is at
    most the largest of their bounds plus the bounds of the terms not
    scanned.  When the k-th best scored doc beats that, the answer
    is exact (an identifier's rare whole token and its common parts, a
    phrase); otherwise None (the caller runs MaxScore).
    """
    terms = q.terms
    if len(q.boost) > constants.SHORTCUT_BOOSTS or any(len(t.dd) for t in terms):
        return None
    small = sorted((t for t in terms if t.big < 0 and t.e > t.s), key=attrgetter("df"))
    bound = sum(t.ub for t in terms if t.big >= 0)
    pdoc = ix._post.doc
    full: list[np.ndarray] = []  # docs of the rarest terms, taken whole
    budget = constants.MULTI_WHOLE
    i = 0
    while i < len(small) and small[i].df <= budget:
        budget -= small[i].df
        full.append(pdoc[small[i].s : small[i].e])
        i += 1
    rest = small[i:]
    # the most common small terms are bounded like big terms, not scanned
    n = 0
    for j, t in enumerate(rest):
        n += t.df
        if n > constants.MULTI_MAX:
            bound += sum(u.ub for u in rest[j:])
            rest = rest[:j]
            break
    if rest:
        bound += max(t.ub for t in rest)
    parts: list[np.ndarray] = [x.astype(np.int64) for x in full]
    if len(rest) >= 2:
        D = np.sort(np.concatenate([pdoc[t.s : t.e] for t in rest]), kind="stable")
        two = D[1:][D[1:] == D[:-1]]
        parts.append(two.astype(np.int64))
    if q.boost:
        parts.append(q.boost_arrays()[0])
    if not parts:
        return None
    C = sorted_unique(np.concatenate(parts) if len(parts) > 1 else parts[0])
    m = valid_np(ix, q, C, exclude)
    if m is not None:
        C = C[m]
    if len(C) < k or len(C) > constants.MULTI_MAX // 16:
        return None
    sc, tfm = exact_np(ix, q, C)
    theta = float(np.partition(sc, len(sc) - k)[len(sc) - k])
    if theta <= bound + 1e-9 * (1.0 + abs(theta)):
        return None
    return top_np(ix, q, C, sc, k, tfm)


def rank_pair(ix: RecallIndex, q: QueryState, k: int, exclude: np.ndarray | None
              ) -> list[Any] | None:
    """Two common terms: score the docs having both (and the boosted docs) exactly.

    When the k-th best of those exceeds what either term alone can give
    (its upper bound), no doc with one term and no boost can enter the top
    k: the answer is exact.  Otherwise None (the caller runs MaxScore).
    """
    a, b = sorted(q.terms, key=attrgetter("df"))
    if len(a.dd) or len(b.dd) or len(q.boost) > constants.SHORTCUT_BOOSTS or a.df > 65536:
        return None
    ub = max(a.ub, b.ub)
    if not ub or min(a.ub, b.ub) < 0.25 * ub:
        return None
    pdoc = ix._post.doc
    if a.big >= 0:
        Da = np.flatnonzero(ix._rows[a.big][q.i0 :])
        if q.i0:
            Da += q.i0
    else:
        Da = pdoc[a.s : a.e]
    if b.big >= 0:
        both = Da[ix._rows[b.big][Da] != 0]
    else:
        # a bitmap of the other term's docs: three linear passes beat a
        # binary search per doc
        mark = np.zeros(ix._nb, dtype=np.bool_)
        mark[pdoc[b.s : b.e]] = True
        both = Da[mark[Da]]
    C = both.astype(np.int64)
    if q.boost:
        C = sorted_unique(np.concatenate((C, q.boost_arrays()[0])))
    m = valid_np(ix, q, C, exclude)
    if m is not None:
        C = C[m]
    if len(C) < k:
        return None
    sc, tfm = exact_np(ix, q, C)
    theta = float(np.partition(sc, len(sc) - k)[len(sc) - k])
    if theta <= ub + 1e-9 * (1.0 + abs(theta)):
        return None
    return top_np(ix, q, C, sc, k, tfm)


def rank_empty(ix: RecallIndex, q: QueryState, k: int, exclude: np.ndarray | None) -> list[Any]:
    """No query text: the newest valid docs (filters only), score 0."""
    if q.restrict is not None:
        D = q.restrict
    else:
        D = np.arange(q.lo, q.hi, dtype=np.int64)
        if ix._n > ix._nb:
            D = np.concatenate((D, np.arange(ix._nb, ix._n, dtype=np.int64)))
    m = valid_np(ix, q, D, exclude)
    if m is not None:
        D = D[m]
    base = D[D < ix._nb][-k:]
    delta = D[D >= ix._nb]
    return best(ix, [(0.0, d, []) for d in base.tolist() + delta.tolist()], k)


def rank_direct(ix: RecallIndex, q: QueryState, D: np.ndarray, k: int, exclude: np.ndarray | None
                 ) -> list[Any]:
    """Score every doc of a narrow filter/scope set."""
    m = valid_np(ix, q, D, exclude)
    if m is not None:
        D = D[m]
    if not len(D):
        return []
    sc, tfm = exact_np(ix, q, D)
    hit = (sc > 0) | (tfm > 0).any(axis=1)
    return top_np(ix, q, D[hit], sc[hit], k, tfm[hit])


def rank_tiny(ix: RecallIndex, q: QueryState, k: int, exclude: np.ndarray | None
              ) -> list[Any] | None:
    """All small terms have few postings: plain Python, big terms probed or walked."""
    ok = valid_fn(ix, q, exclude)
    pd = ix._post.doc_mv
    cand: dict[int, None] = dict.fromkeys(q.boost)
    big = []
    for t in q.terms:
        if len(t.dd):  # delta docs: never in an impact order, always candidates
            cand.update(dict.fromkeys(t.dd.tolist()))
        if t.big >= 0:
            big.append(t)
        elif t.e > t.s:
            cand.update(dict.fromkeys(pd[t.s : t.e].tolist()))
    scored = []
    for d in cand:
        if ok is None or ok(d):
            s, matched = exact_py(ix, q, d)
            scored.append((s, d, matched))
    top = best(ix, scored, k)
    if not big:
        return top
    theta = top[-1][0] if len(top) >= k else -math.inf
    rem = sum(t.ub for t in big)
    if rem < theta - 1e-9 * (1.0 + abs(theta)):
        return top
    if len(big) > 1:
        return None
    walked = walk(ix, q, big[0], k, cand, ok)
    if walked is None:
        return None
    return best(ix, top + walked, k)
