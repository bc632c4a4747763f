"""The recall index: a frozen columnar base segment plus a small mutable delta.

* ``add``/``remove`` touch only the delta (dicts) and a few per-doc arrays; the
  base is never re-indexed by a put.  The delta is merged into a new base
  (without re-tokenising the base) when it grows past ``max(4096, N/8)``
  docs, and by :meth:`RecallIndex.to_bytes`.
* ``search`` scores the base with numpy over flat posting arrays and the
  delta from its dicts, with the *same* statistics (N, n, avgdl over every
  live entry), so answers never depend on where a doc lives.

See docs/recall.md for the semantics.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from . import segment as S
from .snippet import make_snippet
from .tokenize import tokenize, tokenize_all
from .types import RecallDoc, RecallHit, dedupe, est_tokens

K1 = 1.5
B = 0.75

#: additive structured boosts, per query word and kind (best level only)
BOOSTS = {
    "path_exact": 3.0,  # canonical path or a path suffix ("json/decoder.py")
    "path_alias": 2.0,  # a basename that names exactly one live path
    "symbol_exact": 4.0,  # whole symbol or its last qualified component
    "symbol_prefix": 2.0,  # symbol or one of its components starts with the word
    "symbol_contains": 1.0,
    "test_exact": 3.0,  # whole test name or its last component
    "task_exact": 2.0,  # the word is one of the entry's task ids
}

SCOPES = ("global", "task-first", "task-only")
_TRIM = "\"'`()[]{}<>,;!?"
_IDENT_SHAPED = re.compile(r"_|[a-z][A-Z]|[A-Za-z][0-9]|[0-9][A-Za-z]|\.")
_COMPONENT_START = re.compile(r"(?:^|[.:#])")


def query_words(query: str) -> list[str]:
    """Whitespace-separated words of a query, outer punctuation trimmed."""
    out = []
    for w in query.split():
        w = w.strip(_TRIM)
        if w.endswith((".", ":")):
            w = w.rstrip(".:")
        if w:
            out.append(w)
    return dedupe(out)


def is_path_like(w: str) -> bool:
    return "/" in w or "\\" in w or ("." in w.strip("."))


def partial_symbol_ok(w: str) -> bool:
    """Prefix/contains symbol matching only for identifier-shaped words of 4+ chars."""
    return len(w) >= 4 and _IDENT_SHAPED.search(w) is not None


def sym_level(v: str, w: str, partial: bool) -> int:
    """3 exact, 2 prefix, 1 contains, 0 none (v and w lowercased)."""
    if v == w or S.sym_keys(v)[-1] == w:
        return 3
    if not partial or w not in v:
        return 0
    if v.startswith(w) or re.search(r"[.:#]" + re.escape(w), v):
        return 2
    return 1


def path_level(v: str, cw: str) -> int:
    """2 canonical/suffix, 1 basename, 0 none (cw canonical)."""
    if v == cw:
        return 2
    if "/" in cw:
        return 2 if v.endswith("/" + cw) else 0
    return 1 if v.rsplit("/", 1)[-1] == cw else 0


def test_level(v: str, w: str) -> int:
    return 1 if w in S.test_keys(v) else 0


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
        self._removed: list[int] = []
        self._removed_arr: tuple[np.ndarray, np.ndarray] | None = None
        self._dpost: dict[str, dict[int, int]] = {}
        self._dkeys: dict[str, dict[str, set[str]]] = {t: {} for t in S.TABLES}
        self._dvals: dict[str, dict[str, set[int]]] = {t: {} for t in S.TABLES}
        self._ddocs: dict[int, RecallDoc] = {}
        self._keymap: dict[str, int] | None = None
        self._tnames: list[str] | None = None
        self._tmap: dict[str, int] | None = None
        self._norm_key: tuple[int, float] | None = None
        self._norm: np.ndarray | None = None
        self._version = 0
        self._blobs: dict[str, bytes] = {}

    def _ensure_mutable(self, extra: int = 1) -> None:
        need = self._n + extra
        if self._mutable and len(self._created) >= need:
            return
        cap = max(need, 64, len(self._created) * 2 if self._mutable else need + need // 8)
        n = self._n

        def grow(a: np.ndarray, fill: Any) -> np.ndarray:
            out = np.full(cap, fill, dtype=a.dtype)
            out[:n] = a[:n]
            return out

        self._created = grow(self._created, 0.0)
        self._dl = grow(self._dl, 0)
        self._tgt = grow(self._tgt, 0)
        self._est = grow(self._est, 0)
        alive = np.zeros(cap, dtype=np.uint8)
        if self._alive is None:
            alive[:n] = 1
        else:
            alive[:n] = self._alive[:n]
        self._alive = alive
        self._mutable = True

    def _keys(self) -> dict[str, int]:
        if self._keymap is None:
            seg = self._seg
            keys = S.decode_strings(seg["key_blob"], seg["key_off"])
            km = {k: i for i, k in enumerate(keys)}
            for i in self._removed:
                km.pop(keys[i], None)
            for i, d in self._ddocs.items():
                km[d.cache_key] = i
            self._keymap = km
        return self._keymap

    def _targets(self) -> tuple[list[str], dict[str, int]]:
        if self._tnames is None or self._tmap is None:
            self._tnames = S.decode_strings(self._seg["tgt_blob"], self._seg["tgt_off"])
            self._tmap = {t: i for i, t in enumerate(self._tnames)}
        return self._tnames, self._tmap

    def __len__(self) -> int:
        return self._live_n

    def __contains__(self, cache_key: object) -> bool:
        return isinstance(cache_key, str) and cache_key in self._keys()

    @property
    def delta_size(self) -> int:
        """Docs added since the last merge into the base segment."""
        return len(self._ddocs)

    # ------------------------------------------------------------ build / mutate
    @classmethod
    def build(cls, docs: Iterable[RecallDoc]) -> RecallIndex:
        """Bulk-build an index (fast path); later duplicates of a cache_key win."""
        byk: dict[str, RecallDoc] = {}
        for d in docs:
            byk.pop(d.cache_key, None)
            byk[d.cache_key] = d
        idx = cls.__new__(cls)
        idx._load(S.assemble(None, None, list(byk.values())))
        return idx

    def add(self, doc: RecallDoc) -> None:
        """Insert ``doc``, replacing any entry with the same cache_key (no re-index)."""
        km = self._keys()
        old = km.get(doc.cache_key)
        if old is not None:
            self._remove_id(old)
        self._ensure_mutable()
        assert self._alive is not None
        i = self._n
        self._n += 1
        toks = tokenize_all(doc.texts())
        self._created[i] = doc.created_at
        self._dl[i] = len(toks)
        self._est[i] = doc.est_bytes
        _, tmap = self._targets()
        t = tmap.get(doc.target)
        if t is None:
            assert self._tnames is not None
            t = tmap[doc.target] = len(self._tnames)
            self._tnames.append(doc.target)
        self._tgt[i] = t
        self._alive[i] = 1
        dpost = self._dpost
        for term, tf in Counter(toks).items():
            p = dpost.get(term)
            if p is None:
                dpost[term] = {i: tf}
            else:
                p[i] = tf
        for name in S.TABLES:
            keyfn = S.TABLE_RULES[name][1]
            dk, dv = self._dkeys[name], self._dvals[name]
            for v in S.doc_table_values(doc, name):
                docs = dv.get(v)
                if docs is None:
                    dv[v] = {i}
                    for k in keyfn(v):
                        dk.setdefault(k, set()).add(v)
                else:
                    docs.add(i)
        self._ddocs[i] = doc
        km[doc.cache_key] = i
        self._live_n += 1
        self._live_len += len(toks)
        self._version += 1
        if len(self._ddocs) > max(4096, self._nb // 8):
            self.compact()

    def add_many(self, docs: Iterable[RecallDoc]) -> None:
        """``add`` each doc; a large batch is merged straight into a new base."""
        docs = list(docs)
        if len(docs) > max(4096, self._nb // 8):
            km = self._keys()
            latest: dict[str, RecallDoc] = {}
            for d in docs:
                latest.pop(d.cache_key, None)
                latest[d.cache_key] = d
            for k in latest:
                old = km.get(k)
                if old is not None:
                    self._remove_id(old)
            self._compact(list(latest.values()))
        else:
            for d in docs:
                self.add(d)

    def remove(self, cache_key: str) -> None:
        """Drop the entry with ``cache_key``; no-op when absent."""
        i = self._keys().get(cache_key)
        if i is not None:
            self._remove_id(i)

    def _remove_id(self, i: int) -> None:
        self._ensure_mutable(0)
        assert self._alive is not None
        self._alive[i] = 0
        self._live_n -= 1
        self._live_len -= int(self._dl[i])
        self._version += 1
        km = self._keys()
        if i < self._nb:
            self._removed.append(i)
            self._removed_arr = None
            seg = self._seg
            key = seg["key_blob"][seg["key_off"][i] : seg["key_off"][i + 1]].tobytes()
            km.pop(key.decode("utf-8", "surrogatepass"), None)
            return
        doc = self._ddocs.pop(i)
        km.pop(doc.cache_key, None)
        for term in set(tokenize_all(doc.texts())):
            p = self._dpost.get(term)
            if p is not None:
                p.pop(i, None)
                if not p:
                    del self._dpost[term]
        for name in S.TABLES:
            keyfn = S.TABLE_RULES[name][1]
            dk, dv = self._dkeys[name], self._dvals[name]
            for v in S.doc_table_values(doc, name):
                docs = dv.get(v)
                if docs is None:
                    continue
                docs.discard(i)
                if not docs:
                    del dv[v]
                    for k in keyfn(v):
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

    def _removed_sorted(self) -> tuple[np.ndarray, np.ndarray]:
        if self._removed_arr is None:
            r = np.array(sorted(self._removed), dtype=np.int64)
            rc = np.zeros(len(r) + 1, dtype=np.int64)
            if len(r):
                np.cumsum(self._seg["dl"][r], out=rc[1:])
            self._removed_arr = (r, rc)
        return self._removed_arr

    def _stats(self, la: float | None) -> tuple[int, int, int]:
        """(N, total length, first base doc id not expired) over live docs."""
        if la is None:
            return self._live_n, self._live_len, 0
        nb = self._nb
        i0 = int(np.searchsorted(self._seg["created"], la, "left"))
        cum = self._cumdl()
        n = nb - i0
        total = int(cum[nb] - cum[i0])
        if self._removed:
            r, rc = self._removed_sorted()
            j = int(np.searchsorted(r, i0, "left"))
            n -= len(r) - j
            total -= int(rc[-1] - rc[j])
        if self._n > nb:
            assert self._alive is not None
            m = (self._alive[nb : self._n] != 0) & (self._created[nb : self._n] >= la)
            n += int(m.sum())
            total += int(self._dl[nb : self._n][m].sum(dtype=np.int64))
        return n, total, i0

    def _live_mask(self, docs: np.ndarray, la: float | None) -> np.ndarray | None:
        """Mask of live docs among ``docs`` (None: all live)."""
        m = None
        if self._alive is not None:
            m = self._alive[docs] != 0
        if la is not None:
            t = self._created[docs] >= la
            m = t if m is None else (m & t)
        return m

    def _norms(self, avgdl: float) -> np.ndarray:
        key = (self._version, avgdl)
        if self._norm_key != key or self._norm is None:
            self._norm = K1 * (1.0 - B + B * (self._dl[: self._n] / avgdl))
            self._norm_key = key
        return self._norm

    # ------------------------------------------------------------ lookups
    def _postings(self, term: str, i0: int, la: float | None) -> tuple[np.ndarray, np.ndarray,
                                                                         np.ndarray]:
        """(docs, tfs, sorted base docs) of the live postings of ``term``."""
        seg = self._seg
        tid = S.hash_lookup(seg["term_hash"], seg["term_blob"], seg["term_off"],
                            term.encode("utf-8", "surrogatepass"))
        docs: np.ndarray = _EMPTY_I
        tfs: np.ndarray = _EMPTY_I
        if tid >= 0:
            s, e = int(seg["post_off"][tid]), int(seg["post_off"][tid + 1])
            docs = seg["post_doc"][s:e]
            tfs = seg["post_tf"][s:e]
            if i0:
                j = int(np.searchsorted(docs, i0, "left"))
                docs, tfs = docs[j:], tfs[j:]
            if self._removed:
                assert self._alive is not None
                m = self._alive[docs] != 0
                docs, tfs = docs[m], tfs[m]
        base_docs = docs
        d = self._dpost.get(term) if self._dpost else None
        if d:
            dd = np.fromiter(d.keys(), dtype=np.int64, count=len(d))
            dt = np.fromiter(d.values(), dtype=np.int64, count=len(d))
            if la is not None:
                m = self._created[dd] >= la
                dd, dt = dd[m], dt[m]
            if len(dd):
                docs = np.concatenate((docs.astype(np.int64), dd))
                tfs = np.concatenate((tfs.astype(np.int64), dt))
        return docs, tfs, base_docs

    def _table_exact(self, name: str, key: str) -> tuple[np.ndarray, list[str]]:
        """Base value ids and delta values having lookup key ``key``."""
        seg = self._seg
        k = S.hash_lookup(seg[name + "_khash"], seg[name + "_kblob"], seg[name + "_koff"],
                          key.encode("utf-8", "surrogatepass"))
        ids = _EMPTY_I
        if k >= 0:
            off = seg[name + "_kv_off"]
            ids = seg[name + "_kv_val"][off[k] : off[k + 1]]
        dvals = sorted(self._dkeys[name].get(key, ()))
        return ids, dvals

    def _value_str(self, name: str, vid: int) -> str:
        seg = self._seg
        off = seg[name + "_voff"]
        return seg[name + "_vblob"][off[vid] : off[vid + 1] - 1].tobytes().decode(
            "utf-8", "surrogatepass")

    def _value_docs(self, name: str, ids: np.ndarray, dvals: Iterable[str]) -> np.ndarray:
        seg = self._seg
        parts = [S.gather_ranges(seg[name + "_vd_off"], seg[name + "_vd_doc"],
                                 np.asarray(ids, dtype=np.int64)).astype(np.int64)]
        dv = self._dvals[name]
        extra: list[int] = []
        for v in dvals:
            extra.extend(dv.get(v, ()))
        if extra:
            parts.append(np.array(extra, dtype=np.int64))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def _sym_scan(self, name: str, w: str) -> tuple[np.ndarray, np.ndarray, list[tuple[str, int]]]:
        """Prefix/contains matches of ``w`` in a table's values: (base ids, levels, delta)."""
        seg = self._seg
        blob = self._blobs.get(name)
        if blob is None:
            blob = self._blobs[name] = seg[name + "_vblob"].tobytes()
        wb = w.encode("utf-8", "surrogatepass")
        pos_l: list[int] = []
        lvl_l: list[int] = []
        find = blob.find
        p = find(wb)
        while p != -1:
            pos_l.append(p)
            lvl_l.append(2 if blob[p - 1 : p] in (b"\n", b".", b":", b"#") else 1)
            p = find(wb, p + 1)
        if pos_l:
            voff = seg[name + "_voff"]
            ids = np.searchsorted(voff, np.array(pos_l, dtype=np.int64), "right") - 1
            lv = np.array(lvl_l, dtype=np.int64)
        else:
            ids = lv = _EMPTY_I
        delta = []
        for v in self._dvals[name]:
            lvl = sym_level(v, w, True)
            if lvl:
                delta.append((v, lvl))
        return ids, lv, delta

    def _target_docs_mask(self, target: str, cand: np.ndarray) -> np.ndarray:
        _, tmap = self._targets()
        t = tmap.get(target)
        if t is None:
            return np.zeros(len(cand), dtype=bool)
        return self._tgt[cand] == t

    # ------------------------------------------------------------ search
    def search(
        self,
        query: str,
        limit: int = 8,
        since: float | None = None,
        until: float | None = None,
        target: str | None = None,
        task_id: str | None = None,
        scope: str = "global",
        packet_types: Sequence[str] = (),
        path_filters: Sequence[str] = (),
        symbol_filters: Sequence[str] = (),
        live_after: float | None = None,
        now: float | None = None,
    ) -> list[RecallHit]:
        """Ranked live entries for ``query`` (see docs/recall.md)."""
        if scope not in SCOPES:
            raise ValueError(f"unknown scope {scope!r}: expected one of {', '.join(SCOPES)}")
        if limit is None:
            limit = 8
        if not isinstance(limit, int) or limit < 0:
            raise ValueError(f"limit must be a non-negative integer, got {limit!r}")
        if scope != "global" and not task_id:
            raise ValueError(f"scope {scope} needs a task id")
        packet_types = tuple(packet_types or ())
        path_filters = tuple(p for p in (path_filters or ()) if p)
        symbol_filters = tuple(s for s in (symbol_filters or ()) if s)
        qtoks = dedupe(tokenize(query or ""))
        words = query_words(query or "")
        has_filter = bool(since is not None or until is not None or target is not None
                          or packet_types or path_filters or symbol_filters
                          or (task_id and scope != "global"))
        if not qtoks and not has_filter:
            raise ValueError("empty query: give query text or at least one filter "
                             "(since, until, target, packet type, path, symbol, task scope)")
        if now is None:
            now = time.time()
        if limit == 0:
            return []
        la = live_after
        N, total, i0 = self._stats(la)
        if N == 0:
            return []
        avgdl = total / N if total > 0 else 1.0

        # ---- BM25 over text
        per_term: dict[str, tuple[np.ndarray, set[int]]] = {}
        cands: list[np.ndarray] = []
        contribs: list[np.ndarray] = []
        norms = None
        for term in qtoks:
            docs, tfs, base_docs = self._postings(term, i0, la)
            n = len(docs)
            if n == 0:
                continue
            idf = math.log(1.0 + (N - n + 0.5) / (n + 0.5))
            if n > 2048:
                if norms is None:
                    norms = self._norms(avgdl)
                nrm = norms[docs]
            else:
                nrm = K1 * (1.0 - B + B * (self._dl[docs] / avgdl))
            tf = tfs.astype(np.float64)
            contribs.append(idf * (tf * (K1 + 1.0)) / (tf + nrm))
            cands.append(docs)
            dset = set(docs[len(base_docs):].tolist()) if len(docs) > len(base_docs) else set()
            per_term[term] = (base_docs, dset)
        text_docs, text_score = _accumulate(cands, contribs, self._n)

        # ---- structured matches from query words
        boost_docs: list[np.ndarray] = []
        boost_vals: list[np.ndarray] = []
        kind_docs: dict[str, list[np.ndarray]] = {"path": [], "sym": [], "test": [], "task": []}
        word_rules: list[tuple[str, str, int]] = []  # (kind, word, mode) for hit rendering
        if words and qtoks:
            for w in words:
                self._match_word(w, la, boost_docs, boost_vals, kind_docs, word_rules)
        struct_docs, struct_score = _accumulate(boost_docs, boost_vals, self._n)

        # ---- candidates
        if qtoks:
            if len(struct_docs):
                cand, score = _merge_sorted(text_docs, text_score, struct_docs, struct_score)
            else:
                cand, score = text_docs, text_score
            if la is not None or self._alive is not None:
                # text postings are live already; structured ones may not be
                if len(struct_docs):
                    m = self._live_mask(cand, la)
                    if m is not None:
                        cand, score = cand[m], score[m]
        else:
            cand = self._all_live(la)
            score = np.zeros(len(cand), dtype=np.float64)

        # ---- filters
        filt_path: list[np.ndarray] = []
        filt_sym: list[np.ndarray] = []
        if len(cand):
            m = None
            if since is not None:
                m = self._created[cand] >= since
            if until is not None:
                t = self._created[cand] <= until
                m = t if m is None else m & t
            if target is not None:
                t = self._target_docs_mask(target, cand)
                m = t if m is None else m & t
            if packet_types:
                allowed = [self._value_docs("ptype", *self._table_exact("ptype", p))
                           for p in packet_types]
                t = _member(cand, allowed, self._n)
                m = t if m is None else m & t
            if path_filters:
                for p in path_filters:
                    cp = S.canon_path(p)
                    ids, dv = self._table_exact("path", cp)
                    filt_path.append(self._value_docs("path", ids, dv))
                    word_rules.append(("pathf", cp, 0))
                t = _member(cand, filt_path, self._n)
                m = t if m is None else m & t
            if symbol_filters:
                for s_ in symbol_filters:
                    filt_sym.append(self._symbol_filter_docs(s_.lower()))
                    word_rules.append(("symf", s_.lower(), 0))
                t = _member(cand, filt_sym, self._n)
                m = t if m is None else m & t
            if m is not None:
                cand, score = cand[m], score[m]

        # ---- scope
        task_docs = None
        if task_id:
            task_docs = self._value_docs("task", *self._table_exact("task", task_id.lower()))
        if scope == "task-only":
            assert task_docs is not None
            mk = _member(cand, [task_docs], self._n)
            cand, score = cand[mk], score[mk]
            order = self._top(cand, score, limit)
        elif scope == "task-first":
            assert task_docs is not None
            mk = _member(cand, [task_docs], self._n)
            first = self._top(cand[mk], score[mk], limit)
            inn = np.flatnonzero(mk)
            out = np.flatnonzero(~mk)
            order = [int(inn[i]) for i in first]
            if len(order) < limit:
                rest = self._top(cand[out], score[out], limit - len(order))
                order += [int(out[i]) for i in rest]
        else:
            order = self._top(cand, score, limit)

        # ---- hits
        kind_sorted = {k: (np.unique(np.concatenate(v)) if v else _EMPTY_I)
                       for k, v in kind_docs.items()}
        hits = []
        text_sorted = text_docs  # always sorted (see _accumulate)
        for j in order:
            d = int(cand[j])
            hits.append(self._hit(d, float(score[j]), qtoks, per_term, kind_sorted, word_rules,
                                  text_sorted, task_id, task_docs, now))
        return hits

    def _all_live(self, la: float | None) -> np.ndarray:
        docs = np.arange(self._n, dtype=np.int64)
        m = self._live_mask(docs, la)
        return docs if m is None else docs[m]

    def _symbol_filter_docs(self, w: str) -> np.ndarray:
        parts = []
        for k in (w,):
            ids, dv = self._table_exact("sym", k)
            parts.append(self._value_docs("sym", ids, dv))
        sids, _, sdelta = self._sym_scan("sym", w)
        parts.append(self._value_docs("sym", np.unique(sids), [v for v, _ in sdelta]))
        return np.concatenate(parts)

    def _live_values(self, name: str, ids: np.ndarray, dvals: list[str],
                     la: float | None) -> tuple[list[int], list[str]]:
        """The values (base ids, delta strings) that have at least one live doc."""
        live_ids = []
        for i in np.asarray(ids).tolist():
            docs = self._value_docs(name, np.array([i]), [])
            m = self._live_mask(docs, la)
            if m is None or bool(m.any()):
                live_ids.append(i)
        live_d = []
        for v in dvals:
            docs = self._value_docs(name, _EMPTY_I, [v])
            m = self._live_mask(docs, la)
            if m is None or bool(m.any()):
                live_d.append(v)
        return live_ids, live_d

    def _match_word(self, w: str, la: float | None, boost_docs: list[np.ndarray],
                    boost_vals: list[np.ndarray], kind_docs: dict[str, list[np.ndarray]],
                    rules: list[tuple[str, str, int]]) -> None:
        wl = w.lower()
        path_hit = False
        # paths
        if is_path_like(w):
            cw = S.canon_path(w)
            ids, dv = self._table_exact("path", cw)
            if len(ids) or dv:
                path_hit = True
                exact_ids: list[int] = []
                exact_d: list[str] = []
                alias_ids: list[int] = []
                alias_d: list[str] = []
                for i in np.asarray(ids).tolist():
                    v = self._value_str("path", i)
                    (exact_ids if path_level(v, cw) == 2 else alias_ids).append(i)
                for v in dv:
                    (exact_d if path_level(v, cw) == 2 else alias_d).append(v)
                if alias_ids or alias_d:
                    li, ld = self._live_values("path", np.array(alias_ids + exact_ids,
                                                                dtype=np.int64),
                                               alias_d + exact_d, la)
                    # a path may live in both the base and the delta: count strings
                    unique = len({self._value_str("path", i) for i in li} | set(ld)) == 1
                else:
                    unique = False
                if unique:
                    alias_docs = self._value_docs("path", np.array(alias_ids, dtype=np.int64),
                                                  alias_d)
                    rules.append(("path", cw, 1))
                else:
                    alias_docs = _EMPTY_I
                    rules.append(("path", cw, 0))
                ex_docs = self._value_docs("path", np.array(exact_ids, dtype=np.int64), exact_d)
                d, b = _best([(ex_docs, BOOSTS["path_exact"]),
                              (alias_docs, BOOSTS["path_alias"])])
                if len(d):
                    boost_docs.append(d)
                    boost_vals.append(b)
                    kind_docs["path"].append(d)
        # symbols
        if len(wl) >= 2:
            levels: list[tuple[np.ndarray, float]] = []
            ids, dv = self._table_exact("sym", wl)
            levels.append((self._value_docs("sym", ids, dv), BOOSTS["symbol_exact"]))
            partial = partial_symbol_ok(w) and not path_hit
            if partial:
                sids, slv, sdelta = self._sym_scan("sym", wl)
                for lvl, bname in ((2, "symbol_prefix"), (1, "symbol_contains")):
                    sel = np.unique(sids[slv == lvl]) if len(sids) else _EMPTY_I
                    dsel = [v for v, lv in sdelta if lv == lvl]
                    levels.append((self._value_docs("sym", sel, dsel), BOOSTS[bname]))
            rules.append(("sym", wl, 1 if partial else 0))
            d, b = _best(levels)
            if len(d):
                boost_docs.append(d)
                boost_vals.append(b)
                kind_docs["sym"].append(d)
            # tests
            ids, dv = self._table_exact("test", wl)
            if len(ids) or dv:
                d = np.unique(self._value_docs("test", ids, dv))
                boost_docs.append(d)
                boost_vals.append(np.full(len(d), BOOSTS["test_exact"]))
                kind_docs["test"].append(d)
                rules.append(("test", wl, 0))
            # tasks
            ids, dv = self._table_exact("task", wl)
            if len(ids) or dv:
                d = np.unique(self._value_docs("task", ids, dv))
                boost_docs.append(d)
                boost_vals.append(np.full(len(d), BOOSTS["task_exact"]))
                kind_docs["task"].append(d)
                rules.append(("task", wl, 0))

    def _top(self, cand: np.ndarray, score: np.ndarray, k: int) -> list[int]:
        """Positions of the best ``k`` candidates: score desc, newest, cache_key."""
        n = len(cand)
        if n == 0 or k <= 0:
            return []
        if n > k:
            kth = np.partition(score, n - k)[n - k]
            sel = np.flatnonzero(score >= kth)
            if len(sel) > 4 * k + 64:
                # a big tie at the k-th score: cut it by created_at first
                gt = sel[score[sel] > kth]
                eq = sel[score[sel] == kth]
                need = k - len(gt)
                ce = self._created[cand[eq]]
                kc = np.partition(ce, len(ce) - need)[len(ce) - need]
                eq = eq[ce >= kc]
                sel = np.concatenate((gt, eq))
        else:
            sel = np.arange(n)
        sc = score[sel].tolist()
        cr = self._created[cand[sel]].tolist()
        rows = sorted(zip(sc, cr, sel.tolist(), strict=False), key=lambda r: (-r[0], -r[1]))
        # resolve exact (score, created) ties by cache_key, only where needed
        out: list[int] = []
        i = 0
        while i < len(rows) and len(out) < k:
            j = i + 1
            while j < len(rows) and rows[j][0] == rows[i][0] and rows[j][1] == rows[i][1]:
                j += 1
            group = [r[2] for r in rows[i:j]]
            if len(group) > 1:
                group.sort(key=lambda p: self._key_of(int(cand[p])))
            out.extend(group)
            i = j
        return out[:k]

    def _key_of(self, d: int) -> str:
        if d >= self._nb:
            return self._ddocs[d].cache_key
        seg = self._seg
        return seg["key_blob"][seg["key_off"][d] : seg["key_off"][d + 1]].tobytes().decode(
            "utf-8", "surrogatepass")

    def _fields(self, d: int) -> tuple[str, str, tuple[str, ...], tuple[str, ...],
                                       tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        if d >= self._nb:
            doc = self._ddocs[d]
            return (doc.cache_key, doc.summary, doc.paths, doc.symbols, doc.tests,
                    doc.task_ids, doc.packet_types)
        seg = self._seg
        rec = seg["rec_blob"][seg["rec_off"][d] : seg["rec_off"][d + 1]].tobytes()
        s, p, y, t, k, pt = S.decode_record(rec)
        return self._key_of(d), s, p, y, t, k, pt

    def _hit(self, d: int, score: float, qtoks: list[str],
             per_term: dict[str, tuple[np.ndarray, set[int]]],
             kind_sorted: dict[str, np.ndarray], rules: list[tuple[str, str, int]],
             text_sorted: np.ndarray, task_id: str | None, task_docs: np.ndarray | None,
             now: float) -> RecallHit:
        key, summary, paths, symbols, tests, task_ids, ptypes = self._fields(d)
        matched = []
        for t in qtoks:
            pt = per_term.get(t)
            if pt is None:
                continue
            base_docs, dset = pt
            if d in dset or (len(base_docs) and _sorted_has(base_docs, d)):
                matched.append(t)
        reasons = []
        if matched:
            reasons.append("bm25_text")
        mpaths: list[str] = []
        msyms: list[str] = []
        cpaths = [S.canon_path(p) for p in paths]
        lsyms = [s.lower() for s in symbols]
        for kind, w, mode in rules:
            if kind == "path" or kind == "pathf":
                for p, cp in zip(paths, cpaths, strict=False):
                    lv = path_level(cp, w)
                    if (lv == 2 or (lv == 1 and (mode == 1 or kind == "pathf"))) \
                            and p not in mpaths:
                        mpaths.append(p)
            elif kind == "sym" or kind == "symf":
                for s_, ls in zip(symbols, lsyms, strict=False):
                    if sym_level(ls, w, mode == 1 or kind == "symf") and s_ not in msyms:
                        msyms.append(s_)
        if mpaths:
            reasons.append("path_match")
        if msyms:
            reasons.append("symbol_match")
        if _sorted_has(kind_sorted["test"], d):
            reasons.append("test_match")
        if _sorted_has(kind_sorted["task"], d) or (
                task_id and task_id.lower() in (k.lower() for k in task_ids)):
            reasons.append("task_match")
        est = int(self._est[d])
        created = float(self._created[d])
        snippet = make_snippet([summary, *paths, *symbols, *tests], matched)
        return RecallHit(
            cache_key=key,
            target=self._target_name(d),
            score=score,
            summary=summary,
            snippet=snippet,
            matched_tokens=tuple(matched),
            matched_paths=tuple(mpaths),
            matched_symbols=tuple(msyms),
            match_reasons=tuple(reasons),
            packet_types=tuple(ptypes),
            task_ids=tuple(task_ids),
            budget_estimate={"est_tokens": est_tokens(est), "est_bytes": est},
            created_at_unix=created,
            age_secs=max(0.0, now - created),
        )

    def _target_name(self, d: int) -> str:
        names, _ = self._targets()
        return names[int(self._tgt[d])]


_EMPTY_I = np.zeros(0, dtype=np.int64)


def _sorted_has(arr: np.ndarray, d: int) -> bool:
    if len(arr) == 0:
        return False
    i = int(np.searchsorted(arr, d))
    return i < len(arr) and int(arr[i]) == d


def _accumulate(docs: list[np.ndarray], vals: list[np.ndarray], n: int) -> tuple[np.ndarray,
                                                                                    np.ndarray]:
    """Sum values per doc over several (docs, values) lists; docs unique within a list."""
    docs = [d for d in docs if len(d)]
    vals = [v for v in vals if len(v)]
    if not docs:
        return _EMPTY_I, np.zeros(0, dtype=np.float64)
    if len(docs) == 1:
        return docs[0].astype(np.int64, copy=False), vals[0].astype(np.float64, copy=False)
    total = sum(len(d) for d in docs)
    if total * 8 < n:
        alld = np.concatenate(docs).astype(np.int64, copy=False)
        allv = np.concatenate(vals)
        u, inv = np.unique(alld, return_inverse=True)
        return u, np.bincount(inv, weights=allv, minlength=len(u))
    # every value is > 0, so a doc was hit iff its sum is > 0
    acc = np.bincount(np.concatenate(docs), weights=np.concatenate(vals), minlength=n)
    u = np.flatnonzero(acc)
    return u, acc[u]


def _merge_sorted(a: np.ndarray, av: np.ndarray, b: np.ndarray,
                  bv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of two doc lists (``a`` sorted, both unique) with summed values; sorted."""
    if not len(a):
        o = np.argsort(b, kind="stable")
        return b[o], bv[o]
    pos = np.searchsorted(a, b)
    pos_c = np.minimum(pos, len(a) - 1)
    found = a[pos_c] == b
    score = av.astype(np.float64, copy=True)
    np.add.at(score, pos_c[found], bv[found])
    if found.all():
        return a, score
    docs = np.concatenate((a, b[~found]))
    score = np.concatenate((score, bv[~found]))
    o = np.argsort(docs, kind="stable")
    return docs[o], score[o]


def _best(levels: list[tuple[np.ndarray, float]]) -> tuple[np.ndarray, np.ndarray]:
    """Per doc, the highest boost among the levels (levels given best first)."""
    seen: np.ndarray | None = None
    out_d: list[np.ndarray] = []
    out_b: list[np.ndarray] = []
    for docs, boost in levels:
        if not len(docs):
            continue
        docs = np.unique(docs)
        if seen is not None and len(seen):
            docs = docs[~np.isin(docs, seen, assume_unique=True)]
        if len(docs):
            out_d.append(docs)
            out_b.append(np.full(len(docs), boost))
            seen = docs if seen is None else np.union1d(seen, docs)
    if not out_d:
        return _EMPTY_I, np.zeros(0)
    return np.concatenate(out_d), np.concatenate(out_b)


def _member(cand: np.ndarray, sets: list[np.ndarray], n: int) -> np.ndarray:
    """Mask of ``cand`` entries present in any of ``sets``."""
    sets = [s for s in sets if len(s)]
    if not sets:
        return np.zeros(len(cand), dtype=bool)
    allowed = np.concatenate(sets)
    if len(cand) * 4 > n or len(allowed) * 4 > n:
        mark = np.zeros(n, dtype=bool)
        mark[allowed] = True
        return mark[cand]
    return np.isin(cand, allowed)
