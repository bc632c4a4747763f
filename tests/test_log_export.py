"""``log export`` / ``log import``: JSON Lines that rebuild the log exactly.

export -> import -> export is byte-identical (seqs, digests, times, batch ids
and every value's bytes), also for a compacted log that starts above seq 1;
a file that does not chain is refused before anything is written.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import batch_lists
from test_compact import answers, fill

from cli.main import ctxledger
from eventstore import (
    Event,
    ImportRefusedError,
    Ledger,
    LedgerError,
    check_anchor,
    head_anchor,
)
from eventstore.export import check_import
from projections.compaction import compact


def export(led: Ledger, **kw: Any) -> bytes:
    return "".join(line + "\n" for line in led.export_lines(**kw)).encode()


def load(path: Path, text: bytes) -> Ledger:
    led = Ledger.open(path)
    led.import_log(check_import(io.BytesIO(text)))
    return led


def files(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.blake2b(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


@settings(max_examples=60, deadline=None)
@given(batch_lists, st.lists(st.text(min_size=1, max_size=8) | st.none(), max_size=8))
def test_round_trip_is_exact(tmp_path_factory: pytest.TempPathFactory,
                             batches: list[list[Event]], ids: list[str | None]) -> None:
    d = tmp_path_factory.mktemp("rt")
    with Ledger.open(d / "a") as a:
        for i, b in enumerate(batches):
            a.append(b, batch_id=ids[i] if i < len(ids) and ids[i] else None)
        text = export(a)
        with load(d / "b", text) as b2:
            assert export(b2) == text
            assert b2.head == a.head and b2.head_digest == a.head_digest
            assert [(e.kind, e.key, e.data, e.at) for e in b2.read()] == [
                (e.kind, e.key, e.data, e.at) for e in a.read()]
            assert b2.verify().ok
    for line in text.splitlines():
        json.loads(line)  # every line is one JSON object


def test_a_store_round_trips_and_answers_the_same(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    fill(a, n=4)
    with Ledger.open(a / ".ctxledger" / "log") as led:
        text = export(led)
    (b / ".ctxledger").mkdir(parents=True)
    shutil.copytree(a / "src", b / "src")  # the files the packets name (freshness)
    with load(b / ".ctxledger" / "log", text) as led:
        assert export(led) == text
    assert answers(b) == answers(a)


def test_a_compacted_log_round_trips_with_its_anchors(tmp_path: Path) -> None:
    fill(tmp_path / "a", n=4)
    with Ledger.open(tmp_path / "a" / ".ctxledger" / "log") as led:
        anchor = head_anchor(led)
        compact(led)
        led.append([Event("x.y", None, {"after": b"\x00", "f": 0.1, "i": 2**80})])
        assert led.base > 1
        text = export(led)
    with load(tmp_path / "b", text) as led:
        assert export(led) == text
        assert led.base > 1 and led.verify().ok
        assert check_anchor(led, anchor) is None  # the anchors file came along


def test_filtered_exports(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "a") as led:
        led.append([Event("a.b", "k", {"n": 1}), Event("a.c", None, {"n": 2})])
        led.append([Event("a.b", None, {"n": 3})])
        lines = [json.loads(x) for x in export(led, kind="a.b").splitlines()]
        assert [x["seq"] for x in lines] == [1, 3]
        assert [x["seq"] for x in map(json.loads, export(led, from_seq=2).splitlines())] \
            == [2, 3]
        with pytest.raises(ImportRefusedError, match="gap"):
            check_import(io.BytesIO(export(led, kind="a.b")))
        with pytest.raises(ImportRefusedError, match="whole log"):
            check_import(io.BytesIO(export(led, from_seq=3)))


def _bad_files(text: bytes) -> dict[str, tuple[bytes, str]]:
    lines = text.splitlines(keepends=True)
    first = json.loads(lines[0])

    def edit(i: int, **kw: Any) -> bytes:
        obj = json.loads(lines[i])
        obj.update(kw)
        return b"".join(lines[:i] + [json.dumps(obj).encode() + b"\n"] + lines[i + 1:])

    d = first["digest"]
    out = {
        "digest": (edit(0, digest=("0" if d[0] != "0" else "1") + d[1:]), "does not chain"),
        "gap": (b"".join(lines[:1] + lines[2:]), "expected"),
        "json": (b"".join(lines[:1] + [b'{"seq": 2,\n'] + lines[2:]), "not JSON"),
        "data": (edit(0, data={"n": 999}), "data differs"),
        "kind": (edit(0, kind="z.z"), "kind or key differs"),
        "at": (edit(1, at=first["at"] + 1), "disagree"),
        "at0": (edit(0, at=first["at"] + 1), "does not chain"),
        "truncated": (b"".join(lines[:-1]), "ends inside the frame"),
        "empty": (b"", "no event"),
        "not object": (b"[1]\n", "not a JSON object"),
    }
    assert sorted(out) == sorted(BAD)
    return out


BAD = ["digest", "gap", "json", "data", "kind", "at", "at0", "truncated", "empty", "not object"]


@pytest.mark.parametrize("which", BAD)
def test_a_file_that_does_not_chain_is_refused_before_anything_is_written(
    tmp_path: Path, which: str
) -> None:
    with Ledger.open(tmp_path / "a") as led:
        led.append([Event("a.b", "k", {"n": 1})])
        led.append([Event("a.b", None, {"n": 2}), Event("a.b", None, {"n": 3})])
        text = export(led)
    bad, why = _bad_files(text)[which]
    (tmp_path / "b").mkdir()
    before = files(tmp_path / "b")
    with pytest.raises(ImportRefusedError, match=why):
        check_import(io.BytesIO(bad))
    (tmp_path / "bad.jsonl").write_bytes(bad)
    res = CliRunner().invoke(ctxledger, ["init", "--root", str(tmp_path / "b")])
    before = files(tmp_path / "b")
    res = CliRunner().invoke(ctxledger, ["log", "import", "--root", str(tmp_path / "b"),
                                         str(tmp_path / "bad.jsonl")])
    assert res.exit_code == 1 and res.stderr.startswith("error: line ")
    assert files(tmp_path / "b") == before


def test_a_line_over_the_limit_is_refused(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "a") as led:
        led.append([Event("a.b", "k", {"pad": "x" * 500})])
        text = export(led)
    with pytest.raises(ImportRefusedError) as e:
        check_import(io.BytesIO(text), limit=100)
    assert (e.value.line, e.value.reason) == (1, "line is longer than 100 bytes")
    assert check_import(io.BytesIO(text), limit=len(text)).head_digest


def test_import_never_reads_more_than_a_line_limit_at_once(tmp_path: Path) -> None:
    """A file of one huge line costs the limit in memory, not the line's size."""
    asked: list[int | None] = []

    class Recording(io.BytesIO):
        def readline(self, size: int | None = -1) -> bytes:  # type: ignore[override]
            asked.append(size)
            return super().readline(size)

    with Ledger.open(tmp_path / "a") as led:
        led.append([Event("a.b", "k", {"pad": "x" * 500})])
        text = export(led)
    with pytest.raises(ImportRefusedError):
        check_import(Recording(text), limit=100)
    assert asked == [101]
    asked.clear()
    check_import(Recording(text), limit=len(text))
    assert asked == [len(text) + 1, len(text) + 1]  # the line, then the end of the file


