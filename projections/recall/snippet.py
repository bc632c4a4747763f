"""Snippets: the best bounded window of a document's text around matched terms."""

from __future__ import annotations

import re
from collections.abc import Iterable

from .tokenize import ident_tokens

_IDENT = re.compile(r"\w+")
SEPARATOR = " · "


def make_snippet(texts: Iterable[str], matched_tokens: Iterable[str], max_len: int = 240) -> str:
    """The window of at most ``max_len`` characters covering the most matched terms.

    The texts are joined with `` · `` and whitespace is collapsed.  Among all
    windows, the one covering the most *distinct* matched tokens wins, then the
    most occurrences, then the earliest.  Cut ends are marked with ``…`` (the
    marks count towards ``max_len``).  No match: the start of the text.
    """
    max_len = max(8, int(max_len))
    # str.split() and re's \s agree on what whitespace is
    text = SEPARATOR.join([" ".join(t.split()) for t in texts if t and not t.isspace()])
    if len(text) <= max_len:
        return text
    wanted = set(matched_tokens)
    hits = _token_hits(text, wanted) if wanted else []
    budget = max_len - 2  # room for both ellipses
    if not hits:
        return _cut(text, 0, budget, max_len)
    best = (-1, -1, 0)
    j = 0
    # two pointers: window starts at hit i, extends over hits ending within budget
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
    # centre the matched span a little: begin some context before the first hit
    span_end = start
    for s, e, _ in hits:
        if s >= start and e - start <= budget:
            span_end = max(span_end, e)
    slack = budget - (span_end - start)
    begin = max(0, start - min(slack // 3, 60))
    return _cut(text, begin, budget, max_len)


def _token_hits(text: str, wanted: set[str]) -> list[tuple[int, int, frozenset[str]]]:
    """(start, end, matched tokens) of every identifier of ``text`` with a wanted token."""
    if not text.isascii():
        hits = []
        for m in _IDENT.finditer(text):
            toks = wanted.intersection(ident_tokens(m.group()))
            if toks:
                hits.append((m.start(), m.end(), frozenset(toks)))
        return hits
    # ASCII: lowercasing keeps positions, and a token of an identifier is a
    # substring of the lowercased identifier, so search for the tokens instead
    low = text.lower()
    n = len(low)
    word = _WORD_CHARS
    spans: dict[int, tuple[int, frozenset[str]]] = {}
    for w in wanted:
        i = low.find(w)
        while i != -1:
            s = i
            while s > 0 and low[s - 1] in word:
                s -= 1
            e = i + len(w)
            while e < n and low[e] in word:
                e += 1
            if s not in spans:
                toks = wanted.intersection(ident_tokens(text[s:e]))
                spans[s] = (e, frozenset(toks))
            i = low.find(w, e)
    return [(s, e, toks) for s, (e, toks) in sorted(spans.items()) if toks]


_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _cut(text: str, begin: int, budget: int, max_len: int) -> str:
    """``text[begin:begin+budget]`` snapped to word edges, with ellipses; ≤ max_len."""
    if begin > 0:
        # snap forward to a word start if one is near
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
