"""Snippets: the best bounded window of a document's text around matched terms.

Bounded work (failure rule 8): the window is chosen among the first
:data:`SCAN_CHARS` characters of a document's texts, which are read lazily, so
a snippet costs the same for a 15 MB packet as for one of 16 KiB. Documents
shorter than that get exactly the snippet a scan of the whole text would give.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from .tokenize import ident_tokens

_IDENT = re.compile(r"\w+")
_TAIL_WORD = re.compile(r"\w+\Z")
SEPARATOR = " · "
_DOT = "\u00b7"
SCAN_CHARS = 16_384
"""How much text a snippet looks at: characters of the texts, plus one per text."""


def make_snippet(texts: Iterable[str], matched_tokens: Iterable[str], max_len: int = 240) -> str:
    """The window of at most ``max_len`` characters covering the most matched terms.

    The texts are joined with `` · `` and whitespace is collapsed.  Among all
    windows, the one covering the most *distinct* matched tokens wins, then the
    most occurrences, then the earliest.  Cut ends are marked with ``…`` (the
    marks count towards ``max_len``).  No match: the start of the text.  Only
    the first :data:`SCAN_CHARS` of the texts are looked at (``texts`` may be
    a lazy iterator: it is not read further).
    """
    max_len = max(8, int(max_len))
    text, more = _scanned_text(texts, SCAN_CHARS)
    if not more and len(text) <= max_len:
        return text
    wanted = set(matched_tokens)
    hits = _token_hits(text, wanted) if wanted else []
    budget = max_len - 2  # room for both ellipses
    if not hits:
        return _cut(text, 0, budget, max_len, more)
    start = _best_start(hits, budget)
    # centre the matched span a little: begin some context before the first hit
    span_end = start
    for s, e, _ in hits:
        if s >= start and e - start <= budget:
            span_end = max(span_end, e)
    slack = budget - (span_end - start)
    begin = max(0, start - min(slack // 3, 60))
    return _cut(text, begin, budget, max_len, more)


def _scanned_text(texts: Iterable[str], limit: int) -> tuple[str, bool]:
    """The texts joined as :func:`make_snippet` shows them, up to ``limit``; and whether
    anything was left out.

    Each non-empty text costs its length plus one (empty ones cost nothing, but
    at most ``limit`` texts are read); the text that crosses ``limit`` is cut
    there -- a word it cuts in two is dropped, unless that would leave nothing of
    the text (one long word: base64, a hash dump) -- and no later text is read.
    Within the limit this is exactly the whole joined text, and ``False``.
    """
    parts: list[str] = []
    room = limit
    items = limit
    for t in texts:
        items -= 1
        if room <= 0 or items < 0:
            return SEPARATOR.join(parts), True
        if not t:
            continue
        room -= 1
        if len(t) <= room:
            room -= len(t)
            if not t.isspace():
                # str.split() and re's \s agree on what whitespace is
                parts.append(" ".join(t.split()))
            continue
        piece = t[:room]
        shown = " ".join(piece.split())
        if _IDENT.match(t, room):  # the cut falls before a word character: drop a cut word
            whole_words = " ".join(_TAIL_WORD.sub("", piece).split())
            shown = whole_words or shown
        if shown:
            parts.append(shown)
        return SEPARATOR.join(parts), True
    return SEPARATOR.join(parts), False


def _best_start(hits: list[tuple[int, int, frozenset[str]]], budget: int) -> int:
    """Start of the window (from a hit, over the hits ending within ``budget`` of it)
    covering the most distinct tokens, then the most hits, then the earliest.

    A sliding window with token counts: each hit enters and leaves once, so the
    cost is the number of hits, not hits times hits per window.
    """
    counts: dict[str, int] = {}
    distinct = 0
    best: tuple[int, int, int] | None = None
    best_start = 0
    j = -1  # the window is hits[i..j]
    n = len(hits)
    for i in range(n):
        start = hits[i][0]
        if j < i:  # empty window: it always holds its first hit
            j = i
            for tok in hits[i][2]:
                c = counts.get(tok, 0)
                counts[tok] = c + 1
                distinct += not c
        while j + 1 < n and hits[j + 1][1] - start <= budget:
            j += 1
            for tok in hits[j][2]:
                c = counts.get(tok, 0)
                counts[tok] = c + 1
                distinct += not c
        key = (distinct, j - i + 1, -start)
        if best is None or key > best:
            best, best_start = key, start
        for tok in hits[i][2]:  # hit i leaves the window
            c = counts[tok] - 1
            counts[tok] = c
            distinct -= not c
    return best_start


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



def _cut(text: str, begin: int, budget: int, max_len: int, more: bool = False) -> str:
    """``text[begin:begin+budget]`` snapped to word edges, with ellipses; ≤ max_len.

    ``more``: the document goes on past ``text`` (it was cut at the scan limit).
    """
    if begin > 0:
        # snap forward to a word start if one is near
        m = re.search(r"\s", text[begin : begin + 20])
        if m is not None and begin + m.end() < len(text):
            begin += m.end()
    end = min(len(text), begin + budget)
    cut_after = end < len(text) or more
    if cut_after:
        cut = text.rfind(" ", begin + budget // 2, end)
        if cut > begin:
            end = cut
    out = text[begin:end].strip()
    if begin > 0:
        out = "…" + out
    if cut_after:
        out = out + "…"
    return out[:max_len]
