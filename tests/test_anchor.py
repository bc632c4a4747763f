"""Anchored audit (issue 9): ``log head``, ``verify --anchor``, and a forger's rewrite.

The forger rewrites one packet's bytes inside a segment and recomputes what
docs/format.md says a reader checks (the frame's header crc and chain digest;
in the strongest case every later digest too). ``verify`` alone cannot tell a
fully re-chained log from the real one; an anchor taken before can, and the
store never serves the altered body as valid (its content address).
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import Any

import blake3
import pytest
from click.testing import CliRunner, Result

from cli.main import ctxledger
from eventstore import Anchor, Event, Ledger, LedgerError, MemoryLog, check_anchor, head_anchor
from eventstore.frame import FRAME_HEADER, GENESIS_DIGEST, SEGMENT_HEADER_SIZE
from projections import ContextStore, store_dir

FRUIT = ("apple", "banana", "cherry", "damson", "elder", "fig")


def cli(*args: str) -> Result:
    return CliRunner().invoke(ctxledger, list(args))


def ok_json(*args: str) -> Any:
    res = cli(*args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def error_line(res: Result) -> str:
    (line,) = res.stderr.splitlines()
    assert line.startswith("error: ")
    return line


# --- log head ----------------------------------------------------------------------


def test_log_head_is_the_last_seq_and_its_digest(tmp_path: Path) -> None:
    root = str(tmp_path)
    assert cli("init", "--root", root).exit_code == 0
    zero = "0" * 64
    assert ok_json("log", "head", "--root", root) == {"seq": 0, "digest": zero}
    assert cli("log", "head", "--root", root).stdout == f"seq 0 digest {zero}\n"
    with Ledger.open(store_dir(tmp_path) / "log") as led:
        led.append([Event("t.a", None, {})])
        led.append([Event("t.b", None, {}), Event("t.b", None, {})])  # one batch: seqs 2-3
        digest = led.head_digest.hex()
    assert ok_json("log", "head", "--root", root) == {"seq": 3, "digest": digest}
    assert cli("log", "head", "--root", root).stdout == f"seq 3 digest {digest}\n"


def test_head_anchor_and_check_anchor_on_any_backend() -> None:
    with MemoryLog() as log:
        assert head_anchor(log) == Anchor(0, GENESIS_DIGEST)
        log.append([Event("t.a", None, {})])
        log.append([Event("t.b", None, {}), Event("t.b", None, {})])
        a = head_anchor(log)
        assert a == Anchor(3, log.head_digest)
        one = Anchor(1, log.digest_at(1))  # type: ignore[arg-type]
        assert check_anchor(log, a) is None and check_anchor(log, one) is None
        assert check_anchor(log, Anchor(0, GENESIS_DIGEST)) is None
        assert check_anchor(log, Anchor(2, a.digest)) == (
            "seq 2 is inside a batch; anchors are batch ends, e.g. 3")
        assert check_anchor(log, Anchor(4, a.digest)) == (
            "seq 4 is past the log's head 3: this log is shorter than the one anchored "
            "(cut back, or another log)")
        assert check_anchor(log, Anchor(1, a.digest)) == (
            f"the chain digest at seq 1 is {one.digest.hex()}, not the anchor's "
            f"{a.digest.hex()}: the log up to seq 1 is not the one anchored")
        assert Anchor.parse(str(a)) == a


@pytest.mark.parametrize("text", ["", "3", ":", "3:", "x:" + "a" * 64, "-1:" + "a" * 64,
                                  "3:" + "a" * 63, "3:" + "a" * 65, "3:" + "g" * 64,
                                  "٣:" + "a" * 64, "3;" + "a" * 64])
def test_a_malformed_anchor_is_a_usage_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(ValueError, match="is not an anchor"):
        Anchor.parse(text)
    assert cli("init", "--root", str(tmp_path)).exit_code == 0
    res = cli("verify", "--root", str(tmp_path), "--anchor", text)
    assert res.exit_code == 2
    assert "--anchor" in error_line(res)


# --- verify --anchor -----------------------------------------------------------------


def build(root: Path) -> list[str]:
    """Six packets, one batch each; the keys."""
    with ContextStore.open(root) as st:
        return [st.put({"target": "t", "summary": f"alpha {w}"}).cache_key for w in FRUIT]


def anchor_now(root: Path) -> str:
    got = ok_json("log", "head", "--root", str(root))
    return f"{got['seq']}:{got['digest']}"


def test_verify_with_a_good_anchor(tmp_path: Path) -> None:
    build(tmp_path)
    early = anchor_now(tmp_path)
    with ContextStore.open(tmp_path) as st:
        st.put({"target": "t", "summary": "later"})  # an anchor is a prefix: the log may grow
    for a in (early, anchor_now(tmp_path)):
        doc = ok_json("verify", "--root", str(tmp_path), "--anchor", a)
        seq, digest = a.split(":")
        assert doc["ok"] is True
        assert doc["anchor"] == {"seq": int(seq), "digest": digest, "ok": True, "error": None}
        human = cli("verify", "--root", str(tmp_path), "--anchor", a)
        assert human.exit_code == 0
        assert human.stdout.splitlines()[-1] == f"anchor seq {seq}: digest {digest} matches"


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda seq, d: f"{seq}:{'ab' * 32}", "is not the one anchored"),
        (lambda seq, d: f"{seq + 5}:{d}", "past the log's head"),
    ],
    ids=["other-digest", "past-head"],
)
def test_verify_with_a_wrong_anchor_fails_with_one_line(
    tmp_path: Path, make: Any, why: str
) -> None:
    build(tmp_path)
    seq, digest = anchor_now(tmp_path).split(":")
    res = cli("verify", "--root", str(tmp_path), "--json", "--anchor", make(int(seq), digest))
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert doc["ok"] is False and doc["problems"] == [] and doc["anchor"]["ok"] is False
    assert why in doc["anchor"]["error"]
    assert "anchor not confirmed" in error_line(res) and why in error_line(res)


def test_an_anchor_inside_a_batch_names_the_batch_end(tmp_path: Path) -> None:
    assert cli("init", "--root", str(tmp_path)).exit_code == 0
    with Ledger.open(store_dir(tmp_path) / "log") as led:
        led.append([Event("t.a", None, {}) for _ in range(4)])  # seqs 1-4, one batch
        digest = led.head_digest.hex()
    res = cli("verify", "--root", str(tmp_path), "--anchor", f"2:{digest}")
    assert res.exit_code == 1
    assert error_line(res).endswith("seq 2 is inside a batch; anchors are batch ends, e.g. 4")


# --- the forger ----------------------------------------------------------------------


def _rewrite(seg: Path, old: bytes, new: bytes, rechain: bool) -> None:
    """Replace ``old`` by ``new`` (same length) inside one frame's payload and recompute
    that frame's chain digest and header crc (format.md §3, §4); with ``rechain``, every
    later frame's too, so the whole segment checks out again."""
    assert len(old) == len(new)
    raw = bytearray(seg.read_bytes())
    at = raw.find(old)
    assert at > 0 and raw.find(old, at + 1) == -1
    raw[at : at + len(old)] = new
    prev, off, changed = GENESIS_DIGEST, SEGMENT_HEADER_SIZE, False
    while off < len(raw):
        magic, _hcrc, n, count, first, digest = FRAME_HEADER.unpack_from(raw, off)
        assert magic == b"CTXF"
        payload = bytes(raw[off + 56 : off + 56 + n])
        ours = off + 56 <= at < off + 56 + n
        if ours or (changed and rechain):
            digest = blake3.blake3(prev + bytes(raw[off + 8 : off + 24]) + payload).digest()
            raw[off + 24 : off + 56] = digest
            struct.pack_into("<I", raw, off + 4, zlib.crc32(bytes(raw[off + 8 : off + 56])))
            changed = True
        prev, off = digest, off + n + 64
    seg.write_bytes(bytes(raw))


