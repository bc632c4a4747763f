"""Building frozen, columnar index segments: a bulk build, or a merge of a base and new docs.

A segment is a :class:`~.columns.Segment`: typed groups of flat numpy arrays
(:mod:`.layout` writes and reads them as bytes); it can live on top of a
``bytes``/``mmap`` buffer without copying, so opening a checkpointed index costs
a header parse, not a rebuild. New docs are tokenised in bulk (:mod:`.bulk_tokens`) and their values
normalised by :mod:`.normalize`.

Documents are numbered by ``(created_at, cache_key descending)``: "created at
or after T" is a suffix of the doc ids and of every posting list, and among
docs of equal score a higher id is the better one (newest, then smallest
cache_key), which is the ranking's tie-break.

Terms are *small* (postings sorted by doc: ``terms.post_doc``/``post_tf``) or
*big* (in at least ``max(BIG_MIN_DOCS, n / BIG_FRACTION)`` docs): a big term keeps
a dense per-doc tf row (``big_tf``) for O(1) probes and its docs in *impact
order* (``big.entries``: grouped by tf, each group by doc length ascending, then
doc id descending).  MaxScore reads the tf groups and each group's shortest
doc (exact score bounds, a term's tf >= 2 docs apart); the walk reads the
order inside a group (the best docs by that term alone, first).  See
docs/recall.md, "Index layout".
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from operator import attrgetter

import numpy as np

from . import constants
from .arrays import (
    build_hash,
    gather_ranges,
    offsets,
    sort_pairs,
    strings_blob,
    uint_dtype,
)
from .bulk_tokens import I32, I64, _AutoIds, _NewDocs, tokenize_docs
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
from .layout import M_KEYHEX, M_LEN, M_TBASE, decode_strings
from .normalize import (
    _ENCODE,
    _RAW_FIELD,
    SYM_SPLIT,
    TABLE_RULES,
    TABLES,
    TEST_SPLIT,
    _encode_all,
    _hex_keys,
    dec,
    enc,
)
from .types import RecallDoc

U8 = np.uint8

def seg_keys(seg: Segment) -> list[str]:
    """Every doc's cache_key, in doc order."""
    if int(seg.meta[M_KEYHEX]):
        raw = seg.docs.key_bin.tobytes()
        return [raw[i : i + 32].hex() for i in range(0, len(raw), 32)]
    return decode_strings(seg.docs.key_blob, seg.docs.key_off)


