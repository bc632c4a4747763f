"""Recall documents and hits (plain values, no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from ..calibration import Profile
    from ..freshness import Freshness

_join = "".join


def _str_tuple(value: Any) -> tuple[str, ...]:
    """A packet list field as a tuple of strings (a lone string counts as one)."""
    if type(value) is list:  # the usual case
        t = tuple(value)
        for v in t:
            if type(v) is not str:
                return tuple(v for v in t if isinstance(v, str))
        return t
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)):
        return tuple(v for v in value if isinstance(v, str))
    return ()


def payload_strings(payload: Any) -> Iterator[str]:
    """Every string value inside ``payload``, depth first, in document order, lazily.

    Mapping keys are structure, not text: only values are collected. Lazy in
    every direction (a stack of iterators, no recursion limit), so a reader that
    stops early (a snippet) pays for what it read, not for the payload; the
    plain twin of :func:`_collect`, the bulk walk indexing uses (a test holds
    them equal).
    """
    stack: list[Iterator[Any]] = [iter((payload,))]
    while stack:
        for x in stack[-1]:
            if isinstance(x, str):
                yield x
            elif isinstance(x, dict):
                stack.append(iter(x.values()))
                break
            elif isinstance(x, (list, tuple)):
                stack.append(iter(x))
                break
        else:
            stack.pop()


def indexed_texts(summary: str, lists: Iterable[Iterable[str]],
                  payload: Iterable[str]) -> Iterator[str]:
    """An entry's indexed text fields in order: summary, paths, symbols, tests, payload.

    The one definition of that order: :meth:`RecallDoc.texts` (a doc) and
    :func:`packet_texts` (a logged packet, lazily) both read it.
    """
    yield summary
    for values in lists:
        yield from values
    yield from payload


def _packet_strs(value: Any) -> Iterator[str]:
    """A packet list field's strings, lazily (as :func:`_str_tuple` keeps them)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, str):
                yield v


def packet_texts(packet: Mapping[str, Any]) -> Iterator[str]:
    """``RecallDoc.from_packet(..., packet, ...).texts()``, lazily (a test holds them equal).

    What a snippet reads from a logged body: it stops once it has read enough,
    so a huge packet costs what a small one does.
    """
    summary = packet.get("summary")
    return indexed_texts(summary if isinstance(summary, str) else "",
                         (_packet_strs(packet.get(name)) for name in ("paths", "symbols", "tests")),
                         payload_strings(packet.get("payload")))


def _collect(item: Any, out: list[str]) -> None:
    """Append the strings of ``item`` to ``out`` (depth first; no recursion limit)."""
    start = len(out)
    if type(item) is dict:  # the usual payload: a flat mapping, scanned directly
        for v in item.values():
            if type(v) is str:
                out.append(v)
            elif isinstance(v, (dict, list, tuple, str)):
                break  # nested: start over below
        else:
            return
        del out[start:]
    stack: list[Any] = [item]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            out.append(x)
        elif isinstance(x, dict):
            stack.extend(reversed(list(x.values())))
        elif isinstance(x, (list, tuple)):
            stack.extend(reversed(x))


@attrs.frozen
class RecallDoc:
    """What the recall index needs of one cache entry."""

    cache_key: str
    target: str
    created_at: float
    summary: str = ""
    paths: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    task_ids: tuple[str, ...] = ()
    packet_types: tuple[str, ...] = ()
    payload_text: tuple[str, ...] = ()
    est_bytes: int = 0

    @classmethod
    def from_packet(
        cls, cache_key: str, packet: dict[str, Any], created_at: float, est_bytes: int
    ) -> RecallDoc:
        """Build from a packet (docs/recall.md: the indexed fields); payload strings collected
        recursively."""
        get = packet.get
        summary = get("summary")
        target = get("target")
        pa, sy, te, ta, pt = (get("paths"), get("symbols"), get("tests"), get("task_ids"),
                              get("packet_types"))
        # the usual packet: five lists of strings (one join checks every item is a str)
        if type(pa) is list and type(sy) is list and type(te) is list and type(ta) is list \
                and type(pt) is list:
            try:
                _join(pa + sy + te + ta + pt)
                pa, sy, te, ta, pt = tuple(pa), tuple(sy), tuple(te), tuple(ta), tuple(pt)
            except TypeError:
                pa, sy, te, ta, pt = (_str_tuple(pa), _str_tuple(sy), _str_tuple(te),
                                      _str_tuple(ta), _str_tuple(pt))
        else:
            pa, sy, te, ta, pt = (_str_tuple(pa), _str_tuple(sy), _str_tuple(te),
                                  _str_tuple(ta), _str_tuple(pt))
        payload = get("payload")
        if type(payload) is dict:  # the usual payload: a flat mapping (as in _collect)
            texts: Any = []
            app = texts.append
            for v in payload.values():
                if type(v) is str:
                    app(v)
                elif isinstance(v, (dict, list, tuple, str)):
                    texts = _payload_tuple(payload)  # nested: the general walk
                    break
            texts = tuple(texts)
        else:
            texts = _payload_tuple(payload)
        target = target if type(target) is str else (
            target if isinstance(target, str) else "")
        summary = summary if type(summary) is str else (
            summary if isinstance(summary, str) else "")
        if cls is RecallDoc:  # what the attrs __init__ does, with the slots' own setters
            d = _new(cls)
            _s_key(d, cache_key)
            _s_target(d, target)
            _s_created(d, float(created_at))
            _s_summary(d, summary)
            _s_paths(d, pa)
            _s_symbols(d, sy)
            _s_tests(d, te)
            _s_tasks(d, ta)
            _s_ptypes(d, pt)
            _s_payload(d, texts)
            _s_est(d, int(est_bytes))
            return d
        return cls(cache_key, target, float(created_at), summary, pa, sy, te, ta, pt, texts,
                   int(est_bytes))

    def texts(self) -> list[str]:
        """The indexed text fields, in order (:func:`indexed_texts`)."""
        return list(indexed_texts(self.summary, (self.paths, self.symbols, self.tests),
                                  self.payload_text))


