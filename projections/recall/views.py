"""Typed read views of a segment's array groups (scalar reads through memoryviews).

A segment is stored as named flat arrays (:mod:`.layout`); the readers of the
impact orders and of the structured tables use these groups instead of
composing array names (``"mimp_" + "goff"``), so a field is a checked attribute.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from .arrays import HashTable, mview


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
    def of(cls, seg: dict[str, np.ndarray]) -> Postings:
        off, doc, tf, ub = seg["post_off"], seg["post_doc"], seg["post_tf"], seg["term_ub"]
        return cls(off, doc, tf, ub, float(seg["ub_avgdl"][0]), mview(off), mview(doc),
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
    def of(cls, seg: dict[str, np.ndarray]) -> BaseDocs:
        return cls(mview(seg["sum_off"]), mview(seg["sum_blob"]), mview(seg["dv_off"]),
                   mview(seg["dv_val"]), mview(seg["est"]), mview(seg["key_bin"]),
                   mview(seg["key_off"]), seg["key_blob"])


@attrs.frozen
class Targets:
    """The distinct targets (``blob``/``off``, in target id order) and each target's
    base docs ``docs[doc_off[t]:doc_off[t+1]]``."""

    blob: np.ndarray
    off: np.ndarray
    doc_off: Any
    docs: np.ndarray

    @classmethod
    def of(cls, seg: dict[str, np.ndarray]) -> Targets:
        return cls(seg["tgt_blob"], seg["tgt_off"], mview(seg["tgtd_off"]), seg["tgtd_doc"])


@attrs.frozen
class Trigrams:
    """The symbol values' byte trigrams: sorted codes (3 bytes as an int) and each
    code's sorted value ids ``val[off[p]:off[p+1]]``."""

    code: Any
    off: Any
    val: np.ndarray
    val_mv: Any

    @classmethod
    def of(cls, seg: dict[str, np.ndarray]) -> Trigrams:
        return cls(mview(seg["tg_code"]), mview(seg["tg_off"]), seg["tg_val"],
                   mview(seg["tg_val"]))


@attrs.frozen
class ImpactOrders:
    """The impact orders of one kind of term: big terms (doc ids) or mid terms
    (positions into their postings). Per term ``m``: entries ``off[m]:off[m+1]``,
    tf groups ``goff[m]:goff[m+1]``; per group its tf, first entry and shortest doc."""

    entries: np.ndarray  # imp_doc (doc ids) or mimp_pos (positions into post_doc)
    entry: Any  # memoryview of entries
    off: Any
    goff: Any
    gtf: Any
    gstart: Any
    gdl: Any

    @classmethod
    def of(cls, seg: dict[str, np.ndarray], pre: str, entries: str) -> ImpactOrders:
        return cls(seg[entries], mview(seg[entries]), mview(seg[pre + "off"]),
                   mview(seg[pre + "goff"]), mview(seg[pre + "gtf"]), mview(seg[pre + "gstart"]),
                   mview(seg[pre + "gdl"]))

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
    def of(cls, seg: dict[str, np.ndarray], name: str) -> Table:
        def mv(part: str) -> Any:
            return mview(seg[f"{name}_{part}"])

        return cls(HashTable(seg[name + "_khash"], seg[name + "_koff"], seg[name + "_kblob"]),
                   (seg[name + "_vblob"], seg[name + "_voff"]), mv("kv_off"), mv("kv_val"),
                   mv("voff"), mv("vblob"), mv("vd_off"), mv("vd_doc"))
