"""``check_import``'s refusals one by one: the line each names and its exact words.

tests/test_log_export.py refuses a few damaged files by a word of the message;
here every check of eventstore/export.py's ``check_import`` is reached by its
own edit of a valid export and must give its own line number and reason (what
a user reads to find the damage), and never write a byte.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2
import pytest
from test_compact import fill

from eventstore import Event, ImportRefusedError, Ledger, LedgerError
from eventstore.export import check_import
from projections.compaction import compact

Lines = list[dict[str, Any]]


def valid_export(tmp_path: Path) -> Lines:
    """Three frames: seq 1 alone; seqs 2-3 (batch id "b2"); seq 4."""
    times = iter([10.0, 20.0, 30.0])
    with Ledger.open(tmp_path / "src", clock=lambda: next(times)) as led:
        led.append([Event("a.b", "k", {"n": 1})])
        led.append([Event("a.b", None, {"n": 2}), Event("a.c", "q", {"n": 3})], batch_id="b2")
        led.append([Event("a.b", None, {"n": 4})])
        return [json.loads(line) for line in led.export_lines()]


def text_of(lines: Lines) -> bytes:
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


def refusal(data: bytes) -> ImportRefusedError:
    with pytest.raises(ImportRefusedError) as e:
        check_import(io.BytesIO(data))
    return e.value


def setting(i: int, path: str, value: Any) -> Callable[[Lines], None]:
    """An edit: line ``i``'s field at ``path`` (``batch.count``) set to ``value``."""
    def edit(lines: Lines) -> None:
        *outer, last = path.split(".")
        obj = lines[i]
        for p in outer:
            obj = obj[p]
        obj[last] = value
    return edit


def dropping(i: int, name: str) -> Callable[[Lines], None]:
    def edit(lines: Lines) -> None:
        del lines[i][name]
    return edit


def cbor_of(value: Any) -> str:
    return cbor2.dumps(value).hex()


ZERO = "00" * 32
BATCH = "batch is not {first_seq, count, batch_id}"
DISAGREE = "events of one frame disagree on its fields"

#: (case, edit of the valid export, line named, exact reason)
CASES: list[tuple[str, Callable[[Lines], None], int, str]] = [
    ("seq 0", setting(0, "seq", 0), 1, "seq is not a positive integer"),
    ("seq text", setting(1, "seq", "2"), 2, "seq is not a positive integer"),
    ("seq true", setting(1, "seq", True), 2, "seq is not a positive integer"),
    ("seq float", setting(1, "seq", 2.0), 2, "seq is not a positive integer"),
    ("at text", setting(1, "at", "20"), 2, "at is not a number"),
    ("at true", setting(1, "at", True), 2, "at is not a number"),
    ("at missing", dropping(2, "at"), 3, "at is not a number"),
    ("batch list", setting(1, "batch", [2, 2, None]), 2, BATCH),
    ("batch first_seq text", setting(1, "batch.first_seq", "2"), 2, BATCH),
    ("batch count 0", setting(1, "batch.count", 0), 2, BATCH),
    ("batch count missing", lambda ls: ls[1]["batch"].pop("count"), 2, BATCH),
    ("batch id number", setting(1, "batch.batch_id", 2), 2, BATCH),
    ("cbor not hex", setting(1, "cbor", "zz"), 2, "cbor is not hex"),
    ("cbor a number", setting(1, "cbor", 12), 2, "cbor is not hex"),
    ("cbor missing", dropping(1, "cbor"), 2, "cbor is not hex"),
    ("digest short", setting(1, "digest", "ab" * 31), 2, "digest is not 32 bytes"),
    ("digest not hex", setting(1, "digest", "x" * 64), 2, "digest is not hex"),
    ("cbor undecodable", setting(1, "cbor", "ff"), 2, "cbor does not decode"),
    ("cbor a pair", setting(1, "cbor", cbor_of(["a.b", None])), 2,
     "cbor is not [kind, key, data]"),
    ("cbor kind a number", setting(1, "cbor", cbor_of([1, None, {}])), 2,
     "cbor is not [kind, key, data]"),
    ("cbor key a number", setting(1, "cbor", cbor_of(["a.b", 1, {}])), 2,
     "cbor is not [kind, key, data]"),
    ("cbor data a list", setting(1, "cbor", cbor_of(["a.b", None, []])), 2,
     "cbor is not [kind, key, data]"),
    ("cbor a map", setting(1, "cbor", cbor_of({"a": 1})), 2, "cbor is not [kind, key, data]"),
    ("kind", setting(1, "kind", "z.z"), 2, "kind or key differs from what cbor holds"),
    ("key", setting(2, "key", "other"), 3, "kind or key differs from what cbor holds"),
    ("data", setting(1, "data", {"n": 99}), 2, "data differs from what cbor holds"),
    ("starts at seq 2", lambda ls: ls.pop(0), 1,
     "the file starts at seq 2: only a whole log (from seq 1, or from a compaction's "
     "ledger.compacted) imports"),
    ("gap", lambda ls: ls.pop(2), 3,
     "seq 4 where 3 was expected (a gap, or a filtered export: only a whole log imports)"),
    ("frame ends early", setting(2, "batch.first_seq", 3), 3, "a frame ends early"),
    ("prev_digest missing", dropping(1, "prev_digest"), 2, "prev_digest is not hex"),
    ("prev_digest short", setting(3, "prev_digest", "00" * 31), 4,
     "prev_digest is not 32 bytes"),
    ("first prev_digest not zero", setting(0, "prev_digest", "11" * 32), 1,
     "a log starting at seq 1 starts from the zero digest"),
    ("prev_digest wrong", setting(1, "prev_digest", ZERO), 2,
     "prev_digest is not the digest of the frame before"),
    ("outside its frame", setting(2, "batch.first_seq", 1), 3,
     "an event outside the frame it names"),
    ("count disagrees", setting(2, "batch.count", 3), 3, DISAGREE),
    ("batch id disagrees", setting(2, "batch.batch_id", "b3"), 3, DISAGREE),
    ("at disagrees", setting(2, "at", 21.0), 3, DISAGREE),
    ("digest disagrees", setting(2, "digest", ZERO), 3, DISAGREE),
    ("ends inside a frame", lambda ls: ls.__delitem__(slice(2, None)), 2,
     "the file ends inside the frame at seq 2"),
]


