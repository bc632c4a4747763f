"""Recall scores equal a plain textbook BM25, and each classic pitfall has a known answer."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.recall import RecallDoc, RecallIndex, tokenize

K1, B = 1.5, 0.75


# ------------------------------------------------------------------ reference
def doc_tokens(doc: RecallDoc) -> list[str]:
    out: list[str] = []
    for t in [doc.summary, *doc.paths, *doc.symbols, *doc.tests, *doc.payload_text]:
        out.extend(tokenize(t))
    return out


def reference_bm25(docs: list[RecallDoc], query: str) -> dict[str, float]:
    """Textbook BM25 (k1=1.5, b=0.75, Lucene-style idf), distinct query terms."""
    toks = {d.cache_key: Counter(doc_tokens(d)) for d in docs}
    lens = {k: sum(c.values()) for k, c in toks.items()}
    n_docs = len(docs)
    if n_docs == 0:
        return {}
    avgdl = sum(lens.values()) / n_docs
    if avgdl == 0:
        avgdl = 1.0
    scores: dict[str, float] = {}
    for term in dict.fromkeys(tokenize(query)):
        n = sum(1 for c in toks.values() if term in c)
        if n == 0:
            continue
        idf = math.log(1 + (n_docs - n + 0.5) / (n + 0.5))
        for k, c in toks.items():
            tf = c.get(term, 0)
            if tf:
                norm = K1 * (1 - B + B * lens[k] / avgdl)
                scores[k] = scores.get(k, 0.0) + idf * tf * (K1 + 1) / (tf + norm)
    return scores


def check_against_reference(idx: RecallIndex, docs: list[RecallDoc], query: str,
                            live_after: float | None = None) -> None:
    live = [d for d in docs if live_after is None or d.created_at >= live_after]
    ref = reference_bm25(live, query)
    hits = idx.search(query, limit=len(docs) + 1, live_after=live_after, now=0.0)
    got = {h.cache_key: h for h in hits}
    for k, _s in ref.items():
        assert k in got, f"{k} missing for {query!r}"
    for h in hits:
        if h.match_reasons == ("bm25_text",):
            assert h.score == pytest.approx(ref[h.cache_key], rel=1e-9, abs=1e-9)
        else:
            assert "bm25_text" not in h.match_reasons or h.cache_key in ref
    # order: score desc, newest first, then cache_key
    keys = [(-h.score, -h.created_at_unix, h.cache_key) for h in hits]
    assert keys == sorted(keys)
    # the public ranking core gives the same keys and bit-identical scores, at any limit
    for limit in (1, 3, len(docs) + 1):
        assert idx.rank(query, limit=limit, live_after=live_after) == [
            (h.cache_key, h.score) for h in hits[:limit]]
    for k, s in idx.rank(query, limit=len(docs) + 1, live_after=live_after):
        if got[k].match_reasons == ("bm25_text",):
            assert s == pytest.approx(ref[k], rel=1e-9, abs=1e-9)


# ------------------------------------------------------------------ strategies
VOCAB = ["alpha", "beta", "gamma", "delta", "parseHTTPHeader", "snake_case_name", "x2",
         "common", "the", "Zeta", "utf8", "über", "a", "b"]
words = st.sampled_from(VOCAB)
text = st.lists(words, max_size=12).map(" ".join)


@st.composite
def corpora(draw: st.DrawFn) -> list[RecallDoc]:
    n = draw(st.integers(0, 14))
    out = []
    for i in range(n):
        out.append(RecallDoc(
            cache_key=f"k{i:02d}",
            target=draw(st.sampled_from(["t.a", "t.b"])),
            created_at=float(draw(st.integers(0, 5))),
            summary=draw(text),
            payload_text=tuple(draw(st.lists(text, max_size=3))),
            est_bytes=draw(st.integers(0, 5000)),
        ))
    return out


queries = st.lists(words, min_size=1, max_size=5).map(" ".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpora(), queries, st.sampled_from([None, 0.0, 2.0, 4.5]))
def test_scores_equal_reference_bm25(docs: list[RecallDoc], query: str,
                                     live_after: float | None) -> None:
    built = RecallIndex.build(docs)
    check_against_reference(built, docs, query, live_after)
    inc = RecallIndex()
    for d in docs:
        inc.add(d)
    check_against_reference(inc, docs, query, live_after)


@settings(max_examples=60, deadline=None)
@given(corpora(), queries, st.lists(st.sampled_from(["src/a.py", "pkg/beta.rs"]), max_size=2),
       st.lists(st.sampled_from(["Gamma", "alphaBeta", "x2"]), max_size=2))
def test_text_only_hits_keep_exact_bm25_with_structured_fields(
        docs: list[RecallDoc], query: str, paths: list[str], syms: list[str]) -> None:
    docs = [RecallDoc(d.cache_key, d.target, d.created_at, d.summary, tuple(paths),
                      tuple(syms), (), ("task-1",), ("kind",), d.payload_text, d.est_bytes)
            if i % 2 else d for i, d in enumerate(docs)]
    check_against_reference(RecallIndex.build(docs), docs, query)


# ------------------------------------------------------------------ known answers
def mk(key: str, summary: str, created: float = 1.0) -> RecallDoc:
    return RecallDoc(cache_key=key, target="t", created_at=created, summary=summary)


def idf(n_docs: int, n: int) -> float:
    return math.log(1 + (n_docs - n + 0.5) / (n + 0.5))


def bm(tf: int, dl: int, avgdl: float, n_docs: int, n: int) -> float:
    return idf(n_docs, n) * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))


def test_term_in_every_document_scores_small_but_positive() -> None:
    docs = [mk(f"k{i}", f"common w{i}") for i in range(4)]
    hits = RecallIndex.build(docs).search("common")
    assert len(hits) == 4
    expected = bm(1, 2, 2.0, 4, 4)  # idf = ln(1 + 0.5/4.5) > 0
    assert expected > 0
    for h in hits:
        assert h.score == pytest.approx(expected, rel=1e-12)
    # equal scores and times: cache_key breaks the tie
    assert [h.cache_key for h in hits] == ["k0", "k1", "k2", "k3"]


def test_term_in_half_the_documents() -> None:
    docs = [mk("a", "half x"), mk("b", "half y"), mk("c", "other z"), mk("d", "other q")]
    hits = RecallIndex.build(docs).search("half")
    assert [h.cache_key for h in hits] == ["a", "b"]
    assert hits[0].score == pytest.approx(bm(1, 2, 2.0, 4, 2), rel=1e-12)
    assert hits[0].score == pytest.approx(math.log(2) * 2.5 / 2.5, rel=1e-12)


def test_two_document_corpus() -> None:
    docs = [mk("a", "rare word word", created=1.0), mk("b", "word", created=2.0)]
    idx = RecallIndex.build(docs)
    hits = idx.search("rare")
    assert [h.cache_key for h in hits] == ["a"]
    assert hits[0].score == pytest.approx(bm(1, 3, 2.0, 2, 1), rel=1e-12)
    hits = idx.search("word")
    assert {h.cache_key: h.score for h in hits} == pytest.approx(
        {"a": bm(2, 3, 2.0, 2, 2), "b": bm(1, 1, 2.0, 2, 2)}, rel=1e-12)


def test_empty_document_counts_in_n_and_avgdl() -> None:
    docs = [mk("a", "solo term"), mk("e", "")]
    hits = RecallIndex.build(docs).search("solo")
    assert [h.cache_key for h in hits] == ["a"]
    # N = 2, avgdl = (2 + 0) / 2
    assert hits[0].score == pytest.approx(bm(1, 2, 1.0, 2, 1), rel=1e-12)


def test_unknown_term_matches_nothing_and_adds_nothing() -> None:
    docs = [mk("a", "known"), mk("b", "other")]
    idx = RecallIndex.build(docs)
    assert idx.search("unknownterm") == []
    assert idx.search("known unknownterm")[0].score == pytest.approx(
        idx.search("known")[0].score, rel=1e-15)


def test_duplicate_query_terms_count_once() -> None:
    docs = [mk("a", "dup one"), mk("b", "two three")]
    idx = RecallIndex.build(docs)
    single = idx.search("dup")[0].score
    assert idx.search("dup dup DUP")[0].score == pytest.approx(single, rel=1e-15)
    # identifier expansion never double counts either: parseHTTP -> parsehttp parse http
    d2 = [mk("a", "parse parseHTTP"), mk("b", "zzz")]
    i2 = RecallIndex.build(d2)
    assert i2.search("parse parse")[0].score == pytest.approx(
        i2.search("parse")[0].score, rel=1e-15)


def test_expired_entries_leave_statistics() -> None:
    docs = [mk("old", "gap term", created=1.0), mk("new", "gap", created=10.0)]
    idx = RecallIndex.build(docs)
    hits = idx.search("gap", live_after=5.0)
    assert [h.cache_key for h in hits] == ["new"]
    assert hits[0].score == pytest.approx(bm(1, 1, 1.0, 1, 1), rel=1e-12)
    assert RecallIndex.build([docs[1]]).search("gap")[0].score == hits[0].score
