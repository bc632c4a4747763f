"""Each array trick of the recall engine equals the plain version it replaces."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from projections.recall.arrays import (
    HashTable,
    Member,
    build_hash,
    gather_ranges,
    isin_sorted,
    merge,
    sort_pairs,
    sorted_unique,
    strings_blob,
    union,
)

ints = st.lists(st.integers(0, 200), max_size=60)
sorted_sets = ints.map(lambda xs: np.array(sorted(set(xs)), dtype=np.int64))
values = st.floats(-1e3, 1e3, allow_nan=False)


def plain_union(lists: list[tuple[np.ndarray, np.ndarray]]) -> dict[int, float]:
    """Doc -> summed value, in list order (the arithmetic ``union`` must match)."""
    out: dict[int, float] = defaultdict(float)
    for docs, vals in lists:
        for d, v in zip(docs.tolist(), vals.tolist(), strict=True):
            out[d] += v
    return dict(out)


@given(ints)
def test_sorted_unique_is_np_unique(xs: list[int]) -> None:
    a = np.array(xs, dtype=np.int64)
    assert sorted_unique(a).tolist() == np.unique(a).tolist()


@given(ints, sorted_sets)
def test_isin_sorted_is_np_isin(xs: list[int], r: np.ndarray) -> None:
    d = np.array(xs, dtype=np.int64)
    assert isin_sorted(d, r).tolist() == np.isin(d, r).tolist()


@given(sorted_sets, ints, st.integers(1, 300))
def test_member_is_set_membership(docs: np.ndarray, probes: list[int], n: int) -> None:
    n = max(n, int(docs[-1]) + 1 if len(docs) else 1)
    m = Member(docs, n)
    want = set(docs.tolist())
    assert all((p in m) == (p in want) for p in probes if p < n)


@given(st.lists(st.tuples(sorted_sets, st.data()), min_size=1, max_size=4))
def test_union_and_merge_sum_like_a_dict(parts: list[tuple[np.ndarray, st.DataObject]]) -> None:
    lists = [(d, np.array([data.draw(values) for _ in range(len(d))], dtype=np.float64))
             for d, data in parts]
    want = plain_union(lists)
    for got in (union(lists), merge([(d, v, True) for d, v in lists])):
        docs, sums = got
        assert docs.tolist() == sorted(want)
        for d, s in zip(docs.tolist(), sums.tolist(), strict=True):
            # at most two values per doc in merge's binary-search path: the same sum
            assert abs(s - want[d]) <= 1e-9 * max(1.0, abs(want[d]))


@given(st.lists(st.binary(max_size=6), max_size=40, unique=True), st.binary(max_size=6))
def test_hash_table_finds_exactly_the_items(items: list[bytes], probe: bytes) -> None:
    blob, off = strings_blob(items)
    table = HashTable(build_hash(items), off, blob)
    for i, item in enumerate(items):
        assert table.find(item) == i
    assert table.find(probe) == (items.index(probe) if probe in items else -1)


@given(st.lists(st.binary(max_size=5), max_size=20), st.data())
def test_gather_ranges_concatenates_the_chosen_items(items: list[bytes],
                                                     data: st.DataObject) -> None:
    blob, off = strings_blob(items)
    ids = data.draw(st.lists(st.integers(0, max(0, len(items) - 1)), max_size=10)) \
        if items else []
    got = gather_ranges(off, blob, np.array(ids, dtype=np.int64)).tobytes()
    assert got == b"".join(items[i] for i in ids)


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=40),
       st.booleans())
def test_sort_pairs_is_sorted_of_the_pairs(pairs: list[tuple[int, int]], dedupe: bool) -> None:
    a = np.array([x for x, _ in pairs], dtype=np.int64)
    b = np.array([y for _, y in pairs], dtype=np.int64)
    ga, gb = sort_pairs(a, b, dedupe)
    want = sorted(set(pairs)) if dedupe else sorted(pairs)
    assert list(zip(ga.tolist(), gb.tolist(), strict=True)) == want


def test_the_layout_names_every_field_of_a_segment_once() -> None:
    """``layout.ARRAYS`` (stored name -> group, field) covers every array field of
    ``columns.Segment`` exactly once, and ``Tables`` has one field per table."""
    import attrs

    from projections.recall.columns import Segment, Tables
    from projections.recall.layout import ARRAYS
    from projections.recall.normalize import TABLES

    attrs.resolve_types(Segment)
    attrs.resolve_types(Tables)
    assert tuple(f.name for f in attrs.fields(Tables)) == TABLES
    want: set[tuple[str, str]] = set()
    for f in attrs.fields(Segment):
        if f.name == "tables":
            table_cols = attrs.fields(Tables)[0].type
            want |= {(t, g.name) for t in TABLES for g in attrs.fields(table_cols)}
        elif isinstance(f.type, type) and attrs.has(f.type):
            want |= {(f.name, g.name) for g in attrs.fields(f.type)}
        else:
            want.add(("", f.name))
    got = [(group, field) for _, group, field in ARRAYS]
    assert len(got) == len(set(got)) == len({nm for nm, _, _ in ARRAYS})
    assert set(got) == want
