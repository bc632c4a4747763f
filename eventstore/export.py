"""The log as JSON Lines, and back: ``ctxledger log export`` / ``log import``.

One event a line (a JSON object, keys in this order)::

    {"seq": 7, "kind": "task.note", "key": "t1", "at": 1700000000.5,
     "data": {...},                      # the event's data as --json renders it (jsonout)
     "cbor": "<hex>",                    # the event's stored CBOR [kind, key, data], exact
     "batch": {"first_seq": 6, "count": 2, "batch_id": null},
     "digest": "<hex>",                  # the chain digest of the event's frame
     "prev_digest": "<hex>",             # first event of a frame only: the digest before it
     "anchors": "<hex>"}                 # a generation's ledger.compacted only (format.md §12)

``data`` is for people and tools; ``cbor`` is what import writes, so every
value round-trips exactly (bytes, floats, integers of any size, tags), and the
frames rebuilt from ``at``, ``batch_id`` and the rows have the same bytes and
so the same digests. Import checks everything (each line's JSON, its size,
that ``kind``/``key``/``data`` say what ``cbor`` holds, seq continuity, every
frame's digest) before it writes a byte, and then writes one segment that
becomes visible by one rename, into an empty log only.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import attrs
import blake3
import cbor2

from .errors import ImportRefusedError, LedgerError
from .frame import (
    GENESIS_DIGEST,
    MAX_PAYLOAD,
    encode_frame_parts,
    encode_raw_rows,
    payload_prefix,
)
from .generation import MARKERS
from .jsonout import dumps, to_jsonable
from .jsontext import loads_strict
from .records import RawBatch

#: The longest line import reads: an event's CBOR is at most ``MAX_PAYLOAD`` bytes,
#: written twice over in hex (``cbor`` and, for byte strings, ``data``), plus room.
MAX_LINE_BYTES = 5 * MAX_PAYLOAD


def export_log(
    batches: Iterator[RawBatch],
    prev_of: Callable[[int], bytes | None],
    *,
    from_seq: int = 1,
    to_seq: int | None = None,
    kind: str | None = None,
    anchors: bytes | None = None,
) -> Iterator[str]:
    """:func:`export_lines` of a backend's raw batches, ``prev_of(first_seq)`` giving the
    chain digest before the first one (None: the log changed under the export)."""
    first = next(batches, None)
    if first is None:
        return iter(())
    prev = prev_of(first.first_seq)
    if prev is None:
        raise LedgerError("the log changed while it was exported; run the export again")
    return export_lines(itertools.chain([first], batches), prev, from_seq=from_seq,
                        to_seq=to_seq, kind=kind, anchors=anchors)


def export_lines(
    batches: Iterable[RawBatch],
    prev_digest: bytes,
    *,
    from_seq: int = 1,
    to_seq: int | None = None,
    kind: str | None = None,
    anchors: bytes | None = None,
) -> Iterator[str]:
    """The JSONL lines of ``batches`` (whole frames, read from the frame whose chain
    starts at ``prev_digest``), limited to the seq range and kind asked for."""
    prev = prev_digest
    for b in batches:
        digest = frame_of(b, prev)[1]
        for i, row in enumerate(b.rows):
            seq = b.first_seq + i
            if seq < from_seq or (to_seq is not None and seq > to_seq):
                continue
            obj = cbor2.loads(row)
            if kind is not None and obj[0] != kind:
                continue
            line: dict[str, Any] = {
                "seq": seq, "kind": obj[0], "key": obj[1], "at": b.at,
                "data": to_jsonable(obj[2]), "cbor": row.hex(),
                "batch": {"first_seq": b.first_seq, "count": len(b.rows),
                          "batch_id": b.batch_id},
                "digest": digest.hex(),
            }
            if i == 0:
                line["prev_digest"] = prev.hex()
            if obj[0] in MARKERS and anchors is not None and i == 0:
                line["anchors"] = anchors.hex()
            yield dumps(line, compact=True)
        prev = digest


def frame_of(b: RawBatch, prev_digest: bytes) -> tuple[bytes, bytes]:
    """The frame bytes and chain digest of a batch (as a writer builds them)."""
    return encode_frame_parts(
        prev_digest, b.first_seq, len(b.rows),
        (payload_prefix(b.at, b.batch_id), encode_raw_rows(list(b.rows))),
    )


@attrs.frozen
class Imported:
    """What a checked import file holds: its frames, in order."""

    batches: tuple[RawBatch, ...]
    prev_digest: bytes  # before the first frame
    head_digest: bytes
    anchors: bytes | None  # the generation's anchors file, if it starts one


def read_lines(f: IO[bytes], limit: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    n = 0
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        n += 1
        if len(line) > limit:
            raise ImportRefusedError(n, f"line is longer than {limit} bytes")
        yield n, line


def _hex(n: int, obj: dict[str, Any], name: str, size: int | None = None) -> bytes:
    v = obj.get(name)
    try:
        if not isinstance(v, str):
            raise ValueError
        out = bytes.fromhex(v)
    except ValueError:
        raise ImportRefusedError(n, f"{name} is not hex") from None
    if size is not None and len(out) != size:
        raise ImportRefusedError(n, f"{name} is not {size} bytes")
    return out


def check_import(f: IO[bytes], limit: int = MAX_LINE_BYTES) -> Imported:
    """Parse and check a whole export file; :class:`ImportRefusedError` names the first
    problem. The file must hold a whole log: from seq 1, or from a generation's
    ``ledger.compacted`` with its anchors file; seqs gapless; every digest right."""
    batches: list[RawBatch] = []
    rows: list[bytes] = []
    cur: dict[str, Any] | None = None  # the frame being collected
    first_prev: bytes | None = None
    # prev and expect are set from the first line before any use (mutants of their
    # initial values are equivalent: .ci/mutants-equivalent)
    prev = b""
    anchors: bytes | None = None
    expect = 0
    n = 0

    def close_frame(n: int) -> None:
        nonlocal prev, cur, rows
        assert cur is not None
        b = RawBatch(cur["first_seq"], cur["at"], cur["batch_id"], tuple(rows))
        digest = frame_of(b, prev)[1]
        if digest != cur["digest"]:
            raise ImportRefusedError(n, f"frame at seq {b.first_seq} does not chain: its digest is "
                               f"{digest.hex()}, the file says {cur['digest'].hex()}")
        batches.append(b)
        prev, cur, rows = digest, None, []

    for n, raw in read_lines(f, limit):
        try:
            obj = loads_strict(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise ImportRefusedError(n, f"not JSON ({e})") from None
        if not isinstance(obj, dict):
            raise ImportRefusedError(n, "not a JSON object")
        seq, batch = obj.get("seq"), obj.get("batch")
        at: Any = obj.get("at")
        if type(seq) is not int or seq < 1:
            raise ImportRefusedError(n, "seq is not a positive integer")
        if type(at) not in (int, float) or isinstance(at, bool):
            raise ImportRefusedError(n, "at is not a number")
        if not (isinstance(batch, dict) and type(batch.get("first_seq")) is int
                and type(batch.get("count")) is int and batch["count"] >= 1
                and (batch.get("batch_id") is None or isinstance(batch.get("batch_id"), str))):
            raise ImportRefusedError(n, "batch is not {first_seq, count, batch_id}")
        row = _hex(n, obj, "cbor")
        digest = _hex(n, obj, "digest", 32)
        try:
            dec = cbor2.loads(row)
        except Exception:
            raise ImportRefusedError(n, "cbor does not decode") from None
        if not (type(dec) is list and len(dec) == 3 and isinstance(dec[0], str)
                and (dec[1] is None or isinstance(dec[1], str)) and isinstance(dec[2], dict)):
            raise ImportRefusedError(n, "cbor is not [kind, key, data]")
        if (obj.get("kind"), obj.get("key")) != (dec[0], dec[1]):
            raise ImportRefusedError(n, "kind or key differs from what cbor holds")
        if json.dumps(obj.get("data"), sort_keys=True) != json.dumps(
                to_jsonable(dec[2]), sort_keys=True):
            raise ImportRefusedError(n, "data differs from what cbor holds")
        if n == 1:
            expect = seq
            if seq != 1 and dec[0] not in MARKERS:
                raise ImportRefusedError(n, f"the file starts at seq {seq}: only a whole log (from "
                                   "seq 1, or from a compaction's ledger.compacted) imports")
        if n > 1 and dec[0] in MARKERS:
            raise ImportRefusedError(n, f"{dec[0]} is only ever a generation's first event")
        if seq != expect:
            raise ImportRefusedError(
                n, f"seq {seq} where {expect} was expected (a gap, or a filtered export: "
                "only a whole log imports)")
        if seq == batch["first_seq"]:
            if cur is not None:
                raise ImportRefusedError(n, "a frame ends early")
            p = _hex(n, obj, "prev_digest", 32)
            if first_prev is None:
                first_prev = p
                if seq == 1 and p != GENESIS_DIGEST:
                    raise ImportRefusedError(
                        n, "a log starting at seq 1 starts from the zero digest")
                prev = p
            elif p != prev:
                raise ImportRefusedError(n, "prev_digest is not the digest of the frame before")
            cur = {"first_seq": seq, "count": batch["count"], "batch_id": batch["batch_id"],
                   "at": float(at), "digest": digest}
            if dec[0] in MARKERS and n == 1:
                anchors = _hex(n, obj, "anchors")
                if blake3.blake3(anchors).hexdigest() != dec[2].get("anchors_blake3"):
                    raise ImportRefusedError(n, f"anchors do not match {dec[0]}")
        elif cur is None or batch["first_seq"] != cur["first_seq"]:
            raise ImportRefusedError(n, "an event outside the frame it names")
        if (batch["count"], batch["batch_id"], float(at), digest) != (
                cur["count"], cur["batch_id"], cur["at"], cur["digest"]):
            raise ImportRefusedError(n, "events of one frame disagree on its fields")
        rows.append(row)
        if sum(map(len, rows)) > MAX_PAYLOAD:
            raise ImportRefusedError(n, "frame exceeds the payload limit")
        expect = seq + 1
        if len(rows) == cur["count"]:
            close_frame(n)
    if cur is not None:
        raise ImportRefusedError(n, f"the file ends inside the frame at seq {cur['first_seq']}")
    # (both or neither: the first frame's line sets first_prev and a frame left open was
    # refused above, so `and` for `or` is an equivalent mutant)
    if not batches or first_prev is None:
        raise ImportRefusedError(n, "the file holds no event")
    return Imported(tuple(batches), first_prev, prev, anchors)
