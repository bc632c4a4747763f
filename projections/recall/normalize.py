"""Normalising a doc's structured values: canonical paths, lookup keys, UTF-8 bytes.

The one definition of how a path, symbol, test name or task id is compared
(docs/recall.md, "Structured matches"): the segment builder stores these keys
and the matcher looks words up by them, so both sides use these functions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from operator import methodcaller

from .types import RecallDoc

#: structured tables, in the order their values appear in a doc's value list
TABLES = ("path", "sym", "test", "task", "ptype")
_RAW_FIELD = {"path": "paths", "sym": "symbols", "test": "tests", "task": "task_ids",
              "ptype": "packet_types"}

_ENCODE = methodcaller("encode", "utf-8", "surrogatepass")


def canon_path(p: str) -> str:
    """Canonical form of a path: ``/`` separators, no ``./`` prefix, no ``//``."""
    if "\\" in p:
        p = p.replace("\\", "/")
    while "//" in p:
        p = p.replace("//", "/")
    while p.startswith("./"):
        p = p[2:]
    return p


SYM_SPLIT = re.compile(r"[.:#]+")
TEST_SPLIT = re.compile(r"::|[./#]")


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
    last = SYM_SPLIT.split(v)[-1]
    return [v] if (not last or last == v) else [v, last]


def test_keys(v: str) -> list[str]:
    """Lookup keys of a (lowercased) test name: itself and its last component."""
    last = TEST_SPLIT.split(v)[-1]
    return [v] if (not last or last == v) else [v, last]


def _lower(s: str) -> str:
    return s.lower()


def _same(s: str) -> str:
    return s


# table name -> (normaliser of a raw value, lookup keys of a normalised value)
TABLE_RULES: dict[str, tuple[Callable[[str], str], Callable[[str], list[str]]]] = {
    "path": (canon_path, path_keys),
    "sym": (_lower, sym_keys),
    "test": (_lower, test_keys),
    "task": (_lower, lambda v: [v]),
    "ptype": (_same, lambda v: [v]),
}


def value_keys(table: str, raw: str) -> list[str]:
    """Lookup keys of a raw table value (``AuthService.login`` -> its lowercase, ``login``)."""
    norm, keyfn = TABLE_RULES[table]
    return keyfn(norm(raw))


def doc_table_values(doc: RecallDoc, table: str) -> tuple[str, ...]:
    """The distinct raw values of one of a doc's structured fields."""
    return tuple(dict.fromkeys(getattr(doc, _RAW_FIELD[table])))


# ---------------------------------------------------------------- helpers
def _encode_all(items: Iterable[str]) -> list[bytes]:
    return list(map(_ENCODE, items))


def _hex_keys(keys: list[str]) -> bytes | None:
    """The keys as 32 raw bytes each when every key is 64 lowercase hex digits."""
    if not keys or set(map(len, keys)) != {64}:
        return None
    joined = "".join(keys)
    if not joined.isascii() or any(c in joined for c in "ABCDEF"):
        return None
    try:
        raw = bytes.fromhex(joined)
    except ValueError:
        return None
    return raw if len(raw) == 32 * len(keys) else None


def enc(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def dec(b: bytes) -> str:
    return b.decode("utf-8", "surrogatepass")
