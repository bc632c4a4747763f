"""A segment's arrays, in typed groups: what the builder makes, the layout stores and
the index reads.

A :class:`Segment` is a few frozen groups of flat numpy arrays (a field is an
attribute, checked by mypy, not a string key); :mod:`.layout` holds the one table
that names each field on disk, and :mod:`.views` wraps the groups the readers scan
in memoryviews. No numpy work here: the builder (:mod:`.segment`) fills the
groups, the layout checks them when it maps a checkpoint back.
"""

from __future__ import annotations

import attrs
import numpy as np


@attrs.frozen
class DocCols:
    """Per base doc ``d`` (ids ordered by created_at, then cache_key descending):
    ``created`` (f8), ``dl`` (doc length), ``est`` (size estimate), ``tgt`` (target
    id); the summary ``sum_blob[sum_off[d]:sum_off[d+1]]`` (UTF-8); its value list
    ``dv_val[dv_off[d]:dv_off[d+1]]`` (global value ids, packet order); its cache
    key, 32 raw bytes at ``key_bin[32*d:]`` when every key is hex (``meta``'s
    ``M_KEYHEX``), else ``key_blob[key_off[d]:key_off[d+1]]``; and ``key_hash``,
    the open-addressing table of the keys."""

    created: np.ndarray
    dl: np.ndarray
    est: np.ndarray
    tgt: np.ndarray
    sum_blob: np.ndarray
    sum_off: np.ndarray
    dv_off: np.ndarray
    dv_val: np.ndarray
    key_bin: np.ndarray
    key_blob: np.ndarray
    key_off: np.ndarray
    key_hash: np.ndarray


@attrs.frozen
class TermCols:
    """The terms: UTF-8 ``blob``/``off`` with their hash table ``hash``; per term its
    score bound ``ub`` (before idf, at the build's average length ``ub_avgdl``, a
    1-element array); the small terms' postings sorted by doc,
    ``post_doc[post_off[t]:post_off[t+1]]`` with tf's ``post_tf`` (a big term's
    range is empty)."""

    blob: np.ndarray
    off: np.ndarray
    hash: np.ndarray
    ub: np.ndarray
    ub_avgdl: np.ndarray
    post_off: np.ndarray
    post_doc: np.ndarray
    post_tf: np.ndarray


@attrs.frozen
class ImpactCols:
    """The impact orders of one kind of term (big: ``entries`` are doc ids; mid:
    positions into the term's postings). Term ``tid[m]``'s entries are
    ``entries[off[m]:off[m+1]]``, grouped by tf (``goff[m]:goff[m+1]``); per group its
    tf ``gtf``, first entry ``gstart`` and shortest doc length ``gdl``."""

    tid: np.ndarray
    entries: np.ndarray
    off: np.ndarray
    goff: np.ndarray
    gtf: np.ndarray
    gstart: np.ndarray
    gdl: np.ndarray


@attrs.frozen
class TargetCols:
    """The distinct targets (``blob``/``off``, in target id order) and each target's
    base docs ``doc[doc_off[t]:doc_off[t+1]]``."""

    blob: np.ndarray
    off: np.ndarray
    doc_off: np.ndarray
    doc: np.ndarray


@attrs.frozen
class TrigramCols:
    """The symbol values' byte trigrams: sorted ``code`` (3 bytes as an int) and each
    code's sorted value ids ``val[off[p]:off[p+1]]``."""

    code: np.ndarray
    off: np.ndarray
    val: np.ndarray


@attrs.frozen
class TableCols:
    """One structured table: its distinct raw values (``vblob``/``voff``), each
    value's docs ``vd_doc[vd_off[v]:vd_off[v+1]]``, the lookup keys
    (``kblob``/``koff``, hash table ``khash``) and each key's values
    ``kv_val[kv_off[k]:kv_off[k+1]]``."""

    vblob: np.ndarray
    voff: np.ndarray
    vd_off: np.ndarray
    vd_doc: np.ndarray
    kblob: np.ndarray
    koff: np.ndarray
    khash: np.ndarray
    kv_off: np.ndarray
    kv_val: np.ndarray


@attrs.frozen
class Tables:
    """The five structured tables, one field each, in :data:`~.normalize.TABLES` order."""

    path: TableCols
    sym: TableCols
    test: TableCols
    task: TableCols
    ptype: TableCols

    def in_order(self) -> tuple[TableCols, ...]:
        """The tables in :data:`~.normalize.TABLES` order (global value ids follow it;
        ``tests/test_recall_arrays.py`` holds the field names equal to TABLES)."""
        return (self.path, self.sym, self.test, self.task, self.ptype)



@attrs.frozen
class Segment:
    """A frozen segment: every array of it, by group.

    ``meta`` is a small int64 array of slots (:data:`~.layout.M_KEYHEX`: keys stored
    as raw bytes; :data:`~.layout.M_TBASE` + i: the first global value id of table
    i). ``big_tf`` holds a dense tf row per big term (``len(big.tid)`` rows of ``n``
    docs, flattened)."""

    meta: np.ndarray
    docs: DocCols
    terms: TermCols
    big: ImpactCols
    big_tf: np.ndarray
    mid: ImpactCols
    targets: TargetCols
    trigrams: TrigramCols
    tables: Tables