def test_import_only_into_an_empty_log(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "a") as led:
        led.append([Event("a.b", "k", {})])
        text = export(led)
    with Ledger.open(tmp_path / "b") as led:
        led.append([Event("c.d", None, {})])
        with pytest.raises(LedgerError) as info:
            led.import_log(check_import(io.BytesIO(text)))
        assert str(info.value) == (f"{tmp_path / 'b'} is not empty: log import only writes "
                                   "into a store whose log has no event")
        assert led.head == 1
    heard: list[int] = []
    with Ledger.open(tmp_path / "c") as led:  # the import's progress hears of what it wrote
        led.import_log(check_import(io.BytesIO(text)), progress=heard.append)
        assert led.head == 1 and heard and sum(heard) >= 1


def test_export_and_import_commands(tmp_path: Path) -> None:
    run = CliRunner().invoke
    a, b = tmp_path / "a", tmp_path / "b"
    fill(a, n=3)
    with Ledger.open(a / ".ctxledger" / "log") as led:
        compact(led)
    out = run(ctxledger, ["log", "export", "--root", str(a)])
    assert out.exit_code == 0 and out.stderr == ""
    (tmp_path / "x.jsonl").write_text(out.stdout)
    assert run(ctxledger, ["init", "--root", str(b)]).exit_code == 0
    shutil.copytree(a / "src", b / "src")
    imp = run(ctxledger, ["log", "import", "--root", str(b), str(tmp_path / "x.jsonl"),
                          "--json"])
    assert imp.exit_code == 0, imp.output
    doc = json.loads(imp.stdout)
    assert doc["first_seq"] > 1 and doc["imported_events"] == len(out.stdout.splitlines())
    again = run(ctxledger, ["log", "export", "--root", str(b)])
    assert again.stdout == out.stdout
    assert run(ctxledger, ["verify", "--root", str(b)]).exit_code == 0
    assert answers(b) == answers(a)