@pytest.mark.parametrize("rechain", [False, True], ids=["one-frame", "whole-chain"])
def test_a_rewritten_packet_is_never_served_and_the_anchor_catches_it(
    tmp_path: Path, rechain: bool
) -> None:
    keys = build(tmp_path)
    before_rewrite = anchor_now(tmp_path)
    seq3 = ok_json("store", "list", "--root", str(tmp_path))["entries"]
    first = next(e for e in seq3 if e["seq"] == 1)  # untouched by the rewrite
    (seg,) = sorted((store_dir(tmp_path) / "log").glob("*.seg"))
    _rewrite(seg, b"alpha cherry", b"alpha cherrz", rechain)  # the third packet

    res = cli("verify", "--root", str(tmp_path))
    if rechain:  # internally consistent again: verify alone cannot tell
        assert res.exit_code == 0
    else:  # the next frame no longer chains to the rewritten one
        assert res.exit_code == 1 and "problem" in error_line(res)
    res = cli("verify", "--root", str(tmp_path), "--anchor", before_rewrite)
    assert res.exit_code == 1
    assert "anchor not confirmed" in error_line(res) or "problem" in error_line(res)
    # an anchor before the rewritten batch still holds: it pins exactly the log up to it
    with Ledger.open(store_dir(tmp_path) / "log", readonly=True) as led:
        assert check_anchor(led, Anchor(2, led.digest_at(2) or b"")) is None

    # readers: the altered body is not served, from a checkpoint or from a fresh fold
    for fresh in (False, True):
        if fresh:
            for f in (store_dir(tmp_path) / "checkpoints").iterdir():
                f.unlink()
        res = cli("store", "get", "--root", str(tmp_path), "--key", keys[2], "--json")
        assert res.exit_code == 1 and "cherrz" not in res.stdout
        if fresh and not rechain:
            assert "corrupt log" in error_line(res)
        else:  # the chain holds for the rewritten batch: only the content address tells
            assert "the packet logged at seq 3 does not match its cache_key" in error_line(res)
        with ContextStore.open(tmp_path, readonly=True) as st:
            with pytest.raises(LedgerError):
                st.get(keys[2])
        untouched = cli("store", "get", "--root", str(tmp_path), "--key", first["cache_key"])
        if fresh and not rechain:  # a refold meets the broken chain: everything fails closed
            assert untouched.exit_code == 1 and "corrupt log" in error_line(untouched)
        else:  # other packets are proven exactly what was put, and served
            assert untouched.exit_code == 0 and "alpha apple" in untouched.stdout


