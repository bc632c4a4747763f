"""Value types of the log: an event, and the receipt of an append."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import cbor2

from .errors import InvalidEventError
from .frame import Encoded, encode_rows

KIND_RE = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
MAX_KIND_LEN = 200
MAX_KEY_LEN = 1024


def _empty() -> dict[str, Any]:
    return {}


@attrs.frozen(eq=True, hash=False, repr=True)
class Event:
    """One fact in the log.

    Callers build ``Event(kind, key, data)``; the log assigns ``seq`` (gapless,
    from 1) and ``at`` (unix seconds) when the batch is appended.
    """

    kind: str
    key: str | None = None
    data: Mapping[str, Any] = attrs.field(factory=_empty)
    seq: int = attrs.field(default=0, kw_only=True)
    at: float = attrs.field(default=0.0, kw_only=True)


# Readers build many Events: object.__new__ and the five slot setters build exactly
# what Event(kind, key, data, seq=seq, at=at) would (a frozen slotted attrs class with
# no validators, converters or cached hash), without the frozen __init__'s
# object.__setattr__ per field. tests/test_ledger_properties.py holds the two equal.
EVENT_BUILDERS = (object.__new__, *(
    Event.__dict__[name].__set__ for name in ("kind", "key", "data", "seq", "at")
))


def build_event(kind: str, key: str | None, data: Any, seq: int, at: float) -> Event:
    """``Event(kind, key, data, seq=seq, at=at)`` through :data:`EVENT_BUILDERS`."""
    new, set_kind, set_key, set_data, set_seq, set_at = EVENT_BUILDERS
    ev: Event = new(Event)
    set_kind(ev, kind)
    set_key(ev, key)
    set_data(ev, data)
    set_seq(ev, seq)
    set_at(ev, at)
    return ev


@attrs.frozen
class Receipt:
    """What an append committed: the batch's seqs, its time and its id."""

    first_seq: int
    last_seq: int
    at: float
    batch_id: str | None = None
    duplicate: bool = False  # True when a retried batch_id was already committed


#: Deepest nesting of maps/arrays an event's data may have (the data mapping is level 1).
#: cbor2 refuses to decode a payload nested deeper than 400 levels; a batch must never be
#: written that its readers cannot decode, so append refuses data deeper than this.
MAX_DATA_DEPTH = 200

_SCALARS = frozenset({str, int, float, bool, type(None), bytes})
_KINDS_OK: set[str] = set()  # kinds that passed KIND_RE (a cache: kinds repeat)
RESERVED_KINDS = frozenset({"ledger.compacted", "ledger.salvaged"})
"""Written only by compaction and salvage, as a generation's first event (format.md §12):
one appended mid-log would read as a cut that is not there."""
def _too_deep() -> InvalidEventError:
    return InvalidEventError(
        f"event data nests deeper than {MAX_DATA_DEPTH} levels of maps and arrays"
    )


def _walk(obj: Any, depth: int) -> bool:
    """Check a dict or list nests at most MAX_DATA_DEPTH levels; True if it holds
    anything other than dicts, lists and plain scalars (see :func:`check_batch`)."""
    if depth > MAX_DATA_DEPTH:
        raise _too_deep()
    # (equivalent mutants: None for False, as false; type(None) for the first type(k),
    # as str is among the scalars)
    other = False
    if type(obj) is dict:
        for k in obj:
            if type(k) is not str and type(k) not in _SCALARS:
                _walk_other(k, depth + 1)
                other = True
        values = obj.values()
    else:
        values = obj
    for v in values:
        t = type(v)
        if t is str or t in _SCALARS:
            continue
        if t is dict or t is list:
            other = _walk(v, depth + 1) or other
        elif t is Encoded:
            if depth + v.depth > MAX_DATA_DEPTH:
                raise _too_deep()
        else:
            _walk_other(v, depth + 1)
            other = True
    return other


