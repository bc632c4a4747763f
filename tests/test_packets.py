"""Packets and settings: the content address, validation, atomic batches, config.toml."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import blake3
import pytest
from cache_strategies import packets, tree_bytes
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import InvalidEventError, LedgerError
from projections import (
    ConfigError,
    ContextStore,
    InvalidPacketError,
    StoreConfig,
    cache_key_of,
    canonical_bytes,
    check_packet,
    store_dir,
)
from projections.config import DEFAULT_TTL
from projections.packet import DEFAULT_MAX_PACKET_BYTES


def key_of(packet: Any) -> str:
    return cache_key_of(canonical_bytes(packet))


def reorder(value: Any, rnd: random.Random) -> Any:
    """The same value with every mapping's keys in another order."""
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: reorder(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [reorder(v, rnd) for v in value]
    return value


# --- the content address ----------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(pkt=packets(), seed=st.integers(0, 2**32))
def test_cache_key_does_not_depend_on_key_order(pkt: dict[str, Any], seed: int) -> None:
    other = reorder(pkt, random.Random(seed))
    assert key_of(other) == key_of(pkt)
    assert canonical_bytes(other) == canonical_bytes(pkt)
    k = key_of(pkt)
    assert re.fullmatch(r"[0-9a-f]{64}", k)
    assert k == blake3.blake3(canonical_bytes(pkt)).hexdigest()
    body, canon = check_packet(other)
    assert body == pkt and canon == canonical_bytes(pkt)


@settings(max_examples=100, deadline=None)
@given(a=packets(), b=packets())
def test_different_packets_have_different_keys(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert (key_of(a) == key_of(b)) == (canonical_bytes(a) == canonical_bytes(b))


def test_key_order_does_not_matter_to_the_store(tmp_path: Path) -> None:
    a = {"target": "t", "summary": "s", "payload": {"x": 1, "y": {"p": [1, 2], "q": None}}}
    b = {"payload": {"y": {"q": None, "p": [1, 2]}, "x": 1}, "summary": "s", "target": "t"}
    with ContextStore.open(tmp_path) as store:
        ra, rb = store.put(a), store.put(b)
        assert ra.cache_key == rb.cache_key == key_of(a)
        assert rb.seq == ra.seq + 1
        assert [e.cache_key for e in store.list()] == [ra.cache_key]
        entry = store.get(ra.cache_key)
        assert entry is not None and entry.body == a and entry.target == "t"
        assert entry.metadata["seq"] == rb.seq  # the refresh is the live put


def test_the_stored_body_is_the_packet_as_the_log_gives_it_back(tmp_path: Path) -> None:
    """Views fold what this process appended without reading it back, so the body it
    appends must already be what a rebuild reads: plain dicts and lists."""
    import collections
    import types

    pkt = {
        "target": "t",
        "paths": ["a.py"],
        "payload": types.MappingProxyType(
            {"k": "needletwo", "t": ("needleone", 1), "o": collections.OrderedDict(x="needlethree")}
        ),
    }
    body, canon = check_packet(pkt)
    assert type(body) is dict and type(body["payload"]) is dict
    assert body["payload"]["t"] == ["needleone", 1] and type(body["payload"]["o"]) is dict
    assert canonical_bytes(body) == canon
    with ContextStore.open(tmp_path) as store:
        store.stats()  # views loaded: the put is folded from memory
        r = store.put(pkt)
        assert r.cache_key == key_of(body)
        entry = store.get(r.cache_key)
        assert entry is not None and entry.body == body
        queries = ("needleone", "needletwo", "needlethree")
        before = [[h.cache_key for h in store.recall(q)] for q in queries]
        assert before == [[r.cache_key]] * 3
        store.rebuild()
        assert [[h.cache_key for h in store.recall(q)] for q in queries] == before


def test_value_types_change_the_key() -> None:
    one = key_of({"target": "t", "payload": {"n": 1}})
    assert one != key_of({"target": "t", "payload": {"n": 1.0}})
    assert one != key_of({"target": "t", "payload": {"n": "1"}})
    assert key_of({"target": "t"}) != key_of({"target": "t", "payload": {}})


# --- invalid packets write nothing ---------------------------------------------------------------

BAD_PACKETS: list[tuple[str, Any]] = [
    ("array", [{"target": "t"}]),
    ("string", "target"),
    ("number", 5),
    ("null", None),
    ("boolean", True),
    ("no target", {"summary": "s"}),
    ("empty target", {"target": ""}),
    ("blank target", {"target": "  \t"}),
    ("numeric target", {"target": 7}),
    ("list target", {"target": ["t"]}),
    ("null target", {"target": None}),
    ("numeric summary", {"target": "t", "summary": 3}),
    ("paths not a list", {"target": "t", "paths": "src/a.py"}),
    ("paths of numbers", {"target": "t", "paths": ["a", 1]}),
    ("symbols a dict", {"target": "t", "symbols": {"a": 1}}),
    ("tests of lists", {"target": "t", "tests": [["x"]]}),
    ("task_ids of null", {"target": "t", "task_ids": [None]}),
    ("packet_types a string", {"target": "t", "packet_types": "coverage"}),
    ("not encodable", {"target": "t", "payload": {"x": object()}}),
]


Files = dict[str, tuple[int, bytes]]


def _store_with_one_packet(root: Path, **cfg: Any) -> tuple[ContextStore, Files]:
    store = ContextStore.open(root, config=StoreConfig(**cfg) if cfg else None)
    store.put({"target": "keep", "summary": "already stored"})
    store.checkpoint()
    return store, tree_bytes(store_dir(root) / "log")


@pytest.mark.parametrize("why,packet", BAD_PACKETS, ids=[b[0] for b in BAD_PACKETS])
def test_invalid_packet_is_refused_and_nothing_written(
    tmp_path: Path, why: str, packet: Any
) -> None:
    store, before = _store_with_one_packet(tmp_path)
    head = store.ledger.head
    with pytest.raises(InvalidPacketError) as ei:
        store.put(packet)
    assert "\n" not in str(ei.value) and str(ei.value)
    with pytest.raises(InvalidPacketError):
        store.put_many([{"target": "fine"}, packet])
    with pytest.raises(InvalidPacketError):
        check_packet(packet)
    assert store.ledger.head == head
    assert len(store.list()) == 1
    store.close()
    assert tree_bytes(store_dir(tmp_path) / "log") == before


def test_invalid_packet_error_is_a_ledger_error_and_a_value_error() -> None:
    assert issubclass(InvalidPacketError, LedgerError)
    assert issubclass(InvalidPacketError, InvalidEventError)
    assert issubclass(InvalidPacketError, ValueError)


def test_error_messages_say_what_is_wrong() -> None:
    cases = {
        "an array": [],
        "non-empty string field 'target'": {"summary": "x"},
        "'paths' must be a list of strings": {"target": "t", "paths": "x"},
        "'summary' must be a string": {"target": "t", "summary": 1},
    }
    for needle, pkt in cases.items():
        with pytest.raises(InvalidPacketError, match=re.escape(needle)):
            check_packet(pkt)


def test_packet_size_limit_is_exact(tmp_path: Path) -> None:
    base = {"target": "t", "summary": ""}
    limit = 300
    fill = limit - len(canonical_bytes(base)) - 2  # the summary's CBOR header grows by 1 byte
    at_limit = {"target": "t", "summary": "x" * fill}
    assert len(canonical_bytes(at_limit)) == limit
    over = {"target": "t", "summary": "x" * (fill + 1)}
    store, before = _store_with_one_packet(tmp_path, max_packet_bytes=limit)
    head = store.ledger.head
    with pytest.raises(InvalidPacketError, match=f"over the {limit}-byte limit"):
        store.put(over)
    with pytest.raises(InvalidPacketError):
        store.put_many([at_limit, over])
    assert store.ledger.head == head
    assert tree_bytes(store_dir(tmp_path) / "log") == before
    r = store.put(at_limit)
    assert r.seq == head + 1
    store.close()


def test_default_size_limit_is_16_mib() -> None:
    assert DEFAULT_MAX_PACKET_BYTES == 16 * 1024 * 1024
    big = {"target": "t", "summary": "x" * (16 * 1024 * 1024)}
    with pytest.raises(InvalidPacketError, match="over the 16777216-byte limit"):
        check_packet(big)


def test_size_limit_from_config_toml(tmp_path: Path) -> None:
    d = store_dir(tmp_path)
    d.mkdir()
    (d / "config.toml").write_text("[store]\nmax_packet_bytes = 64\n")
    with ContextStore.open(tmp_path) as store:
        store.put({"target": "t"})
        with pytest.raises(InvalidPacketError):
            store.put({"target": "t", "summary": "y" * 64})
        assert store.ledger.head == 1


# --- put_many is one atomic batch ----------------------------------------------------------------


def test_put_many_is_one_batch(tmp_path: Path) -> None:
    pkts = [{"target": "t", "summary": str(i)} for i in range(5)]
    with ContextStore.open(tmp_path) as store:
        rs = store.put_many(iter(pkts))  # any iterable
        assert [r.seq for r in rs] == [1, 2, 3, 4, 5]
        assert [r.cache_key for r in rs] == [key_of(p) for p in pkts]
        assert len({r.created_at_unix for r in rs}) == 1
        batches = list(store.ledger.read_batches(1))
        assert len(batches) == 1 and len(batches[0].events) == 5
        assert store.put_many([]) == []
        assert store.ledger.head == 5


def test_put_many_with_duplicates_keeps_the_last(tmp_path: Path) -> None:
    p = {"target": "t", "summary": "dup"}
    with ContextStore.open(tmp_path) as store:
        rs = store.put_many([p, {"target": "u"}, dict(reversed(p.items()))])
        assert rs[0].cache_key == rs[2].cache_key
        assert store.stats()["entries"] == 2
        e = store.get(rs[0].cache_key)
        assert e is not None and e.metadata["seq"] == rs[2].seq


@settings(max_examples=25, deadline=None)
@given(
    good=st.lists(packets(), max_size=4),
    bad=st.sampled_from([b for _w, b in BAD_PACKETS]),
    where=st.integers(0, 4),
)
def test_put_many_with_one_bad_packet_writes_nothing(
    good: list[dict[str, Any]], bad: Any, where: int
) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        store, before = _store_with_one_packet(Path(tmp))
        batch = list(good)
        batch.insert(min(where, len(batch)), bad)
        with pytest.raises(InvalidPacketError):
            store.put_many(batch)
        assert store.ledger.head == 1
        assert store.stats()["entries"] == 1
        store.close()
        assert tree_bytes(store_dir(Path(tmp)) / "log") == before


def test_unencodable_metadata_writes_nothing(tmp_path: Path) -> None:
    store, before = _store_with_one_packet(tmp_path)
    with pytest.raises(InvalidEventError):
        store.put_many([{"target": "a"}, {"target": "b"}], [None, {"x": object()}])
    with pytest.raises(ValueError):  # one metadata per packet
        store.put_many([{"target": "a"}, {"target": "b"}], [None])
    assert store.ledger.head == 1
    store.close()
    assert tree_bytes(store_dir(tmp_path) / "log") == before


def test_metadata_is_kept(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path) as store:
        r = store.put({"target": "t"}, metadata={"source": "test", "tokens": 12})
        e = store.get(r.cache_key)
        assert e is not None
        assert e.metadata == {
            "source": "test",
            "tokens": 12,
            "seq": r.seq,
            "bytes": len(canonical_bytes({"target": "t"})),
        }


# --- config.toml ----------------------------------------------------------------------------


def write_config(root: Path, text: str | bytes) -> Path:
    d = store_dir(root)
    d.mkdir(parents=True, exist_ok=True)
    p = d / "config.toml"
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def test_missing_config_gives_defaults(tmp_path: Path) -> None:
    cfg = StoreConfig.load(tmp_path / "nope.toml")
    assert cfg == StoreConfig()
    assert cfg.ttl_seconds == DEFAULT_TTL == 86_400
    assert cfg.max_packet_bytes == 16 * 1024 * 1024
    assert cfg.sync == "always"


def test_config_is_parsed(tmp_path: Path) -> None:
    p = write_config(
        tmp_path,
        """
# settings
[cache]
ttl_seconds = 3600

[store]
max_packet_bytes = 1024
sync = "batch"

[checkpoint]
every_events = 10
every_seconds = 2.5
""",
    )
    cfg = StoreConfig.load(p)
    assert cfg == StoreConfig(
        ttl_seconds=3600,
        max_packet_bytes=1024,
        sync="batch",
        checkpoint_every_events=10,
        checkpoint_every_seconds=2.5,
    )
    with ContextStore.open(tmp_path) as store:
        assert store.config == cfg
        assert store.stats()["ttl_seconds"] == 3600


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[cache]\nttl_secondz = 5\n", "[cache] 'ttl_secondz'"),
        ("[store]\nsync = \"always\"\nmax_bytes = 1\n", "[store] 'max_bytes'"),
        ("[recal]\nlimit = 4\n", "'recal'"),  # a table no view reads
        ("[recall]\nlimit = 4\n", "[recall] 'limit'"),  # recall reads provider and model only
        ("ttl_seconds = 5\n", "'ttl_seconds'"),  # a key outside its table
    ],
)
def test_unknown_settings_are_refused_by_name(tmp_path: Path, text: str, named: str) -> None:
    p = write_config(tmp_path, text)
    with pytest.raises(ConfigError, match="unknown") as e:
        StoreConfig.load(p)
    assert named in str(e.value)


