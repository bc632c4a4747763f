"""Tokenizer, snippets and the stdlib corpus generator."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.corpus import stdlib_packets
from projections.recall import RecallDoc, make_snippet, tokenize
from projections.recall.tokenize import _ASCII_PARTS, _split_run


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