def seg_postings(seg: Segment) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All (tid, doc, tf) postings of a segment (small and big terms), unsorted."""
    terms = seg.terms
    poff = terms.post_off.astype(I64)
    tid = [np.repeat(np.arange(len(poff) - 1, dtype=I64), np.diff(poff))]
    doc = [terms.post_doc.astype(I64)]
    tf = [terms.post_tf.astype(I64)]
    n = len(seg.docs.created)
    big = seg.big.tid
    if len(big) and n:
        rows = seg.big_tf.reshape(len(big), n)
        for b, t in enumerate(big.tolist()):
            d = np.flatnonzero(rows[b])
            tid.append(np.full(len(d), t, dtype=I64))
            doc.append(d.astype(I64))
            tf.append(rows[b][d].astype(I64))
    return np.concatenate(tid), np.concatenate(doc), np.concatenate(tf)


# ---------------------------------------------------------------- building
def assemble(base: Segment | None, keep: np.ndarray | None,
             docs: Sequence[RecallDoc]) -> Segment:
    """A new segment from the kept docs of ``base`` plus ``docs`` (tokenised here)."""
    nb = 0 if base is None else int(len(base.docs.created))
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
        created[:nk] = base.docs.created[kept]
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

    meta = np.zeros(M_LEN, dtype=I64)

    # ---- per-doc numbers
    est = np.empty(n, dtype=I64)
    if base is not None:
        est[:nk] = base.docs.est[kept]
    est[nk:] = np.fromiter(map(attrgetter("est_bytes"), docs), dtype=I64, count=nd)
    est = est[order]
    est = est.astype(np.uint32) if (n == 0 or (int(est.min()) >= 0 and int(
        est.max()) < (1 << 32))) else est

    # ---- keys
    okeys = list(map(keys.__getitem__, order.tolist()))
    kbin = _hex_keys(okeys)
    if kbin is not None:
        meta[M_KEYHEX] = 1
        key_bin = np.frombuffer(kbin, dtype=U8)
        key_blob, key_off = np.zeros(0, U8), np.zeros(1, np.uint32)
    else:
        key_bin = np.zeros(0, U8)
        key_blob, key_off = strings_blob(_encode_all(okeys))
    del keys, okeys

    # ---- targets
    tnames: list[str] = []
    if base is not None:
        tnames = decode_strings(base.targets.blob, base.targets.off)
    tmap = _AutoIds((t, i) for i, t in enumerate(tnames))
    tgt = np.empty(n, dtype=I64)
    if base is not None:
        tgt[:nk] = base.docs.tgt[kept]
    tgt[nk:] = np.fromiter(map(tmap.__getitem__, map(attrgetter("target"), docs)), dtype=I64,
                           count=nd)
    tnames = list(tmap)
    tgt = tgt[order]
    tord = (np.sort((tgt.astype(np.uint64) << np.uint64(32)) | np.arange(n, dtype=np.uint64))
            & np.uint64(0xFFFFFFFF)).view(I64)  # docs by (target, id)
    targets = TargetCols(*strings_blob([enc(t) for t in tnames]),
                         doc_off=offsets(np.bincount(tgt, minlength=len(tnames)) if n else
                                         np.zeros(len(tnames), I64)),
                         doc=tord.astype(I32))
    tgt = tgt.astype(uint_dtype(len(tnames)))

    # ---- summaries
    sum_parts: list[np.ndarray] = []
    lens = np.empty(n, dtype=I64)
    if base is not None and nk:
        boff = base.docs.sum_off
        sum_parts.append(gather_ranges(boff, base.docs.sum_blob, kept))
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
    sum_blob = flat if in_order else gather_ranges(src, flat, order)
    sum_off = offsets(lens[order])

    # ---- structured tables and each doc's value list
    new = _NewDocs(docs)
    tables, trigrams, dv_off, dv_val = _assemble_tables(meta, base, kept, old2new, new,
                                                        new_ids, order, n)

    # ---- postings
    base_terms: list[bytes] = []
    if base is not None:
        tb = base.terms.blob.tobytes()
        toff = base.terms.off.tolist()
        base_terms = [tb[toff[i] : toff[i + 1]] for i in range(len(toff) - 1)]
    term_ids = _AutoIds((dec(t), i) for i, t in enumerate(base_terms))
    nbt = len(term_ids)
    ntid, ndoc, ntf, ndl = tokenize_docs(new, term_ids)
    all_terms = base_terms + _encode_all(list(term_ids)[nbt:])
    dl = np.empty(n, dtype=I64)
    if base is not None:
        dl[:nk] = base.docs.dl[kept]
        btid, bdoc, btf = seg_postings(base)
        bdoc = old2new[bdoc]
        live = bdoc >= 0
        btid, bdoc, btf = btid[live], bdoc[live], btf[live]
    else:
        btid = bdoc = btf = np.zeros(0, I64)
    dl[nk:] = ndl
    dl = dl[order]
    dl_stored = dl.astype(uint_dtype(int(dl.max()) if n else 0) if n and int(dl.max()) < (
        1 << 31) else I64)
    fresh = base is None and in_order
    if fresh:  # already sorted by (tid, doc)
        tid, doc, tf = ntid, ndoc, ntf  # new ids are 0..n-1 in input order
    else:
        tid = np.concatenate((btid, ntid))
        doc = np.concatenate((bdoc, new_ids[ndoc] if len(ndoc) else ndoc))
        tf = np.concatenate((btf, ntf))
    terms, big, big_tf, mid = _assemble_postings(tid, doc, tf, all_terms, dl, n,
                                                 presorted=fresh)
    key_hash = build_hash(key_items(kbin is not None, key_bin, key_blob, key_off))
    return Segment(
        meta=meta,
        docs=DocCols(created=created[order], dl=dl_stored, est=est, tgt=tgt,
                     sum_blob=sum_blob, sum_off=sum_off, dv_off=dv_off, dv_val=dv_val,
                     key_bin=key_bin, key_blob=key_blob, key_off=key_off, key_hash=key_hash),
        terms=terms, big=big, big_tf=big_tf, mid=mid, targets=targets, trigrams=trigrams,
        tables=tables)


def key_items(hexkeys: bool, key_bin: np.ndarray, key_blob: np.ndarray,
              key_off: np.ndarray) -> list[bytes]:
    """The stored form of every doc's cache_key (32 raw bytes, or UTF-8)."""
    if hexkeys:
        raw = key_bin.tobytes()
        return [raw[i : i + 32] for i in range(0, len(raw), 32)]
    b = key_blob.tobytes()
    o = key_off.tolist()
    return [b[o[i] : o[i + 1]] for i in range(len(o) - 1)]


