"""The recall indexes as a fold: every live cache entry, indexed for recall.

It follows exactly the cache view's events (``cache.put`` adds or refreshes a
document, ``cache.evicted`` removes it), so recall can never return an entry
the cache does not hold. Checkpointed like every view, so a cold process
answers a query without reindexing.
"""

from __future__ import annotations

import struct
from typing import Any

import cbor2

from eventstore import Event

from .cache import EVICTED, PUT, parse_evict, parse_put
from .recall import RecallDoc, RecallIndex
from .recall.constants import CHECKPOINT_VERSION
from .runner import paused_gc

NAME = "recall"
VERSION = CHECKPOINT_VERSION
_LEN = struct.Struct("<I")


class RecallState:
    """Fold state of the recall view; ``apply`` is idempotent below ``seq``."""

    def __init__(self, index: RecallIndex | None = None) -> None:
        self.seq = 0
        self._index = index if index is not None else RecallIndex()
        # documents folded but not yet in the index: added in bulk when it is next
        # needed, so refolding many events is a bulk build, not one add per event
        self._pending: dict[str, RecallDoc] = {}
        self.skipped_unknown = 0
        self.skipped_bad = 0

    @property
    def index(self) -> RecallIndex:
        if self._pending:
            docs = list(self._pending.values())
            self._pending = {}
            with paused_gc():  # a bulk build: millions of acyclic temporaries
                self._index.add_many(docs)
        return self._index

    def settle(self) -> None:
        """Index the documents folded so far (a rebuild times this with the fold)."""
        self.index  # noqa: B018  (the property builds)

    def apply(self, event: Event) -> None:
        if event.seq <= self.seq:
            return
        self.seq = event.seq
        if event.kind == PUT:
            parsed = parse_put(event)
            packet = event.data.get("packet") if parsed is not None else None
            if parsed is None or not isinstance(packet, dict):
                self.skipped_bad += 1
                return
            key, _target, nbytes = parsed
            hexkey = key.hex()
            self._pending.pop(hexkey, None)  # keep insertion order = fold order
            self._pending[hexkey] = RecallDoc.from_packet(hexkey, packet, event.at, nbytes)
        elif event.kind == EVICTED:
            evicted = parse_evict(event)
            if evicted is None:
                self.skipped_bad += 1
            else:
                hexkey = evicted[0].hex()
                self._pending.pop(hexkey, None)
                self._index.remove(hexkey)
        else:
            self.skipped_unknown += 1

    def to_bytes(self) -> bytes:
        """u32 length, CBOR of the counters, then the index's own bytes, raw.

        Raw so that loading is zero-copy: the index's arrays are views of the
        checkpoint's bytes (read into memory, or mapped by the CLI's read commands).
        """
        meta = cbor2.dumps(
            {
                "seq": self.seq,
                "skipped_unknown": self.skipped_unknown,
                "skipped_bad": self.skipped_bad,
            }
        )
        head = _LEN.pack(len(meta)) + meta
        return head + bytes(-len(head) % 64) + self.index.to_bytes()  # index 64-byte aligned

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> RecallState:
        view = memoryview(data)
        (n,) = _LEN.unpack_from(view, 0)
        meta: dict[str, Any] = cbor2.loads(bytes(view[4 : 4 + n]))
        # the checkpoint's checksum already covers these bytes: skip the index's own
        start = 4 + n + (-(4 + n) % 64)
        st = cls(RecallIndex.from_bytes(view[start:], verify=False))
        st.seq = int(meta["seq"])
        st.skipped_unknown, st.skipped_bad = int(meta["skipped_unknown"]), int(meta["skipped_bad"])
        return st

    def snapshot(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "documents": len(self.index),
            "skipped_unknown": self.skipped_unknown,
            "skipped_bad": self.skipped_bad,
        }
