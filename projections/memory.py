"""Memory fields of packets as a fold: kinds, source tiers, dedupe keys, supersession.

A packet may say what kind of memory it is (``memory_kind``), where it came
from (``source_tier``: curated by an agent, or telemetry a tool emitted), that
it replaces earlier packets sharing its ``dedupe_key``, or that it is itself
obsolete (``superseded: true``). This view keeps those fields per cache_key
(only for packets that carry one: the rest need no row) and, per dedupe key,
its members with the time of their latest put.

Which member of a dedupe group is current is decided at read time, not here:
expiry is a read-time rule (a TTL passes without an event), so the newest
*live* member is current -- when it expires the next one is. Packets are
content addressed, so a key's fields never change; a re-put only moves its
time. docs/recall.md ("Memory and scoring") has the rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import cbor2

from eventstore import Event

from .cache import EVICTED, PUT, parse_evict, parse_put

NAME = "memory"
VERSION = 1

MEMORY_KINDS = (
    "brief", "handoff", "recommended_action", "evidence", "tool_trace", "focus_inference",
    "state_write", "other",
)
SOURCE_TIERS = ("curated", "telemetry")
TELEMETRY_KINDS = frozenset({"tool_trace", "focus_inference", "state_write"})
"""Kinds a tool emits rather than an agent writes: ``mode="auto"`` prefers telemetry
when every kind asked for (``kinds=``) is one of these."""
MAX_DEDUPE_KEY = 512
"""Longest ``dedupe_key`` (characters): a name, not a payload."""


def memory_field_error(packet: Mapping[str, Any]) -> str | None:
    """Why the packet's memory fields are unusable (None: absent or fine); put refuses them."""
    get = packet.get
    kind = get("memory_kind")
    if kind is not None and (type(kind) is not str or kind not in MEMORY_KINDS):
        return f"packet field 'memory_kind' must be one of {', '.join(MEMORY_KINDS)}"
    tier = get("source_tier")
    if tier is not None and (type(tier) is not str or tier not in SOURCE_TIERS):
        return f"packet field 'source_tier' must be one of {', '.join(SOURCE_TIERS)}"
    dk = get("dedupe_key")
    if dk is not None and (type(dk) is not str or not dk.strip() or len(dk) > MAX_DEDUPE_KEY):
        return (f"packet field 'dedupe_key' must be a non-empty string of at most "
                f"{MAX_DEDUPE_KEY} characters")
    sup = get("superseded")
    if sup is not None and type(sup) is not bool:
        return "packet field 'superseded' must be true or false"
    return None


@attrs.frozen
class MemoryInfo:
    """A packet's memory fields (None: the packet does not say)."""

    memory_kind: str | None = None
    source_tier: str | None = None
    dedupe_key: str | None = None
    self_superseded: bool = False


NO_INFO = MemoryInfo()


def parse_memory(packet: object) -> MemoryInfo | None:
    """The packet's memory fields, or None when it has none. Lenient: a value put
    refuses (a log from another writer) counts as absent, so a fold never fails."""
    if not isinstance(packet, dict):
        return None
    if not ("memory_kind" in packet or "source_tier" in packet or "dedupe_key" in packet
            or "superseded" in packet):
        return None
    kind = packet.get("memory_kind")
    tier = packet.get("source_tier")
    dk = packet.get("dedupe_key")
    info = MemoryInfo(
        kind if type(kind) is str and kind in MEMORY_KINDS else None,
        tier if type(tier) is str and tier in SOURCE_TIERS else None,
        dk if type(dk) is str and dk.strip() and len(dk) <= MAX_DEDUPE_KEY else None,
        packet.get("superseded") is True,
    )
    return None if info == NO_INFO else info


@attrs.define(slots=True)
class _Row:
    info: MemoryInfo
    created: float  # time of the latest put
    seq: int  # seq of the latest put


@attrs.frozen
class Supersession:
    """Why a live entry is superseded: ``by`` the newer member of its dedupe group
    (None when it marked itself ``superseded``)."""

    by: str | None


def summary_fields(info: MemoryInfo, sup: Supersession | None
                   ) -> tuple[str | None, str | None, bool, str | None]:
    """A listed entry's memory columns: kind, tier, superseded, superseded_by."""
    return (info.memory_kind, info.source_tier, sup is not None,
            None if sup is None else sup.by)