def test_check_anchor_before_a_compaction_asks_the_anchors_file(tmp_path: Path) -> None:
    """An anchor older than the generation start is checked against the anchors file the
    compaction wrote: right, wrong, and a seq inside a compacted batch, word for word."""
    from types import SimpleNamespace

    from projections.compaction import compact

    with ContextStore.open(tmp_path) as st:
        st.put_many([{"target": "t", "summary": f"pair {i}"} for i in range(2)])  # seqs 1-2
        for i in range(6):  # superseded puts: something for the compaction to drop
            st.put({"target": f"t{i % 3}", "summary": f"entry {i % 3}"})
        led = st.ledger
        ends = {last: d for _f, last, d in led.read_digests()}
        assert 1 not in ends and 2 in ends  # seq 1 is inside the first batch
        assert compact(led).compacted
        base = led.base
        assert base > 2
        assert check_anchor(led, Anchor(2, ends[2])) is None
        at_base = led.digest_at(base)  # the generation's first batch: the chain decides
        assert at_base is not None and check_anchor(led, Anchor(base, at_base)) is None
        wrong = bytes(32)
        assert check_anchor(led, Anchor(2, wrong)) == (
            f"the chain digest at seq 2 was {ends[2].hex()} when the log was compacted, "
            f"not the anchor's {wrong.hex()}")
        assert check_anchor(led, Anchor(1, ends[2])) == (
            f"seq 1 lies before this log's generation start {base} and no batch of the "
            "compacted generations ended there")
        # a log without an anchors file to ask (no anchor_digest) says the same
        bare = SimpleNamespace(head=led.head, base=base)
        assert check_anchor(bare, Anchor(2, ends[2])) == (  # type: ignore[arg-type]
            f"seq 2 lies before this log's generation start {base} and no batch of the "
            "compacted generations ended there")


def test_check_anchor_asks_the_anchors_file_from_a_generation_start_of_2() -> None:
    """The smallest compacted log (generation start 2): an anchor at seq 1 is the anchors
    file's to judge, never the chain's."""
    from types import SimpleNamespace

    digest = bytes(range(32))
    log = SimpleNamespace(head=5, base=2,
                          anchor_digest=lambda seq: digest if seq == 1 else None)
    assert check_anchor(log, Anchor(1, digest)) is None  # type: ignore[arg-type]
    assert check_anchor(log, Anchor(1, bytes(32))) == (  # type: ignore[arg-type]
        f"the chain digest at seq 1 was {digest.hex()} when the log was compacted, "
        f"not the anchor's {bytes(32).hex()}")


def test_an_anchor_inside_a_batch_of_a_log_cut_back_meanwhile_names_no_batch_end() -> None:
    """The seq was inside a batch when the digest was asked for, and no batch holds it
    when it is read (the log was cut back in between): the words without an example."""
    from types import SimpleNamespace

    log = SimpleNamespace(head=9, digest_at=lambda seq: None,
                          read_batches=lambda a, b=None: iter(()))
    assert check_anchor(log, Anchor(4, bytes(32))) == (  # type: ignore[arg-type]
        "seq 4 is inside a batch; anchors are batch ends")
