"""The byte layout of a segment: one aligned file of named arrays, checked on open.

``seg_to_bytes`` writes a header (names, dtypes, offsets), the arrays 64-byte
aligned and a blake3 checksum; ``seg_from_bytes`` maps them back without
copying and checks the structure (offsets in range, lengths consistent), so a
garbled checkpoint is a ``ValueError``, never a wrong answer or a crash.
See docs/format.md and docs/recall.md, "Index layout".
"""

from __future__ import annotations

import json
import struct
from typing import Any

import attrs
import blake3
import numpy as np

from .columns import (
    DocCols,
    ImpactCols,
    Segment,
    TableCols,
    Tables,
    TargetCols,
    TermCols,
    TrigramCols,
)
from .normalize import TABLES, dec

MAGIC = b"CTXRECL2"
FORMAT_VERSION = 2
_ALIGN = 64

# meta array slots
M_KEYHEX = 0  # 1: every cache_key is 64 lowercase hex chars, stored as 32 raw bytes
M_TBASE = 1  # M_TBASE + i: first global value id of TABLES[i]; M_TBASE + 5: the end
M_LEN = M_TBASE + len(TABLES) + 1


def decode_strings(blob: np.ndarray, off: np.ndarray) -> list[str]:
    b = blob.tobytes()
    o = off.tolist()
    return [dec(b[o[i] : o[i + 1]]) for i in range(len(o) - 1)]


#: The one table of names: each stored array's name on disk, and the group and field
#: of :class:`~.columns.Segment` that holds it (group ``""``: a field of the segment
#: itself; a table's name: that field of ``Segment.tables``). Arrays are written in
#: name order, so the bytes do not depend on the order of this table.
ARRAYS: tuple[tuple[str, str, str], ...] = (
    ("meta", "", "meta"), ("big_tf", "", "big_tf"),
    ("created", "docs", "created"), ("dl", "docs", "dl"), ("est", "docs", "est"),
    ("tgt", "docs", "tgt"), ("sum_blob", "docs", "sum_blob"), ("sum_off", "docs", "sum_off"),
    ("dv_off", "docs", "dv_off"), ("dv_val", "docs", "dv_val"),
    ("key_bin", "docs", "key_bin"), ("key_blob", "docs", "key_blob"),
    ("key_off", "docs", "key_off"), ("key_hash", "docs", "key_hash"),
    ("term_blob", "terms", "blob"), ("term_off", "terms", "off"),
    ("term_hash", "terms", "hash"), ("term_ub", "terms", "ub"),
    ("ub_avgdl", "terms", "ub_avgdl"), ("post_off", "terms", "post_off"),
    ("post_doc", "terms", "post_doc"), ("post_tf", "terms", "post_tf"),
    ("big_tid", "big", "tid"), ("imp_doc", "big", "entries"), ("imp_off", "big", "off"),
    ("imp_goff", "big", "goff"), ("imp_gtf", "big", "gtf"), ("imp_gstart", "big", "gstart"),
    ("imp_gdl", "big", "gdl"),
    ("mimp_tid", "mid", "tid"), ("mimp_pos", "mid", "entries"), ("mimp_off", "mid", "off"),
    ("mimp_goff", "mid", "goff"), ("mimp_gtf", "mid", "gtf"),
    ("mimp_gstart", "mid", "gstart"), ("mimp_gdl", "mid", "gdl"),
    ("tgt_blob", "targets", "blob"), ("tgt_off", "targets", "off"),
    ("tgtd_off", "targets", "doc_off"), ("tgtd_doc", "targets", "doc"),
    ("tg_code", "trigrams", "code"), ("tg_off", "trigrams", "off"),
    ("tg_val", "trigrams", "val"),
) + tuple((f"{t}_{f.name}", t, f.name) for t in TABLES for f in attrs.fields(TableCols))

#: the class of each group of ARRAYS
_GROUPS: dict[str, type[Any]] = {
    "docs": DocCols, "terms": TermCols, "big": ImpactCols, "mid": ImpactCols,
    "targets": TargetCols, "trigrams": TrigramCols, **dict.fromkeys(TABLES, TableCols)}
_ALLOWED_DTYPES = {"|u1", "<u2", "<u4", "<u8", "<i4", "<i8", "<f4", "<f8", "|i1"}


def _group_of(seg: Segment, group: str) -> Any:
    if not group:
        return seg
    if group in TABLES:
        return getattr(seg.tables, group)
    return getattr(seg, group)


def seg_to_bytes(seg: Segment) -> bytes:
    specs = []
    pos = 0
    chunks: list[bytes] = []
    for nm, group, field in sorted(ARRAYS):
        a = np.ascontiguousarray(getattr(_group_of(seg, group), field))
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


