"""Hit building: a ranked doc as a :class:`RecallHit` (fields, reasons, snippet, budget)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .match import gvalue, path_level, sym_level
from .normalize import canon_path
from .scoring import QueryState, tf_py
from .snippet import make_snippet
from .types import RecallHit

if TYPE_CHECKING:
    from .index import RecallIndex


def fields(ix: RecallIndex, d: int) -> tuple[str, str, tuple[str, ...], tuple[str, ...],
                                   tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    if d >= ix._nb:
        doc = ix._ddocs[d]
        return (doc.cache_key, doc.summary, doc.paths, doc.symbols, doc.tests,
                doc.task_ids, doc.packet_types)
    docs = ix._docs
    so = docs.sum_off
    summary = str(docs.sum_blob[so[d] : so[d + 1]], "utf-8", "surrogatepass")
    vo = docs.dv_off
    lists: list[list[str]] = [[], [], [], [], []]
    cache = ix._vcache
    for g in docs.dv_val[vo[d] : vo[d + 1]].tolist():
        got = cache.get(g) or gvalue(ix, g)
        lists[got[0]].append(got[1])
    return (ix._key_of(d), summary, tuple(lists[0]), tuple(lists[1]), tuple(lists[2]),
            tuple(lists[3]), tuple(lists[4]))


def hit(ix: RecallIndex, d: int, score: float, matched: list[str] | None, q: QueryState,
        task_id: str | None, now: float) -> RecallHit:
    """The :class:`RecallHit` of ranked doc ``d``: fields, matched values, reasons,
    snippet (over summary, paths, symbols and tests: the index keeps no payload),
    budget estimate and age."""
    key, summary, paths, symbols, tests, task_ids, ptypes = fields(ix, d)
    if matched is None:
        matched = [t.tok for t in q.terms if tf_py(ix, t, d)]
    reasons = ["bm25_text"] if matched else []
    kd = q.kind_docs
    # only docs that got a path/symbol boost, or a path/symbol filter, can match
    mpaths = matched_paths(paths, q) if paths and (d in kd["path"] or q.filter_rules) else []
    if mpaths:
        reasons.append("path_match")
    msyms = matched_symbols(symbols, q) if symbols and (d in kd["sym"] or q.filter_rules) \
        else []
    if msyms:
        reasons.append("symbol_match")
    if d in kd["test"]:
        reasons.append("test_match")
    if d in kd["task"] or (task_id and task_id.lower() in (k.lower() for k in task_ids)):
        reasons.append("task_match")
    est = int(ix._est[d]) if d >= ix._nb else ix._docs.est[d]
    created = ix._created_mv[d]
    names = ix._tnames if ix._tnames is not None else ix._targets()[0]
    return RecallHit(
        key, names[ix._tgt[d]], score, summary,
        make_snippet([summary, *paths, *symbols, *tests], matched),
        tuple(matched), tuple(mpaths), tuple(msyms), tuple(reasons), ptypes, task_ids,
        {"est_tokens": -(-est // 4) if est > 0 else 0, "est_bytes": est},
        created, max(0.0, now - created),
    )


def matched_paths(paths: tuple[str, ...], q: QueryState) -> list[str]:
    """The entry's paths a query word or a path filter matched, in rule order."""
    out: list[str] = []
    cpaths = [canon_path(p) for p in paths]
    for kind, w, mode in q.rules:
        if kind == "path" or kind == "pathf":
            for p, cp in zip(paths, cpaths, strict=True):
                lv = path_level(cp, w)
                if (lv == 2 or (lv == 1 and (mode == 1 or kind == "pathf"))) and p not in out:
                    out.append(p)
    return out


def matched_symbols(symbols: tuple[str, ...], q: QueryState) -> list[str]:
    """The entry's symbols a query word or a symbol filter matched, in rule order."""
    out: list[str] = []
    lsyms = [s.lower() for s in symbols]
    for kind, w, mode in q.rules:
        if kind == "sym" or kind == "symf":
            for s_, ls in zip(symbols, lsyms, strict=True):
                if sym_level(ls, w, mode == 1 or kind == "symf") and s_ not in out:
                    out.append(s_)
    return out
