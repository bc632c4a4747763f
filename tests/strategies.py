"""Hypothesis strategies for the log: event kinds, keys, data mappings, batches.

Everything drawn here is something the ledger must accept and give back
unchanged, so a test can compare what it wrote with what it reads.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from eventstore import Event

_WORD = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-",
    min_size=1,
    max_size=12,
)

#: Dotted kinds the ledger accepts: ``cache.put``, ``task.created``, ``x``...
kinds = st.lists(_WORD, min_size=1, max_size=4).map(".".join)

#: Strings the ledger must refuse as a kind.
bad_kinds = st.one_of(
    st.just(""),
    st.just("."),
    st.just("a..b"),
    st.just(".lead"),
    st.just("trail."),
    st.just("has space"),
    st.just("ünïcode"),
    st.just("x" * 201),
    kinds.map(lambda k: k + "/x"),
)

#: An entity key, or none.
keys = st.none() | st.text(max_size=40)

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),  # past u64: CBOR bignums
    st.floats(allow_nan=False),  # NaN != NaN would defeat equality checks
    st.text(max_size=30),
    st.binary(max_size=30),
)

#: Any value that CBOR encodes and decodes to something equal (JSON-ish plus bytes).
values: st.SearchStrategy[Any] = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)

#: Any JSON value (what an MCP answer may hold).
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=8,
)

#: An event's data: a mapping from strings to values.
data_maps = st.dictionaries(st.text(max_size=10), values, max_size=5)

events = st.builds(Event, kinds, keys, data_maps)

#: One atomic batch.
batches = st.lists(events, min_size=1, max_size=5)

#: What a test appends, batch by batch.
batch_lists = st.lists(batches, min_size=1, max_size=8)


def as_rows(batch: list[Event]) -> list[tuple[str, str | None, Any]]:
    """What a batch should read back as (seq and at aside)."""
    return [(e.kind, e.key, dict(e.data)) for e in batch]


#: Token counts of one calibration sample, ``(estimated, actual)``: small ones, so that
#: equal ratios (MAD = 0) come up, and some far from the rest (outliers).
token_pairs = st.tuples(st.integers(1, 50), st.integers(1, 200))

#: The samples of one calibration window, oldest first.
token_windows = st.lists(token_pairs, min_size=0, max_size=30)


# --- damaged bytes (the torture suite's decoder fuzzing) -----------------------------------

#: Values that length and count fields get wrong in interesting ways.
_EDGE_WORDS = (b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x01\x00\x00\x00",
               b"\x00\x00\x00\x80", b"\x40\x00\x00\x00")


@st.composite
def _mutated(draw: st.DrawFn, valid: bytes) -> bytes:
    buf = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(("flip", "set", "insert", "delete", "truncate", "word",
                                     "repeat")))
        pos = draw(st.integers(0, max(len(buf) - 1, 0)))
        if kind == "flip" and buf:
            buf[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and buf:
            buf[pos] = draw(st.integers(0, 255))
        elif kind == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del buf[pos : pos + draw(st.integers(1, 16))]
        elif kind == "truncate":
            del buf[pos:]
        elif kind == "word":
            buf[pos : pos + 4] = draw(st.sampled_from(_EDGE_WORDS))
        else:  # a stretch of the input again, somewhere else (a frame doubled, say)
            end = draw(st.integers(pos, min(len(buf), pos + 256)))
            at = draw(st.integers(0, len(buf)))
            buf[at:at] = buf[pos:end]
    return bytes(buf)


def damaged(valid: bytes) -> st.SearchStrategy[bytes]:
    """Arbitrary bytes, or ``valid`` damaged a few ways at once (bits flipped, bytes set,
    inserted or deleted, cut short, length-like words overwritten, stretches repeated)."""
    return st.one_of(st.binary(max_size=2 * len(valid) + 64), _mutated(valid))


# --- recall corpora and queries (tests/test_recall_oracle.py) -------------------------------

#: A small vocabulary, so that terms repeat across docs (common terms, ties, big terms):
#: identifiers with parts (``gammaRay``, ``delta_x``, ``io2``) and plain words.
RECALL_WORDS = ["alpha", "beta", "gammaRay", "delta_x", "common", "io2", "the", "zeta"]


@st.composite
def recall_corpora(draw: st.DrawFn, max_docs: int = 24) -> list[Any]:
    """Text-only recall docs (summary and payload; no paths, symbols, tests or task ids,
    so no structured boost applies): distinct keys, creation times with repeats (ties),
    two targets."""
    from projections.recall import RecallDoc

    n = draw(st.integers(1, max_docs))
    words = st.sampled_from(RECALL_WORDS)
    docs = []
    for i in range(n):
        docs.append(RecallDoc(
            f"k{i:02d}", draw(st.sampled_from(["t1", "t2"])), float(draw(st.integers(0, 9))),
            " ".join(draw(st.lists(words, max_size=5))),
            payload_text=tuple(draw(st.lists(words.map(lambda w: w + " " + w), max_size=1))),
        ))
    return docs


#: Query texts over the same vocabulary, with a word no doc has.
recall_texts = st.lists(st.sampled_from(RECALL_WORDS + ["missing"]), min_size=1,
                        max_size=4).map(" ".join)
