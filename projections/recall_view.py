"""The recall indexes as a fold: every live cache entry, indexed for recall.

It follows exactly the cache view's events (``cache.put`` adds or refreshes a
document, ``cache.evicted`` removes it), so recall can never return an entry
the cache does not hold. Checkpointed like every view, so a cold process
answers a query without reindexing.
"""

from __future__ import annotations

from typing import Any

import cbor2

from eventstore import Event

from .cache import EVICTED, PUT, _key_bytes
from .recall import RecallDoc, RecallIndex

NAME = "recall"
VERSION = 1


class RecallState:
    """Fold state of the recall view; ``apply`` is idempotent below ``seq``."""

    def __init__(self, index: RecallIndex | None = None) -> None:
        self.seq = 0
        self.index = index if index is not None else RecallIndex()
        self.skipped_unknown = 0
        self.skipped_bad = 0

    def apply(self, event: Event) -> None:
        if event.seq <= self.seq:
            return
        self.seq = event.seq
        if event.kind == PUT:
            data = event.data
            packet = data.get("packet") if isinstance(data, dict) else None
            nbytes = data.get("bytes", 0) if isinstance(data, dict) else 0
            if (_key_bytes(event.key) is None or not isinstance(packet, dict)
                    or not isinstance(packet.get("target"), str) or not isinstance(nbytes, int)):
                self.skipped_bad += 1
                return
            assert event.key is not None
            self.index.add(RecallDoc.from_packet(event.key, packet, event.at, nbytes))
        elif event.kind == EVICTED:
            if isinstance(event.key, str):
                self.index.remove(event.key)
        else:
            self.skipped_unknown += 1

    def to_bytes(self) -> bytes:
        return cbor2.dumps({"seq": self.seq, "skipped_unknown": self.skipped_unknown,
                            "skipped_bad": self.skipped_bad, "index": self.index.to_bytes()})

    @classmethod
    def from_bytes(cls, data: bytes) -> RecallState:
        doc: dict[str, Any] = cbor2.loads(data)
        # the checkpoint's MAC already covers these bytes: skip the index's own checksum
        st = cls(RecallIndex.from_bytes(doc["index"], verify=False))
        st.seq = int(doc["seq"])
        st.skipped_unknown, st.skipped_bad = int(doc["skipped_unknown"]), int(doc["skipped_bad"])
        return st

    def snapshot(self) -> dict[str, Any]:
        return {"seq": self.seq, "documents": len(self.index),
                "skipped_unknown": self.skipped_unknown, "skipped_bad": self.skipped_bad}
