"""Token calibration: how far our token estimate runs from what a provider bills.

Every project's runs teach the same lesson (a model bills what it bills,
whichever repository the prompt came from), so samples are shared: each
``calibration.sample`` event goes to the **agent log** (``<agent home>/log/``)
whatever the project's storage scope, and this view's checkpoints live in
``<agent home>/checkpoints/``. The math is pure (:func:`profile_of`) and
exact (rationals, never floats, until a figure is shown); docs/calibration.md
states it in full.

An event is keyed by nothing (``key`` null): its profile is its data's
``(provider, model, estimator)``, and a ``"provider/model"`` key would be
ambiguous, model names hold slashes.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import attrs
import cbor2

from eventstore import CorruptLogError, Event, Ledger, LedgerError, LedgerIOError, private

from .checkpoints import CheckpointDir
from .config import MAX_WINDOW, label_error
from .runner import Projection, Runner
from .scope import agent_checkpoints_dir, agent_log_dir

NAME = "calibration"
VERSION = 1
SAMPLE = "calibration.sample"
DEFAULT_ESTIMATOR = "chars-v1"
"""ceil(bytes of the packet's canonical encoding / 4): recall's ``est_tokens``."""
DEFAULT_WINDOW = 20
MAX_SAMPLES = MAX_WINDOW
"""Samples kept per profile (the newest by seq); older ones fall out of the view."""
MIN_ACCEPTED = 3
"""No multiplier until this many samples of the window pass the outlier filter."""
MAD_SCALE = Fraction("1.4826")
"""Makes the MAD estimate the standard deviation of normally spread ratios."""
CUTOFF = 3
"""A sample is an outlier when ``|r - median| > CUTOFF * MAD_SCALE * MAD``."""
MAX_INT = 2**63 - 1

NAMES = ("provider", "model", "estimator")
COUNTS = ("estimated", "actual")  # tokens: > 0
USAGE = ("input", "cache_read", "cache_write")  # optional billing detail: >= 0
Key = tuple[str, str, str]


# --- the event ------------------------------------------------------------------------------


def _int_error(value: object, low: int) -> str | None:
    if type(value) is not int:  # (bool is no int here: True is not a token count)
        return "must be an integer"
    if value < low:
        return "must be positive" if low else "must not be negative"
    if value > MAX_INT:
        return f"must be at most {MAX_INT}"
    return None


def data_error(data: object) -> str | None:
    """Why ``data`` is no well-formed sample (None: it is). Keys not named here are ignored."""
    if not isinstance(data, Mapping):
        return "data is not a map"
    for name in NAMES:
        why = label_error(data.get(name))
        if why is not None:
            return f"{name} {why}"
    for name in COUNTS:
        why = _int_error(data.get(name), 1)
        if why is not None:
            return f"{name} {why}"
    for name in USAGE:
        value = data.get(name)
        why = None if value is None else _int_error(value, 0)
        if why is not None:
            return f"{name} {why}"
    return None


def sample_data(
    provider: str,
    model: str,
    estimated: int,
    actual: int,
    *,
    estimator: str = DEFAULT_ESTIMATOR,
    input: int | None = None,
    cache_read: int | None = None,
    cache_write: int | None = None,
) -> dict[str, Any]:
    """The data of one ``calibration.sample`` event; ``ValueError`` naming the bad field."""
    data: dict[str, Any] = {"provider": provider, "model": model, "estimator": estimator,
                            "estimated": estimated, "actual": actual}
    for name, value in (("input", input), ("cache_read", cache_read),
                        ("cache_write", cache_write)):
        if value is not None:
            data[name] = value
    why = data_error(data)
    if why is not None:
        raise ValueError(why)
    return data


def check_profile(provider: str, model: str, estimator: str) -> Key:
    """``(provider, model, estimator)``, each checked as a writer would; ``ValueError``."""
    for name, value in zip(NAMES, (provider, model, estimator), strict=True):
        why = label_error(value)
        if why is not None:
            raise ValueError(f"{name} {why}")
    return provider, model, estimator


# --- the fold -------------------------------------------------------------------------------


@attrs.frozen
class Sample:
    """One kept sample: where it sits in the agent log and what it measured."""

    seq: int
    at: float
    estimated: int
    actual: int
    input: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None

    @property
    def ratio(self) -> Fraction:
        """actual / estimated, exactly."""
        return Fraction(self.actual, self.estimated)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


_SAMPLE_FIELDS = [f.name for f in attrs.fields(Sample)]


class CalibrationState:
    """Fold state: per profile, its newest :data:`MAX_SAMPLES` samples (oldest first).

    ``apply`` is a no-op at or below ``seq``; an event that is no well-formed
    sample counts in ``skipped_bad`` and changes nothing else.
    """

    def __init__(self) -> None:
        self.seq = 0
        self.samples: dict[Key, deque[Sample]] = {}
        self.skipped_bad = 0

    def apply(self, event: Event) -> None:
        if event.seq <= self.seq:
            return
        self.seq = event.seq
        if event.kind != SAMPLE:
            return  # (the agent log also holds projects' events in agent scope)
        d = event.data
        if data_error(d) is not None:
            self.skipped_bad += 1
            return
        key = (d["provider"], d["model"], d["estimator"])
        kept = self.samples.get(key)
        if kept is None:
            kept = self.samples[key] = deque(maxlen=MAX_SAMPLES)
        kept.append(Sample(event.seq, event.at, d["estimated"], d["actual"], d.get("input"),
                           d.get("cache_read"), d.get("cache_write")))

    def to_bytes(self) -> bytes:
        return cbor2.dumps({
            "seq": self.seq,
            "skipped_bad": self.skipped_bad,
            "fields": _SAMPLE_FIELDS,
            "profiles": [[*key, [list(attrs.astuple(s)) for s in kept]]
                         for key, kept in self.samples.items()],
        })

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> CalibrationState:
        obj = cbor2.loads(bytes(data))
        if obj.get("fields") != _SAMPLE_FIELDS:
            raise ValueError("calibration checkpoint has another sample layout")
        st = cls()
        st.seq = int(obj["seq"])
        st.skipped_bad = int(obj["skipped_bad"])
        for provider, model, estimator, rows in obj["profiles"]:
            st.samples[(provider, model, estimator)] = deque(
                (Sample(*row) for row in rows), maxlen=MAX_SAMPLES)
        return st

    def snapshot(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "profiles": len(self.samples),
            "samples": sum(len(k) for k in self.samples.values()),
            "skipped_bad": self.skipped_bad,
        }


PROJECTION = Projection(NAME, VERSION, CalibrationState, CalibrationState.from_bytes)


# --- the math -------------------------------------------------------------------------------


@attrs.frozen
class Outlier:
    """A sample of the window the filter rejected."""

    seq: int
    ratio: Fraction

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "ratio": float(self.ratio)}


@attrs.frozen
class Profile:
    """What the samples of one (provider, model, estimator) say; see :func:`profile_of`.

    ``multiplier`` predicts: actual tokens ~= estimate x multiplier (it may be
    below 1). ``capacity_multiplier`` = max(1, multiplier), 1 without one, is
    what budgets use (:meth:`tokens`, :meth:`estimator_budget`): an estimator
    that overestimates never makes a budget look roomier than it is.
    """

    provider: str
    model: str
    estimator: str
    samples: int
    """Samples kept (at most :data:`MAX_SAMPLES`)."""
    window: int
    """The window size asked for; the newest ``min(samples, window)`` are used."""
    used: int
    """Samples in the window."""
    accepted: int
    rejected: tuple[Outlier, ...]
    """Samples of the window rejected as outliers, by seq."""
    median: Fraction | None
    """Median ratio of the window (None: no samples)."""
    mad: Fraction | None
    """Median absolute deviation of the window's ratios from ``median``."""
    exact: Fraction | None
    """The multiplier, exactly: median ratio of the accepted samples, or None."""

    @property
    def multiplier(self) -> float | None:
        return None if self.exact is None else float(self.exact)

    @property
    def capacity(self) -> Fraction:
        """max(1, multiplier), exactly; 1 without a multiplier."""
        return max(Fraction(1), self.exact) if self.exact is not None else Fraction(1)

    @property
    def capacity_multiplier(self) -> float:
        return float(self.capacity)

    def tokens(self, estimate: int) -> int:
        """ceil(estimate x capacity_multiplier), exact: a budget's worth of ``estimate``."""
        c = self.capacity
        return -(-(max(0, estimate) * c.numerator) // c.denominator)

    def estimator_budget(self, tokens: int) -> int:
        """floor(tokens / capacity_multiplier), exact: a token budget in estimator units."""
        c = self.capacity
        return max(0, tokens) * c.denominator // c.numerator

    def to_json(self) -> dict[str, Any]:
        def num(x: Fraction | None) -> float | None:
            return None if x is None else float(x)

        return {
            "provider": self.provider, "model": self.model, "estimator": self.estimator,
            "samples": self.samples, "window": self.window, "used": self.used,
            "accepted": self.accepted, "rejected": [o.to_json() for o in self.rejected],
            "median": num(self.median), "mad": num(self.mad),
            "multiplier": self.multiplier, "capacity_multiplier": self.capacity_multiplier,
        }


def median(values: list[Fraction]) -> Fraction:
    """Median of sorted ``values``: the middle one, or the mean of the middle two."""
    n = len(values)
    mid = n // 2
    return values[mid] if n % 2 else (values[mid - 1] + values[mid]) / 2


def profile_of(
    provider: str, model: str, estimator: str, samples: Iterable[Sample],
    window: int = DEFAULT_WINDOW,
) -> Profile:
    """The profile the samples imply (docs/calibration.md, "The math").

    The window is the ``window`` newest samples by seq; r = actual / estimated
    each. With m the median of r and MAD the median of |r - m|, a sample is
    rejected when |r - m| > 3 x 1.4826 x MAD (so with MAD = 0, every sample
    whose r is not exactly m). The multiplier is the median r of the accepted
    samples once there are at least 3 of them. Arithmetic is exact and every
    median sorts first: order inside the window changes nothing.
    """
    if type(window) is not int or not 1 <= window <= MAX_WINDOW:
        raise ValueError(f"window must be an integer from 1 to {MAX_WINDOW}")
    kept = sorted(samples, key=lambda s: s.seq)
    recent = kept[-window:]
    ratios = sorted((s.ratio, s.seq) for s in recent)
    m = mad = exact = None
    accepted: list[Fraction] = []
    rejected: list[Outlier] = []
    if ratios:
        m = median([r for r, _ in ratios])
        mad = median(sorted(abs(r - m) for r, _ in ratios))
        limit = CUTOFF * MAD_SCALE * mad
        for r, seq in ratios:
            if abs(r - m) > limit:
                rejected.append(Outlier(seq, r))
            else:
                accepted.append(r)  # (still sorted)
        if len(accepted) >= MIN_ACCEPTED:
            exact = median(accepted)
    rejected.sort(key=lambda o: o.seq)
    return Profile(provider, model, estimator, len(kept), window, len(recent), len(accepted),
                   tuple(rejected), m, mad, exact)


# --- the facade -----------------------------------------------------------------------------


class Calibration:
    """The calibration samples of one agent home: record them, read profiles.

    Nothing is opened until first use, and only :meth:`record` creates the agent
    home; until it exists every read sees no samples. A ``readonly`` one never
    writes a file (nor a checkpoint). Every read
    first folds what other processes appended (the file log takes its writer
    lock per append, so many handles, in many processes, may write).
    """

    def __init__(
        self,
        home: Path,
        *,
        readonly: bool = False,
        clock: Callable[[], float] = time.time,
        window: int = DEFAULT_WINDOW,
        sync: str = "always",
    ) -> None:
        if type(window) is not int or not 1 <= window <= MAX_WINDOW:
            raise ValueError(f"window must be an integer from 1 to {MAX_WINDOW}")
        self.home = Path(home)
        self.readonly = readonly
        self.clock = clock
        self.window = window
        self.sync = sync
        self._ledger: Ledger | None = None
        self._runner: Runner | None = None
        self._closed = False

    @property
    def log_dir(self) -> Path:
        return agent_log_dir(self.home)

    @property
    def checkpoints_dir(self) -> Path:
        return agent_checkpoints_dir(self.home)

    def _open(self, *, create: bool) -> Runner | None:
        """The runner over the agent log, opened on first use; None while there is no
        log and ``create`` is false (reads never create the agent home: only a record does)."""
        if self._closed:
            raise LedgerError("calibration is closed")
        if self._runner is not None:
            return self._runner
        if not create or self.readonly:
            if not self.log_dir.is_dir():
                return None
        else:
            private.check_owner(self.home)
            try:
                for d in (self.log_dir, self.checkpoints_dir):
                    private.make_dirs(d, sync=True)
            except OSError as e:
                raise LedgerIOError(f"cannot create {self.home}: {e.strerror or e}") from e
        ledger = Ledger.open(self.log_dir, readonly=self.readonly, sync=self.sync,  # type: ignore[arg-type]
                             clock=self.clock)
        try:
            self._runner = Runner(
                ledger, CheckpointDir(self.checkpoints_dir, readonly=self.readonly), [PROJECTION]
            )
        except BaseException:
            ledger.close()
            raise
        self._ledger = ledger
        return self._runner

    def record(
        self,
        provider: str,
        model: str,
        estimated: int,
        actual: int,
        *,
        estimator: str = DEFAULT_ESTIMATOR,
        input: int | None = None,
        cache_read: int | None = None,
        cache_write: int | None = None,
    ) -> int:
        """Append one sample; its seq in the agent log (durable when this returns)."""
        data = sample_data(provider, model, estimated, actual, estimator=estimator,
                           input=input, cache_read=cache_read, cache_write=cache_write)
        if self.readonly:
            raise LedgerError("calibration was opened read-only")
        runner = self._open(create=True)
        assert runner is not None and self._ledger is not None
        runner.before_append(1)
        receipt = self._ledger.append([Event(SAMPLE, None, data)])
        # (no packet bytes: every_bytes counts the cache's packets, and samples are tiny)
        runner.fold_own([(SAMPLE, None, data)], receipt.first_seq, receipt.at, nbytes=0)
        runner.maybe_checkpoint(receipt.last_seq)
        return receipt.first_seq

    def state(self) -> CalibrationState:
        """The view, caught up with the agent log (empty while a reader finds no log)."""
        runner = self._open(create=False)
        if runner is None:
            return CalibrationState()
        runner.catch_up()
        st = runner.state(NAME)
        assert isinstance(st, CalibrationState)
        return st

    def profile(self, provider: str, model: str, estimator: str = DEFAULT_ESTIMATOR) -> Profile:
        """The profile of ``(provider, model, estimator)``; one with no samples if unknown."""
        key = check_profile(provider, model, estimator)
        return profile_of(*key, self.state().samples.get(key, ()), window=self.window)

    def multiplier(
        self, provider: str, model: str, estimator: str = DEFAULT_ESTIMATOR
    ) -> float | None:
        return self.profile(provider, model, estimator).multiplier

    def profiles(self) -> list[Profile]:
        """Every profile with samples, sorted by (provider, model, estimator)."""
        st = self.state()
        return [profile_of(*key, st.samples[key], window=self.window)
                for key in sorted(st.samples)]

    def close(self) -> None:
        """Checkpoint what moved (as a store does on close), then close the log."""
        if self._closed:
            return
        self._closed = True
        runner, ledger = self._runner, self._ledger
        if runner is None or ledger is None:
            return
        try:
            if not self.readonly:
                try:
                    runner.close_checkpoint()
                except (LedgerIOError, CorruptLogError) as e:  # checkpoints are disposable
                    runner.checkpoint_error = str(e)
        finally:
            runner.ckdir.close()
            ledger.close()

    def __enter__(self) -> Calibration:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