# the slot setters of RecallDoc's fields (a frozen attrs class: its __init__ sets each
# field through object.__setattr__; these are the same stores without the lookups)
_new = object.__new__
(_s_key, _s_target, _s_created, _s_summary, _s_paths, _s_symbols, _s_tests, _s_tasks,
 _s_ptypes, _s_payload, _s_est) = (vars(RecallDoc)[a.name].__set__
                                   for a in attrs.fields(RecallDoc))

def _payload_tuple(payload: Any) -> tuple[str, ...]:
    if payload is None:
        return ()
    out: list[str] = []
    _collect(payload, out)
    return tuple(out)


def est_tokens(est_bytes: int) -> int:
    """Token estimate of an entry, estimator ``chars-v1``: ceil(bytes / 4) (the usual
    ~4 bytes per token), bytes being those of the packet's canonical encoding."""
    return -(-max(0, est_bytes) // 4)


ESTIMATOR = "chars-v1"


def budget_estimate(est_bytes: int, profile: Profile | None = None) -> dict[str, Any]:
    """A hit's ``budget_estimate``: chars-v1 tokens, scaled up by the calibration
    ``profile``'s capacity multiplier when it has a multiplier (docs/calibration.md)."""
    calibrated = profile is not None and profile.exact is not None
    base = est_tokens(est_bytes)
    return {
        "est_tokens": profile.tokens(base) if profile is not None and calibrated else base,
        "est_bytes": est_bytes,
        "estimator": ESTIMATOR,
        "multiplier": profile.capacity_multiplier if profile is not None and calibrated else 1.0,
        "calibrated": calibrated,
    }


@attrs.frozen
class RecallHit:
    """One ranked recall answer."""

    cache_key: str
    target: str
    score: float
    summary: str
    snippet: str
    matched_tokens: tuple[str, ...]
    matched_paths: tuple[str, ...]
    matched_symbols: tuple[str, ...]
    match_reasons: tuple[str, ...]
    packet_types: tuple[str, ...]
    task_ids: tuple[str, ...]
    budget_estimate: dict[str, Any]
    created_at_unix: float
    age_secs: float
    freshness: Freshness | None = None
    """Whether the packet's files are as they were when it was put (None: the store
    has no project root on disk to check them against)."""
    memory_kind: str | None = None
    """The packet's ``memory_kind`` (None: it names none); docs/recall.md, "Memory and scoring"."""
    source_tier: str | None = None
    """``curated`` or ``telemetry`` (None: the packet names no tier)."""
    superseded_by: str | None = None
    """With ``include_superseded``: the newer cache_key of the dedupe group that replaced
    this one (None: current, or it marked itself ``superseded``)."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready mapping (lists, not tuples)."""
        doc = {
            "cache_key": self.cache_key,
            "target": self.target,
            "score": self.score,
            "summary": self.summary,
            "snippet": self.snippet,
            "matched_tokens": list(self.matched_tokens),
            "matched_paths": list(self.matched_paths),
            "matched_symbols": list(self.matched_symbols),
            "match_reasons": list(self.match_reasons),
            "packet_types": list(self.packet_types),
            "task_ids": list(self.task_ids),
            "budget_estimate": dict(self.budget_estimate),
            "created_at_unix": self.created_at_unix,
            "age_secs": self.age_secs,
            "memory_kind": self.memory_kind,
            "source_tier": self.source_tier,
            "superseded_by": self.superseded_by,
        }
        if self.freshness is not None:
            doc["freshness"] = self.freshness.to_json()
        return doc


def dedupe(items: Iterable[str]) -> list[str]:
    """Items in first-seen order without repeats."""
    return list(dict.fromkeys(items))
