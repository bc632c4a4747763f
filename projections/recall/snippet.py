"""Snippets: the best bounded window of a document's text around matched terms."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from .tokenize import ident_tokens

_IDENT = re.compile(r"\w+")
SEPARATOR = " · "
_DOT = "\u00b7"


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
    # ASCII (the separator's middle dot aside, a non-word char that lowercases to
    # itself) takes the substring search below; other text scans every identifier
    if not text.isascii() and not text.replace(_DOT, "|").isascii():
        return _token_hits_scan(text, wanted)
    # ASCII: lowercasing keeps positions, and a token of an identifier is a
    # substring of the lowercased identifier, so one regex finds the identifiers
    # that contain a wanted token as a substring; those are tokenised
    hits = []
    for m in _containing(frozenset(wanted)).finditer(text.lower()):
        s, e = m.span()
        toks = wanted.intersection(ident_tokens(text[s:e]))
        if toks:
            hits.append((s, e, frozenset(toks)))
    return hits


@lru_cache(maxsize=256)
def _containing(wanted: frozenset[str]) -> re.Pattern[str]:
    """Whole ASCII identifiers (starting after a non-word char) containing a token."""
    alts = "|".join(re.escape(w) for w in sorted(wanted, key=lambda w: (-len(w), w)))
    return re.compile(r"(?<!\w)\w*?(?:" + alts + r")\w*", re.ASCII)


def _token_hits_scan(text: str, wanted: set[str]) -> list[tuple[int, int, frozenset[str]]]:
    """:func:`_token_hits` for any text: tokenise every identifier."""
    hits = []
    for m in _IDENT.finditer(text):
        toks = wanted.intersection(ident_tokens(m.group()))
        if toks:
            hits.append((m.start(), m.end(), frozenset(toks)))
    return hits



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