def _assemble_postings(tid: np.ndarray, doc: np.ndarray, tf: np.ndarray,
                       all_terms: list[bytes], dl: np.ndarray, n: int, presorted: bool = False
                       ) -> tuple[TermCols, ImpactCols, np.ndarray, ImpactCols]:
    """The terms and their postings, the big terms (impact orders, dense tf rows)
    and the mid terms (impact orders)."""
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
    term_blob, term_off = strings_blob(terms)
    term_hash = build_hash(terms)
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
        term_ub = np.nextafter(ub, np.float32(np.inf))
        del f
    else:
        term_ub = np.zeros(0, np.float32)
    # big terms: dense tf rows + impact order
    big_min = max(constants.BIG_MIN_DOCS, n / constants.BIG_FRACTION)
    big = np.flatnonzero(df >= big_min)
    is_big = np.zeros(T, dtype=bool)
    is_big[big] = True
    big_of_tid = np.zeros(nt, dtype=bool)  # indexed by the unrenumbered term ids
    big_of_tid[used[big]] = True
    small_mask = ~big_of_tid[tid] if len(tid) else np.zeros(0, bool)
    sdf = np.where(is_big, 0, df)
    post_off = offsets(sdf)
    post_doc = doc[small_mask].astype(I32)
    post_tf = tf[small_mask].astype(uint_dtype(maxtf))
    tcols = TermCols(blob=term_blob, off=term_off, hash=term_hash, ub=term_ub,
                     ub_avgdl=np.array([avgdl], dtype=np.float64), post_off=post_off,
                     post_doc=post_doc, post_tf=post_tf)
    mid = np.flatnonzero(~is_big & (df >= constants.MID_IMPACT_DOCS))
    big_cols, big_tf = _big_terms(big, doc, tf, starts, dl, n)
    return tcols, big_cols, big_tf, _mid_terms(mid, sdf[mid], post_off, post_doc, post_tf, dl)


def _mid_terms(mid: np.ndarray, mlen: np.ndarray, post_off: np.ndarray, post_doc: np.ndarray,
               post_tf: np.ndarray, dl: np.ndarray) -> ImpactCols:
    """The mid terms' (``mid``, with ``mlen`` postings each) impact orders: positions
    within each term's doc-sorted postings."""
    if len(mid):
        mstart = post_off.astype(I64)[mid]
        idx = np.repeat(mstart - np.concatenate(([0], np.cumsum(mlen)[:-1])), mlen) + \
            np.arange(int(mlen.sum()), dtype=I64)
        owner = np.repeat(np.arange(len(mid), dtype=I64), mlen)
        sd = post_doc[idx].astype(I64)
        sf = post_tf[idx].astype(I64)
        o = _impact_order(owner, sf, dl[sd], sd)
        mpos = idx[o] - np.repeat(mstart, mlen)
        fo, ow = sf[o], owner[o]
        brk = np.concatenate(([0], np.flatnonzero((fo[1:] != fo[:-1]) | (ow[1:] != ow[:-1]))
                              + 1))
        return ImpactCols(tid=mid.astype(I32), entries=mpos.astype(uint_dtype(int(mlen.max()))),
                          off=offsets(mlen),
                          goff=offsets(np.bincount(ow[brk], minlength=len(mid))),
                          gtf=fo[brk].astype(I64), gstart=brk.astype(I64),
                          gdl=dl[sd[o][brk]].astype(I64))  # each group's shortest doc
    none = np.zeros(0, I64)
    return ImpactCols(tid=mid.astype(I32), entries=np.zeros(0, np.uint16), off=offsets(mlen),
                      goff=np.zeros(1, np.uint32), gtf=none, gstart=none, gdl=none)


def _big_terms(big: np.ndarray, doc: np.ndarray, tf: np.ndarray, starts: np.ndarray,
               dl: np.ndarray, n: int) -> tuple[ImpactCols, np.ndarray]:
    """The big terms' (``big``) impact orders (doc ids) and dense tf rows (flattened)."""
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
    cols = ImpactCols(
        tid=big.astype(I32),
        entries=np.concatenate(imp) if imp else np.zeros(0, I32),
        off=offsets(np.array([len(x) for x in imp], dtype=I64)),
        goff=offsets(np.array(gcount, dtype=I64)),
        gtf=np.concatenate(gtf).astype(I64) if gtf else np.zeros(0, I64),
        gstart=np.concatenate(gstart).astype(I64) if gstart else np.zeros(0, I64),
        gdl=np.concatenate(gdl).astype(I64) if gdl else np.zeros(0, I64))
    return cols, rows.reshape(-1)


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


