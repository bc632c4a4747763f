"""Every size limit, at its edge: at the limit accepted, one past it refused (issue 9).

The limits themselves are listed in docs/cli.md ("Limits"). The recall
index's are ``ValueError``, which the CLI shows as a usage error (exit 2); the
log's are ``InvalidEventError`` (exit 1 in the CLI).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli.main import ctxledger
from eventstore import Event, InvalidEventError, MemoryLog
from eventstore.event import MAX_KEY_LEN, MAX_KIND_LEN
from projections import ContextStore
from projections.recall import (
    MAX_QUERY_CHARS,
    MAX_QUERY_TERMS,
    RecallDoc,
    RecallIndex,
    tokenize,
)


def cli(*args: str) -> Result:
    return CliRunner().invoke(ctxledger, list(args))


@pytest.fixture(scope="module")
def index() -> RecallIndex:
    idx = RecallIndex()
    idx.add_many([RecallDoc(f"k{i}", "t", 1.0, summary=f"term{i} common") for i in range(3)])
    return idx


def distinct_terms(n: int) -> str:
    """A query of exactly ``n`` distinct tokens ("aa ab ..." never splits further)."""
    words = [chr(97 + i // 26) + chr(97 + i % 26) for i in range(n)]
    q = " ".join(words)
    assert len(set(tokenize(q))) == n
    return q


def test_query_length_limit(index: RecallIndex) -> None:
    at = ("common " * MAX_QUERY_CHARS)[:MAX_QUERY_CHARS]
    assert len(at) == MAX_QUERY_CHARS
    assert index.search(at, limit=3)
    with pytest.raises(ValueError, match=f"4097 characters long; at most {MAX_QUERY_CHARS}"):
        index.search(at + "x", limit=3)
    with pytest.raises(ValueError, match="characters long"):
        index.rank(at + " ", limit=3)


def test_query_terms_limit(index: RecallIndex) -> None:
    assert MAX_QUERY_TERMS == 64
    index.search(distinct_terms(MAX_QUERY_TERMS), limit=3)
    with pytest.raises(ValueError, match=f"65 distinct terms; at most {MAX_QUERY_TERMS}"):
        index.search(distinct_terms(MAX_QUERY_TERMS + 1), limit=3)
    # repeats are one term; an identifier counts with its parts (parseHTTP: 3 terms)
    index.search(" ".join(["common"] * 500), limit=3)
    with pytest.raises(ValueError, match="65 distinct terms"):
        index.search(distinct_terms(62) + " parseHTTP", limit=3)


def test_the_cli_shows_recall_limits_as_usage_errors(tmp_path: Path) -> None:
    root = str(tmp_path)
    assert cli("init", "--root", root).exit_code == 0
    with ContextStore.open(tmp_path) as st:
        st.put({"target": "t", "summary": "common ground"})
    at = ("common " * MAX_QUERY_CHARS)[:MAX_QUERY_CHARS]
    assert cli("recall", "--root", root, "-q", at).exit_code == 0
    assert cli("recall", "--root", root, "-q", distinct_terms(MAX_QUERY_TERMS)).exit_code == 0
    for args in (["-q", at + "x"], ["-q", distinct_terms(MAX_QUERY_TERMS + 1)]):
        res = cli("recall", "--root", root, *args)
        assert res.exit_code == 2, (args[:1], res.output[-300:])
        (line,) = res.stderr.splitlines()
        assert line.startswith("error: ") and "at most" in line and "--help" in line


@pytest.mark.parametrize(
    ("kind", "key", "batch_id"),
    [
        ("k" * MAX_KIND_LEN, None, None),
        ("k", "y" * MAX_KEY_LEN, None),
        ("k", None, "b" * 200),
    ],
    ids=["kind", "key", "batch_id"],
)
def test_event_limits(kind: str, key: str | None, batch_id: str | None) -> None:
    with MemoryLog() as log:
        log.append([Event(kind, key, {})], batch_id=batch_id)  # at the limit: stored
        over = (kind + "k", key, batch_id) if len(kind) == MAX_KIND_LEN else (
            (kind, key + "y", batch_id) if key is not None else (kind, key, batch_id + "b"))
        with pytest.raises(InvalidEventError, match="at most"):
            log.append([Event(over[0], over[1], {})], batch_id=over[2])
        assert log.head == 1
