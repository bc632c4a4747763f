"""Recall tokenizer: pure, deterministic, shared by indexing and querying.

Rules (see docs/recall.md):

* An *identifier* is a maximal run of word characters (``str.isalnum()``
  characters and ``_``).  Everything else separates.
* Every maximal run of letters/digits inside it is a token, lowercased.
* An identifier that contains ``_`` (``parse_http``, ``__init__``) also yields
  its whole, lowercased, before its parts (``parse_http parse http``).
* A letter/digit run with camelCase or letter/digit boundaries yields the
  whole run first, then its parts: ``parseHTTPHeader`` ->
  ``parsehttpheader parse http header``; ``utf8`` -> ``utf8 utf 8``.
  Plain words (one case, only letters or only digits) are themselves.
"""

from __future__ import annotations

import re

IDENT = re.compile(r"\w+")
"""An identifier: a maximal run of word characters (docs/recall.md, "Indexed text and tokens")."""
_RUN = re.compile(r"[^\W_]+")
# ASCII fast path of _split_run (same boundaries; checked by a property test)
_ASCII_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")

# cache of raw identifier -> tuple of tokens; bounded so a long-lived process
# indexing unbounded junk cannot grow without limit
_CACHE: dict[str, tuple[str, ...]] = {}
_CACHE_MAX = 1 << 20


def _split_run(run: str) -> list[str]:
    """Split one letter/digit run at camelCase and letter/digit boundaries."""
    parts: list[str] = []
    start = 0
    n = len(run)
    # classes: 0 digit, 1 upper, 2 lower / uncased letter
    def cls(ch: str) -> int:
        if not ch.isalpha():
            return 0
        return 1 if ch.isupper() else 2

    prev = cls(run[0])
    for i in range(1, n):
        cur = cls(run[i])
        split = False
        if (prev == 0) != (cur == 0):
            split = True  # letter <-> digit
        elif prev == 2 and cur == 1:
            split = True  # fooBar
        elif prev == 1 and cur == 2 and i - start >= 2:
            # HTTPHeader: split before the last capital of an upper run
            parts.append(run[start : i - 1])
            start = i - 1
        if split:
            parts.append(run[start:i])
            start = i
        prev = cur
    parts.append(run[start:])
    return parts


def _ident_tokens(ident: str) -> tuple[str, ...]:
    if ident.isalpha() and (ident.islower() or ident.isupper()):
        return (ident.lower(),)  # a plain word (one run, one case): itself
    out: list[str] = []
    if not ident.isascii():
        runs = _RUN.findall(ident)
    elif "_" in ident:  # ASCII: the runs are the pieces between underscores
        runs = [r for r in ident.split("_") if r]
    else:
        runs = [ident] if ident else []
    if not runs:
        return ()
    if len(runs) > 1 or runs[0] != ident:
        out.append(ident.lower())
    for run in runs:
        if run.isdigit() or (run.isalpha() and (run.islower() or run.isupper())):
            out.append(run.lower())
            continue
        parts = _ASCII_PARTS.findall(run) if run.isascii() else _split_run(run)
        out.append(run.lower())
        if len(parts) > 1:
            out.extend(p.lower() for p in parts)
    return tuple(out)


def ident_tokens(ident: str) -> tuple[str, ...]:
    """Tokens of one identifier (a ``\\w+`` match), cached."""
    toks = _CACHE.get(ident)
    if toks is None:
        toks = _ident_tokens(ident)
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[ident] = toks
    return toks


def cached_tokens(words: list[str]) -> list[tuple[str, ...] | None]:
    """Each word's cached tokens, or None where the cache has none (one C-speed
    ``map`` over the cache: bulk tokenising reads it for every distinct word)."""
    return list(map(_CACHE.get, words))


def tokenize(text: str) -> list[str]:
    """Tokens of ``text`` in order, with identifier parts after each whole."""
    cache = _CACHE
    out: list[str] = []
    for ident in IDENT.findall(text):
        toks = cache.get(ident)
        if toks is None:
            toks = ident_tokens(ident)
        out.extend(toks)
    return out
