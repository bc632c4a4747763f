"""Frozen, columnar index segments: build, merge, (de)serialise.

A segment is a dict of flat numpy arrays (see ``_REQUIRED``); it can live on
top of a ``bytes``/``mmap`` buffer without copying (``np.frombuffer``), so
opening a checkpointed index costs a header parse, not a rebuild.

Documents are numbered by ``(created_at, cache_key descending)``: "created at
or after T" is a suffix of the doc ids and of every posting list, and among
docs of equal score a higher id is the better one (newest, then smallest
cache_key), which is the ranking's tie-break.

Terms are *small* (postings sorted by doc: ``post_doc``/``post_tf``) or *big*
(in at least ``max(BIG_MIN_DOCS, n / BIG_FRACTION)`` docs): a big term keeps a
dense per-doc tf row (``big_tf``) for O(1) probes and its docs in *impact
order* (``imp_doc``: grouped by tf, each group by doc length ascending, then
doc id descending), so the best docs for that term alone come first whatever
the average length is.  See docs/recall.md, "Index layout".
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain
from itertools import count as _count
from operator import attrgetter, methodcaller
from typing import Any

import blake3
import numpy as np

from . import constants
from .tokenize import IDENT, cached_tokens, ident_tokens
from .types import RecallDoc

MAGIC = b"CTXRECL2"
FORMAT_VERSION = 2
_ALIGN = 64

I32 = np.int32
I64 = np.int64
U8 = np.uint8

#: structured tables, in the order their values appear in a doc's value list
TABLES = ("path", "sym", "test", "task", "ptype")
_RAW_FIELD = {"path": "paths", "sym": "symbols", "test": "tests", "task": "task_ids",
              "ptype": "packet_types"}

# meta array slots
M_KEYHEX = 0  # 1: every cache_key is 64 lowercase hex chars, stored as 32 raw bytes
M_TBASE = 1  # M_TBASE + i: first global value id of TABLES[i]; M_TBASE + 5: the end
M_LEN = M_TBASE + len(TABLES) + 1

_ENCODE = methodcaller("encode", "utf-8", "surrogatepass")


# ---------------------------------------------------------------- normalisers
def canon_path(p: str) -> str:
    """Canonical form of a path: ``/`` separators, no ``./`` prefix, no ``//``."""
    if "\\" in p:
        p = p.replace("\\", "/")
    while "//" in p:
        p = p.replace("//", "/")
    while p.startswith("./"):
        p = p[2:]
    return p


_SYM_SPLIT = re.compile(r"[.:#]+")
_TEST_SPLIT = re.compile(r"::|[./#]")


def path_keys(v: str) -> list[str]:
    """Lookup keys of a canonical path: itself and every ``/``-suffix (down to the basename)."""
    keys = [v]
    i = v.find("/")
    while i != -1:
        if i + 1 < len(v):
            keys.append(v[i + 1 :])
        i = v.find("/", i + 1)
    return keys


def sym_keys(v: str) -> list[str]:
    """Lookup keys of a (lowercased) symbol: itself and its last qualified component."""
    last = _SYM_SPLIT.split(v)[-1]
    return [v] if (not last or last == v) else [v, last]


def test_keys(v: str) -> list[str]:
    """Lookup keys of a (lowercased) test name: itself and its last component."""
    last = _TEST_SPLIT.split(v)[-1]
    return [v] if (not last or last == v) else [v, last]


def _lower(s: str) -> str:
    return s.lower()


def _same(s: str) -> str:
    return s


# table name -> (normaliser of a raw value, lookup keys of a normalised value)
TABLE_RULES: dict[str, tuple[Callable[[str], str], Callable[[str], list[str]]]] = {
    "path": (canon_path, path_keys),
    "sym": (_lower, sym_keys),
    "test": (_lower, test_keys),
    "task": (_lower, lambda v: [v]),
    "ptype": (_same, lambda v: [v]),
}


def value_keys(table: str, raw: str) -> list[str]:
    """Lookup keys of a raw table value (``AuthService.login`` -> its lowercase, ``login``)."""
    norm, keyfn = TABLE_RULES[table]
    return keyfn(norm(raw))


def doc_table_values(doc: RecallDoc, table: str) -> tuple[str, ...]:
    """The distinct raw values of one of a doc's structured fields."""
    return tuple(dict.fromkeys(getattr(doc, _RAW_FIELD[table])))


# ---------------------------------------------------------------- helpers
def _encode_all(items: Iterable[str]) -> list[bytes]:
    return list(map(_ENCODE, items))


def _hex_keys(keys: list[str]) -> bytes | None:
    """The keys as 32 raw bytes each when every key is 64 lowercase hex digits."""
    if not keys or set(map(len, keys)) != {64}:
        return None
    joined = "".join(keys)
    if not joined.isascii() or any(c in joined for c in "ABCDEF"):
        return None
    try:
        raw = bytes.fromhex(joined)
    except ValueError:
        return None
    return raw if len(raw) == 32 * len(keys) else None


