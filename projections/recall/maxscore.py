"""MaxScore: the general ranking strategy (terms rarest first, bounded, then probed).

Functions over a read-only :class:`~projections.recall.index.RecallIndex`; the
fallback of :func:`~projections.recall.strategies.rank` when no shortcut applies.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from . import constants
from .arrays import EMPTY_F, EMPTY_I, Member, merge, sorted_unique
from .constants import K1, B
from .scoring import (
    K1P1,
    QueryState,
    Term,
    Unit,
    best,
    exact_np,
    kth,
    length_norm,
    tf_np,
    top_np,
    valid_fn,
    valid_np,
)

if TYPE_CHECKING:
    from .index import RecallIndex


def postings_np(ix: RecallIndex, q: QueryState, ts: list[tuple[int, Term]], base: bool = True,
                 delta: bool = True) -> tuple[np.ndarray, np.ndarray, bool]:
    """(docs, contributions, whether docs are sorted and distinct) of the
    live-range postings of the terms."""
    D: list[np.ndarray] = []
    F: list[np.ndarray] = []
    idfs: list[float] = []  # per piece of D
    pdoc, ptf = ix._post.doc, ix._post.tf
    for _, t in ts:
        if not base:
            pass
        elif t.big >= 0:
            row = ix._rows[t.big]
            d = np.flatnonzero(row[q.i0 :])
            if q.i0:
                d += q.i0
            D.append(d)
            F.append(row[d])
            idfs.append(t.idf)
        elif t.e > t.s:
            D.append(pdoc[t.s : t.e])
            F.append(ptf[t.s : t.e])
            idfs.append(t.idf)
        if delta and len(t.dd):
            D.append(t.dd)
            F.append(t.dt)
            idfs.append(t.idf)
    if not D:
        return EMPTY_I, EMPTY_F, True
    if len(D) == 1:
        docs = D[0].astype(np.int64)
        tf = F[0].astype(np.float64)
        idf: Any = idfs[0]
        srt = True
    else:
        docs = np.concatenate(D).astype(np.int64, copy=False)
        tf = np.concatenate(F).astype(np.float64)
        idf = np.repeat(np.array(idfs), [len(x) for x in D])
        srt = len(ts) == 1  # base docs, then delta docs (ids past the base)
    return docs, idf * (tf * K1P1) / (tf + length_norm(ix, q, docs)), srt


def impact_groups(ix: RecallIndex, t: Term) -> tuple[Any, Any, list[tuple[int, int, int, int]]]:
    """A term's impact order: (entries, docs of positions or None,
    [(tf, start, end, shortest doc length)])."""
    key = (t.big, t.mid)
    got = ix._gcache.get(key)
    if got is None:
        got = ix._gcache[key] = impact_groups_of(ix, t)
    return got


def impact_groups_of(ix: RecallIndex, t: Term) -> tuple[Any, Any, list[tuple[int, int, int, int]]]:
    """:func:`impact_groups` uncached."""
    if t.big >= 0:
        return ix._imp.entry, None, ix._imp.groups(t.big)
    return ix._mimp.entry, ix._post.doc_mv[t.s0 :], ix._mimp.groups(t.mid)


def units(ix: RecallIndex, q: QueryState) -> list[Unit]:
    """MaxScore units: a term, or its tf >= 2 docs and its tf = 1 docs apart.

    For a term with an impact order the bound is exact: each tf group
    records its shortest doc.  Splitting off the docs that repeat the term
    leaves the tf = 1 docs with a lower bound.
    """
    units = []
    a = K1 * B / q.avgdl
    c0 = K1 * (1.0 - B)
    for j, t in enumerate(q.terms):
        if (t.big < 0 and t.mid < 0) or not t.df:
            units.append(Unit(j, t, "all", t.ub, t.df))
            continue
        _, _, groups = impact_groups(ix, t)
        idf = t.idf * (1.0 + 1e-12)
        lo_n = nhi = 0
        lo_ub = hi_ub = 0.0
        for tf, s0, e, gdl in groups:
            ub = idf * (tf * K1P1) / (tf + (c0 + a * gdl))
            if tf == 1:
                lo_ub, lo_n = ub, e - s0
            else:
                nhi += e - s0
                if ub > hi_ub:
                    hi_ub = ub
        if lo_n and nhi and nhi <= max(256, t.df // 2):
            units.append(Unit(j, t, "hi", hi_ub * (1.0 + 1e-9), nhi))
            units.append(Unit(j, t, "lo", lo_ub * (1.0 + 1e-9), lo_n))
        else:
            units.append(Unit(j, t, "all", max(lo_ub, hi_ub) * (1.0 + 1e-9), t.df))
    return units


def unit_postings(ix: RecallIndex, q: QueryState, units: list[Unit]
                   ) -> tuple[np.ndarray, np.ndarray, bool]:
    """(docs, contributions, sorted-distinct flag) of the base postings of some units."""
    full = [(u.j, u.t) for u in units if u.kind == "all"]
    parts = [postings_np(ix, q, full, delta=False)] if full else []
    D: list[np.ndarray] = []
    F: list[np.ndarray] = []
    J: list[np.ndarray] = []
    for u in units:
        if u.kind == "all":
            continue
        imp, base, groups = impact_groups(ix, u.t)
        arr = ix._imp.entries if u.t.big >= 0 else ix._mimp.entries
        for tf, s0, e, _ in groups:
            if (tf == 1) == (u.kind == "lo") and e > s0:
                x = arr[s0:e]
                D.append(x if base is None else ix._post.doc[u.t.s0 + x.astype(
                    np.int64)])
                F.append(np.full(e - s0, float(tf)))
                J.append(np.full(e - s0, u.j, dtype=np.int64))
    if D:
        docs = np.concatenate(D).astype(np.int64, copy=False)
        tfs = np.concatenate(F)
        col = np.concatenate(J)
        idf = q.idf_row()[col]
        parts.append((docs, idf * (tfs * K1P1) / (tfs + length_norm(ix, q, docs)), False))
    if len(parts) == 1:
        return parts[0]
    return (np.concatenate([x[0] for x in parts]), np.concatenate([x[1] for x in parts]),
            False)


def rank_maxscore(ix: RecallIndex, q: QueryState, k: int, exclude: np.ndarray | None) -> list[Any]:
    """MaxScore over the terms (rarest first), then exact scores of the survivors.

    Units (terms, or their tf >= 2 / tf = 1 halves) whose best possible
    contribution cannot lift a doc without the processed units above the
    current k-th best partial score are never scanned, only probed for the
    surviving candidates; a last unit with an impact order is walked.
    """
    terms = q.terms
    remaining = sorted(units(ix, q), key=lambda u: u.ub)  # pop(): the best bound
    rem_ub = sum(u.ub for u in remaining)
    lists: list[tuple[np.ndarray, np.ndarray, bool]] = []
    if q.boost:
        lists.append((*q.boost_arrays(), True))
    if any(len(t.dd) for t in terms):
        # delta docs: scored in full up front (no stored bound covers them), so
        # their partial score is exact and the base bounds prune them correctly
        lists.append(postings_np(ix, q, list(enumerate(terms)), base=False))
    # the cheap units go first, all at once
    batch: list[Unit] = []
    budget = constants.BATCH
    while remaining and remaining[-1].t.big < 0 and (
            remaining[-1].n <= budget or not (batch or lists)):
        u = remaining.pop()
        batch.append(u)
        rem_ub -= u.ub
        budget -= u.n
    tail: Unit | None = None
    cand, part = EMPTY_I, EMPTY_F
    while True:
        if batch:
            lists.append(unit_postings(ix, q, batch))
            batch = []
        if lists:
            cand, part = merge([(cand, part, True)] + lists if len(cand) else lists)
            lists = []
        valid = valid_np(ix, q, cand, exclude)
        theta = kth(part, valid, k)
        if not remaining or rem_ub < theta - 1e-9 * (1.0 + abs(theta)):
            break
        if len(remaining) == 1 and remaining[0].kind != "hi" and (
                remaining[0].t.big >= 0 or remaining[0].t.mid >= 0):
            tail = remaining[0]
            break
        u = remaining.pop()
        rem_ub -= u.ub
        batch = [u]
    # survivors: valid candidates that can still reach theta
    if theta > -math.inf:
        keep = part + rem_ub >= theta - 1e-9 * (1.0 + abs(theta))
        if valid is not None:
            keep &= valid
        D, P = cand[keep], part[keep]
    else:
        D, P = (cand, part) if valid is None else (cand[valid], part[valid])
    D, P = probe(ix, q, D, P, remaining, rem_ub, k)
    sc, tfm = exact_np(ix, q, D)
    top = top_np(ix, q, D, sc, k, tfm)
    if tail is None:
        return top
    return rank_tail(ix, q, top, cand, tail, k, exclude)


def probe(ix: RecallIndex, q: QueryState, D: np.ndarray, P: np.ndarray,
          remaining: list[Unit], rem_ub: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Probe the unprocessed terms for candidates ``D`` (partial scores ``P``) one at a
    time, best bound first, dropping the candidates that can no longer reach the
    k-th best, while more than ``4k + 32`` are left (a probe then prunes a lot)."""
    terms = q.terms
    left_by: dict[int, float] = {}
    kinds: dict[int, set[str]] = {}
    for u in remaining:
        left_by[u.j] = left_by.get(u.j, 0.0) + u.ub
        kinds.setdefault(u.j, set()).add(u.kind)
    todo = sorted(left_by, key=left_by.__getitem__, reverse=True)
    if todo and len(D) > 4 * k + 32:
        nrm = length_norm(ix, q, D)
        left = rem_ub
        while todo and len(D) > 4 * k + 32:
            j = todo.pop(0)
            t = terms[j]
            f = tf_np(ix, t, D, delta=False)
            ks = kinds[j]
            if ks == {"lo"}:
                f = np.where(f == 1, f, 0)
            elif ks == {"hi"}:
                f = np.where(f >= 2, f, 0)
            f = f.astype(np.float64)
            P = P + t.idf * (f * K1P1) / (f + nrm)
            left -= left_by[j]
            th = float(np.partition(P, len(P) - k)[len(P) - k])
            keep = P + left >= th - 1e-9 * (1.0 + abs(th))
            D, P, nrm = D[keep], P[keep], nrm[keep]
    return D, P