def _assemble_tables(meta: np.ndarray, base: Segment | None, kept: np.ndarray,
                     old2new: np.ndarray, new: _NewDocs, new_ids: np.ndarray,
                     order: np.ndarray, n: int
                     ) -> tuple[Tables, TrigramCols, np.ndarray, np.ndarray]:
    """The structured tables, the symbols' trigrams and each doc's value list
    (``dv_off``, ``dv_val``); fills ``meta``'s table bases."""
    nk, nd = len(kept), len(new_ids)
    # each doc's value list (global ids, raw order) from the base, remapped below
    gid_parts: list[np.ndarray] = []
    glen = np.zeros(n, dtype=I64)
    old_tbase: list[int] = []
    if base is not None:
        old_tbase = base.meta[M_TBASE : M_TBASE + len(TABLES) + 1].tolist()
        boff = base.docs.dv_off
        gid_parts.append(gather_ranges(boff, base.docs.dv_val, kept).astype(I64))
        glen[:nk] = boff[kept + 1].astype(I64) - boff[kept].astype(I64)
    new_counts = np.zeros(nd, dtype=I64)
    for t in TABLES:
        new_counts += new.counts[_RAW_FIELD[t]]
    glen[nk:] = new_counts
    tbase = 0
    remaps: list[np.ndarray] = []
    new_vid_parts: list[tuple[np.ndarray, np.ndarray]] = []  # per table: (vid, count per doc)
    cols: list[TableCols] = []
    trigrams: TrigramCols | None = None
    old = base.tables.in_order() if base is not None else None
    for ti, name in enumerate(TABLES):
        nvals, vids = new.values(_RAW_FIELD[name])
        lens = new.counts[_RAW_FIELD[name]]
        values: list[str] = []
        if old is not None:
            values = decode_strings(old[ti].vblob, old[ti].voff)
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
        if old is not None and nbv:
            voff = old[ti].vd_off.astype(I64)
            a_parts.append(np.repeat(np.arange(nbv, dtype=I64), np.diff(voff)))
            b_parts.append(old2new[old[ti].vd_doc])
        va = np.concatenate(a_parts)
        vb = np.concatenate(b_parts)
        live = vb >= 0
        vid, vdoc = sort_pairs(va[live], vb[live])
        counts = np.bincount(vid, minlength=len(values)) if len(values) else np.zeros(0, I64)
        used = np.flatnonzero(counts)
        remap = np.full(len(values), -1, dtype=I64)
        remap[used] = np.arange(len(used), dtype=I64)
        vals = [values[i] for i in used.tolist()]
        vblob, voff_new = strings_blob(_encode_all(vals))
        # lookup keys -> values
        kflat, kcount = _table_keys(name, vals)
        kuniq = list(dict.fromkeys(kflat))
        kmap = dict(zip(kuniq, range(len(kuniq)), strict=True))
        kid, kval = sort_pairs(np.fromiter(map(kmap.__getitem__, kflat), dtype=I64,
                                           count=len(kflat)),
                               np.repeat(np.arange(len(vals), dtype=I64), kcount))
        kb_ = _encode_all(kuniq)
        kblob, koff = strings_blob(kb_)
        cols.append(TableCols(
            vblob=vblob, voff=voff_new, vd_off=offsets(counts[used]), vd_doc=vdoc.astype(I32),
            kblob=kblob, koff=koff, khash=build_hash(kb_),
            kv_off=offsets(np.bincount(kid, minlength=len(kmap)) if len(kmap)
                           else np.zeros(0, I64)),
            kv_val=kval.astype(I32)))
        if name == "sym":
            trigrams = _assemble_trigrams(vals)
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
    dv_val = (out if (n < 2 or bool(np.all(order[1:] > order[:-1])))
              else gather_ranges(src, out, order)).astype(I32)
    assert trigrams is not None  # "sym" is one of TABLES
    return Tables(*cols), trigrams, offsets(glen[order]), dv_val


def _table_keys(name: str, vals: list[str]) -> tuple[list[str], np.ndarray]:
    """Every lookup key of every value (value by value, no repeats), and the counts."""
    norm, keyfn = TABLE_RULES[name]
    if name in ("task", "ptype"):
        return list(map(norm, vals)), np.ones(len(vals), dtype=I64)
    if name == "path":
        per = [keyfn(norm(v)) for v in vals]  # suffixes are distinct
    else:
        split = SYM_SPLIT.split if name == "sym" else TEST_SPLIT.split
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


def _assemble_trigrams(vals: list[str]) -> TrigramCols:
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
    return TrigramCols(code=ucode.astype(np.uint32),
                       off=offsets(np.diff(np.concatenate((first, [len(code)]))).astype(I64)
                                   if len(code) else np.zeros(0, I64)),
                       val=owner.astype(np.uint16 if len(vals) < (1 << 16) else I32))


def empty_segment() -> Segment:
    return assemble(None, None, [])
