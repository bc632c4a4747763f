"""Typed read views of a segment's array groups (scalar reads through memoryviews).

Each view is made from one group of :class:`~.columns.Segment` (the arrays as
stored) and adds what the readers' Python loops need: memoryviews for scalar
reads, a hash table reader, a float. A field is a checked attribute, never an
array name.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from .arrays import HashTable, mview
from .columns import DocCols, ImpactCols, TableCols, TargetCols, TermCols, TrigramCols


@attrs.frozen
class Postings:
    """The small terms' postings, sorted by doc: term ``tid``'s docs are
    ``doc[off[tid]:off[tid+1]]`` with their tf's in ``tf``; ``ub[tid]`` bounds the
    term's BM25 contribution (before idf) at the build's average length ``ub_avgdl``.

    Arrays for numpy, memoryviews (``*_mv``) for scalar reads in Python loops."""

    off: np.ndarray
    doc: np.ndarray
    tf: np.ndarray
    ub: np.ndarray
    ub_avgdl: float
    off_mv: Any
    doc_mv: Any
    tf_mv: Any
    ub_mv: Any

    @classmethod
    def of(cls, terms: TermCols) -> Postings:
        off, doc, tf, ub = terms.post_off, terms.post_doc, terms.post_tf, terms.ub
        return cls(off, doc, tf, ub, float(terms.ub_avgdl[0]), mview(off), mview(doc),
                   mview(tf), mview(ub))


@attrs.frozen
class BaseDocs:
    """What the hits read of each base doc ``d``: its summary
    (``sum_blob[sum_off[d]:sum_off[d+1]]``, UTF-8), its structured values (global
    value ids ``dv_val[dv_off[d]:dv_off[d+1]]``), its size estimate, and its cache
    key: 32 raw bytes at ``key_bin[32*d:]`` when every key is hex, else
    ``key_blob[key_off[d]:key_off[d+1]]``."""

    sum_off: Any
    sum_blob: Any
    dv_off: Any
    dv_val: Any
    est: Any
    key_bin: memoryview[Any]
    key_off: Any
    key_blob: np.ndarray

    @classmethod
    def of(cls, docs: DocCols) -> BaseDocs:
        return cls(mview(docs.sum_off), mview(docs.sum_blob), mview(docs.dv_off),
                   mview(docs.dv_val), mview(docs.est), mview(docs.key_bin),
                   mview(docs.key_off), docs.key_blob)


@attrs.frozen
class Targets:
    """The distinct targets (``blob``/``off``, in target id order) and each target's
    base docs ``docs[doc_off[t]:doc_off[t+1]]``."""

    blob: np.ndarray
    off: np.ndarray
    doc_off: Any
    docs: np.ndarray

    @classmethod
    def of(cls, targets: TargetCols) -> Targets:
        return cls(targets.blob, targets.off, mview(targets.doc_off), targets.doc)


@attrs.frozen
class Trigrams:
    """The symbol values' byte trigrams: sorted codes (3 bytes as an int) and each
    code's sorted value ids ``val[off[p]:off[p+1]]``."""

    code: Any
    off: Any
    val: np.ndarray
    val_mv: Any

    @classmethod
    def of(cls, tg: TrigramCols) -> Trigrams:
        return cls(mview(tg.code), mview(tg.off), tg.val, mview(tg.val))


@attrs.frozen
class ImpactOrders:
    """The impact orders of one kind of term: big terms (doc ids) or mid terms
    (positions into their postings). Per term ``m``: entries ``off[m]:off[m+1]``,
    tf groups ``goff[m]:goff[m+1]``; per group its tf, first entry and shortest doc."""

    entries: np.ndarray  # doc ids (big terms) or positions into the postings (mid terms)
    entry: Any  # memoryview of entries
    off: Any
    goff: Any
    gtf: Any
    gstart: Any
    gdl: Any

    @classmethod
    def of(cls, imp: ImpactCols) -> ImpactOrders:
        return cls(imp.entries, mview(imp.entries), mview(imp.off), mview(imp.goff),
                   mview(imp.gtf), mview(imp.gstart), mview(imp.gdl))

    def groups(self, m: int) -> list[tuple[int, int, int, int]]:
        """Term ``m``'s tf groups: (tf, first entry, end entry, shortest doc length)."""
        g0, g1 = self.goff[m], self.goff[m + 1]
        end = self.off[m + 1]
        gtf, gst, gdl = self.gtf, self.gstart, self.gdl
        return [(gtf[g], gst[g], gst[g + 1] if g + 1 < g1 else end, gdl[g])
                for g in range(g0, g1)]


@attrs.frozen
class Table:
    """One structured table (path, sym, test, task, ptype): its distinct raw values
    (``vblob``/``voff``), each value's docs (``vd_off``/``vd_doc``) and the lookup
    keys (hash ``keys``) with each key's values (``kv_off``/``kv_val``)."""

    keys: HashTable
    values: tuple[np.ndarray, np.ndarray]  # (vblob, voff) as arrays, for bulk decoding
    kv_off: Any
    kv_val: Any
    voff: Any
    vblob: Any
    vd_off: Any
    vd_doc: Any

    @classmethod
    def of(cls, t: TableCols) -> Table:
        return cls(HashTable(t.khash, t.koff, t.kblob), (t.vblob, t.voff), mview(t.kv_off),
                   mview(t.kv_val), mview(t.voff), mview(t.vblob), mview(t.vd_off),
                   mview(t.vd_doc))
