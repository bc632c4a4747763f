"""Hypothesis strategies and helpers for the cache view and ContextStore tests.

Packets drawn here are valid and JSON-shaped (str keys, lists, no tuples), so
what ``store.get`` gives back compares equal to what was put. Raw cache events
cover well-formed and malformed ``cache.put`` / ``cache.evicted`` data and
unknown kinds, for fold-determinism tests.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import blake3
from hypothesis import strategies as st

from eventstore import Event

# --- packets ----------------------------------------------------------------------------

TARGETS = ("diffy.analyze", "covy.report", "a")

_text = st.text(alphabet="abc xyz_/.é", max_size=8)
_json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    _text,
)
json_values: st.SearchStrategy[Any] = st.recursive(
    _json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
_str_list = st.lists(_text, max_size=3)


@st.composite
def packets(draw: st.DrawFn, targets: tuple[str, ...] = TARGETS) -> dict[str, Any]:
    pkt: dict[str, Any] = {"target": draw(st.sampled_from(targets))}
    for name, strat in (
        ("summary", _text),
        ("paths", _str_list),
        ("symbols", _str_list),
        ("tests", _str_list),
        ("task_ids", _str_list),
        ("packet_types", _str_list),
        ("payload", st.dictionaries(_text, json_values, max_size=3)),
    ):
        if draw(st.booleans()):
            pkt[name] = draw(strat)
    return pkt


# --- raw cache events --------------------------------------------------------------------


def _hexkey(i: int) -> str:
    return blake3.blake3(str(i).encode()).hexdigest()


#: Well-formed cache keys, including ones whose bytes end in NULs (numpy ``S32``
#: strips trailing NULs: the view must still tell them apart).
GOOD_KEYS = (
    _hexkey(1),
    _hexkey(2),
    _hexkey(3),
    "00" * 32,
    "ab" * 31 + "00",
    "ab" * 31 + "01",
    "ab" * 30 + "0000",
)
#: Keys a cache event may carry that are not cache keys (64 chars or not).
BAD_KEYS = (
    None,
    "",
    "ab" * 31,
    "zz" * 32,
    "ab" * 32 + "ab",
    "ab" * 30 + "  cd",  # bytes.fromhex skips whitespace: 31 bytes
    "ab" * 31 + "\n\n",  # likewise
    " " + "ab" * 31 + "a",  # likewise (and odd)
    "ａｂ" * 32,  # full-width letters are not hex digits
)

_good_put_data = st.fixed_dictionaries(
    {
        "packet": st.fixed_dictionaries({"target": st.sampled_from(TARGETS + ("",))}),
        "bytes": st.integers(0, 2**40),
    },
    optional={"metadata": st.dictionaries(st.sampled_from(["who", "why"]), _text, max_size=2)},
)
_bad_put_data = st.one_of(
    st.just({}),
    st.fixed_dictionaries({"packet": st.one_of(st.none(), st.just([]), _text, st.integers())}),
    st.fixed_dictionaries({"packet": st.just({"summary": "no target"})}),
    st.fixed_dictionaries(
        {
            "packet": st.fixed_dictionaries(
                {
                    "target": st.one_of(
                        st.none(), st.integers(), st.just(["t"]), st.binary(max_size=3)
                    )
                }
            )
        }
    ),
    st.fixed_dictionaries(
        {
            "packet": st.just({"target": "t"}),
            "bytes": st.one_of(
                st.text(max_size=3),
                st.floats(allow_nan=False),
                st.none(),
                st.booleans(),
                st.integers(max_value=-1),
                st.integers(min_value=2**63, max_value=2**80),
            ),
        }
    ),
)
_good_evict_data = st.fixed_dictionaries(
    {"reason": st.sampled_from(["expired_ttl", "manual_prune", "corrupt_load_recovery", "other"])}
)
_bad_evict_data = st.one_of(
    st.just({}),
    st.fixed_dictionaries({"reason": st.one_of(st.none(), st.integers(), st.just(["x"]))}),
)
_any_key = st.sampled_from(GOOD_KEYS + BAD_KEYS)
_good_key = st.sampled_from(GOOD_KEYS + tuple(k.upper() for k in GOOD_KEYS[:2]))

cache_events = st.one_of(
    st.builds(Event, st.just("cache.put"), _good_key, _good_put_data),
    st.builds(Event, st.just("cache.put"), _good_key, _good_put_data),
    st.builds(Event, st.just("cache.put"), _any_key, st.one_of(_good_put_data, _bad_put_data)),
    st.builds(Event, st.just("cache.evicted"), _good_key, _good_evict_data),
    st.builds(
        Event, st.just("cache.evicted"), _any_key, st.one_of(_good_evict_data, _bad_evict_data)
    ),
    st.builds(
        Event,
        st.sampled_from(["task.created", "cache", "cache.put.v2", "cache.expired"]),
        st.one_of(st.none(), _any_key),
        st.just({"any": 1}),
    ),
)
event_batches = st.lists(cache_events, min_size=1, max_size=5)


# --- files --------------------------------------------------------------------------------


def tree_bytes(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``root``: relative path -> (mode, content)."""
    out: dict[str, tuple[int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            p = Path(dirpath, d)
            out[str(p.relative_to(root)) + "/"] = (p.stat().st_mode, b"")
        for f in filenames:
            p = Path(dirpath, f)
            out[str(p.relative_to(root))] = (p.stat().st_mode, p.read_bytes())
    return out


def flip_byte(path: Path, offset: int, *, in_place: bool = False) -> bytes:
    """Invert one byte of ``path`` (offset taken modulo its size); return the new content.

    By default the damaged copy replaces the file by rename (a new inode, as an
    editor or ``cp --remove-destination`` would); ``in_place`` rewrites the
    same inode (as ``cp`` over an existing file, or bit rot, would).
    """
    raw = bytearray(path.read_bytes())
    raw[offset % len(raw)] ^= 0xFF
    if in_place:
        path.write_bytes(bytes(raw))
    else:
        tmp = path.with_name(path.name + ".garbling")
        tmp.write_bytes(bytes(raw))
        os.replace(tmp, path)
    return bytes(raw)


def put_event(packet: dict[str, Any]) -> tuple[str, Event]:
    """``(cache_key, event)``: a well-formed ``cache.put`` whose key is its packet's
    content address, as the store writes it (``store.get`` serves only those)."""
    from projections import cache_key_of, canonical_bytes

    canon = canonical_bytes(packet)
    key = cache_key_of(canon)
    return key, Event("cache.put", key, {"packet": packet, "bytes": len(canon)})