def _walk_other(obj: Any, depth: int) -> None:
    """Depth check of any other value: mappings, sequences, sets and tags are levels."""
    if isinstance(obj, (str, bytes, bytearray, memoryview)):
        return
    if depth > MAX_DATA_DEPTH:
        if isinstance(obj, (Mapping, list, tuple, set, frozenset, cbor2.CBORTag)):
            raise _too_deep()
        return
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            _walk_other(k, depth + 1)
            _walk_other(v, depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for v in obj:
            _walk_other(v, depth + 1)
    elif isinstance(obj, cbor2.CBORTag):
        _walk_other(obj.value, depth + 1)


def check_depth(value: Any, level: int) -> None:
    """Raise :class:`InvalidEventError` if ``value``, standing at ``level`` of an
    event's data, nests deeper than :data:`MAX_DATA_DEPTH` (without recursing past it)."""
    _walk_other(value, level)


def _check(event: object) -> bool:
    """Validate one event: its kind, its key, that data is a mapping nesting at most
    :data:`MAX_DATA_DEPTH` levels (whether data encodes, and decodes back, is
    :func:`check_batch`'s part). True if its data is not plain."""
    # (type(None) here, an equivalent mutant: isinstance decides alone, the type test is
    # a fast path; and below, mutants that skip or spoil the cache of kinds only have a
    # kind validated again)
    if type(event) is not Event and not isinstance(event, Event):
        raise InvalidEventError(f"expected an Event, got {type(event).__name__}")
    kind = event.kind
    if type(kind) is not str or kind not in _KINDS_OK:
        if not isinstance(kind, str) or not kind:
            raise InvalidEventError("event kind must be a non-empty string")
        if len(kind) > MAX_KIND_LEN:
            raise InvalidEventError(
                f"event kind is {len(kind)} characters long; at most {MAX_KIND_LEN}"
            )
        if not KIND_RE.fullmatch(kind):
            raise InvalidEventError(
                f"invalid event kind {kind!r}: use dotted words of letters, digits, '_' or '-'"
            )
        if kind in RESERVED_KINDS:
            raise InvalidEventError(
                f"event kind {kind!r} is reserved: only compaction and salvage write it"
            )
        if type(kind) is str:
            if len(_KINDS_OK) >= 4096:
                _KINDS_OK.clear()
            _KINDS_OK.add(kind)
    key = event.key
    if key is not None and (not isinstance(key, str) or len(key) > MAX_KEY_LEN):
        raise InvalidEventError("event key must be a string of at most 1024 characters, or null")
    data = event.data
    if type(data) is dict:
        return _walk(data, 1)
    if not isinstance(data, Mapping):
        raise InvalidEventError(
            f"event data must be a mapping (a JSON object), got {type(data).__name__}"
        )
    _walk_other(data, 1)
    return True


def check_batch(events: Iterable[object]) -> tuple[list[list[Any]], bool]:
    """Validate a batch; return its ``[kind, key, data]`` rows and whether a trial
    decode is needed.

    Data made only of dicts, lists, str, int, float, bool, None and bytes is
    fully judged by the depth walk. Anything else (tuples, sets, tags, other
    mappings, dates, ...) may encode into CBOR that cbor2 refuses to decode
    (a tag with the wrong content, sets counting two levels), so the writer
    decodes such a batch once before writing it.
    """
    rows: list[list[Any]] = []
    other = False
    for e in events:
        if _check(e):
            other = True
        rows.append([e.kind, e.key, e.data])  # type: ignore[attr-defined]
    return rows, other


def encode_batch(events: Iterable[object], batch_id: str | None) -> tuple[bytes, int]:
    """Validate a batch and its id; return its rows as :func:`~.frame.encode_rows`
    gives them, and how many there are.

    Everything a writer must refuse is refused here, as
    :class:`InvalidEventError`, before any byte is written.
    """
    rows, needs_trial_decode = check_batch(events)
    if not rows:
        raise InvalidEventError("a batch needs at least one event")
    if batch_id is not None and (
        not isinstance(batch_id, str) or not batch_id or len(batch_id) > 200
    ):
        raise InvalidEventError("batch_id must be a non-empty string of at most 200 characters")
    try:
        encoded = encode_rows(rows)
    except Exception as e:
        raise InvalidEventError(f"event data cannot be encoded as CBOR: {e}") from None
    if needs_trial_decode:
        try:
            cbor2.loads(b"\x82" + encoded)  # [offsets, events]
        except Exception as e:
            raise InvalidEventError(f"event data would not decode from CBOR: {e}") from None
    return encoded, len(rows)