def enc(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def dec(b: bytes) -> str:
    return b.decode("utf-8", "surrogatepass")


def off_dtype(maxval: int) -> Any:
    return np.uint32 if maxval < (1 << 32) else I64


def uint_dtype(maxval: int) -> Any:
    if maxval < (1 << 8):
        return np.uint8
    if maxval < (1 << 16):
        return np.uint16
    if maxval < (1 << 32):
        return np.uint32
    return np.uint64


def offsets(lens: np.ndarray) -> np.ndarray:
    """CSR offsets (n+1) of the given lengths, in the narrowest offset dtype."""
    off = np.zeros(len(lens) + 1, dtype=I64)
    if len(lens):
        np.cumsum(lens, out=off[1:])
    return off.astype(off_dtype(int(off[-1])))


def strings_blob(items: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenation + offsets (n+1)."""
    lens = np.fromiter(map(len, items), dtype=I64, count=len(items))
    return np.frombuffer(b"".join(items), dtype=U8), offsets(lens)


def gather_ranges(off: np.ndarray, data: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Concatenate ``data[off[i]:off[i+1]]`` for each i in ``ids``."""
    if len(ids) == 0:
        return data[:0]
    if len(ids) == 1:
        i = int(ids[0])
        return data[int(off[i]) : int(off[i + 1])]
    starts = off[ids].astype(I64)
    lens = off[ids + 1].astype(I64) - starts
    total = int(lens.sum())
    if total == 0:
        return data[:0]
    csum = np.cumsum(lens)
    idx = np.repeat(starts - (csum - lens), lens) + np.arange(total, dtype=I64)
    return data[idx]


def build_hash(items: Sequence[bytes]) -> np.ndarray:
    """Open-addressing table (linear probing, load <= 0.8) of item ids keyed by crc32."""
    n = len(items)
    size = 8
    while size < n + n // 4 + 1:
        size <<= 1
    mask = size - 1
    table = np.full(size, -1, dtype=I32)
    if n == 0:
        return table
    pos = np.fromiter(map(zlib.crc32, items), dtype=np.uint32, count=n).astype(I64) & mask
    pending = np.arange(n, dtype=I64)
    while len(pending):
        empty = table[pos] == -1
        idx = np.flatnonzero(empty)
        if len(idx):
            u, first = _first_of_each(pos[idx])
            winners = idx[first]
            table[u] = pending[winners]
            placed = np.zeros(len(pending), dtype=bool)
            placed[winners] = True
            keep = ~placed
            pending = pending[keep]
            pos = pos[keep]
        pos = (pos + 1) & mask
    return table


def _first_of_each(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values of ``x`` (ints in [0, 2**32)) and the index of each one's
    first occurrence: ``np.unique(x, return_index=True)`` with one plain sort of
    ``value << 32 | index`` (no stable argsort)."""
    key = (x.astype(np.uint64) << np.uint64(32)) | np.arange(len(x), dtype=np.uint64)
    key.sort()
    hi = key >> np.uint64(32)
    first = np.empty(len(key), dtype=bool)
    first[:1] = True
    np.not_equal(hi[1:], hi[:-1], out=first[1:])
    key = key[first]
    return (key >> np.uint64(32)).view(I64), (key & np.uint64(0xFFFFFFFF)).view(I64)


def sort_pairs(a: np.ndarray, b: np.ndarray, dedupe: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Sort (a, b) int pairs (both < 2**31) by (a, b); optionally drop duplicates."""
    if len(a) == 0:
        return a.astype(I64), b.astype(I64)
    key = (a.astype(np.uint64) << np.uint64(32)) | b.astype(np.uint64)
    key = np.sort(key)
    if dedupe and len(key) > 1:
        keep = np.ones(len(key), dtype=bool)
        keep[1:] = key[1:] != key[:-1]
        key = key[keep]
    return (key >> np.uint64(32)).astype(I64), (key & np.uint64(0xFFFFFFFF)).astype(I64)


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
    # (fresh memory is costly here, ~1 ms per MB: the full-length arrays are one
    # int64 buffer, turned into the keys in place, and one uint32 buffer)
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


# ---------------------------------------------------------------- reading a segment back
def decode_strings(blob: np.ndarray, off: np.ndarray) -> list[str]:
    b = blob.tobytes()
    o = off.tolist()
    return [dec(b[o[i] : o[i + 1]]) for i in range(len(o) - 1)]


def seg_keys(seg: dict[str, np.ndarray]) -> list[str]:
    """Every doc's cache_key, in doc order."""
    if int(seg["meta"][M_KEYHEX]):
        raw = seg["key_bin"].tobytes()
        return [raw[i : i + 32].hex() for i in range(0, len(raw), 32)]
    return decode_strings(seg["key_blob"], seg["key_off"])


def seg_postings(seg: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All (tid, doc, tf) postings of a segment (small and big terms), unsorted."""
    poff = seg["post_off"].astype(I64)
    tid = [np.repeat(np.arange(len(poff) - 1, dtype=I64), np.diff(poff))]
    doc = [seg["post_doc"].astype(I64)]
    tf = [seg["post_tf"].astype(I64)]
    n = len(seg["created"])
    big = seg["big_tid"]
    if len(big) and n:
        rows = seg["big_tf"].reshape(len(big), n)
        for b, t in enumerate(big.tolist()):
            d = np.flatnonzero(rows[b])
            tid.append(np.full(len(d), t, dtype=I64))
            doc.append(d.astype(I64))
            tf.append(rows[b][d].astype(I64))
    return np.concatenate(tid), np.concatenate(doc), np.concatenate(tf)


# ---------------------------------------------------------------- building
def assemble(base: dict[str, np.ndarray] | None, keep: np.ndarray | None,
             docs: Sequence[RecallDoc]) -> dict[str, np.ndarray]:
    """A new segment from the kept docs of ``base`` plus ``docs`` (tokenised here)."""
    nb = 0 if base is None else int(len(base["created"]))
    if base is not None and keep is None:
        keep = np.ones(nb, dtype=bool)
    # keep is an array whenever base is given (set just above); mypy cannot link the two
    kept = np.flatnonzero(keep) if base is not None else np.zeros(0, I64)  # type: ignore[arg-type]
    nk = len(kept)
    nd = len(docs)
    n = nk + nd

    # ---- order: created ascending, cache_key descending
    created = np.empty(n, dtype=np.float64)
    keys: list[str] = []
    if base is not None:
        created[:nk] = base["created"][kept]
        allk = seg_keys(base)
        keys = [allk[i] for i in kept.tolist()]
    created[nk:] = np.fromiter(map(attrgetter("created_at"), docs), dtype=np.float64, count=nd)
    keys.extend(map(attrgetter("cache_key"), docs))
    order = np.argsort(created)  # ties (any) are re-sorted by key below
    cs = created[order]
    if n > 1 and bool((cs[1:] == cs[:-1]).any()):
        # equal timestamps: the larger cache_key gets the smaller id
        ol = order.tolist()
        ol.sort(key=keys.__getitem__, reverse=True)
        ol.sort(key=created.__getitem__)
        order = np.array(ol, dtype=I64)
    in_order = n < 2 or bool(np.all(order[1:] > order[:-1]))  # input already in doc order
    newid = np.empty(n, dtype=I64)
    newid[order] = np.arange(n, dtype=I64)
    old2new = np.full(nb, -1, dtype=I64)
    old2new[kept] = newid[:nk]
    new_ids = newid[nk:]

    seg: dict[str, np.ndarray] = {}
    meta = np.zeros(M_LEN, dtype=I64)
    seg["created"] = created[order]

    # ---- per-doc numbers
    est = np.empty(n, dtype=I64)
    if base is not None:
        est[:nk] = base["est"][kept]
    est[nk:] = np.fromiter(map(attrgetter("est_bytes"), docs), dtype=I64, count=nd)
    est = est[order]
    seg["est"] = est.astype(np.uint32) if (n == 0 or (int(est.min()) >= 0 and int(
        est.max()) < (1 << 32))) else est

    # ---- keys
    okeys = list(map(keys.__getitem__, order.tolist()))
    kbin = _hex_keys(okeys)
    if kbin is not None:
        meta[M_KEYHEX] = 1
        seg["key_bin"] = np.frombuffer(kbin, dtype=U8)
        seg["key_blob"], seg["key_off"] = np.zeros(0, U8), np.zeros(1, np.uint32)
    else:
        seg["key_bin"] = np.zeros(0, U8)
        seg["key_blob"], seg["key_off"] = strings_blob(_encode_all(okeys))
    del keys, okeys

    # ---- targets
    tnames: list[str] = []
    if base is not None:
        tnames = decode_strings(base["tgt_blob"], base["tgt_off"])
    tmap = _AutoIds((t, i) for i, t in enumerate(tnames))
    tgt = np.empty(n, dtype=I64)
    if base is not None:
        tgt[:nk] = base["tgt"][kept]
    tgt[nk:] = np.fromiter(map(tmap.__getitem__, map(attrgetter("target"), docs)), dtype=I64,
                           count=nd)
    tnames = list(tmap)
    tgt = tgt[order]
    seg["tgt"] = tgt.astype(uint_dtype(len(tnames)))
    seg["tgt_blob"], seg["tgt_off"] = strings_blob([enc(t) for t in tnames])
    tord = (np.sort((tgt.astype(np.uint64) << np.uint64(32)) | np.arange(n, dtype=np.uint64))
            & np.uint64(0xFFFFFFFF)).view(I64)  # docs by (target, id)
    seg["tgtd_off"] = offsets(np.bincount(tgt, minlength=len(tnames)) if n else
                              np.zeros(len(tnames), I64))
    seg["tgtd_doc"] = tord.astype(I32)

    # ---- summaries
    sum_parts: list[np.ndarray] = []
    lens = np.empty(n, dtype=I64)
    if base is not None and nk:
        boff = base["sum_off"]
        sum_parts.append(gather_ranges(boff, base["sum_blob"], kept))
        lens[:nk] = (boff[kept + 1].astype(I64) - boff[kept].astype(I64))
    sums = list(map(attrgetter("summary"), docs))
    joined = "".join(sums)
    if joined.isascii():  # one encode; byte lengths = character lengths
        sum_parts.append(np.frombuffer(joined.encode("ascii"), dtype=U8))
        lens[nk:] = np.fromiter(map(len, sums), dtype=I64, count=nd)
    else:
        new_sum = list(map(_ENCODE, sums))
        sum_parts.append(np.frombuffer(b"".join(new_sum), dtype=U8))
        lens[nk:] = np.fromiter(map(len, new_sum), dtype=I64, count=nd)
        del new_sum
    del sums, joined
    flat = np.concatenate(sum_parts)
    src = np.zeros(n + 1, dtype=I64)
    np.cumsum(lens, out=src[1:])
    seg["sum_blob"] = flat if in_order else gather_ranges(src, flat, order)
    seg["sum_off"] = offsets(lens[order])

    # ---- structured tables and each doc's value list
    new = _NewDocs(docs)
    _assemble_tables(seg, meta, base, kept, old2new, new, new_ids, order, n)

    # ---- postings
    base_terms: list[bytes] = []
    if base is not None:
        tb = base["term_blob"].tobytes()
        toff = base["term_off"].tolist()
        base_terms = [tb[toff[i] : toff[i + 1]] for i in range(len(toff) - 1)]
    term_ids = _AutoIds((dec(t), i) for i, t in enumerate(base_terms))
    nbt = len(term_ids)
    ntid, ndoc, ntf, ndl = tokenize_docs(new, term_ids)
    all_terms = base_terms + _encode_all(list(term_ids)[nbt:])
    dl = np.empty(n, dtype=I64)
    if base is not None:
        dl[:nk] = base["dl"][kept]
        btid, bdoc, btf = seg_postings(base)
        bdoc = old2new[bdoc]
        live = bdoc >= 0
        btid, bdoc, btf = btid[live], bdoc[live], btf[live]
    else:
        btid = bdoc = btf = np.zeros(0, I64)
    dl[nk:] = ndl
    dl = dl[order]
    seg["dl"] = dl.astype(uint_dtype(int(dl.max()) if n else 0) if n and int(dl.max()) < (
        1 << 31) else I64)
    fresh = base is None and in_order
    if fresh:  # already sorted by (tid, doc)
        tid, doc, tf = ntid, ndoc, ntf  # new ids are 0..n-1 in input order
    else:
        tid = np.concatenate((btid, ntid))
        doc = np.concatenate((bdoc, new_ids[ndoc] if len(ndoc) else ndoc))
        tf = np.concatenate((btf, ntf))
    _assemble_postings(seg, tid, doc, tf, all_terms, dl, n, presorted=fresh)
    seg["meta"] = meta
    seg["key_hash"] = build_hash(key_items(seg))
    return seg


def key_items(seg: dict[str, np.ndarray]) -> list[bytes]:
    """The stored form of every doc's cache_key (32 raw bytes, or UTF-8)."""
    if int(seg["meta"][M_KEYHEX]):
        raw = seg["key_bin"].tobytes()
        return [raw[i : i + 32] for i in range(0, len(raw), 32)]
    b = seg["key_blob"].tobytes()
    o = seg["key_off"].tolist()
    return [b[o[i] : o[i + 1]] for i in range(len(o) - 1)]


def _assemble_postings(seg: dict[str, np.ndarray], tid: np.ndarray, doc: np.ndarray,
                       tf: np.ndarray, all_terms: list[bytes], dl: np.ndarray, n: int,
                       presorted: bool = False) -> None:
    nt = len(all_terms)
    maxtf = int(tf.max()) if len(tf) else 0
    if presorted:
        pass
    elif len(tid) and maxtf < (1 << 16) and n < (1 << 24) and nt < (1 << 24):
        key = np.sort((tid.astype(np.uint64) << np.uint64(40))
                      | (doc.astype(np.uint64) << np.uint64(16)) | tf.astype(np.uint64))
        tid = (key >> np.uint64(40)).astype(I64)
        doc = ((key >> np.uint64(16)) & np.uint64(0xFFFFFF)).astype(I64)
        tf = (key & np.uint64(0xFFFF)).astype(I64)
        del key
    elif len(tid):
        o = np.lexsort((doc, tid))
        tid, doc, tf = tid[o], doc[o], tf[o]
    counts = np.bincount(tid, minlength=nt) if nt else np.zeros(0, I64)
    used = np.flatnonzero(counts)
    terms = [all_terms[i] for i in used.tolist()]
    df = counts[used]
    T = len(terms)
    seg["term_blob"], seg["term_off"] = strings_blob(terms)
    seg["term_hash"] = build_hash(terms)
    starts = np.zeros(T + 1, dtype=I64)
    np.cumsum(df, out=starts[1:])
    # per-term upper bound of tf*(k1+1)/(tf + k1*(1-b+b*dl/avgdl)) at this avgdl
    # (float32 rounded up); a search at avgdl a scales it by max(1, a/avgdl)
    avgdl = float(dl.sum()) / n if n and int(dl.sum()) else 1.0
    if len(tid):
        # the length norm per doc, then per posting (same arithmetic, fewer temporaries)
        den = (constants.K1 * (1.0 - constants.B + constants.B * (dl / avgdl)))[doc]
        f = tf.astype(np.float64)
        den += f
        f *= constants.K1 + 1.0
        f /= den
        del den
        ub = np.maximum.reduceat(f, starts[:-1]).astype(np.float32)
        seg["term_ub"] = np.nextafter(ub, np.float32(np.inf))
        del f
    else:
        seg["term_ub"] = np.zeros(0, np.float32)
    seg["ub_avgdl"] = np.array([avgdl], dtype=np.float64)
    # big terms: dense tf rows + impact order
    big_min = max(constants.BIG_MIN_DOCS, n / constants.BIG_FRACTION)
    big = np.flatnonzero(df >= big_min)
    is_big = np.zeros(T, dtype=bool)
    is_big[big] = True
    big_of_tid = np.zeros(nt, dtype=bool)  # indexed by the unrenumbered term ids
    big_of_tid[used[big]] = True
    small_mask = ~big_of_tid[tid] if len(tid) else np.zeros(0, bool)
    sdf = np.where(is_big, 0, df)
    seg["post_off"] = offsets(sdf)
    seg["post_doc"] = doc[small_mask].astype(I32)
    seg["post_tf"] = tf[small_mask].astype(uint_dtype(maxtf))
    # mid terms: impact order as positions within the term's doc-sorted postings
    soff = seg["post_off"].astype(I64)
    mid = np.flatnonzero(~is_big & (df >= constants.MID_IMPACT_DOCS))
    mlen = sdf[mid]
    if len(mid):
        mstart = soff[mid]
        idx = np.repeat(mstart - np.concatenate(([0], np.cumsum(mlen)[:-1])), mlen) + \
            np.arange(int(mlen.sum()), dtype=I64)
        owner = np.repeat(np.arange(len(mid), dtype=I64), mlen)
        sd = seg["post_doc"][idx].astype(I64)
        sf = seg["post_tf"][idx].astype(I64)
        o = _impact_order(owner, sf, dl[sd], sd)
        mpos = idx[o] - np.repeat(mstart, mlen)
        fo, ow = sf[o], owner[o]
        brk = np.concatenate(([0], np.flatnonzero((fo[1:] != fo[:-1]) | (ow[1:] != ow[:-1]))
                              + 1))
        seg["mimp_pos"] = mpos.astype(uint_dtype(int(mlen.max())))
        seg["mimp_goff"] = offsets(np.bincount(ow[brk], minlength=len(mid)))
        seg["mimp_gtf"] = fo[brk].astype(I64)
        seg["mimp_gstart"] = brk.astype(I64)
        seg["mimp_gdl"] = dl[sd[o][brk]].astype(I64)  # each group's shortest doc
    else:
        seg["mimp_pos"] = np.zeros(0, np.uint16)
        seg["mimp_goff"] = np.zeros(1, np.uint32)
        seg["mimp_gtf"] = seg["mimp_gstart"] = seg["mimp_gdl"] = np.zeros(0, I64)
    seg["mimp_tid"] = mid.astype(I32)
    seg["mimp_off"] = offsets(mlen)
    seg["big_tid"] = big.astype(I32)
    bmax = max([1] + [int(tf[starts[b] : starts[b + 1]].max()) for b in big.tolist()])
    rows = np.zeros((len(big), n), dtype=uint_dtype(bmax))
    imp: list[np.ndarray] = []
    gcount: list[int] = []
    gtf: list[np.ndarray] = []
    gstart: list[np.ndarray] = []
    gdl: list[np.ndarray] = []
    pos = 0
    for j, b in enumerate(big.tolist()):
        d = doc[starts[b] : starts[b + 1]]
        f = tf[starts[b] : starts[b + 1]]
        rows[j, d] = f
        o = _impact_order(None, f, dl[d], d)
        imp.append(d[o].astype(I32))
        fs = f[o]
        brk = np.concatenate(([0], np.flatnonzero(fs[1:] != fs[:-1]) + 1))
        gcount.append(len(brk))
        gtf.append(fs[brk])
        gstart.append(brk + pos)
        gdl.append(dl[d[o][brk]])
        pos += len(d)
    seg["big_tf"] = rows.reshape(-1)
    seg["imp_off"] = offsets(np.array([len(x) for x in imp], dtype=I64))
    seg["imp_doc"] = np.concatenate(imp) if imp else np.zeros(0, I32)
    seg["imp_goff"] = offsets(np.array(gcount, dtype=I64))
    seg["imp_gtf"] = np.concatenate(gtf).astype(I64) if gtf else np.zeros(0, I64)
    seg["imp_gstart"] = np.concatenate(gstart).astype(I64) if gstart else np.zeros(0, I64)
    seg["imp_gdl"] = np.concatenate(gdl).astype(I64) if gdl else np.zeros(0, I64)


def _impact_order(owner: np.ndarray | None, tf: np.ndarray, dl: np.ndarray,
                  doc: np.ndarray) -> np.ndarray:
    """Order by (owner, tf, dl ascending, doc descending): one uint64 sort when it fits."""
    n = len(doc)
    if not n:
        return np.zeros(0, I64)
    bits = [int(x.max()).bit_length() for x in (tf, dl, doc)]
    ob = int(owner.max()).bit_length() if owner is not None else 0
    if sum(bits) + ob <= 63:
        key = tf.astype(np.uint64) << np.uint64(bits[1] + bits[2])
        key |= dl.astype(np.uint64) << np.uint64(bits[2])
        key |= (np.uint64((1 << bits[2]) - 1) - doc.astype(np.uint64))
        if owner is not None:
            key |= owner.astype(np.uint64) << np.uint64(sum(bits))
        return np.argsort(key)  # distinct keys (a doc is in a term once): no stable sort
    keys = (-doc, dl, tf) if owner is None else (-doc, dl, tf, owner)
    return np.lexsort(keys)


def _assemble_tables(seg: dict[str, np.ndarray], meta: np.ndarray,
                     base: dict[str, np.ndarray] | None, kept: np.ndarray,
                     old2new: np.ndarray, new: _NewDocs,
                     new_ids: np.ndarray, order: np.ndarray, n: int) -> None:
    nk, nd = len(kept), len(new_ids)
    # each doc's value list (global ids, raw order) from the base, remapped below
    gid_parts: list[np.ndarray] = []
    glen = np.zeros(n, dtype=I64)
    old_tbase: list[int] = []
    if base is not None:
        old_tbase = base["meta"][M_TBASE : M_TBASE + len(TABLES) + 1].tolist()
        boff = base["dv_off"]
        gid_parts.append(gather_ranges(boff, base["dv_val"], kept).astype(I64))
        glen[:nk] = boff[kept + 1].astype(I64) - boff[kept].astype(I64)
    new_counts = np.zeros(nd, dtype=I64)
    for t in TABLES:
        new_counts += new.counts[_RAW_FIELD[t]]
    glen[nk:] = new_counts
    tbase = 0
    remaps: list[np.ndarray] = []
    new_vid_parts: list[tuple[np.ndarray, np.ndarray]] = []  # per table: (vid, count per doc)
    for ti, name in enumerate(TABLES):
        nvals, vids = new.values(_RAW_FIELD[name])
        lens = new.counts[_RAW_FIELD[name]]
        values: list[str] = []
        if base is not None:
            values = decode_strings(base[name + "_vblob"], base[name + "_voff"])
        nbv = len(values)
        if nbv:  # the new docs' values, numbered after the base's
            bmap = {v: i for i, v in enumerate(values)}
            idmap = np.empty(len(nvals), dtype=I64)
            for i, v in enumerate(nvals):
                j = bmap.get(v)
                if j is None:
                    j = len(values)
                    values.append(v)
                idmap[i] = j
            vids = idmap[vids] if len(vids) else vids
        else:
            values = nvals
        # value -> docs pairs: kept base pairs (remapped) + new pairs
        a_parts = [vids]
        b_parts = [np.repeat(new_ids, lens)]
        if base is not None and nbv:
            voff = base[name + "_vd_off"].astype(I64)
            a_parts.append(np.repeat(np.arange(nbv, dtype=I64), np.diff(voff)))
            b_parts.append(old2new[base[name + "_vd_doc"]])
        va = np.concatenate(a_parts)
        vb = np.concatenate(b_parts)
        live = vb >= 0
        vid, vdoc = sort_pairs(va[live], vb[live])
        counts = np.bincount(vid, minlength=len(values)) if len(values) else np.zeros(0, I64)
        used = np.flatnonzero(counts)
        remap = np.full(len(values), -1, dtype=I64)
        remap[used] = np.arange(len(used), dtype=I64)
        vals = [values[i] for i in used.tolist()]
        seg[name + "_vblob"], seg[name + "_voff"] = strings_blob(_encode_all(vals))
        seg[name + "_vd_off"] = offsets(counts[used])
        seg[name + "_vd_doc"] = vdoc.astype(I32)
        # lookup keys -> values
        kflat, kcount = _table_keys(name, vals)
        kuniq = list(dict.fromkeys(kflat))
        kmap = dict(zip(kuniq, range(len(kuniq)), strict=True))
        kid, kval = sort_pairs(np.fromiter(map(kmap.__getitem__, kflat), dtype=I64,
                                           count=len(kflat)),
                               np.repeat(np.arange(len(vals), dtype=I64), kcount))
        seg[name + "_kv_off"] = offsets(np.bincount(kid, minlength=len(kmap)) if len(kmap)
                                        else np.zeros(0, I64))
        seg[name + "_kv_val"] = kval.astype(I32)
        kb_ = _encode_all(kuniq)
        seg[name + "_kblob"], seg[name + "_koff"] = strings_blob(kb_)
        seg[name + "_khash"] = build_hash(kb_)
        if name == "sym":
            _assemble_trigrams(seg, vals)
        meta[M_TBASE + ti] = tbase
        remaps.append(remap + tbase)
        new_vid_parts.append((vids, lens))
        tbase += len(vals)
    meta[M_TBASE + len(TABLES)] = tbase
    # doc value lists: base part remapped table by table, then new docs in table order
    out = np.empty(int(glen.sum()), dtype=I64)
    pos = 0
    if base is not None and nk:
        g = gid_parts[0]
        ob = np.array(old_tbase, dtype=I64)
        t_of = np.searchsorted(ob, g, "right") - 1
        newg = np.empty(len(g), dtype=I64)
        for ti in range(len(TABLES)):
            m = t_of == ti
            newg[m] = remaps[ti][g[m] - ob[ti]]
        out[: len(g)] = newg
        pos = len(g)
    if nd:
        # interleave per doc: table 0 values, table 1 values, ... (positions computed)
        start = np.zeros(nd, dtype=I64)
        np.cumsum(new_counts[:-1], out=start[1:])
        start += pos
        for ti, (vids, lens) in enumerate(new_vid_parts):
            if len(vids):
                within = np.arange(len(vids), dtype=I64) - np.repeat(np.cumsum(lens) - lens,
                                                                     lens)
                out[np.repeat(start, lens) + within] = remaps[ti][vids]
            start += lens
    src = np.zeros(n + 1, dtype=I64)
    np.cumsum(glen, out=src[1:])
    seg["dv_val"] = (out if (n < 2 or bool(np.all(order[1:] > order[:-1])))
                     else gather_ranges(src, out, order)).astype(I32)
    seg["dv_off"] = offsets(glen[order])


def _table_keys(name: str, vals: list[str]) -> tuple[list[str], np.ndarray]:
    """Every lookup key of every value (value by value, no repeats), and the counts."""
    norm, keyfn = TABLE_RULES[name]
    if name in ("task", "ptype"):
        return list(map(norm, vals)), np.ones(len(vals), dtype=I64)
    if name == "path":
        per = [keyfn(norm(v)) for v in vals]  # suffixes are distinct
    else:
        split = _SYM_SPLIT.split if name == "sym" else _TEST_SPLIT.split
        seps = ".:#" if name == "sym" else ".:/#"
        per = []
        for low in map(str.lower, vals):
            if seps[0] in low or seps[1] in low or seps[2] in low or seps[-1] in low:
                last = split(low)[-1]
                per.append([low] if (not last or last == low) else [low, last])
            else:  # no separator: the value is its own last component
                per.append([low])
    return list(chain.from_iterable(per)), np.fromiter(map(len, per), dtype=I64,
                                                       count=len(per))


def _assemble_trigrams(seg: dict[str, np.ndarray], vals: list[str]) -> None:
    """Trigram (of the lowercased UTF-8 value) -> symbol value ids, for prefix/contains."""
    lows = _encode_all([v.lower() for v in vals])
    blob = np.frombuffer(b"".join(lows), dtype=U8).astype(I64)
    lens = np.fromiter(map(len, lows), dtype=I64, count=len(lows))
    starts = np.zeros(len(lows) + 1, dtype=I64)
    np.cumsum(lens, out=starts[1:])
    if len(blob) >= 3:
        code = (blob[:-2] << 16) | (blob[1:-1] << 8) | blob[2:]
        owner = np.repeat(np.arange(len(lows), dtype=I64), lens)[:-2]
        ok = np.arange(len(code), dtype=I64) + 2 < starts[owner + 1]
        code, owner = sort_pairs(code[ok], owner[ok])
    else:
        code = owner = np.zeros(0, I64)
    # code is sorted: the first of each run of equal codes
    head = np.empty(len(code), dtype=bool)
    head[:1] = True
    np.not_equal(code[1:], code[:-1], out=head[1:])
    first = np.flatnonzero(head)
    ucode = code[first]
    seg["tg_code"] = ucode.astype(np.uint32)
    seg["tg_off"] = offsets(np.diff(np.concatenate((first, [len(code)]))).astype(I64)
                            if len(code) else np.zeros(0, I64))
    seg["tg_val"] = owner.astype(np.uint16 if len(vals) < (1 << 16) else I32)


def empty_segment() -> dict[str, np.ndarray]:
    return assemble(None, None, [])


# ---------------------------------------------------------------- bytes
def seg_to_bytes(seg: dict[str, np.ndarray]) -> bytes:
    names = sorted(seg)
    specs = []
    pos = 0
    chunks: list[bytes] = []
    for nm in names:
        a = np.ascontiguousarray(seg[nm])
        pad = (-pos) % _ALIGN
        if pad:
            chunks.append(b"\0" * pad)
            pos += pad
        raw = a.tobytes()
        specs.append([nm, a.dtype.str, int(a.shape[0]), pos])
        chunks.append(raw)
        pos += len(raw)
    header = json.dumps({"v": FORMAT_VERSION, "arrays": specs}, separators=(",", ":")).encode()
    head = MAGIC + struct.pack("<II", FORMAT_VERSION, len(header)) + header
    head += b"\0" * ((-len(head)) % _ALIGN)
    body = head + b"".join(chunks)
    return body + blake3.blake3(body).digest()


_PER_TABLE = ("vblob", "voff", "vd_off", "vd_doc", "kblob", "koff", "khash", "kv_off", "kv_val")
_REQUIRED = {"meta", "key_hash", "created", "dl", "est", "tgt", "tgt_blob", "tgt_off", "tgtd_off",
             "tgtd_doc", "key_bin", "key_blob", "key_off", "sum_blob", "sum_off", "dv_off",
             "dv_val", "term_blob", "term_off", "term_hash", "term_ub", "ub_avgdl",
             "post_off", "post_doc", "post_tf", "big_tid", "big_tf", "imp_off", "imp_doc",
             "imp_goff", "imp_gtf", "imp_gstart", "tg_code", "tg_off", "tg_val", "mimp_tid",
             "mimp_off", "mimp_pos", "mimp_goff", "mimp_gtf", "mimp_gstart", "imp_gdl",
             "mimp_gdl"} | {
    f"{t}_{s}" for t in TABLES for s in _PER_TABLE}
_ALLOWED_DTYPES = {"|u1", "<u2", "<u4", "<u8", "<i4", "<i8", "<f4", "<f8", "|i1"}


def seg_from_bytes(data: Any, verify: bool = True) -> dict[str, np.ndarray]:
    """Parse :func:`seg_to_bytes` output (zero-copy); ValueError when it is not valid."""
    try:
        mv = memoryview(data).cast("B")
    except TypeError as e:
        raise ValueError(f"recall index: not a bytes-like object ({e})") from None
    if len(mv) < len(MAGIC) + 8 + 32 or bytes(mv[: len(MAGIC)]) != MAGIC:
        raise ValueError("recall index: bad magic or truncated data")
    version, hlen = struct.unpack_from("<II", mv, len(MAGIC))
    if version != FORMAT_VERSION:
        raise ValueError(f"recall index: unsupported format version {version}")
    end = len(mv) - 32
    if verify and blake3.blake3(mv[:end]).digest() != bytes(mv[end:]):
        raise ValueError("recall index: checksum mismatch (garbled or truncated)")
    hstart = len(MAGIC) + 8
    if hstart + hlen > end:
        raise ValueError("recall index: truncated header")
    try:
        header = json.loads(bytes(mv[hstart : hstart + hlen]))
        specs = header["arrays"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"recall index: unreadable header ({e})") from None
    base = hstart + hlen + ((-(hstart + hlen)) % _ALIGN)
    seg: dict[str, np.ndarray] = {}
    try:
        for nm, dt, count, off in specs:
            if dt not in _ALLOWED_DTYPES:
                raise ValueError(f"array {nm}: dtype {dt}")
            dtype = np.dtype(dt)
            start = base + int(off)
            stop = start + int(count) * dtype.itemsize
            if stop > end or start < base or count < 0:
                raise ValueError(f"array {nm} out of bounds")
            seg[str(nm)] = np.frombuffer(mv, dtype=dtype, count=int(count), offset=start)
    except (TypeError, ValueError) as e:
        raise ValueError(f"recall index: bad array table ({e})") from None
    _check(seg)
    return seg


def _check(seg: dict[str, np.ndarray]) -> None:
    """Cheap structural checks (lengths and end offsets), so lookups stay in bounds."""
    missing = _REQUIRED - set(seg)
    if missing:
        raise ValueError(f"recall index: missing arrays {sorted(missing)[:3]}")
    n = len(seg["created"])
    meta = seg["meta"]

    def off_ok(off: str, data: str, count: int) -> bool:
        o = seg[off]
        return len(o) == count + 1 and int(o[0]) == 0 and int(o[-1]) == len(seg[data])

    ok = len(meta) == M_LEN
    if ok:
        tb = meta[M_TBASE:].tolist()
        counts = [len(seg[t + "_voff"]) - 1 for t in TABLES]
        ok = tb[0] == 0 and all(tb[i + 1] - tb[i] == counts[i] for i in range(len(TABLES)))
        if int(meta[M_KEYHEX]):
            ok = ok and len(seg["key_bin"]) == 32 * n
        else:
            ok = ok and off_ok("key_off", "key_blob", n)
    T = len(seg["term_off"]) - 1
    B = len(seg["big_tid"])
    ok = (ok and len(seg["dl"]) == n and len(seg["est"]) == n and len(seg["tgt"]) == n
          and off_ok("sum_off", "sum_blob", n) and off_ok("dv_off", "dv_val", n)
          and off_ok("tgt_off", "tgt_blob", len(seg["tgtd_off"]) - 1)
          and off_ok("tgtd_off", "tgtd_doc", len(seg["tgt_off"]) - 1)
          and len(seg["tgtd_doc"]) == n
          and off_ok("term_off", "term_blob", T) and off_ok("post_off", "post_doc", T)
          and len(seg["post_tf"]) == len(seg["post_doc"])
          and len(seg["term_ub"]) == T and len(seg["ub_avgdl"]) == 1
          and len(seg["big_tf"]) == B * n and off_ok("imp_off", "imp_doc", B)
          and off_ok("imp_goff", "imp_gtf", B) and len(seg["imp_gstart"]) == len(seg["imp_gtf"])
          and off_ok("tg_off", "tg_val", len(seg["tg_code"]))
          and off_ok("mimp_off", "mimp_pos", len(seg["mimp_tid"]))
          and off_ok("mimp_goff", "mimp_gtf", len(seg["mimp_tid"]))
          and len(seg["mimp_gstart"]) == len(seg["mimp_gtf"]) == len(seg["mimp_gdl"])
          and len(seg["imp_gdl"]) == len(seg["imp_gtf"]))
    for t in TABLES:
        nv = len(seg[t + "_voff"]) - 1
        nk = len(seg[t + "_koff"]) - 1
        ok = ok and off_ok(t + "_voff", t + "_vblob", nv) and off_ok(
            t + "_vd_off", t + "_vd_doc", nv) and off_ok(t + "_koff", t + "_kblob", nk) and \
            off_ok(t + "_kv_off", t + "_kv_val", nk)
    if ok and B:
        ok = int(seg["big_tid"].max()) < T and int(seg["big_tid"].min()) >= 0
    if ok and len(seg["mimp_tid"]):
        ok = int(seg["mimp_tid"].max()) < T and int(seg["mimp_tid"].min()) >= 0
    kh = seg["key_hash"]
    ok = ok and len(kh) > n and (len(kh) & (len(kh) - 1)) == 0 and (
        not n or int(kh.max()) < n)
    if ok and len(seg["term_hash"]):
        h = seg["term_hash"]
        ok = (len(h) & (len(h) - 1)) == 0 and int(h.max()) < T
    for t in TABLES:
        h = seg[t + "_khash"]
        ok = ok and (len(h) & (len(h) - 1)) == 0 and (
            not len(h) or int(h.max()) < len(seg[t + "_koff"]) - 1)
    if not ok:
        raise ValueError("recall index: inconsistent array lengths")
