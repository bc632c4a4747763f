"""Frozen, columnar index segments: build, merge, (de)serialise.

A segment is a dict of flat numpy arrays (see ``ARRAY_NAMES``); it can live
on top of a ``bytes``/``mmap`` buffer without copying (``np.frombuffer``), so
opening a checkpointed index costs a header parse, not a rebuild.

Documents in a segment are numbered in ``created_at`` order, so "created at
or after T" is a suffix of the doc ids and of every posting list.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from array import array
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any

import blake3
import numpy as np

from .tokenize import _IDENT, ident_tokens
from .types import RecallDoc

MAGIC = b"CTXRECL1"
FORMAT_VERSION = 1
_ALIGN = 64

I32 = np.int32
I64 = np.int64

TABLES = ("path", "sym", "test", "task", "ptype")


# ---------------------------------------------------------------- normalisers
def canon_path(p: str) -> str:
    """Canonical form of a path: ``/`` separators, no ``./`` prefix, no ``//``."""
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


def same_key(v: str) -> list[str]:
    return [v]


def sym_value(s: str) -> str:
    return s.lower()


def ident_value(s: str) -> str:
    return s


# table name -> (value normaliser, keys of a value)
TABLE_RULES: dict[str, tuple[Callable[[str], str], Callable[[str], list[str]]]] = {
    "path": (canon_path, path_keys),
    "sym": (sym_value, sym_keys),
    "test": (sym_value, test_keys),
    "task": (sym_value, same_key),
    "ptype": (ident_value, same_key),
}


def doc_table_values(doc: RecallDoc, table: str) -> tuple[str, ...]:
    raw = {
        "path": doc.paths,
        "sym": doc.symbols,
        "test": doc.tests,
        "task": doc.task_ids,
        "ptype": doc.packet_types,
    }[table]
    norm = TABLE_RULES[table][0]
    return tuple(dict.fromkeys(norm(v).replace("\n", " ") for v in raw))


# ---------------------------------------------------------------- records
def encode_record(doc: RecallDoc) -> bytes:
    """The stored fields of a doc needed to render a hit."""
    parts = [doc.summary, *doc.paths, *doc.symbols, *doc.tests, *doc.task_ids, *doc.packet_types]
    body = "\x00".join(parts)
    if body.count("\x00") != len(parts) - 1:
        return b"\x01" + json.dumps(
            [doc.summary, doc.paths, doc.symbols, doc.tests, doc.task_ids, doc.packet_types]
        ).encode()
    head = (
        f"{len(doc.paths)},{len(doc.symbols)},{len(doc.tests)},"
        f"{len(doc.task_ids)},{len(doc.packet_types)}\x00"
    )
    return (head + body).encode("utf-8", "surrogatepass")


def decode_record(data: bytes) -> tuple[str, tuple[str, ...], ...]:  # type: ignore[misc]
    """(summary, paths, symbols, tests, task_ids, packet_types)."""
    if data[:1] == b"\x01":
        s, p, y, t, k, pt = json.loads(data[1:])
        return s, tuple(p), tuple(y), tuple(t), tuple(k), tuple(pt)
    text = data.decode("utf-8", "surrogatepass")
    head, _, body = text.partition("\x00")
    np_, ns, nt, nk, npt = (int(x) for x in head.split(","))
    parts = body.split("\x00")
    i = 1
    out: list[Any] = [parts[0]]
    for n in (np_, ns, nt, nk, npt):
        out.append(tuple(parts[i : i + n]))
        i += n
    return tuple(out)  # type: ignore[return-value]