def _segment(named: dict[str, np.ndarray]) -> Segment:
    """The typed segment of a checkpoint's arrays by name (ValueError: one is missing;
    names not in :data:`ARRAYS` are ignored)."""
    missing = sorted({nm for nm, _, _ in ARRAYS} - set(named))
    if missing:
        raise ValueError(f"recall index: missing arrays {missing[:3]}")
    fields: dict[str, dict[str, Any]] = {}
    for nm, group, field in ARRAYS:
        fields.setdefault(group, {})[field] = named[nm]
    groups = {g: _GROUPS[g](**f) for g, f in fields.items() if g}
    tables = Tables(**{t: groups.pop(t) for t in TABLES})
    return Segment(**fields[""], **groups, tables=tables)


def seg_from_bytes(data: Any, verify: bool = True) -> Segment:
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
    named: dict[str, np.ndarray] = {}
    try:
        for nm, dt, count, off in specs:
            if dt not in _ALLOWED_DTYPES:
                raise ValueError(f"array {nm}: dtype {dt}")
            dtype = np.dtype(dt)
            start = base + int(off)
            stop = start + int(count) * dtype.itemsize
            if stop > end or start < base or count < 0:
                raise ValueError(f"array {nm} out of bounds")
            named[str(nm)] = np.frombuffer(mv, dtype=dtype, count=int(count), offset=start)
    except (TypeError, ValueError) as e:
        raise ValueError(f"recall index: bad array table ({e})") from None
    seg = _segment(named)
    _check(seg)
    return seg


def _off_ok(off: np.ndarray, data: np.ndarray, count: int) -> bool:
    """``off`` is a CSR offset array of ``count`` ranges covering ``data``."""
    return len(off) == count + 1 and int(off[0]) == 0 and int(off[-1]) == len(data)


def _hash_ok(h: np.ndarray, count: int) -> bool:
    """``h`` is an open-addressing table (power-of-two size) of ids below ``count``."""
    return (len(h) & (len(h) - 1)) == 0 and (not len(h) or int(h.max()) < count)


def _check(seg: Segment) -> None:
    """Cheap structural checks (lengths and end offsets), so lookups stay in bounds."""
    docs, terms, tg, tgt = seg.docs, seg.terms, seg.trigrams, seg.targets
    n = len(docs.created)
    meta = seg.meta
    ok = len(meta) == M_LEN
    if ok:
        tb = meta[M_TBASE:].tolist()
        counts = [len(t.voff) - 1 for t in seg.tables.in_order()]
        ok = tb[0] == 0 and all(tb[i + 1] - tb[i] == counts[i] for i in range(len(TABLES)))
        if int(meta[M_KEYHEX]):
            ok = ok and len(docs.key_bin) == 32 * n
        else:
            ok = ok and _off_ok(docs.key_off, docs.key_blob, n)
    T = len(terms.off) - 1
    ok = (ok and len(docs.dl) == n and len(docs.est) == n and len(docs.tgt) == n
          and _off_ok(docs.sum_off, docs.sum_blob, n) and _off_ok(docs.dv_off, docs.dv_val, n)
          and _off_ok(tgt.off, tgt.blob, len(tgt.doc_off) - 1)
          and _off_ok(tgt.doc_off, tgt.doc, len(tgt.off) - 1) and len(tgt.doc) == n
          and _off_ok(terms.off, terms.blob, T) and _off_ok(terms.post_off, terms.post_doc, T)
          and len(terms.post_tf) == len(terms.post_doc)
          and len(terms.ub) == T and len(terms.ub_avgdl) == 1
          and len(seg.big_tf) == len(seg.big.tid) * n
          and _off_ok(tg.off, tg.val, len(tg.code)))
    for imp in (seg.big, seg.mid):
        ok = (ok and _off_ok(imp.off, imp.entries, len(imp.tid))
              and _off_ok(imp.goff, imp.gtf, len(imp.tid))
              and len(imp.gstart) == len(imp.gtf) == len(imp.gdl)
              and (not len(imp.tid) or (int(imp.tid.max()) < T and int(imp.tid.min()) >= 0)))
    for t in seg.tables.in_order():
        nv, nk = len(t.voff) - 1, len(t.koff) - 1
        ok = (ok and _off_ok(t.voff, t.vblob, nv) and _off_ok(t.vd_off, t.vd_doc, nv)
              and _off_ok(t.koff, t.kblob, nk) and _off_ok(t.kv_off, t.kv_val, nk)
              and _hash_ok(t.khash, nk))
    kh = docs.key_hash
    ok = ok and len(kh) > n and _hash_ok(kh, n) and _hash_ok(terms.hash, T)
    if not ok:
        raise ValueError("recall index: inconsistent array lengths")
