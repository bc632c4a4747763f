"""Bulk tokenising of new docs: every distinct text and word tokenised once, numpy after.

What a build or a merge spends most of its time on; the tokens are exactly those of
:func:`~projections.recall.tokenize.tokenize` text by text (a test holds them equal).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from itertools import count as _count
from operator import attrgetter
from typing import Any

import numpy as np

from .arrays import gather_ranges
from .tokenize import IDENT, cached_tokens, ident_tokens
from .types import RecallDoc

I32 = np.int32
I64 = np.int64

class _AutoIds(defaultdict[Any, int]):
    """value -> dense id, numbering new values on first sight (ids 0, 1, ... in
    insertion order, also after ``items`` given here).

    A ``defaultdict`` whose factory is a C counter: a new value costs no Python
    call (hundreds of thousands of them in a bulk build).  Add entries only by
    lookup after construction.
    """

    def __init__(self, items: Iterable[tuple[Any, int]] = ()) -> None:
        super().__init__(None, items)
        self.default_factory = _count(len(self)).__next__


# ---------------------------------------------------------------- tokens of new docs
class _NewDocs:
    """The columns of the docs being added, each computed once.

    Every distinct text (summary, path, symbol, test, payload string) gets an id
    (``uniq[id]``); the path/symbol/test tables reuse those ids as their values.
    """

    def __init__(self, docs: Sequence[RecallDoc]) -> None:
        n = self.n = len(docs)
        self.lists = {f: list(map(attrgetter(f), docs)) for f in (
            "paths", "symbols", "tests", "task_ids", "packet_types", "payload_text")}
        self.counts = {f: np.fromiter(map(len, v), dtype=I64, count=n)
                       for f, v in self.lists.items()}
        texts = _AutoIds()
        get = texts.__getitem__
        self.summary_ids = np.fromiter(map(get, map(attrgetter("summary"), docs)), dtype=I64,
                                       count=n)
        self.text_ids = {f: np.fromiter(map(get, chain.from_iterable(self.lists[f])),
                                        dtype=I64, count=int(self.counts[f].sum()))
                         for f in ("paths", "symbols", "tests", "payload_text")}
        self.uniq = list(texts)

    def values(self, field: str) -> tuple[list[str], np.ndarray]:
        """A tuple field's distinct values and each occurrence's index into them."""
        ids = self.text_ids.get(field)
        if ids is not None:
            u = np.sort(ids)
            if len(u) > 1:
                keep = np.empty(len(u), dtype=bool)
                keep[0] = True
                np.not_equal(u[1:], u[:-1], out=keep[1:])
                u = u[keep]
            return list(map(self.uniq.__getitem__, u.tolist())), u.searchsorted(ids)
        flat = list(chain.from_iterable(self.lists[field]))
        vmap = _AutoIds()
        vids = np.fromiter(map(vmap.__getitem__, flat), dtype=I64, count=len(flat))
        return list(vmap), vids


# joins distinct texts for one pass; a chunk with a text that contains it is
# tokenised text by text.  ASCII, so that an ASCII chunk stays one byte a character
# and is split with bytes.translate + bytes.split (same words as \w+ on ASCII text)
_SENTINEL = "qzxjq0textsep0qjxzq"
_SENTINEL_B = _SENTINEL.encode("ascii")
_JOIN = " " + _SENTINEL + " "
_SENT_ALIAS = "\x00" + _SENTINEL  # never a word: stands for a real word equal to _SENTINEL
_CHUNK = 20000
_SLICE = 1 << 16  # elements per slice of the token keys (512 KB temporaries, in cache)
_SUBCHUNK = 256
#: ASCII letters, digits and "_" (what \w+ matches in ASCII text) kept, any other byte -> " "
_ASCII_WORDS = bytes(c if (c < 128 and (chr(c).isalnum() or c == 95)) else 32
                     for c in range(256))


def _chunks(texts: list[str]) -> Iterator[tuple[list[str], str]]:
    """Consecutive runs of texts, each with its join; a non-ASCII run is cut into
    short ones so that the ASCII texts around a non-ASCII one stay on the bytes path."""
    for c in range(0, len(texts), _CHUNK):
        part = texts[c : c + _CHUNK]
        big = _JOIN.join(part)
        if big.isascii() or len(part) <= _SUBCHUNK:
            yield part, big
        else:
            for d in range(0, len(part), _SUBCHUNK):
                sub = part[d : d + _SUBCHUNK]
                yield sub, _JOIN.join(sub)


def _text_tokens(texts: list[str], term_ids: _AutoIds) -> tuple[np.ndarray, np.ndarray]:
    """Term ids of every text, concatenated, and each text's token count.

    Words are numbered (one dict lookup each) and each distinct word is split
    into tokens once; the token streams are then gathered with numpy.  Words of
    an ASCII chunk are bytes (word ids 0 and 1 are the separators), others str.
    """
    findall = IDENT.findall
    words = _AutoIds(((_SENTINEL, 0), (_SENTINEL_B, 1)))  # ids 0, 1: text separators
    wget = words.__getitem__
    parts: list[np.ndarray] = []
    def real(w: str) -> int:  # a text's own word that equals the separator
        return wget(_SENT_ALIAS if w == _SENTINEL else w)

    sep1 = np.zeros(1, dtype=I64)
    for part, big in _chunks(texts):
        if parts:
            parts.append(sep1)
        if big.count(_SENTINEL) == len(part) - 1:
            ws = (big.encode("ascii").translate(_ASCII_WORDS).split() if big.isascii()
                  else findall(big))
            parts.append(np.fromiter(map(wget, ws), dtype=I64, count=len(ws)))
            continue
        for i, t in enumerate(part):
            if i:
                parts.append(sep1)
            ws = findall(t)
            parts.append(np.fromiter(map(real, ws), dtype=I64, count=len(ws)))
    if not parts:
        return np.zeros(0, I32), np.zeros(0, I64)
    W = np.concatenate(parts)
    # each distinct word's tokens (the tokenizer's cache read at C speed), then term ids
    wl = [w if type(w) is str else w.decode("ascii") for w in words]
    wl[0] = wl[1] = ""
    wtok: list[tuple[str, ...] | None] = cached_tokens(wl)
    for i, tt in enumerate(wtok):
        if tt is None:
            w = wl[i]
            wtok[i] = ident_tokens(_SENTINEL if w == _SENT_ALIAS else w)
    # the loop above replaced every None: wtok is a list of token tuples now
    wlen = np.fromiter(map(len, wtok), dtype=I64, count=len(wtok))  # type: ignore[arg-type]
    wflat = np.fromiter(map(term_ids.__getitem__, chain.from_iterable(wtok)),  # type: ignore[arg-type]
                        dtype=I32, count=int(wlen.sum()))
    woff = np.zeros(len(wtok) + 1, dtype=I64)
    np.cumsum(wlen, out=woff[1:])
    sep = W <= 1
    text_of = np.cumsum(sep)
    text_len = np.bincount(text_of, weights=wlen[W], minlength=len(texts)).astype(I64)
    return gather_ranges(woff, wflat, W[~sep]), text_len


def tokenize_docs(docs: Sequence[RecallDoc] | _NewDocs, term_ids: _AutoIds
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Bulk tokenisation: (tid, local doc, tf) sorted by (tid, doc), and doc lengths.

    Texts repeat across packets (paths, tests, signatures, re-puts) and words
    repeat across texts, so each distinct text and each distinct word is
    tokenised once; the per-doc token streams are assembled with numpy.  (The
    order of a doc's texts does not matter to BM25, so the texts are taken
    field by field.)  ``term_ids`` gains the new terms.
    """
    nd_ = docs if isinstance(docs, _NewDocs) else _NewDocs(docs)
    nd = nd_.n
    uniq = nd_.uniq
    fs = ("paths", "symbols", "tests", "payload_text")
    tix = np.concatenate([nd_.summary_ids] + [nd_.text_ids[f] for f in fs])
    ar = np.arange(nd, dtype=I64)
    doc_of = np.concatenate([ar] + [np.repeat(ar, nd_.counts[f]) for f in fs])
    text_tok, text_len = _text_tokens(uniq, term_ids)
    text_off = np.zeros(len(text_len) + 1, dtype=I64)
    np.cumsum(text_len, out=text_off[1:])
    occ_len = text_len[tix] if len(tix) else np.zeros(0, I64)
    dl = np.bincount(doc_of, weights=occ_len, minlength=nd).astype(I64) if nd else \
        np.zeros(0, I64)
    if int(occ_len.sum()) == 0:
        z = np.zeros(0, I64)
        return z, z, z, dl
    # sort keys (tid << 32 | doc) of every token occurrence, then count repeats; the
    # token positions and docs of the occurrences are running sums written into one
    # buffer (no repeat/arange temporaries of the full length)
    nz = np.flatnonzero(occ_len)
    lens = occ_len[nz]
    src = text_off[tix[nz]]
    odoc = doc_of[nz]
    pos = np.zeros(len(nz), dtype=I64)
    np.cumsum(lens[:-1], out=pos[1:])
    # (fresh memory is costly here, page faults dominate: the full-length arrays are
    # one int64 buffer, turned into the keys in place, and one uint32 buffer)
    total = int(pos[-1] + lens[-1])
    key = np.ones(total, dtype=I64)
    # one running sum gives both: doc << 32 | position in text_tok of each occurrence's
    # token (the position is in [0, 2**32), so the halves never carry into each other)
    step = src.copy()
    step[1:] -= src[:-1] + lens[:-1] - 1
    dstep = odoc.copy()
    dstep[1:] -= odoc[:-1]
    dstep <<= 32
    step += dstep
    del dstep
    key[pos] = step
    del step
    np.cumsum(key, out=key)
    key = key.view(np.uint64)
    # then (term << 32 | doc), a slice at a time (small temporaries)
    tts = text_tok.astype(np.uint64) << np.uint64(32)
    lo32 = np.uint64(0xFFFFFFFF)
    sh32 = np.uint64(32)
    for c in range(0, total, _SLICE):
        part = key[c : c + _SLICE]
        hi = part >> sh32
        part &= lo32
        # each element's index is read before its slot is written ("clip": unbuffered)
        np.take(tts, part, out=part, mode="clip")
        part |= hi
    del tts, hi, part
    key.sort()
    first = np.empty(len(key), dtype=bool)
    first[0] = True
    np.not_equal(key[1:], key[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    del first
    tf = np.empty(len(starts), dtype=I64)
    np.subtract(starts[1:], starts[:-1], out=tf[:-1])
    tf[-1] = len(key) - starts[-1]
    uk = key[starts]
    del key, starts
    tid = (uk >> np.uint64(32)).view(I64)
    uk &= np.uint64(0xFFFFFFFF)
    return tid, uk.view(I64), tf, dl
