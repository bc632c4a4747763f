"""The recall engine against an independent oracle: exhaustive BM25 over every document.

The oracle below shares nothing with the engine but the tokenizer and the two BM25
constants: plain Python counts and numpy arithmetic over every live document, no
postings, no bounds, no shortcuts. Each ranking strategy of the engine is forced in
turn (called directly on the resolved query, on segments built with and without big
terms and impact orders, with and without a delta); whatever it answers (a strategy
may decline: None) must be the oracle's hits, each scored by the engine's one
arithmetic to 1e-9 of the oracle's score, in the engine's documented order: the
top k bit for bit (``engine_top`` says why the order needs the engine's floats).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from projections.recall import (
    RecallDoc,
    RecallIndex,
    RecallQuery,
    constants,
    maxscore,
    scoring,
    strategies,
    tokenize,
)
from tests.strategies import recall_corpora, recall_texts

K1, B = 1.5, 0.75  # docs/recall.md, "Scoring" (spelled out: the oracle shares no constant)


def oracle(docs: list[RecallDoc], text: str, k: int, live_after: float | None = None,
           since: float | None = None, until: float | None = None,
           target: str | None = None) -> list[tuple[str, float]]:
    """The top ``k`` by exhaustive BM25 (docs/recall.md, "Scoring" and "Filters"):
    N, n(t) and avgdl over the live docs; ties (scores within 1e-9) newest first,
    then cache_key."""
    live = [d for d in docs if live_after is None or d.created_at >= live_after]
    if not live:
        return []
    counts = [Counter(t for x in d.texts() for t in tokenize(x)) for d in live]
    dl = np.array([sum(c.values()) for c in counts], dtype=np.float64)
    n_docs = len(live)
    avgdl = dl.sum() / n_docs if dl.sum() > 0 else 1.0
    score = np.zeros(n_docs)
    toks = list(dict.fromkeys(tokenize(text)))
    for tok in toks:
        tf = np.array([c[tok] for c in counts], dtype=np.float64)
        n = int(np.count_nonzero(tf))
        if n:
            idf = math.log(1.0 + (n_docs - n + 0.5) / (n + 0.5))
            score += idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * dl / avgdl))
    hits = [i for i, (d, c) in enumerate(zip(live, counts, strict=True))
            if any(c[t] for t in toks)
            and (since is None or d.created_at >= since)
            and (until is None or d.created_at <= until)
            and (target is None or d.target == target)]
    hits.sort(key=lambda i: (-round(float(score[i]), 9), -live[i].created_at,
                             live[i].cache_key))
    return [(live[i].cache_key, float(score[i])) for i in hits[:k]]


#: segment layouts: the build's thresholds (big terms keep a dense tf row and an impact
#: order; mid terms an impact order of positions)
LAYOUTS: dict[str, dict[str, int]] = {
    "plain": {},
    "big": dict(BIG_MIN_DOCS=1, BIG_FRACTION=2),
    "mid": dict(BIG_MIN_DOCS=10**9, MID_IMPACT_DOCS=1),
    "big-mid": dict(BIG_MIN_DOCS=1, BIG_FRACTION=3, MID_IMPACT_DOCS=1),
}
#: ranking thresholds forced: walks giving up at once, multi taking no term whole
TWEAKS: dict[str, dict[str, int]] = {
    "none": {},
    "walk-giveup": dict(WALK_MAX=1),
    "probe": dict(BATCH=0),
    "multi-pairs": dict(MULTI_WHOLE=0),
}

Ranker = Callable[[RecallIndex, Any, int], "list[Any] | None"]
STRATEGIES: dict[str, Ranker] = {
    "dispatch": lambda ix, q, k: strategies.rank(ix, q, k, None),
    "tiny": lambda ix, q, k: strategies.rank_tiny(ix, q, k, None),
    "pair": lambda ix, q, k: strategies.rank_pair(ix, q, k, None) if len(q.terms) == 2
    else None,
    "multi": lambda ix, q, k: strategies.rank_multi(ix, q, k, None) if len(q.terms) > 2
    else None,
    "direct": lambda ix, q, k: strategies.rank_direct(
        ix, q, np.arange(ix._n, dtype=np.int64), k, None),
    "maxscore": lambda ix, q, k: maxscore.rank_maxscore(ix, q, k, None),
}


@contextmanager
def forced(**kw: int) -> Iterator[None]:
    saved = {name: getattr(constants, name) for name in kw}
    for name, v in kw.items():
        setattr(constants, name, v)
    try:
        yield
    finally:
        for name, v in saved.items():
            setattr(constants, name, v)


def index_of(docs: list[RecallDoc], delta: int, removed: int) -> RecallIndex:
    """The docs in an index: the last ``delta`` added one by one after a bulk build,
    plus ``removed`` extra docs added and removed again (dead base rows)."""
    ghosts = [RecallDoc(f"gone{i}", "t1", 5.0, "alpha common") for i in range(removed)]
    split = len(docs) - delta
    ix = RecallIndex.build(docs[:split] + ghosts)
    for d in docs[split:]:
        ix.add(d)
    for g in ghosts:
        ix.remove(g.cache_key)
    return ix


def same(got: list[tuple[str, float]], want: list[tuple[str, float]], by: str = "") -> None:
    assert [k for k, _ in got] == [k for k, _ in want], (by, got, want)
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert abs(a - b) <= 1e-9 * max(1.0, abs(b)), (got, want)


def engine_top(ix: RecallIndex, q: Any, docs: list[RecallDoc], hits: list[tuple[str, float]],
               k: int) -> list[tuple[str, float]]:
    """The top ``k`` of the oracle's hits as the engine must order them.

    Each hit's engine score (``scoring.exact_py``, the one arithmetic every strategy
    uses) must be the oracle's to 1e-9. The order is by those floats, equal floats
    newest first, then cache_key: two docs whose exact scores are equal can come out
    a few ulps apart in float64 (three or more terms summed in another order), and
    the oracle's own floats differ from the engine's in the last bits, so only the
    engine's floats can say which of such a near-tie ranks first.
    """
    doc_of = {ix._key_of(d): d for d in range(ix._n)}
    created = {d.cache_key: d.created_at for d in docs}
    scored = []
    for key, want in hits:
        got = scoring.exact_py(ix, q, doc_of[key])[0]
        assert abs(got - want) <= 1e-9 * max(1.0, abs(want)), (key, got, want)
        scored.append((key, got))
    scored.sort(key=lambda kv: (-kv[1], -created[kv[0]], kv[0]))
    return scored[:k]


#: a doc with one rare term beats the docs having two of the terms (multi's bound)
_ONE_RARE = [RecallDoc("a", "t1", 1.0, "alpha"),
             RecallDoc("b", "t1", 1.0, "beta zeta common common common common common"),
             RecallDoc("c", "t1", 1.0, "beta common"), RecallDoc("d", "t1", 1.0, "zeta common")]


#: a near-tie: x and y score the same exactly (tf 1, 1, 2 against 2, 1, 1 on terms of
#: equal df), but summed in query order x comes out one ulp higher; the older x ranks first
_NEAR_TIE = [RecallDoc("x", "t1", 1.0, "alpha beta gamma gamma"),
             RecallDoc("y", "t1", 2.0, "alpha alpha beta gamma")]


#: one token in the whole corpus (avgdl 1/2, not the 1.0 of a corpus without any), and,
#: once the doc holding it has expired, none among the live docs
_ONE_TOKEN = [RecallDoc("a", "t1", 1.0, "alpha"), RecallDoc("b", "t1", 5.0, "")]


@example(docs=_ONE_TOKEN, text="alpha", k=2, layout="plain", tweak="none",
         delta=0, removed=0, live_after=None, filt={})
@example(docs=_ONE_TOKEN, text="alpha", k=2, layout="plain", tweak="none",
         delta=0, removed=0, live_after=3.0, filt={})
@example(docs=_NEAR_TIE, text="alpha beta gamma", k=1, layout="plain", tweak="none",
         delta=0, removed=0, live_after=None, filt={})
@example(docs=_NEAR_TIE, text="alpha beta gamma", k=1, layout="big", tweak="multi-pairs",
         delta=1, removed=1, live_after=None, filt={"target": "t1"})
@example(docs=_ONE_RARE, text="alpha beta zeta", k=1, layout="plain", tweak="multi-pairs",
         delta=0, removed=0, live_after=None, filt={})
@example(docs=_ONE_RARE, text="alpha beta", k=1, layout="plain", tweak="none",
         delta=0, removed=0, live_after=None, filt={})
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=recall_corpora(), text=recall_texts, k=st.integers(1, 6),
       layout=st.sampled_from(sorted(LAYOUTS)), tweak=st.sampled_from(sorted(TWEAKS)),
       delta=st.integers(0, 6),
       removed=st.integers(0, 2), live_after=st.sampled_from([None, 3.0]),
       filt=st.sampled_from([{}, {"target": "t1"}, {"since": 2.0, "until": 7.0}]))
def test_every_strategy_equals_the_exhaustive_oracle(
        docs: list[RecallDoc], text: str, k: int, layout: str, tweak: str, delta: int,
        removed: int, live_after: float | None, filt: dict[str, Any]) -> None:
    hits = oracle(docs, text, len(docs), live_after, **filt)
    rq = RecallQuery(text, k, live_after=live_after, **filt)
    with forced(**LAYOUTS[layout]):
        ix = index_of(docs, min(delta, len(docs)), removed)
    with forced(**TWEAKS[tweak]):
        prepared = ix._prepare(rq, True)
        if prepared is None:
            assert hits == [] and ix.rank(rq) == []
            return
        q, _ = prepared
        want = engine_top(ix, q, docs, hits, k)
        assert ix.rank(rq) == want, ("rank", want)  # the public path, bit for bit
        for name, rank in STRATEGIES.items():  # each strategy forced in turn
            got = rank(ix, q, k)
            if got is None:
                continue  # it declined (its shortcut could not prove an answer)
            assert [(ix._key_of(d), sc) for sc, d, _ in got] == want, (name, got, want)
            # matched tokens, where a strategy reports them, are the query's tokens in the doc
            for _, d, matched in got:
                if matched is not None:
                    assert matched == [t.tok for t in q.terms if scoring.tf_py(ix, t, d)]


def test_the_oracle_knows_a_textbook_answer() -> None:
    """The oracle itself, on a corpus small enough to score by hand."""
    docs = [RecallDoc("a", "t1", 1.0, "alpha beta"), RecallDoc("b", "t1", 2.0, "alpha"),
            RecallDoc("c", "t1", 3.0, "gamma")]
    # N = 3, n(alpha) = 2, avgdl = 4/3; doc b (dl 1) beats doc a (dl 2) on alpha
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    sb = idf * 2.5 / (1 + 1.5 * (1 - 0.75 + 0.75 * 1 / (4 / 3)))
    sa = idf * 2.5 / (1 + 1.5 * (1 - 0.75 + 0.75 * 2 / (4 / 3)))
    assert oracle(docs, "alpha", 5) == [("b", sb), ("a", sa)]
    same(RecallIndex.build(docs).rank("alpha", limit=5), [("b", sb), ("a", sa)])


@given(docs=recall_corpora(), text=recall_texts)
def test_the_cached_length_norm_is_the_plain_one(docs: list[RecallDoc], text: str) -> None:
    """``scoring.length_norm`` keeps the whole per-doc array once two queries in a row use
    the same avgdl: the plain arithmetic, the filling call and the cached gather agree
    bit for bit."""
    ix = RecallIndex.build(docs)
    prepared = ix._prepare(RecallQuery(text), False)
    if prepared is None:
        return
    q, _ = prepared
    D = np.arange(ix._n, dtype=np.int64)[::-1].copy()
    plain = K1 * (1.0 - B + B * (ix._dl[D] / q.avgdl))
    for _ in range(3):  # computed, array kept, array reused
        assert scoring.length_norm(ix, q, D).tolist() == plain.tolist()
