"""Snippets cost O(window), not O(packet) (issue 9), and say the same as before.

``old_make_snippet`` below is the snippet function as it was before the scan
limit (it joined and scanned every text of a packet, and its window search
was hits x hits-per-window): the oracle. Within the scan limit the new one
must give exactly its output; past it, the new one must not read further.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.corpus import stdlib_packets
from projections.recall import RecallDoc, make_snippet, packet_texts, tokenize
from projections.recall.snippet import SCAN_CHARS, SEPARATOR, _token_hits


def old_make_snippet(
    texts: Iterable[str], matched_tokens: Iterable[str], max_len: int = 240
) -> str:
    """The oracle: make_snippet before the scan limit, verbatim but for the names."""
    max_len = max(8, int(max_len))
    text = SEPARATOR.join([" ".join(t.split()) for t in texts if t and not t.isspace()])
    if len(text) <= max_len:
        return text
    wanted = set(matched_tokens)
    hits = _token_hits(text, wanted) if wanted else []
    budget = max_len - 2
    if not hits:
        return _old_cut(text, 0, budget, max_len)
    best = (-1, -1, 0)
    j = 0
    for i in range(len(hits)):
        start = hits[i][0]
        if j < i:
            j = i
        while j + 1 < len(hits) and hits[j + 1][1] - start <= budget:
            j += 1
        covered: set[str] = set()
        for k in range(i, j + 1):
            covered |= hits[k][2]
        key = (len(covered), j - i + 1, -start)
        if key > (best[0], best[1], -best[2]):
            best = (len(covered), j - i + 1, start)
    start = best[2]
    span_end = start
    for s, e, _ in hits:
        if s >= start and e - start <= budget:
            span_end = max(span_end, e)
    slack = budget - (span_end - start)
    begin = max(0, start - min(slack // 3, 60))
    return _old_cut(text, begin, budget, max_len)


def _old_cut(text: str, begin: int, budget: int, max_len: int) -> str:
    if begin > 0:
        m = re.search(r"\s", text[begin : begin + 20])
        if m is not None and begin + m.end() < len(text):
            begin += m.end()
    end = min(len(text), begin + budget)
    if end < len(text):
        cut = text.rfind(" ", begin + budget // 2, end)
        if cut > begin:
            end = cut
    out = text[begin:end].strip()
    if begin > 0:
        out = "…" + out
    if end < len(text):
        out = out + "…"
    return out[:max_len]


WORDS = ["alpha", "beta", "Gamma", "parseHTTP", "parse_http", "x1", "été", "naïve", "·", "_"]
texts_st = st.lists(
    st.lists(st.sampled_from(WORDS) | st.text(alphabet=" \t\n.-,", max_size=3), max_size=30)
    .map(" ".join)
    | st.text(max_size=40),
    max_size=6,
)
tokens_st = st.lists(st.sampled_from(["alpha", "beta", "gamma", "parse", "http", "x1", "été",
                                      "1", "naïve", "zzz"]), max_size=4)


@settings(max_examples=500, deadline=None)
@given(texts_st, tokens_st, st.integers(0, 120))
def test_same_snippet_as_before_within_the_scan_limit(
    texts: list[str], tokens: list[str], max_len: int
) -> None:
    assert make_snippet(texts, tokens, max_len) == old_make_snippet(texts, tokens, max_len)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["word", "word", "other", "wörd"]), min_size=1, max_size=4),
       st.integers(0, 2000))
def test_same_snippet_as_before_on_long_texts_with_many_hits(
    words: list[str], short_by: int
) -> None:
    """Thousands of hits (the case that used to cost hits x window): same window."""
    unit = " ".join(words) + " "
    texts = [unit * ((SCAN_CHARS - 1 - short_by) // len(unit))]
    assert len(texts[0]) < SCAN_CHARS
    assert make_snippet(texts, ["word"]) == old_make_snippet(texts, ["word"])


def test_same_snippets_as_before_on_the_stdlib_corpus() -> None:
    n = 0
    for i, packet in enumerate(stdlib_packets(limit=1500, seed=3)):
        doc = RecallDoc.from_packet(f"k{i}", packet, 0.0, 0)
        texts = doc.texts()
        assert list(packet_texts(packet)) == texts
        words = [w for w in tokenize(" ".join(texts)) if len(w) > 2]
        tokens = words[i % 7 :: 11][:3] + ["stdlib"]
        for max_len in (40, 240):
            assert make_snippet(texts, tokens, max_len) == old_make_snippet(texts, tokens, max_len)
            n += 1
    assert n == 3000


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids,
                                                                max_size=3),
    max_leaves=12,
)
field_values = st.none() | st.integers() | st.text(max_size=5) | st.lists(
    st.text(max_size=5) | st.integers(), max_size=4) | st.tuples(st.text(max_size=3))


@settings(max_examples=300)
@given(st.fixed_dictionaries({}, optional={
    "summary": st.text(max_size=5) | st.integers(),
    "paths": field_values, "symbols": field_values, "tests": field_values,
    "payload": json_values,
}))
def test_lazy_packet_texts_equal_the_docs_texts(packet: dict[str, Any]) -> None:
    doc = RecallDoc.from_packet("k", {"target": "t", **packet}, 0.0, 0)
    assert list(packet_texts(packet)) == doc.texts()


class ReadTooFar(AssertionError):
    pass


def texts_then_trap(*texts: str) -> Iterator[str]:
    """The texts, then a trap: reading one more text raises."""
    yield from texts
    raise ReadTooFar("the snippet read past its scan limit")


def test_a_huge_text_is_read_only_up_to_the_scan_limit() -> None:
    huge = "intro word " + "word filler " * 1_500_000  # 18 MB of text, hits all along
    got = make_snippet(texts_then_trap("summary", huge), ["word"])  # the trap is never hit
    # the same as the old function over the first SCAN_CHARS: the window lies there
    head = huge[: SCAN_CHARS - len("summary") - 2]
    assert got == old_make_snippet(["summary", head + " tail"], ["word"])
    assert got.endswith("…")


def test_texts_past_the_scan_limit_are_not_read() -> None:
    filler = "x" * (SCAN_CHARS - 10)
    got = make_snippet(texts_then_trap("match here", filler, "never read"), ["match"])
    assert got.startswith("match here") and got.endswith("…")


def test_a_cut_word_at_the_scan_limit_is_dropped_not_matched() -> None:
    """A word the limit cuts in two must not match as its head ('wordy' is not 'word')."""
    room = SCAN_CHARS - 1  # what the first text may use: its length, plus one
    pad = "a " * ((room - 4) // 2)
    pad += " " * (room - 4 - len(pad))
    text = pad + "wordy more"
    assert text[:room].endswith(" word") and text[room] == "y"
    got = make_snippet([text], ["word"])
    assert "word" not in got and got.endswith("…")


def test_a_huge_payload_of_many_strings_is_read_lazily() -> None:
    packet = {"target": "t", "summary": "see word", "payload": {"lines": ["word"] * 10**6}}
    seen = 0
    texts = packet_texts(packet)

    def counting() -> Iterator[str]:
        nonlocal seen
        for t in texts:
            seen += 1
            yield t

    make_snippet(counting(), ["word"])
    assert seen <= SCAN_CHARS // 5 + 2  # "word" and its separator: 5 units each
