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

import blake3
import numpy as np

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