@pytest.mark.parametrize(("case", "edit", "line", "reason"), CASES, ids=[c[0] for c in CASES])
def test_each_check_names_its_line_and_reason(tmp_path: Path, case: str,
                                              edit: Callable[[Lines], None], line: int,
                                              reason: str) -> None:
    lines = valid_export(tmp_path)
    check_import(io.BytesIO(text_of(lines)))  # the file before the edit imports
    edit(lines)
    e = refusal(text_of(lines))
    assert (e.line, e.reason) == (line, reason)
    assert str(e) == f"line {line}: {reason}; nothing was imported"


def test_a_frame_whose_digest_is_wrong_names_both_digests(tmp_path: Path) -> None:
    lines = valid_export(tmp_path)
    real = lines[0]["digest"]
    for x in lines[:1]:  # a one-event frame: its digest on its only line
        x["digest"] = ZERO
    e = refusal(text_of(lines))
    assert (e.line, e.reason) == (
        1, f"frame at seq 1 does not chain: its digest is {real}, the file says {ZERO}")


def test_text_that_is_not_an_object_or_not_json(tmp_path: Path) -> None:
    lines = valid_export(tmp_path)
    good = text_of(lines).splitlines(keepends=True)
    e = refusal(good[0] + b"[1, 2]\n")
    assert (e.line, e.reason) == (2, "not a JSON object")
    e = refusal(good[0] + b'{"seq": 2,\n')
    assert e.line == 2 and e.reason.startswith("not JSON (")
    e = refusal(good[0] + b"\xff\n")
    assert e.line == 2 and e.reason.startswith("not JSON (")
    e = refusal(b"")
    assert (e.line, e.reason) == (0, "the file holds no event")


def test_a_generation_files_anchors_are_checked(tmp_path: Path) -> None:
    fill(tmp_path / "a", n=4)
    with Ledger.open(tmp_path / "a" / ".ctxledger" / "log") as led:
        compact(led)
        lines = [json.loads(x) for x in led.export_lines()]
    assert lines[0]["kind"] == "ledger.compacted"
    check_import(io.BytesIO(text_of(lines)))
    lines[0]["anchors"] = lines[0]["anchors"][:-2] + ("00" if lines[0]["anchors"][-2:] != "00"
                                                      else "01")
    e = refusal(text_of(lines))
    assert (e.line, e.reason) == (1, "anchors do not match ledger.compacted")
    del lines[0]["anchors"]
    e = refusal(text_of(lines))
    assert (e.line, e.reason) == (1, "anchors is not hex")


def test_a_frame_over_the_payload_limit_is_refused_and_one_at_it_imports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit is on the sum of a frame's event rows (a 256 MiB frame is too big for a
    test: the limit is lowered to the rows of frame 2 exactly, then one byte below)."""
    import eventstore.export as export_mod

    lines = valid_export(tmp_path)
    rows2 = sum(len(bytes.fromhex(x["cbor"])) for x in lines[1:3])
    monkeypatch.setattr(export_mod, "MAX_PAYLOAD", rows2)
    check_import(io.BytesIO(text_of(lines)))
    monkeypatch.setattr(export_mod, "MAX_PAYLOAD", rows2 - 1)
    e = refusal(text_of(lines))
    assert (e.line, e.reason) == (3, "frame exceeds the payload limit")


def test_export_of_a_backends_batches(tmp_path: Path) -> None:
    """``export_log`` (what the memory and JetStream logs export through) gives the file
    log's lines: from a seq inside a frame, to a seq exactly, of one kind; compact JSON."""
    from eventstore.export import export_log

    times = iter([10.0, 20.0, 30.0])
    with Ledger.open(tmp_path / "src", clock=lambda: next(times)) as led:
        led.append([Event("a.b", "k", {"n": 1})])
        led.append([Event("a.b", None, {"n": 2}), Event("a.c", "q", {"n": 3})], batch_id="b2")
        led.append([Event("a.b", None, {"n": 4})])

        def prev_of(first: int) -> bytes | None:
            return led.digest_at(first - 1) if first > 1 else bytes(32)

        def ours(**kw: Any) -> list[str]:
            return list(export_log(iter(list(led.read_raw_batches())), prev_of, **kw))

        assert ours() == list(led.export_lines())
        assert [json.loads(x)["seq"] for x in ours(from_seq=3)] == [3, 4]  # mid-frame
        assert [json.loads(x)["seq"] for x in ours(to_seq=3)] == [1, 2, 3]  # the seq itself
        assert [json.loads(x)["seq"] for x in ours(from_seq=2, to_seq=2)] == [2]
        assert [json.loads(x)["seq"] for x in ours(kind="a.c")] == [3]
        for line in ours():
            assert line == json.dumps(json.loads(line), separators=(",", ":"))
        assert list(export_log(iter([]), prev_of)) == []
        with pytest.raises(LedgerError) as e:
            export_log(iter(list(led.read_raw_batches())), lambda first: None)
        assert str(e.value) == "the log changed while it was exported; run the export again"
