"""Copying a log between backends with its seqs, times, batch ids and digests.

``ctxledger log mirror`` is built on these two functions. To a JetStream
stream, batches are written one by one as they are in the source
(:meth:`JetStreamLog.append_raw`), so a mirror can be run again to copy what
the source gained since: the stream must then hold a prefix of the source,
which its head digest proves. To a file log, the source's export goes through
the checks ``log import`` makes and lands as one segment by one rename, into an
empty log only.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from .backend import LogBackend
from .errors import LedgerError
from .export import check_import
from .ledger import Ledger


@attrs.frozen
class Mirrored:
    """What a mirror copied, and where the destination now ends."""

    copied_events: int
    copied_batches: int
    already_there: int
    """Events the destination held before (a prefix of the source's)."""
    head_seq: int
    head_digest: bytes

    def to_json(self) -> dict[str, object]:
        return {"copied_events": self.copied_events, "copied_batches": self.copied_batches,
                "already_there": self.already_there, "head_seq": self.head_seq,
                "head_digest": self.head_digest.hex()}


def mirror_to_stream(source: LogBackend, dest: Any,
                     progress: Callable[[int], None] | None = None) -> Mirrored:
    """Copy what ``source`` has past ``dest``'s head (a JetStream log) into it."""
    base = getattr(source, "base", 1)
    if base > 1:
        raise LedgerError(f"this log was compacted (its seqs start at {base}); a JetStream "
                          "stream starts at seq 1: mirror before compacting, or export it")
    have = dest.head
    if have:
        mine = source.digest_at(have)
        if mine is None or mine != dest.head_digest:
            raise LedgerError(
                f"jetstream stream {dest.stream!r} holds {have} events that are not this "
                "log's first ones; mirror into an empty stream")
    batches = events = 0
    for b in source.read_raw_batches(have + 1):
        dest.append_raw(b)
        batches += 1
        events += len(b.rows)
        if progress is not None:
            progress(len(b.rows))
    head = dest.head
    if source.digest_at(head) != dest.head_digest:  # each frame was checked: a bug if not
        raise LedgerError("the mirrored stream does not end at the source's digest")
    return Mirrored(events, batches, have, head, dest.head_digest)


def mirror_to_dir(source: LogBackend, log_dir: Path,
                  progress: Callable[[int], None] | None = None) -> Mirrored:
    """Copy all of ``source`` into a new file log at ``log_dir`` (which holds no event)."""
    if source.head == 0:
        raise LedgerError("the log to mirror holds no event")
    with tempfile.TemporaryFile() as spool:
        for line in source.export_lines():
            spool.write(line.encode("utf-8") + b"\n")  # ("UTF-8" names it too: equivalent)
        spool.seek(0)
        imported = check_import(spool)
    with Ledger.open(log_dir) as led:
        written = led.import_log(imported, progress=progress)
    return Mirrored(written.events, written.frames, 0, written.head, written.digest)