def test_a_generation_marker_inside_the_file_is_refused() -> None:
    """A marker is only ever a generation's first event; one mid-log (a crafted file
    that chains) would make every view fail after the import."""
    import cbor2

    from eventstore.export import export_lines
    from eventstore.frame import GENESIS_DIGEST
    from eventstore.records import RawBatch

    rows = [cbor2.dumps(["a.b", None, {"i": 1}]),
            cbor2.dumps(["ledger.compacted", None, {"old_head": 1}]),
            cbor2.dumps(["a.b", None, {"i": 3}])]
    batches = [RawBatch(i + 1, 1.0 + i, None, (r,)) for i, r in enumerate(rows)]
    text = "".join(line + "\n" for line in export_lines(batches, GENESIS_DIGEST))
    with pytest.raises(ImportRefusedError) as e:
        check_import(io.BytesIO(text.encode()))
    assert (e.value.line, e.value.reason) == (
        2, "ledger.compacted is only ever a generation's first event")


def test_import_refuses_a_log_holding_a_segment_but_no_event(tmp_path: Path) -> None:
    """Empty means no segment at all: one with a header and no frame (head 0) is not."""
    from eventstore.frame import encode_segment_header
    from eventstore.segments import segment_name

    with Ledger.open(tmp_path / "src") as led:
        led.append([Event("a.b", None, {"i": 1})])
        text = export(led)
    log = tmp_path / "dst" / "log"
    log.mkdir(parents=True)
    seg = log / segment_name(1)
    seg.write_bytes(encode_segment_header(1, bytes(32), 1 << 20))
    with Ledger.open(log) as led:
        assert led.head == 0
        with pytest.raises(LedgerError) as info:
            led.import_log(check_import(io.BytesIO(text)))
    assert str(info.value) == (f"{log} is not empty: log import only writes into a store "
                               "whose log has no event")
    assert sorted(p.name for p in log.glob("*.seg")) == [seg.name]


def test_import_checks_what_it_wrote_ends_at_the_files_digest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A guard behind the file's own digest check: a writer bug that ended the new log on
    another digest would be an error, not a log that silently differs."""
    import attrs

    import eventstore.ledger as ledger_mod

    with Ledger.open(tmp_path / "src") as led:
        led.append([Event("a.b", None, {"i": 1})])
        text = export(led)
    real = ledger_mod.write_generation  # type: ignore[attr-defined]
    monkeypatch.setattr(ledger_mod, "write_generation",
                        lambda *a, **k: attrs.evolve(real(*a, **k), digest=bytes(32)))
    with Ledger.open(tmp_path / "dst") as led, pytest.raises(LedgerError) as info:
        led.import_log(check_import(io.BytesIO(text)))
    assert str(info.value) == "imported log does not end at the file's digest"
