"""The recall index: a frozen columnar base segment plus a small mutable delta.

* ``add``/``remove`` touch only the delta (dicts) and a few per-doc arrays; the
  base is never re-indexed by a put.  The delta is merged into a new base
  (without re-tokenising the base) when it grows past ``max(4096, N/8)``
  docs (or as many removals), and by :meth:`RecallIndex.to_bytes`.
* ``rank`` (the ranking core: ``(cache_key, score)`` pairs) and ``search``
  (``rank`` + full :class:`RecallHit` objects) rank exactly (scores are the
  BM25 sum plus boosts, float64) but do not score every posting: two- and
  multi-term queries first score only the docs that can still win (docs with
  two or more of the terms, the rarest terms' docs, boosted docs) and keep
  that answer when no other doc's bound reaches it; otherwise terms are taken
  rarest first and a term whose best possible contribution cannot lift an
  unseen doc into the top k is only *probed* for the candidates (MaxScore);
  when a single big term is left, its impact-ordered doc list yields the best
  remaining docs directly.  Small queries never leave plain Python (no
  per-call numpy overhead).

See docs/recall.md for the semantics and the layout.
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from operator import attrgetter
from typing import Any
from zlib import crc32

import numpy as np

from . import constants
from . import segment as S
from .constants import BOOSTS, K1, B
from .query import RecallQuery, as_query, is_path_like, partial_symbol_ok
from .snippet import make_snippet
from .tokenize import tokenize
from .types import RecallDoc, RecallHit

_K1P1 = K1 + 1.0
_SEPS = frozenset(".:#")

_EMPTY_I = np.zeros(0, dtype=np.int64)
_EMPTY_F = np.zeros(0, dtype=np.float64)


def sym_level(v: str, w: str, partial: bool) -> int:
    """3 exact, 2 prefix, 1 contains, 0 none (v and w lowercased).

    Exact: ``v == w`` or ``w`` is v's last qualified component (after ``.``,
    ``:`` or ``#``); prefix: v or one of its components starts with ``w``.
    """
    if v == w:
        return 3
    i = v.find(w) if w else -1
    if i < 0:
        return 0
    n = len(w)
    if v.endswith(w) and v[-n - 1] in _SEPS and not _SEPS.intersection(w):
        return 3
    if not partial:
        return 0
    while i >= 0:
        if i == 0 or v[i - 1] in _SEPS:
            return 2
        i = v.find(w, i + 1)
    return 1


def path_level(v: str, cw: str) -> int:
    """2 canonical/suffix, 1 basename, 0 none (both canonical)."""
    if v == cw:
        return 2
    if "/" in cw:
        return 2 if v.endswith("/" + cw) else 0
    return 1 if v.rsplit("/", 1)[-1] == cw else 0


def mview(a: np.ndarray) -> memoryview[Any]:
    """A memoryview for fast scalar reads of a 1-d array, also when it is unaligned
    (an index inside a larger mapped file need not start on an aligned offset).

    Its items are Python ints or floats, following ``a``'s dtype (``Any``: the
    segment arrays are not typed by dtype).
    """
    # numpy's stubs declare ndarray.__buffer__ only for Python >= 3.12 (the dunder
    # is new there), but ndarray implements the buffer protocol on every version
    m: memoryview[Any] = memoryview(a)  # type: ignore[arg-type]
    if m.format[:1] in "=<>!@" and m.format != "B":
        # typeshed's cast() takes only literal format codes; a numeric dtype's char
        # (the only dtypes indexed here) is a valid struct format code
        m = m.cast("B").cast(a.dtype.char)  # type: ignore[arg-type]
    return m


class _Hash:
    """Read-only view of a :func:`segment.build_hash` table (no dict is built)."""

    __slots__ = ("h", "mask", "off", "blob")

    def __init__(self, h: np.ndarray, off: np.ndarray, blob: np.ndarray) -> None:
        self.h = mview(h) if len(h) else mview(np.full(8, -1, np.int32))
        self.mask = len(self.h) - 1
        self.off = mview(off)
        self.blob = mview(blob)

    def find(self, key: bytes) -> int:
        h, off, blob, mask = self.h, self.off, self.blob, self.mask
        n = len(key)
        pos = crc32(key) & mask
        while True:
            i = h[pos]
            if i < 0:
                return -1
            s = off[i]
            if off[i + 1] - s == n and blob[s : s + n] == key:
                return i
            pos = (pos + 1) & mask


class _Term:
    """One distinct query token, resolved against the index for one search."""

    __slots__ = ("tok", "idf", "ub", "big", "mid", "s0", "s", "e", "dd", "dt", "ddict", "df")

    def __init__(self, tok: str) -> None:
        self.tok = tok
        self.idf = 0.0
        self.ub = 0.0
        self.big = -1  # index of a big base term, else -1
        self.mid = -1  # index of a small base term's impact order, else -1
        self.s0 = 0  # start of the term's postings in post_doc
        self.s = self.e = 0  # live range in post_doc (small base term)
        self.dd: np.ndarray = _EMPTY_I  # live delta docs, sorted
        self.dt: np.ndarray = _EMPTY_I
        self.ddict: dict[int, int] | None = None
        self.df = 0  # base postings in range (an upper bound of live ones)


class _Unit:
    """A MaxScore unit: a term, or the part of its docs with tf = 1 ("lo") or tf >= 2."""

    __slots__ = ("j", "t", "kind", "ub", "n")

    def __init__(self, j: int, t: _Term, kind: str, ub: float, n: int) -> None:
        self.j, self.t, self.kind, self.ub, self.n = j, t, kind, ub, n


_NO_KINDS: dict[str, Any] = {k: frozenset() for k in ("path", "sym", "test", "task")}


class _Query:
    """Everything one search needs, resolved once."""

    __slots__ = ("terms", "avgdl", "la", "i0", "lo", "hi", "since", "until", "boost",
                 "kind_docs", "rules", "restrict", "task_docs", "ntok", "_barr",
                 "filter_rules", "matched", "_idf")

    # set by RecallIndex._ranked right after construction (declared here for the
    # type checker; bare annotations create no class attributes, so the slots stay
    # the only storage)
    avgdl: float
    la: float | None  # live_after
    i0: int  # first base doc id not expired
    lo: int  # base doc id range [lo, hi) allowed by since/until
    hi: int
    since: float | None
    until: float | None
    ntok: int  # distinct query tokens (matched or not)

    def __init__(self) -> None:
        self.matched = True  # rankers report each hit's matched tokens (search needs them)
        self.terms: list[_Term] = []
        self.boost: dict[int, float] = {}
        self.kind_docs: dict[str, Any] = _NO_KINDS  # replaced on the first match
        self.filter_rules = False
        self.rules: list[tuple[str, str, int]] = []
        self.restrict: np.ndarray | None = None
        self.task_docs: np.ndarray | None = None
        self._barr: tuple[np.ndarray, np.ndarray] | None = None
        self._idf: np.ndarray | None = None

    def idf_row(self) -> np.ndarray:
        """The terms' idf as a row (float64)."""
        if self._idf is None:
            self._idf = np.array([t.idf for t in self.terms], dtype=np.float64)
        return self._idf

    def boost_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The boosted docs (sorted) and their total boosts."""
        if self._barr is None:
            n = len(self.boost)
            d = np.fromiter(self.boost.keys(), dtype=np.int64, count=n)
            v = np.fromiter(self.boost.values(), dtype=np.float64, count=n)
            o = np.argsort(d)
            self._barr = (d[o], v[o])
        return self._barr


class RecallIndex:
    """BM25 + structured recall over live cache entries (pure, in memory)."""

    def __init__(self) -> None:
        self._load(S.empty_segment())

    # ------------------------------------------------------------ state
    def _load(self, seg: dict[str, np.ndarray]) -> None:
        self._seg = seg
        self._nb = nb = int(len(seg["created"]))
        self._n = nb
        self._created: np.ndarray = seg["created"]
        self._dl: np.ndarray = seg["dl"]
        self._tgt: np.ndarray = seg["tgt"]
        self._est: np.ndarray = seg["est"]
        self._alive: np.ndarray | None = None  # None: every base doc alive, no delta
        self._mutable = False
        self._live_n = nb
        self._live_len = int(seg["dl"].sum(dtype=np.int64))
        self._cum: np.ndarray | None = None
        self._removed: set[int] = set()
        self._removed_arr: np.ndarray | None = None
        self._dpost: dict[str, dict[int, int]] = {}
        self._dkeys: dict[str, dict[str, set[str]]] = {t: {} for t in S.TABLES}
        self._dvals: dict[str, dict[str, set[int]]] = {t: {} for t in S.TABLES}
        self._dtgt: dict[str, set[int]] = {}
        self._ddocs: dict[int, RecallDoc] = {}
        self._dkey: dict[str, int] = {}
        self._tnames: list[str] | None = None
        self._tmap: dict[str, int] | None = None
        self._version = 0
        self._nrmc: tuple[Any, np.ndarray] | None = None
        self._nrm_last: Any = None
        self._darr: dict[str, tuple[int, np.ndarray, np.ndarray]] = {}
        meta = seg["meta"]
        self._keyhex = bool(int(meta[S.M_KEYHEX]))
        self._tbase = [int(x) for x in meta[S.M_TBASE :].tolist()]
        self._terms = _Hash(seg["term_hash"], seg["term_off"], seg["term_blob"])
        self._keyhash = _Hash(seg["key_hash"], seg["key_off"], seg["key_blob"])
        self._tables = {t: _Hash(seg[t + "_khash"], seg[t + "_koff"], seg[t + "_kblob"])
                        for t in S.TABLES}
        self._mv = {k: mview(seg[k]) for k in (
            "post_off", "post_doc", "post_tf", "term_ub", "est", "imp_off",
            "imp_doc", "imp_goff", "imp_gtf", "imp_gstart", "dv_off", "dv_val", "sum_off",
            "sum_blob", "key_bin", "tgtd_off", "tgtd_doc", "tg_off", "mimp_off", "mimp_pos",
            "mimp_goff", "mimp_gtf", "mimp_gstart", "imp_gdl", "mimp_gdl", "tg_code",
            "tg_val")}
        for t in S.TABLES:
            for part in ("voff", "vblob", "kv_off", "kv_val", "vd_off", "vd_doc"):
                self._mv[f"{t}_{part}"] = mview(seg[f"{t}_{part}"])
        self._tabs = {t: (self._tables[t], self._mv[t + "_kv_off"], self._mv[t + "_kv_val"])
                      for t in S.TABLES}
        self._big = {int(t): b for b, t in enumerate(seg["big_tid"].tolist())}
        self._midmap = {int(t): m for m, t in enumerate(seg["mimp_tid"].tolist())}
        self._rows = seg["big_tf"].reshape(len(self._big), nb) if nb else \
            np.zeros((len(self._big), 0), np.uint8)
        self._rowmv = [mview(self._rows[b]) for b in range(len(self._big))]
        self._ub_avgdl = float(seg["ub_avgdl"][0])
        self._vcache: dict[int, tuple[int, str]] = {}
        self._gcache: dict[tuple[int, int], Any] = {}  # impact groups (static per segment)
        self._lowvals: list[str] | None = None
        self._bind_arrays()

    def _bind_arrays(self) -> None:
        """Scalar views of the per-doc arrays (they are replaced when they grow)."""
        self._created_mv = mview(self._created)
        self._dl_mv = mview(self._dl)
        self._alive_mv = mview(self._alive) if self._alive is not None else None

    def _ensure_mutable(self, extra: int = 1) -> None:
        need = self._n + extra
        if self._mutable and len(self._created) >= need:
            return
        cap = max(need, 64, len(self._created) * 2 if self._mutable else need + need // 8)
        n = self._n

        def grow(a: np.ndarray, fill: Any, dtype: Any = None) -> np.ndarray:
            out = np.full(cap, fill, dtype=dtype or a.dtype)
            out[:n] = a[:n]
            return out

        self._created = grow(self._created, 0.0)
        self._dl = grow(self._dl, 0, np.int64)
        self._tgt = grow(self._tgt, 0, np.int64)
        self._est = grow(self._est, 0, np.int64)
        alive = np.zeros(cap, dtype=np.uint8)
        if self._alive is None:
            alive[:n] = 1
        else:
            alive[:n] = self._alive[:n]
        self._alive = alive
        self._mutable = True
        self._bind_arrays()

    def _targets(self) -> tuple[list[str], dict[str, int]]:
        if self._tnames is None or self._tmap is None:
            self._tnames = S.decode_strings(self._seg["tgt_blob"], self._seg["tgt_off"])
            self._tmap = {t: i for i, t in enumerate(self._tnames)}
        return self._tnames, self._tmap

    def _base_id(self, cache_key: str) -> int:
        """Base doc id of a live cache_key, else -1."""
        kh = self._keyhash
        if not self._nb:
            return -1
        if self._keyhex:
            if len(cache_key) != 64:
                return -1
            try:
                kb = bytes.fromhex(cache_key)
            except ValueError:
                return -1
            if kb.hex() != cache_key:
                return -1
            h, mask, bins = kh.h, kh.mask, self._mv["key_bin"]
            pos = crc32(kb) & mask
            while True:
                i = h[pos]
                if i < 0:
                    return -1
                if bins[32 * i : 32 * i + 32] == kb:
                    return -1 if i in self._removed else i
                pos = (pos + 1) & mask
        i = kh.find(S.enc(cache_key))
        return -1 if (i < 0 or i in self._removed) else i

    def _doc_id(self, cache_key: str) -> int:
        i = self._dkey.get(cache_key)
        return i if i is not None else self._base_id(cache_key)

    def __len__(self) -> int:
        return self._live_n

    def __contains__(self, cache_key: object) -> bool:
        return isinstance(cache_key, str) and self._doc_id(cache_key) >= 0

    # ------------------------------------------------------------ build / mutate
    @classmethod
    def build(cls, docs: Iterable[RecallDoc]) -> RecallIndex:
        """Bulk-build an index (fast path); later duplicates of a cache_key win."""
        docs = docs if isinstance(docs, (list, tuple)) else list(docs)
        # later duplicates win (doc order is by created_at, cache_key: input order is free)
        byk = dict(zip(map(_KEY, docs), docs, strict=True))
        idx = cls.__new__(cls)
        with _no_gc():
            idx._load(S.assemble(None, None, list(byk.values())))
        return idx

    def add(self, doc: RecallDoc) -> None:
        """Insert ``doc``, replacing any entry with the same cache_key (no re-index)."""
        old = self._doc_id(doc.cache_key)
        if old >= 0:
            self._remove_id(old)
        self._ensure_mutable()
        assert self._alive is not None
        i = self._n
        self._n += 1
        counts = Counter(tokenize_texts(doc))
        dl = sum(counts.values())
        self._created[i] = doc.created_at
        self._dl[i] = dl
        self._est[i] = doc.est_bytes
        _, tmap = self._targets()
        t = tmap.get(doc.target)
        if t is None:
            assert self._tnames is not None
            t = tmap[doc.target] = len(self._tnames)
            self._tnames.append(doc.target)
        self._tgt[i] = t
        self._dtgt.setdefault(doc.target, set()).add(i)
        self._alive[i] = 1
        dpost = self._dpost
        for term, tf in counts.items():
            p = dpost.get(term)
            if p is None:
                dpost[term] = {i: tf}
            else:
                p[i] = tf
        for name in S.TABLES:
            dk, dv = self._dkeys[name], self._dvals[name]
            for v in S.doc_table_values(doc, name):
                docs = dv.get(v)
                if docs is None:
                    dv[v] = {i}
                    for k in S.value_keys(name, v):
                        dk.setdefault(k, set()).add(v)
                else:
                    docs.add(i)
        self._ddocs[i] = doc
        self._dkey[doc.cache_key] = i
        self._live_n += 1
        self._live_len += dl
        self._changed()
        if len(self._ddocs) > max(4096, self._nb // 8):
            self.compact()

    def add_many(self, docs: Iterable[RecallDoc]) -> None:
        """``add`` each doc; a large batch is merged straight into a new base."""
        docs = list(docs)
        if len(docs) > max(4096, self._nb // 8):
            latest: dict[str, RecallDoc] = {}
            for d in docs:
                latest.pop(d.cache_key, None)
                latest[d.cache_key] = d
            for k in latest:
                old = self._doc_id(k)
                if old >= 0:
                    self._remove_id(old)
            self._compact(list(latest.values()))
        else:
            for d in docs:
                self.add(d)

    def remove(self, cache_key: str) -> None:
        """Drop the entry with ``cache_key``; no-op when absent."""
        i = self._doc_id(cache_key)
        if i >= 0:
            self._remove_id(i)
            if len(self._removed) > max(4096, self._nb // 8):
                self.compact()

    def _changed(self) -> None:
        self._version += 1
        self._darr.clear()

    def _remove_id(self, i: int) -> None:
        self._ensure_mutable(0)
        assert self._alive is not None
        self._alive[i] = 0
        self._live_n -= 1
        self._live_len -= int(self._dl[i])
        self._changed()
        if i < self._nb:
            self._removed.add(i)
            self._removed_arr = None
            return
        doc = self._ddocs.pop(i)
        self._dkey.pop(doc.cache_key, None)
        self._dtgt[doc.target].discard(i)
        for term in set(tokenize_texts(doc)):
            p = self._dpost.get(term)
            if p is not None:
                p.pop(i, None)
                if not p:
                    del self._dpost[term]
        for name in S.TABLES:
            dk, dv = self._dkeys[name], self._dvals[name]
            for v in S.doc_table_values(doc, name):
                docs = dv.get(v)
                if docs is None:
                    continue
                docs.discard(i)
                if not docs:
                    del dv[v]
                    for k in S.value_keys(name, v):
                        ks = dk.get(k)
                        if ks is not None:
                            ks.discard(v)
                            if not ks:
                                del dk[k]

    def compact(self) -> None:
        """Merge the delta and drop removed docs into a fresh base segment."""
        self._compact([])

    def _compact(self, extra: list[RecallDoc]) -> None:
        if not self._ddocs and not self._removed and not extra:
            return
        keep = None
        if self._alive is not None:
            keep = self._alive[: self._nb].astype(bool)
        docs = [self._ddocs[i] for i in sorted(self._ddocs)] + extra
        with _no_gc():
            self._load(S.assemble(self._seg, keep, docs))

    # ------------------------------------------------------------ bytes
    def to_bytes(self) -> bytes:
        """Serialise (merging the delta first); load with :meth:`from_bytes`."""
        self.compact()
        return S.seg_to_bytes(self._seg)

    @classmethod
    def from_bytes(cls, data: Any, verify: bool = True) -> RecallIndex:
        """Open serialised bytes (bytes, memoryview or mmap) without copying.

        Raises ValueError when the data is garbled.  ``verify=False`` skips the
        blake3 checksum (structure is still checked) for callers whose own
        authenticated container already covers these bytes.
        """
        idx = cls.__new__(cls)
        idx._load(S.seg_from_bytes(data, verify=verify))
        return idx

    # ------------------------------------------------------------ statistics
    def _cumdl(self) -> np.ndarray:
        if self._cum is None:
            cum = np.zeros(self._nb + 1, dtype=np.int64)
            np.cumsum(self._seg["dl"], out=cum[1:])
            self._cum = cum
        return self._cum

    def _removed_sorted(self) -> np.ndarray:
        if self._removed_arr is None:
            self._removed_arr = np.array(sorted(self._removed), dtype=np.int64)
        return self._removed_arr

    def _stats(self, la: float | None) -> tuple[int, int, int]:
        """(N, total length, first base doc id not expired) over live docs."""
        if la is None:
            return self._live_n, self._live_len, 0
        nb = self._nb
        cmv = self._created_mv
        if nb == 0 or cmv[0] >= la:
            i0 = 0
        else:
            i0 = int(np.searchsorted(self._seg["created"], la, "left"))
        if i0 == 0 and self._n == nb:
            return self._live_n, self._live_len, 0
        cum = self._cumdl()
        n = nb - i0
        total = int(cum[nb] - cum[i0])
        if self._removed:
            r = self._removed_sorted()
            r = r[r >= i0]
            n -= len(r)
            total -= int(self._seg["dl"][r].sum(dtype=np.int64))
        if self._n > nb:
            assert self._alive is not None
            m = (self._alive[nb : self._n] != 0) & (self._created[nb : self._n] >= la)
            n += int(m.sum())
            total += int(self._dl[nb : self._n][m].sum(dtype=np.int64))
        return n, total, i0

    # ------------------------------------------------------------ term resolution
    def _delta_arrays(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        got = self._darr.get(term)
        if got is None:
            d = self._dpost.get(term)
            if not d:
                got = (0, _EMPTY_I, _EMPTY_I)
            else:
                got = (0, np.fromiter(d.keys(), dtype=np.int64, count=len(d)),
                       np.fromiter(d.values(), dtype=np.int64, count=len(d)))
            self._darr[term] = got
        return got[1], got[2]

    def _resolve(self, tok: str, q: _Query, N: int) -> _Term | None:
        """Live postings, idf and score upper bound of one query token (None: absent)."""
        t = _Term(tok)
        tid = self._terms.find(S.enc(tok))
        i0 = q.i0
        n_live = 0
        mv = self._mv
        if tid >= 0:
            b = self._big.get(tid)
            if b is not None:
                t.big = b
                df = mv["imp_off"][b + 1] - mv["imp_off"][b]
                if i0:
                    df -= int(np.count_nonzero(self._rows[b][:i0]))
                t.df = df
                n_live = df
                if self._removed:
                    r = self._removed_sorted()
                    r = r[r >= i0]
                    n_live -= int(np.count_nonzero(self._rows[b][r]))
            else:
                s, e = mv["post_off"][tid], mv["post_off"][tid + 1]
                t.s0 = s
                t.mid = self._midmap.get(tid, -1)
                if i0:
                    s = bisect_left(mv["post_doc"], i0, s, e)
                t.s, t.e = s, e
                t.df = n_live = e - s
                if self._removed and e > s:
                    r = self._removed_sorted()
                    r = r[r >= i0]
                    if len(r):
                        P = self._seg["post_doc"][s:e]
                        j = np.minimum(np.searchsorted(P, r), len(P) - 1)
                        n_live -= int(np.count_nonzero(P[j] == r))
        if self._dpost:
            d = self._dpost.get(tok)
            if d:
                dd, dt = self._delta_arrays(tok)
                if q.la is not None:
                    m = self._created[dd] >= q.la
                    dd, dt = dd[m], dt[m]
                t.dd, t.dt = dd, dt
                n_live += len(dd)
        if n_live <= 0:
            return None
        t.idf = math.log(1.0 + (N - n_live + 0.5) / (n_live + 0.5))
        if tid >= 0 and t.df:
            # the stored bound is for the build's avgdl; a longer average only raises
            # the factor, by at most avgdl / build avgdl
            t.ub = t.idf * mv["term_ub"][tid] * max(1.0, q.avgdl / self._ub_avgdl) * (
                1.0 + 1e-6) + 1e-12
        return t

    # ------------------------------------------------------------ probes
    def _tf_np(self, t: _Term, D: np.ndarray, delta: bool = True) -> np.ndarray:
        """tf of term ``t`` for sorted docs ``D`` (int64; 0 where absent or out of range)."""
        nb = self._nb
        if t.big >= 0:
            if len(D) and int(D[-1]) < nb:
                return self._rows[t.big][D].astype(np.int64)
            out = np.zeros(len(D), dtype=np.int64)
            inb = D < nb
            out[inb] = self._rows[t.big][D[inb]]
        elif len(D) > constants.DENSE_PROBE and t.e - t.s > constants.DENSE_PROBE // 8:
            # many docs: scatter the term's tf's into a dense row, then gather
            ptf = self._seg["post_tf"]
            dense = np.zeros(nb, dtype=ptf.dtype)
            dense[self._seg["post_doc"][t.s : t.e]] = ptf[t.s : t.e]
            if int(D[-1]) < nb:
                out = dense[D].astype(np.int64)
            else:
                out = np.zeros(len(D), dtype=np.int64)
                inb = D < nb
                out[inb] = dense[D[inb]]
        else:
            out = np.zeros(len(D), dtype=np.int64)
            if t.e > t.s and len(D):
                P = self._seg["post_doc"][t.s : t.e]
                j = P.searchsorted(D)
                np.minimum(j, len(P) - 1, out=j)
                hit = P[j] == D
                out[hit] = self._seg["post_tf"][t.s + j[hit]]
        if delta and len(t.dd) and len(D):
            j = t.dd.searchsorted(D)
            np.minimum(j, len(t.dd) - 1, out=j)
            hit = t.dd[j] == D
            out[hit] = t.dt[j[hit]]
        return out

    def _tf_py(self, t: _Term, d: int) -> int:
        if d >= self._nb:
            if t.ddict is None:
                t.ddict = dict(zip(t.dd.tolist(), t.dt.tolist(), strict=True))
            return t.ddict.get(d, 0)
        if t.big >= 0:
            return self._rowmv[t.big][d]
        if t.e > t.s:
            pd = self._mv["post_doc"]
            j = bisect_left(pd, d, t.s, t.e)
            if j < t.e and pd[j] == d:
                return self._mv["post_tf"][j]
        return 0

    def _tfm(self, q: _Query, D: np.ndarray) -> np.ndarray:
        """tf matrix (docs x query terms, int64) of sorted docs ``D``.

        The small terms' positions are found with one searchsorted each and then
        checked and read in one go for all of them (few numpy calls per query).
        """
        terms = q.terms
        S = len(D)
        tfm = np.zeros((S, len(terms)), dtype=np.int64)
        if not S or not terms:
            return tfm
        nb = self._nb
        nbase = S if D[-1] < nb else int(D.searchsorted(nb))
        Db = D if nbase == S else D[:nbase]
        if nbase:
            pdoc = self._seg["post_doc"]
            cols: list[int] = []
            small: list[_Term] = []
            for j, t in enumerate(terms):
                if t.big >= 0:
                    tfm[:nbase, j] = self._rows[t.big][Db]
                elif t.e > t.s:
                    cols.append(j)
                    small.append(t)
            if cols:
                P = np.empty((len(cols), nbase), dtype=np.int64)
                ends = np.empty((len(cols), 1), dtype=np.int64)
                for i, t in enumerate(small):
                    P[i] = pdoc[t.s : t.e].searchsorted(Db)
                    P[i] += t.s
                    ends[i, 0] = t.e - 1
                np.minimum(P, ends, out=P)
                got = np.where(pdoc[P] == Db, self._seg["post_tf"][P], 0)
                if len(cols) == len(terms):
                    tfm[:nbase] = got.T
                else:
                    tfm[:nbase, cols] = got.T
        if nbase < S:
            Dd = D[nbase:]
            for j, t in enumerate(terms):
                if len(t.dd):
                    k = t.dd.searchsorted(Dd)
                    np.minimum(k, len(t.dd) - 1, out=k)
                    hit = t.dd[k] == Dd
                    col = tfm[nbase:, j]
                    col[hit] = t.dt[k[hit]]
        return tfm

    def _exact_np(self, q: _Query, D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact scores (BM25 in query-token order, then boosts) and tf matrix of sorted ``D``.

        Each doc's sum runs over the terms in query-token order (a running sum
        along the row: ``cumsum``), a term with tf = 0 adding exactly 0.0 — the
        same arithmetic as :meth:`_exact_py`, so scores are bit-identical.
        """
        tfm = self._tfm(q, D)
        if len(D) and q.terms:
            F = tfm.astype(np.float64)
            nrm = self._nrm(q, D)
            C = q.idf_row() * (F * _K1P1) / (F + nrm.reshape(-1, 1))
            score = np.cumsum(C, axis=1)[:, -1].copy()
        else:
            score = np.zeros(len(D), dtype=np.float64)
        if len(D) and q.boost:
            bd, bv = q.boost_arrays()
            j = bd.searchsorted(D)
            np.minimum(j, len(bd) - 1, out=j)
            hit = bd[j] == D
            score[hit] += bv[j[hit]]
        return score, tfm

    def _exact_py(self, q: _Query, d: int) -> tuple[float, list[str]]:
        """Exact score and matched tokens of one doc (same arithmetic as :meth:`_exact_np`)."""
        score = 0.0
        matched = []
        nrm = K1 * (1.0 - B + B * (self._dl_mv[d] / q.avgdl))
        for t in q.terms:
            tf = self._tf_py(t, d)
            if tf:
                score += t.idf * (tf * _K1P1) / (tf + nrm)
                matched.append(t.tok)
        b = q.boost.get(d)
        if b:
            score += b
        return score, matched

    # ------------------------------------------------------------ validity
    def _valid_np(self, q: _Query, D: np.ndarray, exclude: np.ndarray | None) -> np.ndarray | None:
        """Mask of the valid docs of ``D`` (None: all of them)."""
        m: np.ndarray | None = None
        if not len(D):
            return m
        if q.la is not None and (q.i0 > 0 or self._n > self._nb):
            m = self._created[D] >= q.la
        if self._alive is not None:
            a = self._alive[D] != 0
            m = a if m is None else (m & a)
        if q.since is not None:
            a = self._created[D] >= q.since
            m = a if m is None else (m & a)
        if q.until is not None:
            a = self._created[D] <= q.until
            m = a if m is None else (m & a)
        if q.restrict is not None:
            a = _isin_sorted(D, q.restrict)
            m = a if m is None else (m & a)
        if exclude is not None:
            a = ~_isin_sorted(D, exclude)
            m = a if m is None else (m & a)
        return m

    def _valid_fn(self, q: _Query, exclude: np.ndarray | None) -> Any:
        """A per-doc validity test in plain Python (for walks and tiny sets)."""
        cr = self._created_mv
        alive = self._alive_mv
        la, since, until = q.la, q.since, q.until
        if la is not None and q.i0 == 0 and self._n == self._nb:
            la = None  # nothing has expired
        rs = None if q.restrict is None else _Member(q.restrict, self._n)
        ex = None if exclude is None else _Member(exclude, self._n)
        if alive is None and la is None and since is None and until is None and rs is None \
                and ex is None:
            return None

        def ok(d: int) -> bool:
            if alive is not None and not alive[d]:
                return False
            if la is not None or since is not None or until is not None:
                c = cr[d]
                if (la is not None and c < la) or (since is not None and c < since) or (
                        until is not None and c > until):
                    return False
            if rs is not None and d not in rs:
                return False
            return ex is None or d not in ex

        return ok

    # ------------------------------------------------------------ ranking
    # A ranked item is (score, doc, matched tokens or None).
    def _best(self, items: list[Any], k: int) -> list[Any]:
        """The best ``k`` of ranked items: score desc, newest, then cache_key."""
        if len(items) <= 1:
            return items[:k]
        nb = self._nb
        if all(x[1] < nb for x in items):
            items.sort(key=lambda x: (-x[0], -x[1]))  # base ids follow (created, -key)
            return items[:k]
        cr = self._created_mv
        items.sort(key=lambda x: (-x[0], -cr[x[1]]))
        out: list[Any] = []
        i = 0
        while i < len(items) and len(out) < k:
            j = i + 1
            while j < len(items) and items[j][0] == items[i][0] and cr[items[j][1]] == cr[
                    items[i][1]]:
                j += 1
            group = items[i:j]
            if len(group) > 1:
                group.sort(key=lambda x: self._key_of(x[1]))
            out.extend(group)
            i = j
        return out[:k]

    def _top_np(self, q: _Query, D: np.ndarray, sc: np.ndarray, k: int,
                tfm: np.ndarray | None = None) -> list[Any]:
        """Best ``k`` of numpy candidates (score desc, newest, cache_key)."""
        n = len(D)
        if n == 0 or k <= 0:
            return []
        if n <= k + 8:
            sel = None
            items = list(zip(sc.tolist(), D.tolist(), range(n), strict=True))
        elif n > k:
            kth = np.partition(sc, n - k)[n - k]
            sel = np.flatnonzero(sc >= kth)
            if len(sel) > 4 * k + 64:
                # a big tie at the k-th score: the newest of the tied win
                gt = sel[sc[sel] > kth]
                eq = sel[sc[sel] == kth]
                need = k - len(gt)
                ce = self._created[D[eq]]
                kc = np.partition(ce, len(ce) - need)[len(ce) - need]
                sel = np.concatenate((gt, eq[ce >= kc]))
        else:
            sel = np.arange(n)
        if sel is not None:
            items = list(zip(sc[sel].tolist(), D[sel].tolist(), sel.tolist(), strict=True))
        top = self._best(items, k)
        if tfm is None or not q.matched:
            return [(x[0], x[1], None) for x in top]
        rows = tfm[[x[2] for x in top]].tolist()
        toks = [t.tok for t in q.terms]
        return [(x[0], x[1], [tok for tok, tf in zip(toks, row, strict=True) if tf])
                for x, row in zip(top, rows, strict=True)]

    def _rank(self, q: _Query, k: int, exclude: np.ndarray | None) -> list[Any]:
        """Exact top ``k`` ranked items among valid docs that match the query."""
        if k <= 0:
            return []
        terms = q.terms
        if not q.ntok:
            return self._rank_empty(q, k, exclude)
        if q.restrict is not None and len(q.restrict) <= max(constants.DIRECT_MAX, sum(
                t.df for t in terms) // 8):
            return self._rank_direct(q, q.restrict, k, exclude)
        sdf = len(q.boost)
        for t in terms:
            sdf += len(t.dd) + (t.df if t.big < 0 else 0)
        if sdf <= constants.TINY:
            got = self._rank_tiny(q, k, exclude)
            if got is not None:
                return got
        if len(terms) == 2 and min(t.df for t in terms) >= constants.PAIR_MIN:
            got = self._rank_pair(q, k, exclude)
            if got is not None:
                return got
        elif len(terms) > 2 and sdf >= constants.PAIR_MIN:
            got = self._rank_multi(q, k, exclude)
            if got is not None:
                return got
        return self._rank_maxscore(q, k, exclude)

    def _rank_multi(self, q: _Query, k: int, exclude: np.ndarray | None) -> list[Any] | None:
        """Several terms: score exactly the docs of the rarest terms, the docs having
        two or more of the next small terms, and the boosted docs.

        Any other doc has at most one of those next terms (plus the big and the
        most common small terms, which are not scanned), so its score is at
        most the largest of their bounds plus the bounds of the terms not
        scanned.  When the k-th best scored doc beats that, the answer
        is exact (an identifier's rare whole token and its common parts, a
        phrase); otherwise None (the caller runs MaxScore).
        """
        terms = q.terms
        if len(q.boost) > constants.SHORTCUT_BOOSTS or any(len(t.dd) for t in terms):
            return None
        small = sorted((t for t in terms if t.big < 0 and t.e > t.s), key=attrgetter("df"))
        bound = sum(t.ub for t in terms if t.big >= 0)
        pdoc = self._seg["post_doc"]
        full: list[np.ndarray] = []  # docs of the rarest terms, taken whole
        budget = 256
        i = 0
        while i < len(small) and small[i].df <= budget:
            budget -= small[i].df
            full.append(pdoc[small[i].s : small[i].e])
            i += 1
        rest = small[i:]
        # the most common small terms are bounded like big terms, not scanned
        n = 0
        for j, t in enumerate(rest):
            n += t.df
            if n > constants.MULTI_MAX:
                bound += sum(u.ub for u in rest[j:])
                rest = rest[:j]
                break
        if rest:
            bound += max(t.ub for t in rest)
        parts: list[np.ndarray] = [x.astype(np.int64) for x in full]
        if len(rest) >= 2:
            D = np.sort(np.concatenate([pdoc[t.s : t.e] for t in rest]), kind="stable")
            two = D[1:][D[1:] == D[:-1]]
            parts.append(two.astype(np.int64))
        if q.boost:
            parts.append(q.boost_arrays()[0])
        if not parts:
            return None
        C = _sorted_unique(np.concatenate(parts) if len(parts) > 1 else parts[0])
        m = self._valid_np(q, C, exclude)
        if m is not None:
            C = C[m]
        if len(C) < k or len(C) > constants.MULTI_MAX // 16:
            return None
        sc, tfm = self._exact_np(q, C)
        theta = float(np.partition(sc, len(sc) - k)[len(sc) - k])
        if theta <= bound + 1e-9 * (1.0 + abs(theta)):
            return None
        return self._top_np(q, C, sc, k, tfm)

    def _rank_pair(self, q: _Query, k: int, exclude: np.ndarray | None) -> list[Any] | None:
        """Two common terms: score the docs having both (and the boosted docs) exactly.

        When the k-th best of those exceeds what either term alone can give
        (its upper bound), no doc with one term and no boost can enter the top
        k: the answer is exact.  Otherwise None (the caller runs MaxScore).
        """
        a, b = sorted(q.terms, key=attrgetter("df"))
        if len(a.dd) or len(b.dd) or len(q.boost) > constants.SHORTCUT_BOOSTS or a.df > 65536:
            return None
        ub = max(a.ub, b.ub)
        if not ub or min(a.ub, b.ub) < 0.25 * ub:
            return None
        pdoc = self._seg["post_doc"]
        if a.big >= 0:
            Da = np.flatnonzero(self._rows[a.big][q.i0 :])
            if q.i0:
                Da += q.i0
        else:
            Da = pdoc[a.s : a.e]
        if b.big >= 0:
            both = Da[self._rows[b.big][Da] != 0]
        else:
            # a bitmap of the other term's docs: three linear passes beat a
            # binary search per doc
            mark = np.zeros(self._nb, dtype=np.bool_)
            mark[pdoc[b.s : b.e]] = True
            both = Da[mark[Da]]
        C = both.astype(np.int64)
        if q.boost:
            C = _sorted_unique(np.concatenate((C, q.boost_arrays()[0])))
        m = self._valid_np(q, C, exclude)
        if m is not None:
            C = C[m]
        if len(C) < k:
            return None
        sc, tfm = self._exact_np(q, C)
        theta = float(np.partition(sc, len(sc) - k)[len(sc) - k])
        if theta <= ub + 1e-9 * (1.0 + abs(theta)):
            return None
        return self._top_np(q, C, sc, k, tfm)

    def _rank_empty(self, q: _Query, k: int, exclude: np.ndarray | None) -> list[Any]:
        """No query text: the newest valid docs (filters only), score 0."""
        if q.restrict is not None:
            D = q.restrict
        else:
            D = np.arange(q.lo, q.hi, dtype=np.int64)
            if self._n > self._nb:
                D = np.concatenate((D, np.arange(self._nb, self._n, dtype=np.int64)))
        m = self._valid_np(q, D, exclude)
        if m is not None:
            D = D[m]
        base = D[D < self._nb][-k:]
        delta = D[D >= self._nb]
        return self._best([(0.0, d, []) for d in base.tolist() + delta.tolist()], k)

    def _rank_direct(self, q: _Query, D: np.ndarray, k: int, exclude: np.ndarray | None
                     ) -> list[Any]:
        """Score every doc of a narrow filter/scope set."""
        m = self._valid_np(q, D, exclude)
        if m is not None:
            D = D[m]
        if not len(D):
            return []
        sc, tfm = self._exact_np(q, D)
        hit = (sc > 0) | (tfm > 0).any(axis=1)
        return self._top_np(q, D[hit], sc[hit], k, tfm[hit])

    def _rank_tiny(self, q: _Query, k: int, exclude: np.ndarray | None) -> list[Any] | None:
        """All small terms have few postings: plain Python, big terms probed or walked."""
        ok = self._valid_fn(q, exclude)
        pd = self._mv["post_doc"]
        cand: dict[int, None] = dict.fromkeys(q.boost)
        big = []
        for t in q.terms:
            if len(t.dd):  # delta docs: never in an impact order, always candidates
                cand.update(dict.fromkeys(t.dd.tolist()))
            if t.big >= 0:
                big.append(t)
            elif t.e > t.s:
                cand.update(dict.fromkeys(pd[t.s : t.e].tolist()))
        scored = []
        for d in cand:
            if ok is None or ok(d):
                s, matched = self._exact_py(q, d)
                scored.append((s, d, matched))
        top = self._best(scored, k)
        if not big:
            return top
        theta = top[-1][0] if len(top) >= k else -math.inf
        rem = sum(t.ub for t in big)
        if rem < theta - 1e-9 * (1.0 + abs(theta)):
            return top
        if len(big) > 1:
            return None
        walked = self._walk(q, big[0], k, cand, ok)
        if walked is None:
            return None
        return self._best(top + walked, k)

    def _walk(self, q: _Query, t: _Term, k: int, seen: Any, ok: Any, lo_only: bool = False
              ) -> list[Any] | None:
        """The best ``k`` valid docs outside ``seen``, by term ``t``'s contribution alone.

        Walks the term's impact order (per tf group: shortest docs first, then
        newest), merging the groups by score; None when too many docs had to be
        skipped (the caller then scores the term in full).  Delta docs are not
        in impact orders: callers put them in ``seen``.
        """
        mv = self._mv
        if t.big >= 0:
            m, pre = t.big, "imp_"
            imp = mv["imp_doc"]
            base = None
        else:
            m, pre = t.mid, "mimp_"
            imp = mv["mimp_pos"]
            base = self._mv["post_doc"][t.s0 :]
        g0, g1 = mv[pre + "goff"][m], mv[pre + "goff"][m + 1]
        end = mv[pre + "off"][m + 1]
        gtf, gst = mv[pre + "gtf"], mv[pre + "gstart"]
        dl = self._dl_mv
        idf, avgdl, i0 = t.idf, q.avgdl, q.i0
        heap = []
        for g in range(g0, g1):
            s = gst[g]
            e = gst[g + 1] if g + 1 < g1 else end
            tf = gtf[g]
            if s < e and (tf == 1 or not lo_only):
                d = imp[s] if base is None else base[imp[s]]
                sc = idf * (tf * _K1P1) / (tf + K1 * (1.0 - B + B * (dl[d] / avgdl)))
                heap.append((-sc, -d, s, e, tf))
        heapq.heapify(heap)
        out: list[Any] = []
        skipped = 0
        tok = [t.tok]
        while heap and len(out) < k:
            nsc, nd, s, e, tf = heap[0]
            d = -nd
            if d >= i0 and d not in seen and (ok is None or ok(d)):
                out.append((-nsc, d, tok))
            else:
                skipped += 1
                if skipped > constants.WALK_MAX:
                    return None
            s += 1
            if s < e:
                d = imp[s] if base is None else base[imp[s]]
                sc = idf * (tf * _K1P1) / (tf + K1 * (1.0 - B + B * (dl[d] / avgdl)))
                heapq.heapreplace(heap, (-sc, -d, s, e, tf))
            else:
                heapq.heappop(heap)
        return out

    def _postings_np(self, q: _Query, ts: list[tuple[int, _Term]], base: bool = True,
                     delta: bool = True) -> tuple[np.ndarray, np.ndarray, bool]:
        """(docs, contributions, whether docs are sorted and distinct) of the
        live-range postings of the terms."""
        D: list[np.ndarray] = []
        F: list[np.ndarray] = []
        idfs: list[float] = []  # per piece of D
        pdoc, ptf = self._seg["post_doc"], self._seg["post_tf"]
        for _, t in ts:
            if not base:
                pass
            elif t.big >= 0:
                row = self._rows[t.big]
                d = np.flatnonzero(row[q.i0 :])
                if q.i0:
                    d += q.i0
                D.append(d)
                F.append(row[d])
                idfs.append(t.idf)
            elif t.e > t.s:
                D.append(pdoc[t.s : t.e])
                F.append(ptf[t.s : t.e])
                idfs.append(t.idf)
            if delta and len(t.dd):
                D.append(t.dd)
                F.append(t.dt)
                idfs.append(t.idf)
        if not D:
            return _EMPTY_I, _EMPTY_F, True
        if len(D) == 1:
            docs = D[0].astype(np.int64)
            tf = F[0].astype(np.float64)
            idf: Any = idfs[0]
            srt = True
        else:
            docs = np.concatenate(D).astype(np.int64, copy=False)
            tf = np.concatenate(F).astype(np.float64)
            idf = np.repeat(np.array(idfs), [len(x) for x in D])
            srt = len(ts) == 1  # base docs, then delta docs (ids past the base)
        return docs, idf * (tf * _K1P1) / (tf + self._nrm(q, docs)), srt

    def _nrm(self, q: _Query, D: np.ndarray) -> np.ndarray:
        """``K1·(1 − b + b·dl/avgdl)`` of docs ``D`` (the same arithmetic everywhere).

        When two searches in a row use the same avgdl on an unchanged index, the
        whole per-doc array is computed once and kept (gathers instead of four
        array operations per use).
        """
        c = self._nrmc
        key = (q.avgdl, self._version, self._n)
        if c is not None and c[0] == key:
            return c[1][D]
        if self._nrm_last == key and self._n:
            arr = K1 * (1.0 - B + B * (self._dl[: self._n] / q.avgdl))
            self._nrmc = (key, arr)
            return arr[D]
        self._nrm_last = key
        return K1 * (1.0 - B + B * (self._dl[D] / q.avgdl))

    def _kth(self, part: np.ndarray, valid: np.ndarray | None, k: int) -> float:
        vp = part if valid is None else part[valid]
        if len(vp) < k:
            return -math.inf
        return float(np.partition(vp, len(vp) - k)[len(vp) - k])

    def _groups(self, t: _Term) -> tuple[Any, Any, list[tuple[int, int, int, int]]]:
        """A term's impact order: (entries, docs of positions or None,
        [(tf, start, end, shortest doc length)])."""
        key = (t.big, t.mid)
        got = self._gcache.get(key)
        if got is None:
            got = self._gcache[key] = self._groups_of(t)
        return got

    def _groups_of(self, t: _Term) -> tuple[Any, Any, list[tuple[int, int, int, int]]]:
        mv = self._mv
        if t.big >= 0:
            m, pre, imp, base = t.big, "imp_", mv["imp_doc"], None
        else:
            m, pre, imp, base = t.mid, "mimp_", mv["mimp_pos"], mv["post_doc"][t.s0 :]
        g0, g1 = mv[pre + "goff"][m], mv[pre + "goff"][m + 1]
        end = mv[pre + "off"][m + 1]
        gtf, gst, gdl = mv[pre + "gtf"], mv[pre + "gstart"], mv[pre + "gdl"]
        return imp, base, [(gtf[g], gst[g], gst[g + 1] if g + 1 < g1 else end, gdl[g])
                           for g in range(g0, g1)]

    def _units(self, q: _Query) -> list[_Unit]:
        """MaxScore units: a term, or its tf >= 2 docs and its tf = 1 docs apart.

        For a term with an impact order the bound is exact: each tf group
        records its shortest doc.  Splitting off the docs that repeat the term
        leaves the tf = 1 docs with a lower bound.
        """
        units = []
        a = K1 * B / q.avgdl
        c0 = K1 * (1.0 - B)
        for j, t in enumerate(q.terms):
            if (t.big < 0 and t.mid < 0) or not t.df:
                units.append(_Unit(j, t, "all", t.ub, t.df))
                continue
            _, _, groups = self._groups(t)
            idf = t.idf * (1.0 + 1e-12)
            lo_n = nhi = 0
            lo_ub = hi_ub = 0.0
            for tf, s0, e, gdl in groups:
                ub = idf * (tf * _K1P1) / (tf + (c0 + a * gdl))
                if tf == 1:
                    lo_ub, lo_n = ub, e - s0
                else:
                    nhi += e - s0
                    if ub > hi_ub:
                        hi_ub = ub
            if lo_n and nhi and nhi <= max(256, t.df // 2):
                units.append(_Unit(j, t, "hi", hi_ub * (1.0 + 1e-9), nhi))
                units.append(_Unit(j, t, "lo", lo_ub * (1.0 + 1e-9), lo_n))
            else:
                units.append(_Unit(j, t, "all", max(lo_ub, hi_ub) * (1.0 + 1e-9), t.df))
        return units

    def _unit_postings(self, q: _Query, units: list[_Unit]
                       ) -> tuple[np.ndarray, np.ndarray, bool]:
        """(docs, contributions, sorted-distinct flag) of the base postings of some units."""
        full = [(u.j, u.t) for u in units if u.kind == "all"]
        parts = [self._postings_np(q, full, delta=False)] if full else []
        D: list[np.ndarray] = []
        F: list[np.ndarray] = []
        J: list[np.ndarray] = []
        for u in units:
            if u.kind == "all":
                continue
            imp, base, groups = self._groups(u.t)
            arr = self._seg["imp_doc" if u.t.big >= 0 else "mimp_pos"]
            for tf, s0, e, _ in groups:
                if (tf == 1) == (u.kind == "lo") and e > s0:
                    x = arr[s0:e]
                    D.append(x if base is None else self._seg["post_doc"][u.t.s0 + x.astype(
                        np.int64)])
                    F.append(np.full(e - s0, float(tf)))
                    J.append(np.full(e - s0, u.j, dtype=np.int64))
        if D:
            docs = np.concatenate(D).astype(np.int64, copy=False)
            tfs = np.concatenate(F)
            col = np.concatenate(J)
            idf = q.idf_row()[col]
            parts.append((docs, idf * (tfs * _K1P1) / (tfs + self._nrm(q, docs)), False))
        if len(parts) == 1:
            return parts[0]
        return (np.concatenate([x[0] for x in parts]), np.concatenate([x[1] for x in parts]),
                False)

    def _rank_maxscore(self, q: _Query, k: int, exclude: np.ndarray | None) -> list[Any]:
        """MaxScore over the terms (rarest first), then exact scores of the survivors.

        Units (terms, or their tf >= 2 / tf = 1 halves) whose best possible
        contribution cannot lift a doc without the processed units above the
        current k-th best partial score are never scanned, only probed for the
        surviving candidates; a last unit with an impact order is walked.
        """
        terms = q.terms
        remaining = sorted(self._units(q), key=lambda u: u.ub)  # pop(): the best bound
        rem_ub = sum(u.ub for u in remaining)
        lists: list[tuple[np.ndarray, np.ndarray, bool]] = []
        if q.boost:
            lists.append((*q.boost_arrays(), True))
        if any(len(t.dd) for t in terms):
            # delta docs: scored in full up front (no stored bound covers them), so
            # their partial score is exact and the base bounds prune them correctly
            lists.append(self._postings_np(q, list(enumerate(terms)), base=False))
        # the cheap units go first, all at once
        batch: list[_Unit] = []
        budget = constants.BATCH
        while remaining and remaining[-1].t.big < 0 and (
                remaining[-1].n <= budget or not (batch or lists)):
            u = remaining.pop()
            batch.append(u)
            rem_ub -= u.ub
            budget -= u.n
        tail: _Unit | None = None
        cand, part = _EMPTY_I, _EMPTY_F
        while True:
            if batch:
                lists.append(self._unit_postings(q, batch))
                batch = []
            if lists:
                cand, part = _merge([(cand, part, True)] + lists if len(cand) else lists)
                lists = []
            valid = self._valid_np(q, cand, exclude)
            theta = self._kth(part, valid, k)
            if not remaining or rem_ub < theta - 1e-9 * (1.0 + abs(theta)):
                break
            if len(remaining) == 1 and remaining[0].kind != "hi" and (
                    remaining[0].t.big >= 0 or remaining[0].t.mid >= 0):
                tail = remaining[0]
                break
            u = remaining.pop()
            rem_ub -= u.ub
            batch = [u]
        # survivors: valid candidates that can still reach theta
        if theta > -math.inf:
            keep = part + rem_ub >= theta - 1e-9 * (1.0 + abs(theta))
            if valid is not None:
                keep &= valid
            D, P = cand[keep], part[keep]
        else:
            D, P = (cand, part) if valid is None else (cand[valid], part[valid])
        # probe the unprocessed terms one at a time while that prunes a lot
        left_by: dict[int, float] = {}
        kinds: dict[int, set[str]] = {}
        for u in remaining:
            left_by[u.j] = left_by.get(u.j, 0.0) + u.ub
            kinds.setdefault(u.j, set()).add(u.kind)
        todo = sorted(left_by, key=left_by.__getitem__, reverse=True)
        if todo and len(D) > 4 * k + 32:
            nrm = self._nrm(q, D)
            left = rem_ub
            while todo and len(D) > 4 * k + 32:
                j = todo.pop(0)
                t = terms[j]
                f = self._tf_np(t, D, delta=False)
                ks = kinds[j]
                if ks == {"lo"}:
                    f = np.where(f == 1, f, 0)
                elif ks == {"hi"}:
                    f = np.where(f >= 2, f, 0)
                f = f.astype(np.float64)
                P = P + t.idf * (f * _K1P1) / (f + nrm)
                left -= left_by[j]
                th = float(np.partition(P, len(P) - k)[len(P) - k])
                keep = P + left >= th - 1e-9 * (1.0 + abs(th))
                D, P, nrm = D[keep], P[keep], nrm[keep]
        sc, tfm = self._exact_np(q, D)
        top = self._top_np(q, D, sc, k, tfm)
        if tail is None:
            return top
        seen = _Member(cand, self._n)
        walked = self._walk(q, tail.t, k, seen, self._valid_fn(q, exclude),
                            lo_only=tail.kind == "lo")
        if walked is None:
            # too much skipping: score the tail term in full
            j = tail.j
            cand = _sorted_unique(np.concatenate((cand, self._postings_np(q, [(j, terms[j])])[0])))
            valid = self._valid_np(q, cand, exclude)
            if valid is not None:
                cand = cand[valid]
            sc, tfm = self._exact_np(q, cand)
            return self._top_np(q, cand, sc, k, tfm)
        return self._best(top + walked, k)

    # ------------------------------------------------------------ structured lookups
    def _table_exact(self, name: str, key: str) -> tuple[list[int], list[str]]:
        """Base value ids and delta values having lookup key ``key``."""
        h, off, val = self._tabs[name]
        k = h.find(key.encode("utf-8", "surrogatepass"))
        ids: list[int] = val[off[k] : off[k + 1]].tolist() if k >= 0 else []
        dk = self._dkeys[name]
        return ids, (sorted(dk.get(key, ())) if dk else [])

    def _value_str(self, name: str, vid: int) -> str:
        return self._gvalue(self._tbase[S.TABLES.index(name)] + vid)[1]

    def _gvalue(self, g: int) -> tuple[int, str]:
        """(table index, raw string) of a global value id (cached)."""
        got = self._vcache.get(g)
        if got is None:
            tb = self._tbase
            ti = 0
            while g >= tb[ti + 1]:
                ti += 1
            name = S.TABLES[ti]
            off = self._mv[name + "_voff"]
            v = g - tb[ti]
            got = (ti, S.dec(bytes(self._mv[name + "_vblob"][off[v] : off[v + 1]])))
            if len(self._vcache) > 200_000:
                self._vcache.clear()
            self._vcache[g] = got
        return got

    def _value_docs(self, name: str, ids: Iterable[int], dvals: Iterable[str]) -> list[int]:
        """Docs of base value ids and delta values (may repeat; liveness not checked)."""
        off = self._mv[name + "_vd_off"]
        vd = self._mv[name + "_vd_doc"]
        out: list[int] = []
        for i in ids:
            out.extend(vd[off[i] : off[i + 1]].tolist())
        dv = self._dvals[name]
        for v in dvals:
            out.extend(dv.get(v, ()))
        return out

    def _sym_partial(self, w: str) -> tuple[list[tuple[int, int]], list[tuple[str, int]]]:
        """Symbols containing ``w`` (lowercased): ([(base value id, level)], [(delta, level)])."""
        wb = S.enc(w)
        base: list[tuple[int, int]] = []
        seg = self._seg
        ncode = len(self._mv["tg_code"])
        if len(wb) >= 3 and ncode:
            # a symbol containing w contains every trigram of w: look up all of
            # them (a bisect each), start from the rarest list and keep only the
            # candidates found in the next rarest lists, then check the rest
            code, off = self._mv["tg_code"], self._mv["tg_off"]
            spans: list[tuple[int, int]] = []
            # non-overlapping trigrams (and the last one) cover every byte of w;
            # a few bisects, no numpy call
            n = len(wb) - 2
            for i in sorted({*range(0, n, 3), n - 1}):
                c = (wb[i] << 16) | (wb[i + 1] << 8) | wb[i + 2]
                p = bisect_left(code, c)
                if p == ncode or code[p] != c:
                    spans = []
                    break
                spans.append((off[p + 1] - off[p], p))
            if spans:
                spans.sort()
                tv = self._mv["tg_val"]
                p = spans[0][1]
                cands: Any = seg["tg_val"][off[p] : off[p + 1]]
                for _, p in spans[1:]:
                    if len(cands) <= 8:
                        break
                    s0, e0 = off[p], off[p + 1]
                    if isinstance(cands, list) or len(cands) <= 24:
                        keep = []
                        for v in (cands if isinstance(cands, list) else cands.tolist()):
                            j = bisect_left(tv, v, s0, e0)
                            if j < e0 and tv[j] == v:
                                keep.append(v)
                        cands = keep
                    else:  # sorted arrays: vectorised membership
                        L = seg["tg_val"][s0:e0]
                        j = np.searchsorted(L, cands)
                        np.minimum(j, len(L) - 1, out=j)
                        cands = cands[L[j] == cands]
                if not isinstance(cands, list):
                    cands = cands.tolist()
                for v in sorted(set(cands)):
                    lv = sym_level(self._value_str("sym", v).lower(), w, True)
                    if lv:
                        base.append((v, lv))
        elif len(wb) < 3:
            if self._lowvals is None:
                self._lowvals = [v.lower() for v in S.decode_strings(seg["sym_vblob"],
                                                                     seg["sym_voff"])]
            for v, low in enumerate(self._lowvals):
                if w in low:
                    lv = sym_level(low, w, True)
                    if lv:
                        base.append((v, lv))
        delta = []
        for v in self._dvals["sym"]:
            lv = sym_level(v.lower(), w, True)
            if lv:
                delta.append((v, lv))
        return base, delta

    def _valid_fn_live(self, q: _Query) -> Any:
        cr = self._created_mv
        alive = self._alive_mv
        la = q.la

        def ok(d: int) -> bool:
            return (alive is None or bool(alive[d])) and (la is None or cr[d] >= la)

        return ok

    def _match_word(self, w: str, q: _Query, add: Any) -> None:
        """Structured matches of one query word: ``add(docs, boost, kind)``."""
        wl = w.lower()
        path_hit = False
        if is_path_like(w):
            cw = S.canon_path(w)
            ids, dv = self._table_exact("path", cw)
            if ids or dv:
                path_hit = True
                exact: list[int] = []
                alias: list[int] = []
                alias_paths: set[str] = set()
                live_ok = self._valid_fn_live(q)
                for i in ids:
                    v = S.canon_path(self._value_str("path", i))
                    docs = self._value_docs("path", (i,), ())
                    if path_level(v, cw) == 2:
                        exact.extend(docs)
                    else:
                        alias.extend(docs)
                        if any(live_ok(d) for d in docs):
                            alias_paths.add(v)
                for raw in dv:
                    v = S.canon_path(raw)
                    docs = self._value_docs("path", (), (raw,))
                    if path_level(v, cw) == 2:
                        exact.extend(docs)
                    else:
                        alias.extend(docs)
                        if any(live_ok(d) for d in docs):
                            alias_paths.add(v)
                if any(live_ok(d) for d in exact):
                    # a live path equal to the word counts for the uniqueness too
                    alias_paths.add(cw)
                unique = bool(alias) and len(alias_paths) == 1
                q.rules.append(("path", cw, 1 if unique else 0))
                add(exact, BOOSTS["path_exact"], "path")
                if unique:
                    add(alias, BOOSTS["path_alias"], "path")
        if len(wl) < 2:
            return
        ids, dv = self._table_exact("sym", wl)
        exact_docs = self._value_docs("sym", ids, dv) if ids or dv else None
        partial = partial_symbol_ok(w) and not path_hit
        q.rules.append(("sym", wl, 1 if partial else 0))
        if exact_docs:
            add(exact_docs, BOOSTS["symbol_exact"], "sym")
        if partial:
            base, delta = self._sym_partial(wl)
            for lvl, bname in ((2, "symbol_prefix"), (1, "symbol_contains")):
                docs = self._value_docs("sym", [v for v, lv in base if lv == lvl],
                                        [v for v, lv in delta if lv == lvl])
                add(docs, BOOSTS[bname], "sym")
        ids, dv = self._table_exact("test", wl)
        if ids or dv:
            add(self._value_docs("test", ids, dv), BOOSTS["test_exact"], "test")
        ids, dv = self._table_exact("task", wl)
        if ids or dv:
            add(self._value_docs("task", ids, dv), BOOSTS["task_exact"], "task")

    def _structured(self, words: list[str], q: _Query) -> None:
        """Boosts of the query words: per word and kind, each doc gets its best level.

        Boosts of dead or expired docs never surface: candidates are checked.
        """
        kind_docs: dict[str, set[int]] | None = None
        parts: list[tuple[list[int], float]] = []  # (distinct docs, boost)
        for w in words:
            found: dict[str, list[tuple[list[int], float]]] = {}

            def add(docs: list[int], b: float, kind: str,
                    found: dict[str, list[tuple[list[int], float]]] = found) -> None:
                if docs:
                    found.setdefault(kind, []).append((docs, b))

            self._match_word(w, q, add)
            if found and kind_docs is None:
                kind_docs = {k: set() for k in _NO_KINDS}
                q.kind_docs = kind_docs
            for kind, levels in found.items():
                assert kind_docs is not None
                if len(levels) == 1:
                    docs = list(dict.fromkeys(levels[0][0]))
                    parts.append((docs, levels[0][1]))
                    kind_docs[kind].update(docs)
                    continue
                seen: dict[int, float] = {}
                for docs, b in levels:  # best level first
                    for d in docs:
                        seen.setdefault(d, b)
                kind_docs[kind].update(seen)
                by_b: dict[float, list[int]] = {}
                for d, b in seen.items():
                    by_b.setdefault(b, []).append(d)
                parts.extend((docs, b) for b, docs in by_b.items())
        if not parts:
            return
        if len(parts) == 1:
            docs, b = parts[0]
            q.boost = dict.fromkeys(docs, b)
            return
        if sum(len(d) for d, _ in parts) <= 64:
            boost = q.boost
            for docs, b in parts:
                for d in docs:
                    boost[d] = boost.get(d, 0.0) + b
            return
        ud, uv = _union([(np.array(docs, dtype=np.int64), np.full(len(docs), b))
                         for docs, b in parts])
        q.boost = dict(zip(ud.tolist(), uv.tolist(), strict=True))
        q._barr = (ud, uv)

    def _filter_sets(self, q: _Query, packet_types: Sequence[str],
                     path_filters: Sequence[str], symbol_filters: Sequence[str],
                     target: str | None, task_only: np.ndarray | None) -> None:
        sets: list[np.ndarray] = []
        if target is not None:
            sets.append(self._target_docs(target))
        if packet_types:
            docs: list[int] = []
            for p in packet_types:
                docs.extend(self._value_docs("ptype", *self._table_exact("ptype", p)))
            sets.append(_uniq(docs))
        if path_filters:
            docs = []
            for p in path_filters:
                cp = S.canon_path(p)
                docs.extend(self._value_docs("path", *self._table_exact("path", cp)))
                q.rules.append(("pathf", cp, 0))
            sets.append(_uniq(docs))
        if symbol_filters:
            docs = []
            for s_ in symbol_filters:
                sl = s_.lower()
                docs.extend(self._value_docs("sym", *self._table_exact("sym", sl)))
                base, delta = self._sym_partial(sl)
                docs.extend(self._value_docs("sym", [v for v, _ in base], [v for v, _ in delta]))
                q.rules.append(("symf", sl, 0))
            sets.append(_uniq(docs))
        if task_only is not None:
            sets.append(task_only)
        q.filter_rules = bool(path_filters or symbol_filters)
        if not sets:
            return
        sets.sort(key=len)
        r = sets[0]
        for other in sets[1:]:
            r = r[_isin_sorted(r, other)]
        q.restrict = r

    def _target_docs(self, target: str) -> np.ndarray:
        _, tmap = self._targets()
        parts = []
        t = tmap.get(target)
        if t is not None and t < len(self._seg["tgtd_off"]) - 1:
            off = self._mv["tgtd_off"]
            parts.append(self._seg["tgtd_doc"][off[t] : off[t + 1]].astype(np.int64))
        d = self._dtgt.get(target)
        if d:
            parts.append(np.array(sorted(d), dtype=np.int64))
        if not parts:
            return _EMPTY_I
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    # ------------------------------------------------------------ search
    def rank(self, query: RecallQuery | str, **options: Any) -> list[tuple[str, float]]:
        """The ranking core of :meth:`search`: ``[(cache_key, score)]``, best first.

        ``query``: a :class:`RecallQuery`, or its text with the other fields as
        keywords (``rank("login", limit=3, live_after=t)``). Same filters, scopes,
        boosts, exact scores and order as ``search`` — only the :class:`RecallHit`
        objects (snippet, matched tokens/paths/symbols, reasons, budget) are not
        built. The like-for-like call for engines that return (doc, score) pairs.
        """
        got = self._ranked(as_query(query, options), False)
        if not got:
            return []
        key = self._key_of
        return [(key(d), sc) for sc, d, _ in got[1]]

    def search(self, query: RecallQuery | str, now: float | None = None, **options: Any
               ) -> list[RecallHit]:
        """Ranked live entries for ``query`` as full hits (see docs/recall.md).

        ``search`` = :meth:`rank` + building a :class:`RecallHit` per ranked entry
        (``now``, default the clock: the hits' ages).
        """
        rq = as_query(query, options)
        got = self._ranked(rq, True)
        if not got:
            return []
        q, ranked = got
        if now is None:
            now = time.time()
        hit = self._hit
        return [hit(d, sc, m, q, rq.task_id, now) for sc, d, m in ranked]

    def hits_for(self, ranked: Sequence[tuple[str, float]], query: RecallQuery | str,
                 now: float | None = None, **options: Any) -> list[RecallHit]:
        """Full hits for ``ranked`` ``(cache_key, score)`` pairs that :meth:`rank` gave for
        the same query, with the caller's scores: a re-ranker on top of ``rank``
        builds hits only for the entries it keeps."""
        if not ranked:
            return []
        rq = as_query(query, options)
        q = self._prepare(rq, False)
        if q is None:
            raise ValueError("hits_for: these entries were not ranked for this query")
        if now is None:
            now = time.time()
        out = []
        for key, sc in ranked:
            d = self._doc_id(key)
            if d < 0:
                raise ValueError(f"hits_for: {key} is not in the index")
            out.append(self._hit(d, sc, None, q[0], rq.task_id, now))
        return out

    def _ranked(self, rq: RecallQuery, matched: bool) -> tuple[_Query, list[Any]] | None:
        """Resolve and rank: (query state, [(score, doc, matched tokens or None)])."""
        limit = rq.limit
        if limit == 0:
            return None
        got = self._prepare(rq, matched)
        if got is None:
            return None
        q, task_docs = got
        if rq.scope == "task-first":
            assert task_docs is not None
            saved = q.restrict
            q.restrict = task_docs if saved is None else saved[_isin_sorted(saved, task_docs)]
            ranked = self._rank(q, limit, None)
            if len(ranked) < limit:
                q.restrict = saved
                ranked += self._rank(q, limit - len(ranked), task_docs)
        else:
            ranked = self._rank(q, limit, None)
        return q, ranked

    def _prepare(self, rq: RecallQuery, matched: bool
                 ) -> tuple[_Query, np.ndarray | None] | None:
        """Resolve a (validated) query: (query state, the task's docs or None); None: no hits."""
        la = rq.live_after
        N, total, i0 = self._stats(la)
        if N == 0:
            return None
        since, until, task_id = rq.since, rq.until, rq.task_id
        q = _Query()
        q.matched = matched
        q.avgdl = total / N if total > 0 else 1.0
        q.la, q.i0, q.since, q.until = la, i0, since, until
        q.lo, q.hi = i0, self._nb
        if since is not None and self._nb:
            q.lo = max(q.lo, int(np.searchsorted(self._seg["created"], since, "left")))
        if until is not None and self._nb:
            q.hi = int(np.searchsorted(self._seg["created"], until, "right"))
        qtoks = rq.tokens
        q.ntok = len(qtoks)
        for tok in qtoks:
            t = self._resolve(tok, q, N)
            if t is not None:
                q.terms.append(t)
        if qtoks:
            self._structured(rq.words(), q)
        task_docs = None
        if task_id:
            ids, dv = self._table_exact("task", task_id.lower())
            task_docs = _uniq(self._value_docs("task", ids, dv))
        if q.ntok and not q.terms and not q.boost:
            return None  # nothing matches (filters can only narrow)
        if rq.has_filter:
            self._filter_sets(q, rq.packet_types, rq.path_filters, rq.symbol_filters, rq.target,
                              task_docs if rq.scope == "task-only" else None)
        return q, task_docs

    # ------------------------------------------------------------ hits
    def _key_of(self, d: int) -> str:
        if d >= self._nb:
            return self._ddocs[d].cache_key
        if self._keyhex:
            return self._mv["key_bin"][32 * d : 32 * d + 32].hex()
        seg = self._seg
        return S.dec(seg["key_blob"][int(seg["key_off"][d]) : int(seg["key_off"][d + 1])]
                     .tobytes())

    def _fields(self, d: int) -> tuple[str, str, tuple[str, ...], tuple[str, ...],
                                       tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        if d >= self._nb:
            doc = self._ddocs[d]
            return (doc.cache_key, doc.summary, doc.paths, doc.symbols, doc.tests,
                    doc.task_ids, doc.packet_types)
        mv = self._mv
        so = mv["sum_off"]
        summary = str(mv["sum_blob"][so[d] : so[d + 1]], "utf-8", "surrogatepass")
        vo = mv["dv_off"]
        lists: list[list[str]] = [[], [], [], [], []]
        cache = self._vcache
        for g in mv["dv_val"][vo[d] : vo[d + 1]].tolist():
            got = cache.get(g) or self._gvalue(g)
            lists[got[0]].append(got[1])
        return (self._key_of(d), summary, tuple(lists[0]), tuple(lists[1]), tuple(lists[2]),
                tuple(lists[3]), tuple(lists[4]))

    def _hit(self, d: int, score: float, matched: list[str] | None, q: _Query,
             task_id: str | None, now: float) -> RecallHit:
        key, summary, paths, symbols, tests, task_ids, ptypes = self._fields(d)
        if matched is None:
            matched = [t.tok for t in q.terms if self._tf_py(t, d)]
        reasons = ["bm25_text"] if matched else []
        mpaths: list[str] = []
        msyms: list[str] = []
        kd = q.kind_docs
        # only docs that got a path/symbol boost, or a path/symbol filter, can match
        if paths and (d in kd["path"] or q.filter_rules):
            cpaths = [S.canon_path(p) for p in paths]
            for kind, w, mode in q.rules:
                if kind == "path" or kind == "pathf":
                    for p, cp in zip(paths, cpaths, strict=True):
                        lv = path_level(cp, w)
                        if (lv == 2 or (lv == 1 and (mode == 1 or kind == "pathf"))) \
                                and p not in mpaths:
                            mpaths.append(p)
            if mpaths:
                reasons.append("path_match")
        if symbols and (d in kd["sym"] or q.filter_rules):
            lsyms = [s.lower() for s in symbols]
            for kind, w, mode in q.rules:
                if kind == "sym" or kind == "symf":
                    for s_, ls in zip(symbols, lsyms, strict=True):
                        if sym_level(ls, w, mode == 1 or kind == "symf") and s_ not in msyms:
                            msyms.append(s_)
            if msyms:
                reasons.append("symbol_match")
        if d in kd["test"]:
            reasons.append("test_match")
        if d in kd["task"] or (task_id and task_id.lower() in (k.lower() for k in task_ids)):
            reasons.append("task_match")
        est = int(self._est[d]) if d >= self._nb else self._mv["est"][d]
        created = self._created_mv[d]
        names = self._tnames if self._tnames is not None else self._targets()[0]
        return RecallHit(
            key, names[self._tgt[d]], score, summary,
            make_snippet([summary, *paths, *symbols, *tests], matched),
            tuple(matched), tuple(mpaths), tuple(msyms), tuple(reasons), ptypes, task_ids,
            {"est_tokens": -(-est // 4) if est > 0 else 0, "est_bytes": est},
            created, max(0.0, now - created),
        )


_KEY = attrgetter("cache_key")


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic GC during a bulk build: it allocates millions of acyclic
    objects, and collections of the caller's large heap would dominate."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def tokenize_texts(doc: RecallDoc) -> list[str]:
    """Every token of a doc's indexed text, in order."""
    out: list[str] = []
    for t in doc.texts():
        out.extend(tokenize(t))
    return out


class _Member:
    """Membership in a sorted doc array: a bitmap when large, a set when small."""

    __slots__ = ("s", "m")

    def __init__(self, docs: np.ndarray, n: int) -> None:
        if len(docs) <= 256:
            self.s: set[int] | None = set(docs.tolist())
            self.m = None
        else:
            self.s = None
            mark = np.zeros(max(n, 1), dtype=np.uint8)
            mark[docs] = 1
            # see mview: numpy's stubs gate ndarray.__buffer__ on Python >= 3.12
            self.m = memoryview(mark)  # type: ignore[arg-type]

    def __contains__(self, d: object) -> bool:
        if self.s is not None:
            return d in self.s
        assert self.m is not None and isinstance(d, int)
        return bool(self.m[d])


def _sorted_unique(x: np.ndarray, copy: bool = True) -> np.ndarray:
    """Sorted distinct values of an int array: ``np.unique`` without its Python layers
    (numpy 2.4's ``np.unique`` imports ``numpy.ma`` on first use, ~14 ms cold).
    ``copy=False``: ``x`` is int64 and the caller's own, sorted in place."""
    x = x.astype(np.int64, copy=copy)  # sorted in place
    if len(x) < 2:
        return x
    x.sort()
    keep = np.empty(len(x), dtype=np.bool_)
    keep[0] = True
    np.not_equal(x[1:], x[:-1], out=keep[1:])
    return x[keep]


def _uniq(docs: list[int]) -> np.ndarray:
    if not docs:
        return _EMPTY_I
    return _sorted_unique(np.array(docs, dtype=np.int64), copy=False)


def _isin_sorted(D: np.ndarray, R: np.ndarray) -> np.ndarray:
    """Mask of ``D`` entries present in sorted unique ``R``."""
    if not len(R) or not len(D):
        return np.zeros(len(D), dtype=bool)
    j = R.searchsorted(D)
    np.minimum(j, len(R) - 1, out=j)
    return R[j] == D


def _merge(lists: list[tuple[np.ndarray, np.ndarray, bool]]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_union` of (docs, values, sorted and distinct) lists; two sorted lists,
    one of them short, are merged by binary search instead of a sort.

    Each doc has at most one value per list, so with two lists a sum has at most
    two terms: the same value in either order.
    """
    if len(lists) == 2 and lists[0][2] and lists[1][2]:
        (ad, av, _), (bd, bv, _) = lists
        if len(ad) < len(bd):
            ad, av, bd, bv = bd, bv, ad, av
        if len(bd) <= 64 and len(ad):
            ad = ad.astype(np.int64, copy=False)
            bd = bd.astype(np.int64, copy=False)
            j = ad.searchsorted(bd)
            jc = np.minimum(j, len(ad) - 1)
            found = ad[jc] == bd
            v = av.astype(np.float64)  # a copy
            bv = bv.astype(np.float64, copy=False)
            if found.all():
                v[j] += bv
                return ad, v
            v[j[found]] += bv[found]
            miss = ~found
            jm = j[miss]
            return np.insert(ad, jm, bd[miss]), np.insert(v, jm, bv[miss])
    return _union([(d, v) for d, v, _ in lists])


def _union(lists: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Union of (docs, values) lists with summed values: (sorted unique docs, sums).

    A stable sort (timsort) merges the already sorted runs in linear time.
    """
    if len(lists) == 1:
        d, v = lists[0]
        if len(d) < 2 or bool((d[1:] > d[:-1]).all()):
            return d.astype(np.int64, copy=False), v.astype(np.float64, copy=False)
    d = np.concatenate([x[0] for x in lists]).astype(np.int64, copy=False)
    v = np.concatenate([x[1] for x in lists]).astype(np.float64, copy=False)
    o = np.argsort(d, kind="stable")
    d, v = d[o], v[o]
    first = np.empty(len(d), dtype=bool)
    first[:1] = True
    np.not_equal(d[1:], d[:-1], out=first[1:])
    if bool(first.all()):
        return d, v
    starts = np.flatnonzero(first)
    return d[starts], np.add.reduceat(v, starts)
