"""Recall index: filters, scopes, structured matches, incremental == rebuilt, bytes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.recall import BOOSTS, RecallDoc, RecallHit, RecallIndex, tokenize


def doc(key: str, summary: str = "", created: float = 1.0, target: str = "diffy.analyze",
        paths: tuple[str, ...] = (), symbols: tuple[str, ...] = (), tests: tuple[str, ...] = (),
        tasks: tuple[str, ...] = (), ptypes: tuple[str, ...] = (),
        payload: tuple[str, ...] = (), est: int = 100) -> RecallDoc:
    return RecallDoc(key, target, created, summary, paths, symbols, tests, tasks, ptypes,
                     payload, est)


CORPUS = [
    doc("auth", "coverage gap in auth", 10.0, paths=("src/auth.rs",), symbols=("AuthService",),
        tests=("tests/auth.rs::test_login",), tasks=("task-123",), ptypes=("coverage",)),
    doc("svc", "service layer refactor", 20.0, paths=("src/service.rs", "src/lib.rs"),
        symbols=("AuthService.login", "Service"), tasks=("task-9",), ptypes=("refactor",)),
    doc("svc2", "another service module", 30.0, target="other.tool",
        paths=("lib/service.rs",), symbols=("ServiceFactory",), ptypes=("coverage",)),
    doc("hdr", "header parsing", 40.0, paths=("src/http/header.py",),
        symbols=("parseHTTPHeader",), tests=("test_parse_header",), tasks=("task-123",),
        payload=("parses an HTTP header line",)),
]


@pytest.fixture(params=["built", "incremental", "reloaded"])
def idx(request: pytest.FixtureRequest) -> RecallIndex:
    if request.param == "built":
        return RecallIndex.build(CORPUS)
    inc = RecallIndex()
    for d in CORPUS:
        inc.add(d)
    if request.param == "incremental":
        return inc
    return RecallIndex.from_bytes(inc.to_bytes())


def keys(hits: list[RecallHit]) -> list[str]:
    return [h.cache_key for h in hits]


def test_path_query_matches_suffix_without_filter(idx: RecallIndex) -> None:
    hits = idx.search("src/service.rs", now=100.0)
    assert hits[0].cache_key == "svc"
    assert "path_match" in hits[0].match_reasons
    assert hits[0].matched_paths == ("src/service.rs",)
    # "service.rs" names two paths: no alias boost, only text
    hits = idx.search("service.rs")
    assert all("path_match" not in h.match_reasons for h in hits)
    # a unique basename is an alias
    hits = idx.search("auth.rs")
    assert hits[0].cache_key == "auth" and hits[0].matched_paths == ("src/auth.rs",)
    assert "path_match" in hits[0].match_reasons


def test_symbol_exact_beats_prefix_and_contains(idx: RecallIndex) -> None:
    hits = idx.search("AuthService")
    assert keys(hits)[:2] == ["auth", "svc"]
    assert hits[0].matched_symbols == ("AuthService",)
    assert hits[1].matched_symbols == ("AuthService.login",)
    assert "symbol_match" in hits[0].match_reasons
    # last qualified component counts as exact; case-insensitive
    hits = idx.search("LOGIN")
    assert hits[0].cache_key == "svc" and hits[0].matched_symbols == ("AuthService.login",)


def test_test_and_task_matches(idx: RecallIndex) -> None:
    hits = idx.search("test_login")
    assert hits[0].cache_key == "auth" and "test_match" in hits[0].match_reasons
    hits = idx.search("task-123")
    assert set(keys(hits)) == {"auth", "hdr"}
    assert all(h.match_reasons == ("task_match",) for h in hits)
    assert all(h.score == BOOSTS["task_exact"] for h in hits)
    # newest first on equal score
    assert keys(hits) == ["hdr", "auth"]


def test_filters(idx: RecallIndex) -> None:
    assert keys(idx.search("service", target="other.tool")) == ["svc2"]
    assert set(keys(idx.search("service", packet_types=["coverage"]))) == {"svc2", "auth"}
    assert keys(idx.search("service", since=25.0)) == ["svc2"]
    assert keys(idx.search("service", until=25.0)) == ["svc", "auth"]
    # a time window alone over every entry (the filter-only path's own mask, each bound
    # the first and the only one applied)
    assert keys(idx.search("", until=25.0)) == ["svc", "auth"]
    assert keys(idx.search("", since=25.0)) == ["hdr", "svc2"]
    assert keys(idx.search("", since=15.0, until=35.0)) == ["svc2", "svc"]
    assert keys(idx.search("service", path_filters=["lib/service.rs"])) == ["svc2"]
    assert set(keys(idx.search("service", path_filters=["service.rs"]))) == {"svc", "svc2"}
    hits = idx.search("service", symbol_filters=["servicefactory"])
    assert keys(hits) == ["svc2"] and hits[0].matched_symbols == ("ServiceFactory",)
    # filter-only (empty query) lists matching entries newest first
    assert keys(idx.search("", packet_types=["coverage"])) == ["svc2", "auth"]
    assert keys(idx.search("", target="nope")) == []


def test_a_time_window_keeps_the_entries_at_its_bounds(idx: RecallIndex) -> None:
    """since and until are inclusive. On the filter-only path a built index cuts its
    range of entries by binary search on their times: the side taken at each bound
    decides whether an entry made exactly then is in."""
    assert keys(idx.search("", until=20.0)) == ["svc", "auth"]
    assert keys(idx.search("", since=20.0)) == ["hdr", "svc2", "svc"]
    assert keys(idx.search("", since=20.0, until=20.0)) == ["svc"]
    assert keys(idx.search("", since=10.0, until=10.0)) == ["auth"]
    assert keys(idx.search("", since=40.0, until=40.0)) == ["hdr"]
    assert set(keys(idx.search("service", until=20.0))) == {"svc", "auth"}


def test_scopes(idx: RecallIndex) -> None:
    glob = keys(idx.search("service auth header"))
    first = idx.search("service auth header", scope="task-first", task_id="task-123")
    assert set(keys(first)) == set(glob)
    assert set(keys(first)[:2]) == {"auth", "hdr"}
    assert all("task_match" in h.match_reasons for h in first[:2])
    only = idx.search("service auth header", scope="task-only", task_id="task-123")
    assert set(keys(only)) == {"auth", "hdr"}
    assert keys(idx.search("", scope="task-only", task_id="task-9")) == ["svc"]


def test_rank_validates_like_search(idx: RecallIndex) -> None:
    for bad in (dict(query="x", scope="nope"), dict(query="x", limit=-1), dict(query=""),
                dict(query="x", scope="task-only")):
        with pytest.raises(ValueError):
            idx.rank(**bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            idx.search(**bad)  # type: ignore[arg-type]
    assert idx.rank("anything", limit=0) == []


def test_limits_and_usage_errors(idx: RecallIndex) -> None:
    assert len(idx.search("service", limit=1)) == 1
    assert idx.search("service", limit=0) == []
    with pytest.raises(ValueError, match="scope"):
        idx.search("x", scope="everywhere")
    with pytest.raises(ValueError, match="limit"):
        idx.search("x", limit=-1)
    with pytest.raises(ValueError, match="empty query"):
        idx.search("   ")
    with pytest.raises(ValueError, match="task"):
        idx.search("x", scope="task-only")


def test_hit_fields(idx: RecallIndex) -> None:
    h = idx.search("header", now=100.0)[0]
    assert h.cache_key == "hdr" and h.target == "diffy.analyze"
    assert h.summary == "header parsing"
    assert "header" in h.snippet
    assert h.matched_tokens == ("header",)
    assert h.budget_estimate == {"est_tokens": 25, "est_bytes": 100}
    assert h.created_at_unix == 40.0 and h.age_secs == 60.0
    assert h.task_ids == ("task-123",)
    j = h.to_json()
    assert j["matched_tokens"] == ["header"] and j["budget_estimate"]["est_tokens"] == 25


def test_readd_refreshes_and_remove() -> None:
    idx = RecallIndex.build(CORPUS)
    assert len(idx) == 4 and "auth" in idx
    idx.add(doc("auth", "coverage gap in auth", 99.0))
    assert len(idx) == 4
    assert idx.search("auth")[0].created_at_unix == 99.0
    idx.remove("auth")
    idx.remove("absent")
    assert len(idx) == 3 and "auth" not in idx
    assert "auth" not in keys(idx.search("auth coverage"))
    assert "auth" not in keys(idx.search("", since=0.0))


def test_garbled_bytes_raise_value_error() -> None:
    data = RecallIndex.build(CORPUS).to_bytes()
    for bad in (b"", data[:10], data[:-1], data[:100] + b"\xff" + data[101:],
                data[:-40] + bytes(40), b"junk" * 100):
        with pytest.raises(ValueError):
            RecallIndex.from_bytes(bad)


# ------------------------------------------------------------------ properties
KEYS = [f"k{i}" for i in range(8)]
WORDS = ["alpha", "beta", "gammaRay", "delta_x", "common", "io2"]
PATHS = ["src/a.py", "lib/a.py", "src/b.rs", "c.txt"]
SYMS = ["Alpha", "Beta.gamma", "DeltaX", "commonThing"]


@st.composite
def rdocs(draw: st.DrawFn) -> RecallDoc:
    w = st.sampled_from(WORDS)
    return doc(
        draw(st.sampled_from(KEYS)),
        " ".join(draw(st.lists(w, max_size=6))),
        float(draw(st.integers(0, 9))),
        target=draw(st.sampled_from(["t1", "t2"])),
        paths=tuple(draw(st.lists(st.sampled_from(PATHS), max_size=2))),
        symbols=tuple(draw(st.lists(st.sampled_from(SYMS), max_size=2))),
        tests=tuple(draw(st.lists(st.sampled_from(["test_alpha", "test_b"]), max_size=1))),
        tasks=tuple(draw(st.lists(st.sampled_from(["task-1", "task-2"]), max_size=2))),
        ptypes=tuple(draw(st.lists(st.sampled_from(["cov", "ref"]), max_size=1))),
        payload=tuple(draw(st.lists(w, max_size=3))),
    )


ops = st.lists(st.one_of(
    st.tuples(st.just("add"), rdocs()),
    st.tuples(st.just("remove"), st.sampled_from(KEYS)),
    st.tuples(st.just("compact"), st.none()),
    st.tuples(st.just("reload"), st.none()),
), max_size=25)

QUERIES = [
    dict(query="alpha"), dict(query="common beta io2"), dict(query="a.py"),
    dict(query="src/a.py"), dict(query="DeltaX gammaRay"), dict(query="alph commonth"),
    dict(query="test_alpha task-1"), dict(query="", target="t1"),
    dict(query="alpha", path_filters=["a.py"]), dict(query="beta", symbol_filters=["gam"]),
    dict(query="common", packet_types=["cov"], since=3.0, until=8.0),
    dict(query="alpha beta", scope="task-first", task_id="task-1"),
    dict(query="common", scope="task-only", task_id="task-2"),
    dict(query="alpha common", live_after=4.0),
    dict(query="c.txt", live_after=2.0),
]


def answers(idx: RecallIndex) -> list[list[tuple[object, ...]]]:
    out = []
    for q in QUERIES:
        hits = idx.search(limit=5, now=50.0, **q)  # type: ignore[arg-type]
        out.append([(h.cache_key, round(h.score, 9), h.match_reasons, h.matched_tokens,
                     h.matched_paths, h.matched_symbols, h.target, h.created_at_unix,
                     h.summary, h.task_ids, h.packet_types, h.snippet) for h in hits])
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_incremental_equals_rebuilt(steps: list[tuple[str, object]]) -> None:
    idx = RecallIndex()
    model: dict[str, RecallDoc] = {}
    for op, arg in steps:
        if op == "add":
            assert isinstance(arg, RecallDoc)
            idx.add(arg)
            model.pop(arg.cache_key, None)
            model[arg.cache_key] = arg
        elif op == "remove":
            assert isinstance(arg, str)
            idx.remove(arg)
            model.pop(arg, None)
        elif op == "compact":
            idx.compact()
        else:
            idx = RecallIndex.from_bytes(idx.to_bytes())
    assert len(idx) == len(model)
    assert all(k in idx for k in model)
    rebuilt = RecallIndex.build(model.values())
    assert answers(idx) == answers(rebuilt)
    assert answers(RecallIndex.from_bytes(rebuilt.to_bytes())) == answers(rebuilt)


# ------------------------------------------------------------------ pruning == brute force
# The search prunes (MaxScore with its tf-group bounds of big and mid terms,
# impact-ordered walks of big and mid terms (after the tiny path and as
# MaxScore's last unit), plain-Python paths for tiny sets, the pair/multi
# shortcuts, direct scoring of narrow filters).  Forcing each path on
# small corpora must give exactly the unpruned answers.
MODES: dict[str, dict[str, int]] = {
    "big-terms": dict(BIG_MIN_DOCS=1, BIG_FRACTION=3, TINY=0, DIRECT_MAX=-1),
    "tiny-big": dict(BIG_MIN_DOCS=1, BIG_FRACTION=2, TINY=1000, DIRECT_MAX=-1),
    "mid-units": dict(BIG_MIN_DOCS=1, BIG_FRACTION=1, MID_IMPACT_DOCS=1, TINY=0, DIRECT_MAX=-1),
    "walk-giveup": dict(BIG_MIN_DOCS=1, BIG_FRACTION=2, MID_IMPACT_DOCS=1, TINY=1000,
                        DIRECT_MAX=-1, WALK_MAX=1),
    "no-direct": dict(TINY=0, DIRECT_MAX=-1),
    "pair": dict(PAIR_MIN=1, TINY=0, DIRECT_MAX=-1),
    "pair-big": dict(PAIR_MIN=1, BIG_MIN_DOCS=1, BIG_FRACTION=2, TINY=0, DIRECT_MAX=-1),
    "probe": dict(PAIR_MIN=10**9, BATCH=0, TINY=0, DIRECT_MAX=-1),
}


@contextmanager
def thresholds(**kw: int) -> Iterator[None]:
    from projections.recall import constants
    saved = {k: getattr(constants, k) for k in kw}
    for k, v in kw.items():
        setattr(constants, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(constants, k, v)


PRUNE_QUERIES = QUERIES + [
    dict(query="common"), dict(query="alpha common gammaRay delta_x io2 beta"),
    dict(query="alpha", target="t2"), dict(query="common beta", since=2.0),
    dict(query="gamma", scope="task-first", task_id="task-2"),
    # two-term queries (the "docs with both terms" shortcut)
    dict(query="alpha beta"), dict(query="common beta", target="t1"),
    dict(query="beta common", live_after=3.0),
    dict(query="alpha common", scope="task-first", task_id="task-1"),
]


def ranked(idx: RecallIndex, limit: int) -> list[list[tuple[object, ...]]]:
    out = []
    for q in PRUNE_QUERIES:
        hits = idx.search(limit=limit, now=50.0, **q)  # type: ignore[arg-type]
        # rank() is search() without building hits: same keys, same scores
        assert idx.rank(limit=limit, **q) == [  # type: ignore[arg-type]
            (h.cache_key, h.score) for h in hits]
        out.append([(h.cache_key, h.score, h.match_reasons, h.matched_tokens,
                     h.matched_paths, h.matched_symbols, h.snippet) for h in hits])
    return out


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(rdocs(), max_size=16), st.lists(st.sampled_from(KEYS), max_size=3),
       st.sampled_from(sorted(MODES)), st.integers(1, 4))
def test_pruned_search_equals_brute_force(docs: list[RecallDoc], removed: list[str],
                                          mode: str, limit: int) -> None:
    latest = {d.cache_key: d for d in docs}
    for k in removed:
        latest.pop(k, None)
    full = ranked(RecallIndex.build(latest.values()), 100)
    with thresholds(**MODES[mode]):
        built = RecallIndex.build(latest.values())
        inc = RecallIndex.build(docs[: len(docs) // 2])
        for d in docs[len(docs) // 2 :]:
            inc.add(d)
        for k in removed:
            inc.remove(k)
        answers_ = [ranked(built, limit), ranked(inc, limit)]  # inc: base + delta
        answers_.append(ranked(RecallIndex.from_bytes(inc.to_bytes()), limit))  # merged
        for got in answers_:
            for g, f in zip(got, full, strict=True):
                assert [h[0] for h in g] == [h[0] for h in f[:limit]]
                assert g == [h for h in f[:limit]] or [
                    (h[0], round(float(h[1]), 9)) + h[2:] for h in g] == [  # type: ignore
                    (h[0], round(float(h[1]), 9)) + h[2:] for h in f[:limit]]  # type: ignore


def test_big_term_known_answer() -> None:
    """A term in every doc: the best docs are the shortest, then the newest."""
    docs = [doc(f"k{i}", "word " + " ".join(["pad"] * (i % 3)), float(i)) for i in range(9)]
    with thresholds(BIG_MIN_DOCS=1, BIG_FRACTION=1):
        idx = RecallIndex.build(docs)
        assert keys(idx.search("word", limit=4)) == ["k6", "k3", "k0", "k7"]
        idx.remove("k6")
        assert keys(idx.search("word", limit=2)) == ["k3", "k0"]
        assert keys(idx.search("word", limit=2, live_after=2.0)) == ["k3", "k7"]


@pytest.mark.parametrize("sep", ["ǂǂǂ", "SEP"])
def test_bulk_build_texts_with_the_internal_separator_word(sep: str) -> None:
    """The bulk tokenizer joins texts with a separator word; texts containing it still work
    (in ASCII chunks, split as bytes, and in non-ASCII ones)."""
    from projections.recall import bulk_tokens as segment_mod
    s = segment_mod._SENTINEL if sep == "SEP" else sep
    docs = [doc("a", f"x {s} y", 1.0, payload=(f"a{s}", "")), doc("b", s, 2.0),
            doc("c", f"plain {s}x", 3.0), doc("d", "", 4.0, payload=(f"{s} {s}",)),
            doc("e", "ascii only_text here", 5.0), doc("f", "ünïcode wörds here", 6.0)]
    for chunk, sub in ((1, 256), (2, 256), (3, 256), (10_000, 256), (10_000, 2), (5, 1)):
        saved = segment_mod._CHUNK, segment_mod._SUBCHUNK
        segment_mod._CHUNK, segment_mod._SUBCHUNK = chunk, sub
        try:
            built = RecallIndex.build(docs)
        finally:
            segment_mod._CHUNK, segment_mod._SUBCHUNK = saved
        inc = RecallIndex()
        for d in docs:
            inc.add(d)
        for q in (s, "x y", f"a{s}", f"{s}x", "plain", "here", "only_text", "wörds"):
            assert [(h.cache_key, h.score) for h in built.search(q)] == [
                (h.cache_key, h.score) for h in inc.search(q)]
        assert keys(built.search(s))[:3] == ["d", "b", "a"]  # (c: parts of a digit split)
        assert keys(built.search("here")) == ["f", "e"]


def test_hex_keys_and_other_keys_round_trip_through_bytes() -> None:
    hexkeys = [f"{i:064x}" for i in range(5)]
    for ks in (hexkeys, hexkeys[:4] + ["ABCDEF" + "0" * 58], ["k1", "k2", "κ3"]):
        docs = [doc(k, f"{'abcde'[i] * 3} common", float(i)) for i, k in enumerate(ks)]
        idx = RecallIndex.build(docs)
        data = idx.to_bytes()
        # an unaligned view (as inside a larger checkpoint) and an mmap-like memoryview
        for view in (data, memoryview(b"xyz" + data)[3:]):
            loaded = RecallIndex.from_bytes(view, verify=False)
            assert all(k in loaded for k in ks) and "absent" not in loaded
            assert keys(loaded.search("common", limit=10)) == list(reversed(ks))
            loaded.remove(ks[0])
            assert ks[0] not in loaded and len(loaded) == len(ks) - 1
            loaded.add(docs[0])
            assert keys(loaded.search("aaa")) == [ks[0]]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text(alphabet="abcAB._#:", min_size=1, max_size=9), min_size=1,
                max_size=12), st.text(alphabet="abcAB_.", min_size=1, max_size=5))
def test_symbol_partial_matches_equal_a_scan(symbols: list[str], word: str) -> None:
    """The trigram index finds exactly the symbols a plain scan finds."""
    from projections.recall.match import sym_level
    from projections.recall.query import is_path_like, partial_symbol_ok, query_words
    docs = [doc(f"k{i}", "x", float(i), symbols=(s,)) for i, s in enumerate(symbols)]
    wl = word.lower()
    want_filter = {f"k{i}" for i, s in enumerate(symbols) if sym_level(s.lower(), wl, True)}
    for idx in (RecallIndex.build(docs), RecallIndex.from_bytes(RecallIndex.build(docs)
                                                                .to_bytes())):
        got = {h.cache_key for h in idx.search("", symbol_filters=[word], limit=100)}
        assert got == want_filter
        ws = query_words(word)  # outer punctuation is trimmed from query words
        w = ws[0] if ws else ""
        if len(w) >= 2 and not is_path_like(w) and tokenize(word):
            partial = partial_symbol_ok(w)
            want = {f"k{i}" for i, s in enumerate(symbols)
                    if sym_level(s.lower(), w.lower(), partial)}
            hits = idx.search(word, limit=100)
            assert {h.cache_key for h in hits if "symbol_match" in h.match_reasons} == want


def test_pruning_on_a_larger_corpus_equals_unpruned() -> None:
    """Probes, the pair/multi shortcuts, walks and tf-group bounds only act on
    corpora larger than a few dozen docs: a seeded 600-doc corpus, small limits
    against an unpruned answer (limit above the corpus size)."""
    import random
    rng = random.Random(7)
    vocab = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "rareWordX"]
    vocab += [f"w{i}" for i in range(40)]
    docs = []
    for i in range(600):
        head = vocab[: rng.randint(3, len(vocab))]
        words = [rng.choice(head) for _ in range(rng.randint(1, 14))]
        docs.append(doc(f"k{i:03d}", " ".join(words), float(i % 97),
                        target="t1" if i % 3 else "t2",
                        symbols=("AlphaBeta",) if i % 50 == 0 else (),
                        tasks=("task-1",) if i % 7 == 0 else ()))
    queries = [dict(query="alpha beta"), dict(query="alpha beta gamma"),
               dict(query="w1 w2 alpha"), dict(query="theta"), dict(query="rareWordX w3"),
               dict(query="alpha w3 w4 w5 beta eta"), dict(query="AlphaBeta gamma delta"),
               dict(query="beta gamma", target="t2"), dict(query="eps zeta", live_after=30.0),
               dict(query="alpha delta w7", scope="task-first", task_id="task-1")]
    base = RecallIndex.build(docs)
    want = {i: base.rank(limit=1000, **q) for i, q in enumerate(queries)}  # type: ignore[arg-type]
    for mode in ("probe", "pair", "pair-big", "no-direct", "big-terms", "mid-units",
                 "walk-giveup"):
        with thresholds(**MODES[mode]):
            idx = RecallIndex.build(docs)
            half = RecallIndex.build(docs[:500])
            for d in docs[500:]:
                half.add(d)  # base + delta
            for ix in (idx, half):
                for i, q in enumerate(queries):
                    for limit in (1, 3, 10):
                        got = ix.rank(limit=limit, **q)  # type: ignore[arg-type]
                        assert [k for k, _ in got] == [k for k, _ in want[i][:limit]], (mode, q)
                        assert [s for _, s in got] == pytest.approx(
                            [s for _, s in want[i][:limit]], rel=1e-12, abs=1e-12)


def test_from_packet_equals_the_attrs_init() -> None:
    # from_packet stores RecallDoc's slots directly: same fields, equality, hash, frozen
    import attrs

    packet = {"summary": "s", "target": "t", "paths": ["a.py"], "symbols": ["A.b"],
              "tests": ["test_b"], "task_ids": ["T1"], "packet_types": ["p"],
              "payload": {"x": "y", "n": 3}}
    d = RecallDoc.from_packet("k", packet, 5, 7)
    e = RecallDoc("k", "t", 5.0, "s", ("a.py",), ("A.b",), ("test_b",), ("T1",), ("p",),
                  ("y",), 7)
    assert d == e and hash(d) == hash(e) and repr(d) == repr(e)
    assert attrs.asdict(d) == attrs.asdict(e)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        d.target = "u"  # type: ignore[misc]

    class Sub(RecallDoc):
        pass

    s = Sub.from_packet("k", packet, 5, 7)
    assert type(s) is Sub and attrs.asdict(s) == attrs.asdict(e)


@pytest.mark.parametrize("name, off", [("rank_direct", dict(DIRECT_MAX=-1)),
                                       ("rank_tiny", dict(TINY=-1))])
def test_a_strategys_off_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch, name: str,
                                             off: dict[str, int]) -> None:
    # benchmarks/bench_strategies.py measures each strategy by its off switch; a switch
    # that leaves the strategy running (as DIRECT_MAX=0 once did: max(0, Σdf/8) still
    # let a narrow filter through) measures nothing. Default on, and off when switched.
    from projections.recall import strategies
    docs = [doc(f"k{i:03d}", "common word" + (" xylophone" if i == 7 else ""), created=float(i + 1),
                tasks=(f"task-{i % 20}",)) for i in range(200)]
    idx = RecallIndex.build(docs)
    calls: list[int] = []
    real = getattr(strategies, name)

    def counted(*a: object, **kw: object) -> object:
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(strategies, name, counted)
    q = (dict(query="common word", scope="task-only", task_id="task-3")
         if name == "rank_direct" else dict(query="xylophone"))
    want = idx.rank(limit=5, **q)  # type: ignore[arg-type]
    assert calls, f"{name} did not run with its default threshold"
    calls.clear()
    with thresholds(**off):
        assert idx.rank(limit=5, **q) == want  # type: ignore[arg-type]
    assert not calls, f"{name} ran although switched off by {off}"


@pytest.mark.parametrize("delta", [False, True], ids=["built", "added"])
def test_one_words_symbol_matches_at_each_level(delta: bool) -> None:
    """``match_word``'s calls, level by level: a symbol equal to the word, starting with
    it, containing it, for docs in the built part and docs added since; a two-letter
    word matches whole symbols only. (The hypothesis test above checks which docs
    match, not at which level; under mutation testing it runs 10 examples.)"""
    from projections.recall.match import match_word
    from projections.recall.scoring import QueryState

    docs = [doc("exact", "x", 1.0, symbols=("read_frame",)),
            doc("prefix", "x", 2.0, symbols=("read_frame_header",)),
            doc("contains", "x", 3.0, symbols=("unread_frame_x",)),
            doc("two", "x", 4.0, symbols=("io",)),
            doc("none", "x", 5.0, symbols=("zzz",))]
    idx = RecallIndex.build([] if delta else docs)
    for d in docs if delta else ():
        idx.add(d)

    def calls(word: str) -> tuple[list[tuple[list[str], float, str]], list[Any]]:
        """What ``add`` was given, and the rules the query state noted (1: partial)."""
        got: list[tuple[list[str], float, str]] = []
        q = QueryState()
        match_word(idx, word, q, lambda ds, b, kind: got.append(
            (sorted(idx._key_of(d) for d in ds), b, kind)))
        return got, [r for r in q.rules if r[0] == "sym"]

    assert calls("read_frame") == ([
        (["exact"], BOOSTS["symbol_exact"], "sym"),
        (["prefix"], BOOSTS["symbol_prefix"], "sym"),
        (["contains"], BOOSTS["symbol_contains"], "sym")], [("sym", "read_frame", 1)])
    assert calls("io") == ([(["two"], BOOSTS["symbol_exact"], "sym")], [("sym", "io", 0)])
    assert calls("i") == ([], [])


@pytest.mark.parametrize("delta", [False, True], ids=["built", "added"])
def test_values_with_a_lone_surrogate_match_exactly(delta: bool) -> None:
    """A path from a file name that is not UTF-8 (decoded with surrogateescape) and
    the symbol, test and task values beside it: each is found by itself."""
    d = doc("s", "x", 1.0, paths=("src/b\udcffad.py",), symbols=("na\udcffme",),
            tests=("test_\udcffx",), tasks=("task-\udcff",))
    idx = RecallIndex.build([] if delta else [d])
    if delta:
        idx.add(d)
    for word, reason in (("src/b\udcffad.py", "path_match"), ("na\udcffme", "symbol_match"),
                         ("test_\udcffx", "test_match"), ("task-\udcff", "task_match")):
        hits = idx.search(word)
        assert keys(hits) == ["s"] and reason in hits[0].match_reasons, word


def test_task_first_over_a_task_of_hundreds_of_entries() -> None:
    """A task holding hundreds of entries, a word only three of them hold: the tiny
    candidate set is checked one doc at a time, against the task's docs (a bitmap at
    this size) first and then outside them."""
    docs = [doc(f"e{i:03d}", "rare finding" if i in (5, 250, 390) else "common text",
                float(i), tasks=("t-1",) if i < 300 else ()) for i in range(400)]
    for ix in (RecallIndex.build(docs), RecallIndex.from_bytes(RecallIndex.build(docs).to_bytes())):
        first = ix.search("rare", scope="task-first", task_id="t-1")
        assert keys(first) == ["e250", "e005", "e390"]
        assert [("task_match" in h.match_reasons) for h in first] == [True, True, False]
        assert keys(ix.search("rare", scope="task-only", task_id="t-1")) == ["e250", "e005"]
