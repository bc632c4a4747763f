"""Anchors: a ``(seq, chain digest)`` of a log, recorded somewhere the log's writer cannot reach.

The chain is unkeyed (format.md §4): ``verify`` alone proves a log consistent
with itself, which anyone able to rewrite the files can arrange by rewriting
the whole chain. An anchor taken earlier (``ctxledger log head``) and kept
elsewhere pins the history: if the log still has that digest at that seq,
every batch up to it is the one that was there when the anchor was taken.
"""

from __future__ import annotations

import attrs

from .backend import LogBackend
from .errors import LedgerError

_HEX = frozenset("0123456789abcdefABCDEF")


@attrs.frozen
class Anchor:
    seq: int
    digest: bytes

    @classmethod
    def parse(cls, text: str) -> Anchor:
        """``SEQ:DIGEST``: a seq (decimal digits) and 64 hex digits; ``ValueError`` otherwise."""
        seq, sep, hexd = text.strip().partition(":")
        if not sep or not seq.isascii() or not seq.isdigit():
            raise ValueError(f"{text!r} is not an anchor: expected SEQ:DIGEST, e.g. 42:9f3a…")
        if len(hexd) != 64 or not _HEX.issuperset(hexd):
            raise ValueError(f"{text!r} is not an anchor: DIGEST must be 64 hex digits")
        if int(seq) == 0:  # every log starts from the same digest: 0 pins nothing
            raise ValueError("seq 0 anchors nothing (every log has it): take an anchor "
                             "with `ctxledger log head` after the first append")
        return cls(int(seq), bytes.fromhex(hexd))

    def __str__(self) -> str:
        return f"{self.seq}:{self.digest.hex()}"

    def to_json(self) -> dict[str, object]:
        return {"seq": self.seq, "digest": self.digest.hex()}


def head_anchor(log: LogBackend) -> Anchor:
    """The log's head and its chain digest: always a batch end, so always an anchor."""
    seq = log.head
    digest = log.digest_at(seq)  # not head_digest: a writer may append in between
    if digest is None:  # the log was cut back below the head we just read
        raise LedgerError(f"the log changed under us at seq {seq}; run the command again")
    return Anchor(seq, digest)


def check_anchor(log: LogBackend, anchor: Anchor) -> str | None:
    """None if the log's chain digest at ``anchor.seq`` is ``anchor.digest``; else why not.

    Says what the log has instead, so a user can tell a log cut back from a
    rewritten one and from an anchor that names a seq inside a batch. It checks
    the one digest; that the chain up to it is sound is ``verify``'s part.
    """
    head = log.head
    base: int = getattr(log, "base", 1)
    if 1 < base and anchor.seq < base:  # taken before a compaction: its anchors file decides
        lookup = getattr(log, "anchor_digest", None)
        got = lookup(anchor.seq) if lookup is not None else None
        if got is None:
            return (f"seq {anchor.seq} lies before this log's generation start {base} and "
                    "no batch of the compacted generations ended there")
        if got != anchor.digest:
            return (f"the chain digest at seq {anchor.seq} was {got.hex()} when the log was "
                    f"compacted, not the anchor's {anchor.digest.hex()}")
        return None
    if anchor.seq > head:
        return (f"seq {anchor.seq} is past the log's head {head}: this log is shorter than "
                "the one anchored (cut back, or another log)")
    got = log.digest_at(anchor.seq)
    if got is None:
        # the batch holding the seq (reading on past it, to_seq None or left out, gives
        # the same first batch: equivalent mutants); none if the log was cut back since
        batch = next(iter(log.read_batches(anchor.seq, anchor.seq)), None)
        end = f", e.g. {batch.last_seq}" if batch is not None else ""
        return f"seq {anchor.seq} is inside a batch; anchors are batch ends{end}"
    if got != anchor.digest:
        return (f"the chain digest at seq {anchor.seq} is {got.hex()}, not the anchor's "
                f"{anchor.digest.hex()}: the log up to seq {anchor.seq} is not the one anchored")
    return None
