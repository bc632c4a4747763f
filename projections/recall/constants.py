"""Every tuning number and fixed name of the recall engine, in one place (no numpy).

The CLI imports :data:`SCOPES` from here without loading numpy or the index; the
index, the segment builder and the ranking strategies read the rest. The ranking
thresholds are read as ``constants.NAME`` at call time, so a test can lower one
to force a strategy on a small corpus (``tests/test_recall_index.py``).
"""

from __future__ import annotations

#: BM25 parameters (docs/recall.md, "Scoring"); the segment's stored score bounds
#: are computed with these too, so there is one copy
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
DEFAULT_LIMIT = 8

# Bounded work per request (failure rule 8): a query's terms are resolved and scored
# one by one, so the work a query does is bounded by these, not by what a caller sends.
MAX_QUERY_CHARS = 4096
MAX_QUERY_TERMS = 64  # distinct tokens after tokenizing (an identifier counts with its parts)

#: version of the recall view's checkpoint (the serialised index inside it)
CHECKPOINT_VERSION = 3

# ---------------------------------------------------------------- segment layout
#: a term in at least this many docs (and not big) gets an impact order
MID_IMPACT_DOCS = 1024
#: a term is big when in >= max(BIG_MIN_DOCS, n / BIG_FRACTION) docs (tests lower it)
BIG_MIN_DOCS = 1024
BIG_FRACTION = 8

# ---------------------------------------------------------------- ranking strategies
# (docs/recall.md, "Ranking strategies", says which strategy each one selects)
#: candidate sets up to this size are scored in plain Python
TINY = 48
#: a filter/scope narrower than max(this, the query terms' postings / 8) is scored
#: directly, every doc of it (< 0: never)
DIRECT_MAX = 4096
#: give up walking a big term's impact order after this many skipped docs (< 0: never walk)
WALK_MAX = 4096
#: two-term queries whose rarer term is in at least this many docs try the
#: "docs with both terms" shortcut first
PAIR_MIN = 512
#: ... and queries of more terms, when their small terms (but the rarest) have at
#: most this many postings (and at most 1/16 of it are docs to score)
MULTI_MAX = 8192
#: ... of which the rarest terms are taken whole up to this many postings (the rest
#: contribute the docs having two or more of them)
MULTI_WHOLE = 256
#: neither shortcut when more docs than this got a structured boost (a path
#: query's many files): MaxScore starts from those docs instead
SHORTCUT_BOOSTS = 256
#: MaxScore scans the rarest units together up to this many postings (earns its keep at
#: 50k: docs/recall.md, "What was removed and why")
BATCH = 2048