def rank_tail(ix: RecallIndex, q: QueryState, top: list[Any], cand: np.ndarray, tail: Unit,
              k: int, exclude: np.ndarray | None) -> list[Any]:
    """The top ``k`` with the last unit's docs outside ``cand`` added: walked in its
    impact order, or, when the walk gives up, that term's postings scored in full."""
    terms = q.terms
    seen = Member(cand, ix._n)
    walked = walk(ix, q, tail.t, k, seen, valid_fn(ix, q, exclude), lo_only=tail.kind == "lo")
    if walked is None:
        # too much skipping: score the tail term in full
        j = tail.j
        cand = sorted_unique(np.concatenate((cand, postings_np(ix, q, [(j, terms[j])])[0])))
        valid = valid_np(ix, q, cand, exclude)
        if valid is not None:
            cand = cand[valid]
        sc, tfm = exact_np(ix, q, cand)
        return top_np(ix, q, cand, sc, k, tfm)
    return best(ix, top + walked, k)


def walk(ix: RecallIndex, q: QueryState, t: Term, k: int, seen: Any, ok: Any, lo_only: bool = False
          ) -> list[Any] | None:
    """The best ``k`` valid docs outside ``seen``, by term ``t``'s contribution alone.

    Walks the term's impact order (per tf group: shortest docs first, then
    newest), merging the groups by score; None when too many docs had to be
    skipped (the caller then scores the term in full).  Delta docs are not
    in impact orders: callers put them in ``seen``.
    """
    if constants.WALK_MAX < 0:
        return None
    orders = ix._imp if t.big >= 0 else ix._mimp
    m = t.big if t.big >= 0 else t.mid
    imp = orders.entry
    base = None if t.big >= 0 else ix._post.doc_mv[t.s0 :]
    g0, g1 = orders.goff[m], orders.goff[m + 1]
    end = orders.off[m + 1]
    gtf, gst = orders.gtf, orders.gstart
    dl = ix._dl_mv
    idf, avgdl, i0 = t.idf, q.avgdl, q.i0
    heap = []
    for g in range(g0, g1):
        s = gst[g]
        e = gst[g + 1] if g + 1 < g1 else end
        tf = gtf[g]
        if s < e and (tf == 1 or not lo_only):
            d = imp[s] if base is None else base[imp[s]]
            sc = idf * (tf * K1P1) / (tf + K1 * (1.0 - B + B * (dl[d] / avgdl)))
            heap.append((-sc, -d, s, e, tf))
    heapq.heapify(heap)
    out: list[Any] = []
    skipped = 0
    tok = [t.tok]
    while heap and len(out) < k:
        nsc, nd, s, e, tf = heap[0]
        d = -nd
        if d >= i0 and d not in seen and (ok is None or ok(d)):
            out.append((-nsc, d, tok))
        else:
            skipped += 1
            if skipped > constants.WALK_MAX:
                return None
        s += 1
        if s < e:
            d = imp[s] if base is None else base[imp[s]]
            sc = idf * (tf * K1P1) / (tf + K1 * (1.0 - B + B * (dl[d] / avgdl)))
            heapq.heapreplace(heap, (-sc, -d, s, e, tf))
        else:
            heapq.heappop(heap)
    return out
