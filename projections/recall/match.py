"""Structured matching: query words against paths, symbols, tests and task ids; filters.

Functions over a read-only :class:`~projections.recall.index.RecallIndex`: they
read its segment tables and delta dicts and fill the per-query
:class:`~projections.recall.scoring.QueryState` (boosts, rules, the filter set).
docs/recall.md, "Structured matches" and "Filters, scopes, ordering", is the spec.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .arrays import EMPTY_I, isin_sorted, union, uniq
from .constants import BOOSTS
from .layout import decode_strings
from .normalize import TABLES, canon_path, dec, enc
from .query import is_path_like, partial_symbol_ok
from .scoring import NO_KINDS, QueryState

if TYPE_CHECKING:
    from .index import RecallIndex

_SEPS = frozenset(".:#")


def sym_level(v: str, w: str, partial: bool) -> int:
    """3 exact, 2 prefix, 1 contains, 0 none (v and w lowercased).

    Exact: ``v == w`` or ``w`` is v's last qualified component (after ``.``,
    ``:`` or ``#``); prefix: v or one of its components starts with ``w``.
    """
    if v == w:
        return 3
    i = v.find(w) if w else -1  # any negative is the same: -2 is an equivalent mutant
    if i < 0:
        return 0
    n = len(w)
    if v.endswith(w) and v[-n - 1] in _SEPS and not _SEPS.intersection(w):
        return 3
    if not partial:
        return 0
    while i >= 0:
        if i == 0 or v[i - 1] in _SEPS:
            return 2
        i = v.find(w, i + 1)
    return 1


def path_level(v: str, cw: str) -> int:
    """2 canonical/suffix, 1 basename, 0 none (both canonical)."""
    if v == cw:
        return 2
    if "/" in cw:
        return 2 if v.endswith("/" + cw) else 0
    # (rsplit with any other maxsplit has the same last part: equivalent mutants)
    return 1 if v.rsplit("/", 1)[-1] == cw else 0


def table_exact(ix: RecallIndex, name: str, key: str) -> tuple[list[int], list[str]]:
    """Base value ids and delta values having lookup key ``key``."""
    tab = ix._tabs[name]
    # (equivalent mutants: "UTF-8"; the slice or the sorted get made when nothing is
    # there, both empty: off[-1]:off[0] runs backwards, an empty dict gets ())
    k = tab.keys.find(key.encode("utf-8", "surrogatepass"))
    off = tab.kv_off
    ids: list[int] = tab.kv_val[off[k] : off[k + 1]].tolist() if k >= 0 else []
    dk = ix._dkeys[name]
    return ids, (sorted(dk.get(key, ())) if dk else [])


def value_str(ix: RecallIndex, name: str, vid: int) -> str:
    return gvalue(ix, ix._tbase[TABLES.index(name)] + vid)[1]


def gvalue(ix: RecallIndex, g: int) -> tuple[int, str]:
    """(table index, raw string) of a global value id (cached)."""
    # (a cache: mutants that miss it, store None in it or clear it at another size
    # compute the same value again, equivalent)
    got = ix._vcache.get(g)
    if got is None:
        tb = ix._tbase
        ti = 0
        while g >= tb[ti + 1]:
            ti += 1
        name = TABLES[ti]
        tab = ix._tabs[name]
        off = tab.voff
        v = g - tb[ti]
        got = (ti, dec(bytes(tab.vblob[off[v] : off[v + 1]])))
        if len(ix._vcache) > 200_000:
            ix._vcache.clear()
        ix._vcache[g] = got
    return got


def value_docs(ix: RecallIndex, name: str, ids: Iterable[int], dvals: Iterable[str]) -> list[int]:
    """Docs of base value ids and delta values (may repeat; liveness not checked)."""
    tab = ix._tabs[name]
    off, vd = tab.vd_off, tab.vd_doc
    out: list[int] = []
    for i in ids:
        out.extend(vd[off[i] : off[i + 1]].tolist())
    dv = ix._dvals[name]
    for v in dvals:  # (callers pass values the table holds: a default of None is equivalent)
        out.extend(dv.get(v, ()))
    return out


def sym_partial(ix: RecallIndex, w: str) -> tuple[list[tuple[int, int]], list[tuple[str, int]]]:
    """Symbols containing ``w`` (lowercased): ([(base value id, level)], [(delta, level)])."""
    wb = enc(w)
    base: list[tuple[int, int]] = []
    # (the scan below finds the same symbols for a 3-byte word, only slower: mutants
    # that move the bound to 4 are equivalent)
    if len(wb) >= 3:
        for v in trigram_candidates(ix, wb):
            lv = sym_level(value_str(ix, "sym", v).lower(), w, True)
            if lv:
                base.append((v, lv))
    else:
        if ix._lowvals is None:
            ix._lowvals = [v.lower() for v in decode_strings(*ix._tabs["sym"].values)]
        for v, low in enumerate(ix._lowvals):
            if w in low:
                lv = sym_level(low, w, True)
                if lv:
                    base.append((v, lv))
    delta: list[tuple[str, int]] = []
    for raw in ix._dvals["sym"]:
        lv = sym_level(raw.lower(), w, True)
        if lv:
            delta.append((raw, lv))
    return base, delta


def trigram_candidates(ix: RecallIndex, wb: bytes) -> list[int]:
    """Base symbol value ids that may contain ``wb`` (3+ bytes), sorted: those having
    every trigram of it (a superset of the matches; the caller checks each).

    Non-overlapping trigrams (and the last one) cover every byte of ``wb``: a few
    bisects, no numpy call. The rarest trigram's list is the start, narrowed by
    the next rarest lists while more than 8 candidates are left.

    Any superset gives the same answer (the caller checks each candidate), so mutants
    that sample other trigrams, order the lists otherwise, start from a longer list,
    narrow by fewer lists, stop at another count, keep more, or narrow a list the array
    way (or the reverse) are equivalent: they change the work, not the result.
    """
    tg = ix._tg
    code, off = tg.code, tg.off
    ncode = len(code)
    if not ncode:
        return []
    spans: list[tuple[int, int]] = []
    n = len(wb) - 2
    for i in sorted({*range(0, n, 3), n - 1}):
        c = (wb[i] << 16) | (wb[i + 1] << 8) | wb[i + 2]
        p = bisect_left(code, c)
        if p == ncode or code[p] != c:
            return []
        spans.append((off[p + 1] - off[p], p))
    spans.sort()
    tv = tg.val_mv
    p = spans[0][1]
    cands: Any = tg.val[off[p] : off[p + 1]]
    for _, p in spans[1:]:
        if len(cands) <= 8:
            break
        s0, e0 = off[p], off[p + 1]
        if isinstance(cands, list) or len(cands) <= 24:
            keep = []
            for v in (cands if isinstance(cands, list) else cands.tolist()):
                j = bisect_left(tv, v, s0, e0)
                if j < e0 and tv[j] == v:
                    keep.append(v)
            cands = keep
        else:  # sorted arrays: vectorised membership
            L = tg.val[s0:e0]
            j = np.searchsorted(L, cands)
            np.minimum(j, len(L) - 1, out=j)
            cands = cands[L[j] == cands]
    if not isinstance(cands, list):
        cands = cands.tolist()
    return sorted(set(cands))


def valid_fn_live(ix: RecallIndex, q: QueryState) -> Any:
    cr = ix._created_mv
    alive = ix._alive_mv
    la = q.la

    def ok(d: int) -> bool:
        return (alive is None or bool(alive[d])) and (la is None or cr[d] >= la)

    return ok


def match_word(ix: RecallIndex, w: str, q: QueryState, add: Any) -> None:
    """Structured matches of one query word: ``add(docs, boost, kind)``."""
    wl = w.lower()
    path_hit = is_path_like(w) and match_path(ix, w, q, add)
    if len(wl) < 2:
        return
    ids, dv = table_exact(ix, "sym", wl)
    # (value_docs of nothing, an equivalent mutant: [] is as false as None)
    exact_docs = value_docs(ix, "sym", ids, dv) if ids or dv else None
    partial = partial_symbol_ok(w) and not path_hit
    q.rules.append(("sym", wl, 1 if partial else 0))
    if exact_docs:
        add(exact_docs, BOOSTS["symbol_exact"], "sym")
    if partial:
        base, delta = sym_partial(ix, wl)
        for lvl, bname in ((2, "symbol_prefix"), (1, "symbol_contains")):
            docs = value_docs(ix, "sym", [v for v, lv in base if lv == lvl],
                                    [v for v, lv in delta if lv == lvl])
            add(docs, BOOSTS[bname], "sym")
    ids, dv = table_exact(ix, "test", wl)
    if ids or dv:
        add(value_docs(ix, "test", ids, dv), BOOSTS["test_exact"], "test")
    ids, dv = table_exact(ix, "task", wl)
    if ids or dv:
        add(value_docs(ix, "task", ids, dv), BOOSTS["task_exact"], "task")


def match_path(ix: RecallIndex, w: str, q: QueryState, add: Any) -> bool:
    """Path matches of a path-like word (exact or suffix; a basename naming exactly
    one live path as an alias): ``add(docs, boost, "path")``; whether any path matched."""
    cw = canon_path(w)
    ids, dv = table_exact(ix, "path", cw)
    if not ids and not dv:
        return False
    exact: list[int] = []
    alias: list[int] = []
    alias_paths: set[str] = set()
    live_ok = valid_fn_live(ix, q)
    found = [(canon_path(value_str(ix, "path", i)), value_docs(ix, "path", (i,), ()))
             for i in ids]
    found += [(canon_path(raw), value_docs(ix, "path", (), (raw,))) for raw in dv]
    for v, docs in found:
        if path_level(v, cw) == 2:
            exact.extend(docs)
        else:
            alias.extend(docs)
            if any(live_ok(d) for d in docs):
                alias_paths.add(v)
    if any(live_ok(d) for d in exact):
        # a live path equal to the word counts for the uniqueness too (adding any value no
        # alias path has would count the same: mutants that add None are equivalent)
        alias_paths.add(cw)
    unique = bool(alias) and len(alias_paths) == 1
    q.rules.append(("path", cw, 1 if unique else 0))
    add(exact, BOOSTS["path_exact"], "path")
    if unique:
        add(alias, BOOSTS["path_alias"], "path")
    return True


def structured(ix: RecallIndex, words: list[str], q: QueryState) -> None:
    """Boosts of the query words: per word and kind, each doc gets its best level.

    Boosts of dead or expired docs never surface: candidates are checked.
    """
    kind_docs: dict[str, set[int]] | None = None
    parts: list[tuple[list[int], float]] = []  # (distinct docs, boost)
    for w in words:
        found: dict[str, list[tuple[list[int], float]]] = {}

        def add(docs: list[int], b: float, kind: str,
                found: dict[str, list[tuple[list[int], float]]] = found) -> None:
            if docs:
                found.setdefault(kind, []).append((docs, b))

        match_word(ix, w, q, add)
        if found and kind_docs is None:
            kind_docs = {k: set() for k in NO_KINDS}
            q.kind_docs = kind_docs
        for kind, levels in found.items():
            assert kind_docs is not None
            if len(levels) == 1:
                docs = list(dict.fromkeys(levels[0][0]))
                parts.append((docs, levels[0][1]))
                kind_docs[kind].update(docs)
                continue
            seen: dict[int, float] = {}
            for docs, b in levels:  # best level first
                for d in docs:
                    seen.setdefault(d, b)
            kind_docs[kind].update(seen)
            by_b: dict[float, list[int]] = {}
            for d, b in seen.items():
                by_b.setdefault(b, []).append(d)
            parts.extend((docs, b) for b, docs in by_b.items())
    if not parts:
        return
    if len(parts) == 1:
        docs, b = parts[0]
        q.boost = dict.fromkeys(docs, b)
        return
    # (each way gives the same sums: the boosts are whole numbers, exact in any order;
    # the threshold, < 64 or <= 65, picks the faster way: equivalent mutants, as are the
    # union's dtype left to numpy (int64 here), zip's strict (the union's two arrays
    # have one length) and _barr left unset (boost_arrays makes it from q.boost))
    if sum(len(d) for d, _ in parts) <= 64:
        boost = q.boost
        for docs, b in parts:
            for d in docs:
                boost[d] = boost.get(d, 0.0) + b
        return
    ud, uv = union([(np.array(docs, dtype=np.int64), np.full(len(docs), b))
                     for docs, b in parts])
    q.boost = dict(zip(ud.tolist(), uv.tolist(), strict=True))
    q._barr = (ud, uv)


def filter_sets(ix: RecallIndex, q: QueryState, packet_types: Sequence[str],
                 path_filters: Sequence[str], symbol_filters: Sequence[str],
                 target: str | None, task_only: np.ndarray | None) -> None:
    sets: list[np.ndarray] = []
    if target is not None:
        sets.append(target_docs(ix, target))
    if packet_types:
        docs: list[int] = []
        for p in packet_types:
            docs.extend(value_docs(ix, "ptype", *table_exact(ix, "ptype", p)))
        sets.append(uniq(docs))
    if path_filters:
        docs = []
        for p in path_filters:
            cp = canon_path(p)
            docs.extend(value_docs(ix, "path", *table_exact(ix, "path", cp)))
            q.rules.append(("pathf", cp, 0))  # a filter's mode is never read: 1 is equivalent
        sets.append(uniq(docs))
    if symbol_filters:
        docs = []
        for s_ in symbol_filters:
            sl = s_.lower()
            docs.extend(value_docs(ix, "sym", *table_exact(ix, "sym", sl)))
            base, delta = sym_partial(ix, sl)
            docs.extend(value_docs(ix, "sym", [v for v, _ in base], [v for v, _ in delta]))
            q.rules.append(("symf", sl, 0))
        sets.append(uniq(docs))
    if task_only is not None:
        sets.append(task_only)
    q.filter_rules = bool(path_filters or symbol_filters)
    if not sets:
        return
    sets.sort(key=len)
    r = sets[0]
    for other in sets[1:]:
        r = r[isin_sorted(r, other)]
    q.restrict = r


def target_docs(ix: RecallIndex, target: str) -> np.ndarray:
    _, tmap = ix._targets()
    parts = []
    t = tmap.get(target)
    tg = ix._tgts
    if t is not None and t < len(tg.doc_off) - 1:
        off = tg.doc_off
        parts.append(tg.docs[off[t] : off[t + 1]].astype(np.int64))
    d = ix._dtgt.get(target)
    if d:  # (numpy's default int is int64 on the 64-bit platforms we run on: mutants
        # that drop the dtype are equivalent here, as is concatenating a single part)
        parts.append(np.array(sorted(d), dtype=np.int64))
    if not parts:
        return EMPTY_I
    return np.concatenate(parts) if len(parts) > 1 else parts[0]