class MemoryState:
    """Fold state of the memory view; ``apply`` is idempotent below ``seq``."""

    def __init__(self) -> None:
        self.seq = 0
        self.rows: dict[str, _Row] = {}
        self.groups: dict[str, list[str]] = {}  # dedupe_key -> member cache_keys
        self.tiers: dict[str, int] = {}  # source_tier -> rows holding it
        self.multi = 0  # groups with two members or more
        self.self_marked = 0  # rows marked superseded by themselves

    # --- the fold -------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        if event.seq <= self.seq:
            return
        self.seq = event.seq
        if event.kind == PUT:
            parsed = parse_put(event)  # the cache's rule: no row for a put it refuses
            if parsed is None:
                return
            info = parse_memory(event.data.get("packet"))
            if info is None:
                return
            key = parsed[0].hex()
            row = self.rows.get(key)
            if row is not None:  # a re-put: same content, a new time
                row.created, row.seq = float(event.at), event.seq
                return
            self.rows[key] = _Row(info, float(event.at), event.seq)
            self._count(info, 1)
            if info.dedupe_key is not None:
                members = self.groups.setdefault(info.dedupe_key, [])
                members.append(key)
                if len(members) == 2:
                    self.multi += 1
        elif event.kind == EVICTED:
            ev = parse_evict(event)
            if ev is None:
                return
            key = ev[0].hex()
            row = self.rows.pop(key, None)
            if row is None:
                return
            self._count(row.info, -1)
            dk = row.info.dedupe_key
            if dk is not None:
                members = self.groups[dk]
                members.remove(key)
                if len(members) == 1:
                    self.multi -= 1
                elif not members:
                    del self.groups[dk]

    def _count(self, info: MemoryInfo, step: int) -> None:
        if info.source_tier is not None:
            self.tiers[info.source_tier] = self.tiers.get(info.source_tier, 0) + step
        if info.self_superseded:
            self.self_marked += step

    # --- queries --------------------------------------------------------------------

    def info(self, cache_key: str) -> MemoryInfo:
        row = self.rows.get(cache_key)
        return NO_INFO if row is None else row.info

    def has_tier(self, tier: str) -> bool:
        """Does any entry (live or expired) carry ``tier``? (False: no tier bonus can apply.)"""
        return self.tiers.get(tier, 0) > 0

    def may_supersede(self) -> bool:
        """Could any entry be superseded? (False: nothing to filter.)"""
        return self.multi > 0 or self.self_marked > 0

    def current(self, dedupe_key: str, live_after: float | None) -> str | None:
        """The group's newest live member: latest put time, then seq."""
        best: tuple[float, int] | None = None
        out = None
        for key in self.groups.get(dedupe_key, ()):
            row = self.rows[key]
            if live_after is not None and row.created <= live_after:
                continue
            rank = (row.created, row.seq)
            if best is None or rank > best:
                best, out = rank, key
        return out

    def superseded(self, cache_key: str, live_after: float | None,
                   memo: dict[str, str | None] | None = None) -> Supersession | None:
        """Why the live entry ``cache_key`` is superseded, or None when it is current.

        ``memo``: the current member of each group found so far in this query (same
        ``live_after``), so that judging many members walks their group once."""
        row = self.rows.get(cache_key)
        if row is None:
            return None
        dk = row.info.dedupe_key
        if dk is not None and len(self.groups[dk]) > 1:
            if memo is None:
                cur = self.current(dk, live_after)
            elif dk in memo:
                cur = memo[dk]
            else:
                cur = memo[dk] = self.current(dk, live_after)
            if cur is not None and cur != cache_key:
                return Supersession(cur)
        if row.info.self_superseded:
            return Supersession(None)
        return None

    def superseded_keys(self, live_after: float | None) -> dict[str, Supersession]:
        """Every live superseded entry (a walk of the groups and the self-marked rows)."""
        out: dict[str, Supersession] = {}
        if self.multi:
            for dk, members in self.groups.items():
                if len(members) < 2:
                    continue
                cur = self.current(dk, live_after)
                for key in members:
                    if key != cur and (live_after is None
                                       or self.rows[key].created > live_after):
                        out[key] = Supersession(cur)
        if self.self_marked:
            for key, row in self.rows.items():
                if row.info.self_superseded and key not in out and (
                        live_after is None or row.created > live_after):
                    out[key] = Supersession(None)
        return out

    # --- checkpoints ----------------------------------------------------------------

    def to_bytes(self) -> bytes:
        rows = [[k, r.info.memory_kind, r.info.source_tier, r.info.dedupe_key,
                 r.info.self_superseded, r.created, r.seq] for k, r in self.rows.items()]
        return cbor2.dumps({"seq": self.seq, "rows": rows})

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> MemoryState:
        """Rebuilds the groups and counters from the rows (in put order: as the fold had them)."""
        obj = cbor2.loads(bytes(data))
        st = cls()
        rows = sorted(obj["rows"], key=lambda r: r[6])
        for key, kind, tier, dk, sup, created, seq in rows:
            info = MemoryInfo(kind, tier, dk, bool(sup))
            st.rows[key] = _Row(info, float(created), int(seq))
            st._count(info, 1)
            if dk is not None:
                members = st.groups.setdefault(dk, [])
                members.append(key)
                if len(members) == 2:
                    st.multi += 1
        st.seq = int(obj["seq"])
        return st

    def snapshot(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "entries": len(self.rows),
            "dedupe_groups": len(self.groups),
            "self_superseded": self.self_marked,
        }
