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
  unseen doc into the top k is only *probed* for the candidates (MaxScore).
  Small queries never leave plain Python (no per-call numpy overhead).

See docs/recall.md for the semantics and the layout.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any
from zlib import crc32

import numpy as np

from . import strategies
from .arrays import EMPTY_I, HashTable, isin_sorted, mview, no_gc, uniq
from .columns import Segment
from .hits import hit
from .layout import M_KEYHEX, M_TBASE, decode_strings, seg_from_bytes, seg_to_bytes
from .match import filter_sets, structured, table_exact, value_docs
from .normalize import TABLES, dec, doc_table_values, enc, value_keys
from .query import RecallQuery, as_query
from .scoring import QueryState, resolve
from .segment import assemble, empty_segment
from .tokenize import tokenize
from .types import RecallDoc, RecallHit
from .views import BaseDocs, ImpactOrders, Postings, Table, Targets, Trigrams


class RecallIndex:
    """BM25 + structured recall over live cache entries (pure, in memory)."""

    def __init__(self) -> None:
        self._load(empty_segment())

    # ------------------------------------------------------------ state
    def _load(self, seg: Segment) -> None:
        self._seg = seg
        docs = seg.docs
        self._nb = nb = int(len(docs.created))
        self._n = nb
        self._created: np.ndarray = docs.created
        self._dl: np.ndarray = docs.dl
        self._tgt: np.ndarray = docs.tgt
        self._est: np.ndarray = docs.est
        self._alive: np.ndarray | None = None  # None: every base doc alive, no delta
        self._mutable = False
        self._live_n = nb
        self._live_len = int(docs.dl.sum(dtype=np.int64))
        self._cum: np.ndarray | None = None
        self._removed: set[int] = set()
        self._removed_arr: np.ndarray | None = None
        self._dpost: dict[str, dict[int, int]] = {}
        self._dkeys: dict[str, dict[str, set[str]]] = {t: {} for t in TABLES}
        self._dvals: dict[str, dict[str, set[int]]] = {t: {} for t in TABLES}
        self._dtgt: dict[str, set[int]] = {}
        self._ddocs: dict[int, RecallDoc] = {}
        self._dkey: dict[str, int] = {}
        self._tnames: list[str] | None = None
        self._tmap: dict[str, int] | None = None
        self._version = 0
        self._nrmc: tuple[Any, np.ndarray] | None = None
        self._nrm_last: Any = None
        self._darr: dict[str, tuple[int, np.ndarray, np.ndarray]] = {}
        meta = seg.meta
        self._keyhex = bool(int(meta[M_KEYHEX]))
        self._tbase = [int(x) for x in meta[M_TBASE :].tolist()]
        self._terms = HashTable(seg.terms.hash, seg.terms.off, seg.terms.blob)
        self._keyhash = HashTable(docs.key_hash, docs.key_off, docs.key_blob)
        self._tabs = {t: Table.of(c) for t, c in zip(TABLES, seg.tables.in_order(), strict=True)}
        self._imp = ImpactOrders.of(seg.big)  # big terms: doc ids
        self._mimp = ImpactOrders.of(seg.mid)  # mid terms: positions
        self._post = Postings.of(seg.terms)
        self._docs = BaseDocs.of(docs)
        self._tgts = Targets.of(seg.targets)
        self._tg = Trigrams.of(seg.trigrams)
        self._big = {int(t): b for b, t in enumerate(seg.big.tid.tolist())}
        self._midmap = {int(t): m for m, t in enumerate(seg.mid.tid.tolist())}
        self._rows = seg.big_tf.reshape(len(self._big), nb) if nb else \
            np.zeros((len(self._big), 0), np.uint8)
        self._rowmv = [mview(self._rows[b]) for b in range(len(self._big))]
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
            self._tnames = decode_strings(self._tgts.blob, self._tgts.off)
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
            h, mask, bins = kh.h, kh.mask, self._docs.key_bin
            pos = crc32(kb) & mask
            while True:
                i = h[pos]
                if i < 0:
                    return -1
                if bins[32 * i : 32 * i + 32] == kb:
                    return -1 if i in self._removed else i
                pos = (pos + 1) & mask
        i = kh.find(enc(cache_key))
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
        with no_gc():
            idx._load(assemble(None, None, list(byk.values())))
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
        for name in TABLES:
            dk, dv = self._dkeys[name], self._dvals[name]
            for v in doc_table_values(doc, name):
                docs = dv.get(v)
                if docs is None:
                    dv[v] = {i}
                    for k in value_keys(name, v):
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
        for name in TABLES:
            dk, dv = self._dkeys[name], self._dvals[name]
            for v in doc_table_values(doc, name):
                docs = dv.get(v)
                if docs is None:
                    continue
                docs.discard(i)
                if not docs:
                    del dv[v]
                    for k in value_keys(name, v):
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
        with no_gc():
            self._load(assemble(self._seg, keep, docs))

    # ------------------------------------------------------------ bytes
    def to_bytes(self) -> bytes:
        """Serialise (merging the delta first); load with :meth:`from_bytes`."""
        self.compact()
        return seg_to_bytes(self._seg)

    @classmethod
    def from_bytes(cls, data: Any, verify: bool = True) -> RecallIndex:
        """Open serialised bytes (bytes, memoryview or mmap) without copying.

        Raises ValueError when the data is garbled.  ``verify=False`` skips the
        blake3 checksum (structure is still checked) for callers whose own
        authenticated container already covers these bytes.
        """
        idx = cls.__new__(cls)
        idx._load(seg_from_bytes(data, verify=verify))
        return idx

    # ------------------------------------------------------------ statistics
    def _cumdl(self) -> np.ndarray:
        if self._cum is None:
            cum = np.zeros(self._nb + 1, dtype=np.int64)
            np.cumsum(self._seg.docs.dl, out=cum[1:])
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
            i0 = int(np.searchsorted(self._seg.docs.created, la, "left"))
        if i0 == 0 and self._n == nb:
            return self._live_n, self._live_len, 0
        cum = self._cumdl()
        n = nb - i0
        total = int(cum[nb] - cum[i0])
        if self._removed:
            r = self._removed_sorted()
            r = r[r >= i0]
            n -= len(r)
            total -= int(self._seg.docs.dl[r].sum(dtype=np.int64))
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
                got = (0, EMPTY_I, EMPTY_I)
            else:
                got = (0, np.fromiter(d.keys(), dtype=np.int64, count=len(d)),
                       np.fromiter(d.values(), dtype=np.int64, count=len(d)))
            self._darr[term] = got
        return got[1], got[2]


    # ------------------------------------------------------------ probes





    # ------------------------------------------------------------ validity


    # ------------------------------------------------------------ ranking
    # A ranked item is (score, doc, matched tokens or None).

















    # ------------------------------------------------------------ structured lookups










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
        return [hit(self, d, sc, m, q, rq.task_id, now) for sc, d, m in ranked]

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
            out.append(hit(self, d, sc, None, q[0], rq.task_id, now))
        return out

    def _ranked(self, rq: RecallQuery, matched: bool) -> tuple[QueryState, list[Any]] | None:
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
            q.restrict = task_docs if saved is None else saved[isin_sorted(saved, task_docs)]
            ranked = strategies.rank(self, q, limit, None)
            if len(ranked) < limit:
                q.restrict = saved
                ranked += strategies.rank(self, q, limit - len(ranked), task_docs)
        else:
            ranked = strategies.rank(self, q, limit, None)
        return q, ranked

    def _prepare(self, rq: RecallQuery, matched: bool
                 ) -> tuple[QueryState, np.ndarray | None] | None:
        """Resolve a (validated) query: (query state, the task's docs or None); None: no hits."""
        la = rq.live_after
        N, total, i0 = self._stats(la)
        if N == 0:
            return None
        since, until, task_id = rq.since, rq.until, rq.task_id
        q = QueryState()
        # (None: an equivalent mutant; the rankers then leave the matched tokens out and
        # hit() finds the same ones per hit)
        q.matched = matched
        # (equivalent mutants: any avgdl when total is 0. No live doc has a token then,
        # and avgdl only scales the length of a doc that holds a query token)
        q.avgdl = total / N if total > 0 else 1.0
        q.la, q.i0, q.since, q.until = la, i0, since, until
        q.lo, q.hi = i0, self._nb
        # (the range only narrows what the filter-only path looks at; every doc in it is
        # still checked against since/until. Equivalent mutants: "left" left out (the
        # default), and the string "right" searched for, which sorts above every time:
        # no narrowing)
        if since is not None and self._nb:
            q.lo = max(q.lo, int(np.searchsorted(self._seg.docs.created, since, "left")))
        if until is not None and self._nb:
            q.hi = int(np.searchsorted(self._seg.docs.created, until, "right"))
        qtoks = rq.tokens
        q.ntok = len(qtoks)
        for tok in qtoks:
            t = resolve(self, tok, q, N)
            if t is not None:
                q.terms.append(t)
        if qtoks:
            structured(self, rq.words(), q)
        task_docs = None  # ("": an equivalent mutant, read only under a task_id)
        if task_id:
            ids, dv = table_exact(self, "task", task_id.lower())
            task_docs = uniq(value_docs(self, "task", ids, dv))
        if q.ntok and not q.terms and not q.boost:
            return None  # nothing matches (filters can only narrow)
        if rq.has_filter:
            filter_sets(self, q, rq.packet_types, rq.path_filters, rq.symbol_filters, rq.target,
                              task_docs if rq.scope == "task-only" else None)
        return q, task_docs

    # ------------------------------------------------------------ hits
    def _key_of(self, d: int) -> str:
        if d >= self._nb:
            return self._ddocs[d].cache_key
        if self._keyhex:
            return self._docs.key_bin[32 * d : 32 * d + 32].hex()
        docs = self._docs
        return dec(docs.key_blob[docs.key_off[d] : docs.key_off[d + 1]].tobytes())




_KEY = attrgetter("cache_key")


def tokenize_texts(doc: RecallDoc) -> list[str]:
    """Every token of a doc's indexed text, in order."""
    out: list[str] = []
    for t in doc.texts():
        out.extend(tokenize(t))
    return out
