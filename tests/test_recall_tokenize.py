"""Tokenizer, snippets and the stdlib corpus generator."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.corpus import stdlib_packets
from projections.recall import RecallDoc, make_snippet, tokenize
from projections.recall.tokenize import _ASCII_PARTS, _RUN, _ident_tokens, _split_run


def test_identifier_parts_follow_the_whole() -> None:
    assert tokenize("parseHTTPHeader") == ["parsehttpheader", "parse", "http", "header"]
    assert tokenize("parse_http_header") == ["parse_http_header", "parse", "http", "header"]
    assert tokenize("utf8") == ["utf8", "utf", "8"]
    assert tokenize("src/auth.rs") == ["src", "auth", "rs"]
    assert tokenize("plain words HERE") == ["plain", "words", "here"]
    assert tokenize("__init__") == ["__init__", "init"]
    assert tokenize("ÉtéÀ x-y") == ["étéà", "été", "à", "x", "y"]
    assert tokenize("") == [] and tokenize("_ -- !") == []


@settings(max_examples=300)
@given(st.text(alphabet="aAbBzZ09", min_size=1, max_size=10))
def test_ascii_fast_path_equals_general_split(run: str) -> None:
    assert _ASCII_PARTS.findall(run) == _split_run(run)


def _ident_tokens_reference(ident: str) -> tuple[str, ...]:
    """The tokenizer's rules with the regex runs for every identifier (no fast paths)."""
    runs = _RUN.findall(ident)
    if not runs:
        return ()
    out = [ident.lower()] if (len(runs) > 1 or runs[0] != ident) else []
    for run in runs:
        parts = _split_run(run)
        out.append(run.lower())
        if len(parts) > 1:
            out.extend(p.lower() for p in parts)
    return tuple(out)


@settings(max_examples=500)
@given(st.one_of(st.text(alphabet="aAbBzZ09_", max_size=12),
                 st.text(alphabet="aAzZ0_\u00e9\u00c9\u0130\u03a3\u01c5\u00b2\u0660",
                         max_size=8)))
def test_ident_fast_paths_equal_reference(ident: str) -> None:
    # plain words, ASCII underscore splits and the empty "identifier" (a separator)
    assert _ident_tokens(ident) == _ident_tokens_reference(ident)


@settings(max_examples=200)
@given(st.text(max_size=60))
def test_tokens_are_lowercase_word_runs(text: str) -> None:
    for t in tokenize(text):
        assert t == t.lower() or t.lower() != t  # lower() is idempotent-safe
        assert re.fullmatch(r"\w+", t) or any(not c.isalnum() for c in t)


def test_snippet_window_covers_matches() -> None:
    text = "lorem " * 100 + "the needle is here " + "ipsum " * 100
    s = make_snippet([text], ["needle"], max_len=80)
    assert "needle" in s and len(s) <= 80 and s.startswith("…") and s.endswith("…")
    assert make_snippet(["short", "text"], ["x"]) == "short · text"
    assert len(make_snippet(["word " * 200], [], max_len=50)) <= 50


def test_stdlib_packets_are_deterministic_and_complete() -> None:
    a = list(stdlib_packets(300, seed=3))
    b = list(stdlib_packets(300, seed=3))
    assert a == b and len(a) == 300
    for p in a:
        assert p["target"].startswith("stdlib.")
        assert p["paths"][0].startswith("Lib/") and p["paths"][0].endswith(".py")
        assert p["symbols"] and p["tests"] and p["summary"]
        assert "stdlib" in tokenize(p["payload"]["source"])
        d = RecallDoc.from_packet("k", p, 1.0, 10)
        assert p["payload"]["signature"] in d.payload_text


# ------------------------------------------------------------------ fast paths == plain versions
def _reference_hits(text: str, wanted: set[str]) -> list[tuple[int, int, frozenset[str]]]:
    from projections.recall.tokenize import ident_tokens
    out = []
    for m in re.finditer(r"\w+", text):
        toks = wanted.intersection(ident_tokens(m.group()))
        if toks:
            out.append((m.start(), m.end(), frozenset(toks)))
    return out


@settings(max_examples=300)
@given(st.text(alphabet="aAbB_1 .:/xyzXYZé", max_size=80), st.data())
def test_snippet_token_search_equals_identifier_scan(text: str, data: st.DataObject) -> None:
    from projections.recall.snippet import _token_hits
    toks = sorted(set(tokenize(text))) or ["nothing"]
    wanted = set(data.draw(st.lists(st.sampled_from(toks + ["zz", "b"]), max_size=4)))
    assert _token_hits(text, wanted) == _reference_hits(text, wanted)


def _reference_sym_level(v: str, w: str, partial: bool) -> int:
    if v == w or re.split(r"[.:#]+", v)[-1] == w:
        return 3
    if not partial or w not in v:
        return 0
    if v.startswith(w) or re.search(r"[.:#]" + re.escape(w), v):
        return 2
    return 1


@settings(max_examples=500)
@given(st.text(alphabet="ab.:#c", max_size=10), st.text(alphabet="ab.:#c", min_size=1,
                                                         max_size=4), st.booleans())
def test_sym_level_equals_reference(v: str, w: str, partial: bool) -> None:
    from projections.recall.match import sym_level
    assert sym_level(v, w, partial) == _reference_sym_level(v, w, partial)


def _reference_payload(payload: object) -> list[str]:
    out: list[str] = []

    def walk(x: object) -> None:
        if isinstance(x, str):
            out.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(payload)
    return out


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids,
                                                                max_size=3),
    max_leaves=12)


@settings(max_examples=300)
@given(json_values)
def test_payload_strings_depth_first_in_document_order(payload: object) -> None:
    from projections.recall import payload_strings
    assert list(payload_strings(payload)) == _reference_payload(payload)
    d = RecallDoc.from_packet("k", {"target": "t", "payload": payload}, 1.0, 1)
    assert list(d.payload_text) == _reference_payload(payload)


def test_payload_nesting_deeper_than_the_recursion_limit() -> None:
    deep: object = "leaf"
    for _ in range(5000):
        deep = {"x": [deep]}
    d = RecallDoc.from_packet("k", {"target": "t", "payload": deep}, 1.0, 1)
    assert d.payload_text == ("leaf",)


def test_from_packet_ignores_non_string_junk() -> None:
    d = RecallDoc.from_packet("k", {"target": 3, "summary": ["x"], "paths": ["a", 1, None],
                                    "symbols": "Sym", "tests": None, "task_ids": ("t-1",),
                                    "packet_types": {"x": 1}}, 2, 7)
    assert (d.target, d.summary, d.paths, d.symbols, d.tests, d.task_ids, d.packet_types) == (
        "", "", ("a",), ("Sym",), (), ("t-1",), ())
    assert d.created_at == 2.0 and d.est_bytes == 7


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="abAB_1 .·-/:xyzXYZ", max_size=30), max_size=5),
       st.lists(st.sampled_from(["ab", "a", "b", "xyz", "1", "ab_1", "ba", "x"]), max_size=3))
def test_snippet_token_hits_fast_path_equals_scan(texts: list[str], wanted: list[str]) -> None:
    """ASCII text (and the separator's middle dot) takes a substring search: same hits."""
    from projections.recall.snippet import SEPARATOR, _token_hits, _token_hits_scan
    text = SEPARATOR.join(texts)
    assert _token_hits(text, set(wanted)) == _token_hits_scan(text, set(wanted))
