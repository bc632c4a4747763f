"""A query's structured boosts against a plain sum of them (docs/recall.md, "Boosts").

Per query word and kind (path, symbol, test, task) a doc gets the boost of the best
level it matched at (a symbol's exact name over a prefix over a substring); the
boosts of every word and kind add up. ``structured`` gets there by shortcuts: one
level, one part, a small sum in a dict, a large one merged as sorted arrays. Here
the same matches (``match_word``) are summed the plain way, on queries chosen to
take each shortcut and its way around. (Mutation testing found several unpinned:
the recall oracle's corpora have no paths or symbols.)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

from projections.recall import RecallDoc, RecallIndex, RecallQuery
from projections.recall.match import match_word
from projections.recall.scoring import NO_KINDS, QueryState


def doc(i: int) -> RecallDoc:
    symbols = [f"read_file{i}", "do_read_file" if i % 3 == 0 else "other"]
    if i % 10 == 0:
        symbols.append("read_file")
    return RecallDoc(f"k{i:03d}", "t1", float(i), "entry", paths=(f"src/m{i}/mod.py",),
                     symbols=tuple(symbols),
                     tests=("tests/x.py::read_file",) if i % 7 == 0 else (),
                     task_ids=("read_file",) if i % 11 == 0 else ())


CORPUS = [doc(i) for i in range(100)]
QUERIES = [
    "read_file",                # symbol at three levels, a test, a task: over 64 docs
    "file",                     # too plain a word for a prefix: no symbol matches
    "do_read_file",             # one kind, one level: one part
    "read_file7",               # exact for one doc, prefix for ten
    "read_file7 read_file70",   # two words on doc 70: a small sum
    "read_file7 do_read_file",  # parts of two words, 40-odd docs
    "read_file do_read_file",   # a large sum of many parts
    "src/m5/mod.py",            # a path, exact
    "src/m5/mod.py read_file5",
    "nothing here",
]


def plain_boosts(ix: RecallIndex, words: list[str], q: QueryState,
                 seen: Counter[str]) -> tuple[dict[int, float], dict[str, set[int]]]:
    """Each word's matches, per kind the best level per doc, summed over words and kinds."""
    total: dict[int, float] = {}
    kinds: dict[str, set[int]] = {k: set() for k in NO_KINDS}
    for w in words:
        calls: list[tuple[list[int], float, str]] = []
        match_word(ix, w, q, lambda *call, out=calls: out.append(call))
        found: dict[str, list[tuple[list[int], float]]] = defaultdict(list)
        for docs, b, kind in calls:
            if len(docs):  # a level that matched no doc is no level
                found[kind].append((list(docs), b))
        seen["kinds>1"] += len(found) > 1
        for kind, levels in found.items():
            seen["levels>1"] += len(levels) > 1
            best: dict[int, float] = {}
            for docs, b in levels:  # best level first
                for d in docs:
                    best.setdefault(d, b)
            kinds[kind].update(best)
            for d, b in best.items():
                total[d] = total.get(d, 0.0) + b
    seen["over 64"] += len(total) > 64
    return total, kinds


@pytest.mark.parametrize("layout", ["built", "incremental"])
def test_structured_boosts_are_the_plain_sum(layout: str) -> None:
    if layout == "built":
        ix = RecallIndex.build(CORPUS)
    else:
        ix = RecallIndex()
        for d in CORPUS:
            ix.add(d)
    seen: Counter[str] = Counter()
    for text in QUERIES:
        rq = RecallQuery(text, 10)
        got = ix._prepare(rq, True)
        if got is None:
            assert text == "nothing here"
            continue
        q = got[0]
        again = ix._prepare(rq, True)
        assert again is not None
        want, kinds = plain_boosts(ix, rq.words(), again[0], seen)
        assert q.boost == pytest.approx(want, rel=1e-12), text
        assert set(q.boost) == set(want), text
        if want:
            assert {k: set(v) for k, v in q.kind_docs.items()} == kinds, text
        d, v = q.boost_arrays()  # the sorted arrays the rankers read
        assert d.tolist() == sorted(want) and v.tolist() == pytest.approx(
            [want[x] for x in sorted(want)], rel=1e-12), text
    # the queries took every way through: several kinds and levels, a large sum
    assert seen["kinds>1"] and seen["levels>1"] and seen["over 64"], seen


def test_the_best_level_of_a_kind_counts_once_per_word() -> None:
    """Doc 70 matches "read_file7" by prefix (read_file70) and "read_file70" exactly:
    2 + 4. Doc 0 has the symbols read_file (exact, 4), read_file0 (prefix, 2) and
    do_read_file (contains, 1): per kind only the best counts, with its test (3) and
    its task (2) beside it."""
    ix = RecallIndex.build(CORPUS)
    q: Any = ix._prepare(RecallQuery("read_file7 read_file70", 10), True)[0]  # type: ignore[index]
    assert q.boost[70] == 6.0 and q.boost[7] == 4.0 and q.boost[71] == 2.0
    q = ix._prepare(RecallQuery("read_file", 10), True)[0]  # type: ignore[index]
    assert q.boost[0] == 4.0 + 3.0 + 2.0  # symbol exact, test, task
    assert q.boost[3] == 2.0  # read_file3 by prefix (do_read_file's is the lower level)
    assert q.boost[1] == 2.0 and q.boost[77] == 2.0 + 3.0 + 2.0