# ---------------------------------------------------------------- helpers
def strings_blob(items: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenation + offsets (n+1)."""
    lens = np.fromiter(map(len, items), dtype=I64, count=len(items))
    off = np.zeros(len(items) + 1, dtype=I64)
    np.cumsum(lens, out=off[1:])
    return np.frombuffer(b"".join(items), dtype=np.uint8), off


def gather_ranges(off: np.ndarray, data: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Concatenate ``data[off[i]:off[i+1]]`` for each i in ``ids``."""
    if len(ids) == 0:
        return data[:0]
    if len(ids) == 1:
        i = int(ids[0])
        return data[off[i] : off[i + 1]]
    starts = off[ids]
    lens = off[ids + 1] - starts
    total = int(lens.sum())
    if total == 0:
        return data[:0]
    csum = np.cumsum(lens)
    idx = np.repeat(starts - (csum - lens), lens) + np.arange(total, dtype=I64)
    return data[idx]


def gather_lens(off: np.ndarray, ids: np.ndarray) -> np.ndarray:
    return off[ids + 1] - off[ids]


def _hash(b: bytes) -> int:
    return zlib.crc32(b)


def build_hash(items: Sequence[bytes]) -> np.ndarray:
    """Open-addressing table (linear probing) of item ids keyed by crc32."""
    n = len(items)
    size = 8
    while size < 2 * n + 8:
        size <<= 1
    mask = size - 1
    table = np.full(size, -1, dtype=I32)
    if n == 0:
        return table
    pos = np.fromiter(map(_hash, items), dtype=np.uint32, count=n).astype(I64) & mask
    pending = np.arange(n, dtype=I64)
    while len(pending):
        empty = table[pos] == -1
        idx = np.flatnonzero(empty)
        if len(idx):
            cpos = pos[idx]
            u, first = np.unique(cpos, return_index=True)
            winners = idx[first]
            table[u] = pending[winners]
            placed = np.zeros(len(pending), dtype=bool)
            placed[winners] = True
            keep = ~placed
            pending = pending[keep]
            pos = pos[keep]
        pos = (pos + 1) & mask
    return table


def hash_lookup(table: np.ndarray, blob: np.ndarray, off: np.ndarray, key: bytes) -> int:
    """Id of ``key`` in a table made by :func:`build_hash`, or -1."""
    mask = len(table) - 1
    pos = _hash(key) & mask
    n = len(key)
    while True:
        i = int(table[pos])
        if i < 0:
            return -1
        s = int(off[i])
        if int(off[i + 1]) - s == n and blob[s : s + n].tobytes() == key:
            return i
        pos = (pos + 1) & mask


def csr(keys: np.ndarray, vals: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of (key, val) pairs, assuming they are already sorted by (key, val)."""
    off = np.zeros(n + 1, dtype=I64)
    if len(keys):
        np.cumsum(np.bincount(keys, minlength=n), out=off[1:])
    return off, vals


def sort_pairs(a: np.ndarray, b: np.ndarray, dedupe: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Sort (a, b) int pairs (both < 2**31) by (a, b); optionally drop duplicates."""
    if len(a) == 0:
        return a.astype(I64), b.astype(I64)
    key = (a.astype(np.uint64) << np.uint64(32)) | b.astype(np.uint64)
    key = np.sort(key)
    if dedupe:
        keep = np.ones(len(key), dtype=bool)
        keep[1:] = key[1:] != key[:-1]
        key = key[keep]
    return (key >> np.uint64(32)).astype(I64), (key & np.uint64(0xFFFFFFFF)).astype(I64)


# ---------------------------------------------------------------- building
class _WordIds(dict):  # type: ignore[type-arg]
    """raw identifier -> tuple of term ids; fills itself on a miss."""

    def __init__(self, term_ids: dict[str, int]) -> None:
        super().__init__()
        self.term_ids = term_ids

    def __missing__(self, word: str) -> tuple[int, ...]:
        tids = self.term_ids
        ids = tuple(tids.setdefault(t, len(tids)) for t in ident_tokens(word))
        self[word] = ids
        return ids


def tokenize_docs(
    docs: Sequence[RecallDoc], term_ids: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Bulk tokenisation: (tid, local doc, tf) triples sorted by (tid, doc), and doc lengths."""
    wc = _WordIds(term_ids)
    get = wc.__getitem__
    findall = _IDENT.findall
    from_iter = chain.from_iterable
    # texts repeat a lot across packets (paths, signatures, re-puts): tokenise each once
    text_ids: dict[str, tuple[int, ...]] = {}

    def text_missing(t: str) -> tuple[int, ...]:
        ids = tuple(from_iter(map(get, findall(t))))
        if len(text_ids) < 2_000_000:
            text_ids[t] = ids
        return ids

    tget = text_ids.get
    arr = array("i")
    ext = arr.extend
    lens = array("q")
    push = lens.append
    prev = 0
    for d in docs:
        for t in (d.summary, *d.paths, *d.symbols, *d.tests, *d.payload_text):
            ids = tget(t)
            ext(ids if ids is not None else text_missing(t))
        cur = len(arr)
        push(cur - prev)
        prev = cur
    dl = np.frombuffer(lens, dtype=I64).astype(I32) if len(lens) else np.zeros(0, I32)
    tid = np.frombuffer(arr, dtype=I32) if len(arr) else np.zeros(0, I32)
    if len(tid) == 0:
        z = np.zeros(0, I64)
        return z, z, z, dl
    doc = np.repeat(np.arange(len(docs), dtype=np.uint64), dl.astype(I64))
    key = np.sort((tid.astype(np.uint64) << np.uint64(32)) | doc)
    brk = np.flatnonzero(key[1:] != key[:-1]) + 1
    starts = np.concatenate(([0], brk))
    tf = np.diff(np.concatenate((starts, [len(key)])))
    uk = key[starts]
    return (
        (uk >> np.uint64(32)).astype(I64),
        (uk & np.uint64(0xFFFFFFFF)).astype(I64),
        tf.astype(I64),
        dl,
    )


def _tf_dtype(maxtf: int) -> Any:
    if maxtf < 256:
        return np.uint8
    if maxtf < 65536:
        return np.uint16
    return np.uint32


def assemble(base: dict[str, np.ndarray] | None, keep: np.ndarray | None,
             docs: Sequence[RecallDoc]) -> dict[str, np.ndarray]:
    """A new segment from the kept docs of ``base`` plus ``docs`` (tokenised here)."""
    nb = 0 if base is None else int(len(base["created"]))
    if base is not None and keep is None:
        keep = np.ones(nb, dtype=bool)
    kept = np.flatnonzero(keep) if base is not None else np.zeros(0, I64)  # type: ignore[arg-type]
    nk = len(kept)
    nd = len(docs)
    n = nk + nd

    # ---- terms
    term_ids: dict[str, int] = {}
    base_terms: list[bytes] = []
    if base is not None:
        tb = base["term_blob"].tobytes()
        toff = base["term_off"].tolist()
        base_terms = [tb[toff[i] : toff[i + 1]] for i in range(len(toff) - 1)]
        term_ids = {t.decode("utf-8", "surrogatepass"): i for i, t in enumerate(base_terms)}
    nbt = len(term_ids)
    ntid, ndoc, ntf, ndl = tokenize_docs(docs, term_ids)
    new_terms = list(term_ids)[nbt:]
    all_terms = base_terms + [t.encode("utf-8", "surrogatepass") for t in new_terms]

    # ---- per-doc columns, in created order
    created = np.empty(n, dtype=np.float64)
    dl = np.empty(n, dtype=I32)
    est = np.empty(n, dtype=I64)
    if base is not None:
        created[:nk] = base["created"][kept]
        dl[:nk] = base["dl"][kept]
        est[:nk] = base["est"][kept]
    created[nk:] = [d.created_at for d in docs]
    dl[nk:] = ndl
    est[nk:] = [d.est_bytes for d in docs]
    order = np.argsort(created, kind="stable")
    newid = np.empty(n, dtype=I64)
    newid[order] = np.arange(n, dtype=I64)
    old2new = np.full(nb, -1, dtype=I64)
    old2new[kept] = newid[:nk]

    seg: dict[str, np.ndarray] = {}
    seg["created"] = created[order]
    seg["dl"] = dl[order]
    seg["est"] = est[order]

    # targets
    tnames: list[str] = []
    tmap: dict[str, int] = {}
    tgt = np.empty(n, dtype=I32)
    if base is not None:
        tnames = decode_strings(base["tgt_blob"], base["tgt_off"])
        tmap = {t: i for i, t in enumerate(tnames)}
        tgt[:nk] = base["tgt"][kept]
    for j, d in enumerate(docs):
        t = tmap.get(d.target)
        if t is None:
            t = tmap[d.target] = len(tnames)
            tnames.append(d.target)
        tgt[nk + j] = t
    seg["tgt"] = tgt[order]
    seg["tgt_blob"], seg["tgt_off"] = strings_blob([t.encode("utf-8", "surrogatepass")
                                                    for t in tnames])

    # keys and records
    def column(blob_name: str, off_name: str, new_items: list[bytes]) -> None:
        parts_blob: list[np.ndarray] = []
        lens_all = np.empty(n, dtype=I64)
        if base is not None and nk:
            boff = base[off_name]
            parts_blob.append(gather_ranges(boff, base[blob_name], kept))
            lens_all[:nk] = gather_lens(boff, kept)
        nbytes = b"".join(new_items)
        parts_blob.append(np.frombuffer(nbytes, dtype=np.uint8))
        lens_all[nk:] = np.fromiter(map(len, new_items), dtype=I64, count=nd)
        flat = np.concatenate(parts_blob) if parts_blob else np.zeros(0, np.uint8)
        src_off = np.zeros(n + 1, dtype=I64)
        np.cumsum(lens_all, out=src_off[1:])
        if n and not bool(np.all(order[1:] > order[:-1])):
            fb = flat.tobytes()
            so = src_off.tolist()
            seg[blob_name] = np.frombuffer(
                b"".join([fb[so[i] : so[i + 1]] for i in order.tolist()]), dtype=np.uint8)
        else:
            seg[blob_name] = flat
        out_off = np.zeros(n + 1, dtype=I64)
        np.cumsum(lens_all[order], out=out_off[1:])
        seg[off_name] = out_off

    column("key_blob", "key_off", [d.cache_key.encode("utf-8", "surrogatepass") for d in docs])
    column("rec_blob", "rec_off", [encode_record(d) for d in docs])

    # ---- postings
    if base is not None and len(base["post_doc"]):
        poff = base["post_off"]
        btid = np.repeat(np.arange(len(poff) - 1, dtype=I64), np.diff(poff))
        bdoc = old2new[base["post_doc"]]
        live = bdoc >= 0
        btid, bdoc, btf = btid[live], bdoc[live], base["post_tf"][live].astype(I64)
    else:
        btid = bdoc = btf = np.zeros(0, I64)
    tid = np.concatenate((btid, ntid))
    doc = np.concatenate((bdoc, newid[nk + ndoc] if len(ndoc) else ndoc))
    tf = np.concatenate((btf, ntf))
    maxtf = int(tf.max()) if len(tf) else 0
    if len(tid) and maxtf < (1 << 16) and n < (1 << 24) and len(all_terms) < (1 << 24):
        key = np.sort((tid.astype(np.uint64) << np.uint64(40))
                      | (doc.astype(np.uint64) << np.uint64(16)) | tf.astype(np.uint64))
        tid = (key >> np.uint64(40)).astype(I64)
        doc = ((key >> np.uint64(16)) & np.uint64(0xFFFFFF)).astype(I64)
        tf = (key & np.uint64(0xFFFF)).astype(I64)
    elif len(tid):
        o = np.lexsort((doc, tid))
        tid, doc, tf = tid[o], doc[o], tf[o]
    # drop terms without postings
    counts = np.bincount(tid, minlength=len(all_terms)) if len(all_terms) else np.zeros(0, I64)
    used = np.flatnonzero(counts)
    remap = np.full(len(all_terms), -1, dtype=I64)
    remap[used] = np.arange(len(used), dtype=I64)
    terms = [all_terms[i] for i in used.tolist()]
    seg["term_blob"], seg["term_off"] = strings_blob(terms)
    seg["term_hash"] = build_hash(terms)
    post_off = np.zeros(len(terms) + 1, dtype=I64)
    np.cumsum(counts[used], out=post_off[1:])
    seg["post_off"] = post_off
    seg["post_doc"] = doc.astype(I32)
    seg["post_tf"] = tf.astype(_tf_dtype(maxtf))

    # ---- structured tables
    for name in TABLES:
        _assemble_table(seg, name, base, kept, old2new, docs, newid[nk:])
    return seg


def decode_strings(blob: np.ndarray, off: np.ndarray) -> list[str]:
    b = blob.tobytes()
    o = off.tolist()
    return [b[o[i] : o[i + 1]].decode("utf-8", "surrogatepass") for i in range(len(o) - 1)]


def table_values(seg: dict[str, np.ndarray], name: str) -> list[str]:
    """Decoded values of a table (without the blob's separators)."""
    b = seg[name + "_vblob"].tobytes()
    o = seg[name + "_voff"].tolist()
    return [b[o[i] : o[i + 1] - 1].decode("utf-8", "surrogatepass") for i in range(len(o) - 1)]


def _assemble_table(seg: dict[str, np.ndarray], name: str, base: dict[str, np.ndarray] | None,
                    kept: np.ndarray, old2new: np.ndarray, docs: Sequence[RecallDoc],
                    new_ids: np.ndarray) -> None:
    values: list[str] = []
    vmap: dict[str, int] = {}
    a_parts: list[np.ndarray] = []
    b_parts: list[np.ndarray] = []
    if base is not None:
        values = table_values(base, name)
        vmap = {v: i for i, v in enumerate(values)}
        voff = base[name + "_vd_off"]
        vid = np.repeat(np.arange(len(voff) - 1, dtype=I64), np.diff(voff))
        d = old2new[base[name + "_vd_doc"]]
        live = d >= 0
        a_parts.append(vid[live])
        b_parts.append(d[live])
    norm = TABLE_RULES[name][0]
    raw_of = {"path": "paths", "sym": "symbols", "test": "tests", "task": "task_ids",
              "ptype": "packet_types"}[name]
    lists = [getattr(d, raw_of) for d in docs]
    lens = np.fromiter(map(len, lists), dtype=I64, count=len(lists))
    flat = list(chain.from_iterable(lists))
    rawid: dict[str, int] = {}
    for r in dict.fromkeys(flat):
        v = norm(r).replace("\n", " ")
        i = vmap.get(v)
        if i is None:
            i = vmap[v] = len(values)
            values.append(v)
        rawid[r] = i
    a_parts.append(np.fromiter(map(rawid.__getitem__, flat), dtype=I64, count=len(flat)))
    b_parts.append(np.repeat(new_ids.astype(I64), lens) if len(flat) else np.zeros(0, I64))
    vid, vdoc = sort_pairs(np.concatenate(a_parts), np.concatenate(b_parts))
    counts = np.bincount(vid, minlength=len(values)) if len(values) else np.zeros(0, I64)
    used = np.flatnonzero(counts)
    remap = np.full(len(values), -1, dtype=I64)
    remap[used] = np.arange(len(used), dtype=I64)
    vals = [values[i] for i in used.tolist()]
    vd_off = np.zeros(len(vals) + 1, dtype=I64)
    np.cumsum(counts[used], out=vd_off[1:])
    seg[name + "_vd_off"] = vd_off
    seg[name + "_vd_doc"] = vdoc.astype(I32)
    enc = [v.encode("utf-8", "surrogatepass") for v in vals]
    blob = b"\n" + b"\n".join(enc) + b"\n" if enc else b"\n"
    voff = np.ones(len(enc) + 1, dtype=I64)
    if enc:
        np.cumsum(np.fromiter((len(e) + 1 for e in enc), dtype=I64, count=len(enc)),
                  out=voff[1:])
        voff[1:] += 1
    seg[name + "_vblob"] = np.frombuffer(blob, dtype=np.uint8)
    seg[name + "_voff"] = voff
    # keys -> values
    keyfn = TABLE_RULES[name][1]
    kmap: dict[str, int] = {}
    ka = array("q")
    kb = array("q")
    for i, v in enumerate(vals):
        for k in keyfn(v):
            ki = kmap.get(k)
            if ki is None:
                ki = kmap[k] = len(kmap)
            ka.append(ki)
            kb.append(i)
    kid, kval = sort_pairs(np.frombuffer(ka, dtype=I64) if len(ka) else np.zeros(0, I64),
                           np.frombuffer(kb, dtype=I64) if len(kb) else np.zeros(0, I64))
    kv_off, _ = csr(kid, kval, len(kmap))
    seg[name + "_kv_off"] = kv_off
    seg[name + "_kv_val"] = kval.astype(I32)
    keys = [k.encode("utf-8", "surrogatepass") for k in kmap]
    seg[name + "_kblob"], seg[name + "_koff"] = strings_blob(keys)
    seg[name + "_khash"] = build_hash(keys)


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


_REQUIRED = {"created", "dl", "est", "tgt", "tgt_blob", "tgt_off", "key_blob", "key_off",
             "rec_blob", "rec_off", "term_blob", "term_off", "term_hash", "post_off",
             "post_doc", "post_tf"} | {
    f"{t}_{s}" for t in TABLES
    for s in ("vd_off", "vd_doc", "vblob", "voff", "kv_off", "kv_val", "kblob", "koff", "khash")}


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
    try:
        header = json.loads(bytes(mv[hstart : hstart + hlen]))
        specs = header["arrays"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"recall index: unreadable header ({e})") from None
    base = hstart + hlen + ((-(hstart + hlen)) % _ALIGN)
    seg: dict[str, np.ndarray] = {}
    try:
        for nm, dt, count, off in specs:
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
    missing = _REQUIRED - set(seg)
    if missing:
        raise ValueError(f"recall index: missing arrays {sorted(missing)[:3]}")
    n = len(seg["created"])

    def off_ok(off: str, data: str, count: int) -> bool:
        o = seg[off]
        return len(o) == count + 1 and int(o[0]) >= 0 and int(o[-1]) == len(seg[data])

    ok = (len(seg["dl"]) == n and len(seg["est"]) == n and len(seg["tgt"]) == n
          and off_ok("key_off", "key_blob", n) and off_ok("rec_off", "rec_blob", n)
          and len(seg["term_off"]) == len(seg["post_off"])
          and off_ok("post_off", "post_doc", len(seg["post_off"]) - 1)
          and len(seg["post_tf"]) == len(seg["post_doc"])
          and int(seg["term_off"][-1]) == len(seg["term_blob"]))
    for t in TABLES:
        nv = len(seg[t + "_voff"]) - 1
        ok = ok and off_ok(t + "_vd_off", t + "_vd_doc", nv) and off_ok(
            t + "_kv_off", t + "_kv_val", len(seg[t + "_koff"]) - 1)
    if not ok:
        raise ValueError("recall index: inconsistent array lengths")