def test_fractional_ttl_is_allowed(tmp_path: Path) -> None:
    p = write_config(tmp_path, "[cache]\nttl_seconds = 0.5\n")
    assert StoreConfig.load(p).ttl_seconds == 0.5


def test_ttl_from_config_decides_expiry(tmp_path: Path) -> None:
    write_config(tmp_path, "[cache]\nttl_seconds = 100\n")
    now = [0.0]
    with ContextStore.open(tmp_path, clock=lambda: now[0]) as store:
        r = store.put({"target": "t"})
        created = next(store.ledger.read(r.seq, r.seq)).at
        now[0] = created + 50
        assert store.get(r.cache_key) is not None
        assert store.list()[0].expires_at_unix == int(created + 100)
        now[0] = created + 150
        assert store.get(r.cache_key) is None
        assert store.list() == []
        assert store.stats()["entries"] == 0 and store.stats()["expired_pending_prune"] == 1
        res = store.prune()
        assert (res.removed, res.remaining, res.reasons) == (1, 0, {"expired_ttl": 1})


BAD_CONFIGS = [
    ("not toml", "[cache\nttl_seconds = 1"),
    ("not utf-8", b"[cache]\nttl_seconds = 1 # \xff\xfe\n"),
    ("zero ttl", "[cache]\nttl_seconds = 0"),
    ("negative ttl", "[cache]\nttl_seconds = -5"),
    ("string ttl", '[cache]\nttl_seconds = "1d"'),
    ("boolean ttl", "[cache]\nttl_seconds = true"),
    ("array ttl", "[cache]\nttl_seconds = [1]"),
    ("infinite ttl", "[cache]\nttl_seconds = inf"),
    ("nan ttl", "[cache]\nttl_seconds = nan"),
    ("fractional size", "[store]\nmax_packet_bytes = 1.5"),
    ("zero size", "[store]\nmax_packet_bytes = 0"),
    ("bad sync", '[store]\nsync = "sometimes"'),
    ("numeric sync", "[store]\nsync = 1"),
    ("zero every_events", "[checkpoint]\nevery_events = 0"),
    ("nan every_seconds", "[checkpoint]\nevery_seconds = nan"),
    ("cache not a table", "cache = 5"),
    ("store not a table", 'store = "fast"'),
    ("checkpoint not a table", "checkpoint = [1, 2]"),
]


@pytest.mark.parametrize("why,text", BAD_CONFIGS, ids=[b[0] for b in BAD_CONFIGS])
def test_bad_config_is_a_config_error(tmp_path: Path, why: str, text: str | bytes) -> None:
    p = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as ei:
        StoreConfig.load(p)
    msg = str(ei.value)
    assert "config.toml" in msg and "\n" not in msg
    assert isinstance(ei.value, LedgerError)
    with pytest.raises(ConfigError):
        ContextStore.open(tmp_path)
    # nothing was created next to the bad config
    assert sorted(x.name for x in store_dir(tmp_path).iterdir()) == ["config.toml"]


def test_unreadable_config_is_a_config_error(tmp_path: Path) -> None:
    d = store_dir(tmp_path) / "config.toml"
    d.mkdir(parents=True)  # a directory where the file should be
    with pytest.raises(ConfigError, match="cannot read"):
        StoreConfig.load(d)
