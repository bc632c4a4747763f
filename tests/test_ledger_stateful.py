"""A stateful test of the ledger against a plain list: several handles, one directory.

Hypothesis interleaves appends of random sizes (segments of a few KiB, so they
roll), reopened handles, torn tails left past the last frame (as a crash
mid-write leaves them) and reads by seq range, ``head`` and ``digest_at``. The
model is the list of acknowledged events: nothing acknowledged may be lost,
torn bytes never show in a read and go to quarantine/ on the next append.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import strategies as S
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from eventstore import Event, Ledger
from eventstore.frame import (
    GENESIS_DIGEST,
    SEGMENT_HEADER_SIZE,
    content_end,
    encode_frame,
    encode_payload,
)
from eventstore.segments import QUARANTINE, list_segments
from eventstore.verify import verify_log

Row = tuple[str, Any, Any]  # (kind, key, data) as read back


def make_batch(n: int, tag: int, extra: list[Event]) -> list[Event]:
    """``n`` cheap events (drawing 300 rich ones would dominate the run), plus ``extra``."""
    pad = "x" * (tag % 40)
    return [Event("sm.event", f"k{tag}.{i}", {"i": i, "pad": pad}) for i in range(n)] + extra


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._tmp = tempfile.TemporaryDirectory(prefix="ctxl-sm-")
        self.dir = Path(self._tmp.name) / "log"
        self.now = 1_000.0
        self.rows: list[Row] = []  # every acknowledged event, seq = index + 1
        self.ats: list[float] = []  # each event's batch ``at``
        self.batches: list[tuple[int, int]] = []  # (first_seq, last_seq) per batch
        self.digests: dict[int, bytes] = {}  # last seq of a batch -> chain digest there
        self.last_id: tuple[str, int, int] | None = None  # (batch_id, first, last)
        self.junk = b""  # torn bytes left since the last append
        self.handles: list[Ledger] = []

    # --- setup ---------------------------------------------------------------------------

    @initialize(
        segment_bytes=st.sampled_from([4096, 8192, 16384]),
        sync=st.sampled_from(["none", "none", "batch"]),
        n=st.integers(2, 3),
    )
    def open_handles(self, segment_bytes: int, sync: str, n: int) -> None:
        self.segment_bytes, self.sync = segment_bytes, sync
        self.handles = [self._open() for _ in range(n)]

    def _open(self) -> Ledger:
        return Ledger.open(
            self.dir, segment_bytes=self.segment_bytes, sync=self.sync,  # type: ignore[arg-type]
            lock_timeout=30, clock=lambda: self.now,
        )

    def teardown(self) -> None:
        for led in self.handles:
            led.close()
        try:
            if self.handles:
                rep = verify_log(self.dir)
                assert rep.head_seq == len(self.rows) and rep.events == len(self.rows)
                assert all("torn final frame" in p.error for p in rep.problems), rep.problems
        finally:
            self._tmp.cleanup()

    # --- writes --------------------------------------------------------------------------

    @rule(
        h=st.integers(0, 2),
        n=st.integers(1, 300) | st.integers(1, 5),
        tag=st.integers(0, 10**6),
        extra=st.lists(S.events, max_size=2),
        tick=st.floats(-5, 60),
        with_id=st.booleans(),
    )
    def append(
        self, h: int, n: int, tag: int, extra: list[Event], tick: float, with_id: bool
    ) -> None:
        led = self.handles[h % len(self.handles)]
        self.now += tick  # may step back: ``at`` never does
        batch = make_batch(n, tag, extra)
        bid = f"b{len(self.batches)}.{tag}" if with_id else None
        quarantined = self._quarantined()
        r = led.append(batch, batch_id=bid)
        first = len(self.rows) + 1
        assert (r.first_seq, r.last_seq, r.duplicate) == (first, first + len(batch) - 1, False)
        at = max([self.now, *self.ats[-1:]])
        assert r.at == at
        self.rows += [(e.kind, e.key, dict(e.data)) for e in batch]
        self.ats += [at] * len(batch)
        self.batches.append((r.first_seq, r.last_seq))
        self.digests[r.last_seq] = led.head_digest
        self.last_id = (bid, r.first_seq, r.last_seq) if bid else None
        if self.junk.strip(b"\0"):  # torn bytes were set aside, never deleted
            new = [q for name, q in self._quarantined().items() if name not in quarantined]
            assert any(q.endswith(self.junk) for q in new), (new, self.junk)
        self.junk = b""

    @precondition(lambda self: self.last_id is not None)
    @rule(h=st.integers(0, 2))
    def retry_last_batch(self, h: int) -> None:
        """A retry with a committed batch_id writes nothing, from any handle."""
        assert self.last_id is not None
        bid, first, last = self.last_id
        r = self.handles[h % len(self.handles)].append([Event("sm.retry", None, {})], batch_id=bid)
        assert (r.first_seq, r.last_seq, r.duplicate) == (first, last, True)

    @precondition(lambda self: self.handles)
    @rule(
        kind=st.sampled_from(["garbage", "torn frame", "zeros"]),
        junk=st.binary(min_size=1, max_size=120),
        cut=st.integers(1, 10**6),
    )
    def tear_the_tail(self, kind: str, junk: bytes, cut: int) -> None:
        """Leave what a crash mid-append leaves past the last frame of the last segment."""
        segs = list_segments(self.dir)
        if not segs:
            return
        if kind == "garbage":
            junk = junk.rstrip(b"\0") + b"\x01"  # nothing a reader could take for free space
        elif kind == "torn frame":  # the first bytes of the frame the next append would write
            head = len(self.rows)
            prev = self.digests.get(head, GENESIS_DIGEST)
            payload = encode_payload(self.now, None, [["sm.torn", None, {"junk": junk}]])
            frame, _digest = encode_frame(prev, head + 1, 1, payload)
            junk = frame[: 1 + cut % (len(frame) - 1)]
        else:
            junk = bytes(len(junk))
        path = segs[-1][1]
        behind_zeros = content_end(path.read_bytes(), SEGMENT_HEADER_SIZE) < path.stat().st_size
        with open(path, "ab") as f:
            f.write(junk)
        self.junk += junk
        if behind_zeros and kind != "zeros":
            # Handles that saw zeros at the end take them as free space and look no
            # further; only a power cut leaves bytes behind them, and every handle is
            # reopened after one (its full walk finds them).
            self.handles = [self._reopen(led) for led in self.handles]

    @rule(h=st.integers(0, 2))
    def reopen(self, h: int) -> None:
        k = h % len(self.handles)
        self.handles[k] = self._reopen(self.handles[k])

    def _reopen(self, led: Ledger) -> Ledger:
        led.close()
        return self._open()

    # --- reads ---------------------------------------------------------------------------

    @rule(h=st.integers(0, 2), a=st.integers(0, 10**6), span=st.integers(-1, 400))
    def read_range(self, h: int, a: int, span: int) -> None:
        led = self.handles[h % len(self.handles)]
        total = len(self.rows)
        a = a % (total + 2)  # 0 and past the head included
        b = a + span
        got = [(e.seq, e.kind, e.key, e.data, e.at) for e in led.read(a, b)]
        lo = max(a, 1)
        want = [
            (s, *self.rows[s - 1], self.ats[s - 1]) for s in range(lo, min(b, total) + 1)
        ]
        assert got == want

    @rule(h=st.integers(0, 2), a=st.integers(0, 10**6), span=st.integers(0, 400))
    def read_batches(self, h: int, a: int, span: int) -> None:
        led = self.handles[h % len(self.handles)]
        a = 1 + a % (len(self.rows) + 1)
        b = a + span
        got = [(bt.first_seq, len(bt.events)) for bt in led.read_batches(a, b)]
        want = [(f, last - f + 1) for f, last in self.batches if last >= a and f <= b]
        assert got == want

    @rule(h=st.integers(0, 2), seq=st.integers(0, 10**6))
    def read_raw(self, h: int, seq: int) -> None:
        """A point read gives the event a verified read gives (None past the head)."""
        seq = seq % (len(self.rows) + 2)
        got = self.handles[h % len(self.handles)].read_raw(seq)
        if not 1 <= seq <= len(self.rows):
            assert got is None
            return
        assert got is not None
        e = got.event()
        assert (e.seq, e.kind, e.key, e.data, e.at) == (
            seq, *self.rows[seq - 1], self.ats[seq - 1]
        )

    @rule(h=st.integers(0, 2), seq=st.integers(0, 10**6))
    def digest_at(self, h: int, seq: int) -> None:
        seq = seq % (len(self.rows) + 2)
        want = GENESIS_DIGEST if seq == 0 else self.digests.get(seq)
        assert self.handles[h % len(self.handles)].digest_at(seq) == want

    @invariant()
    def every_handle_sees_the_head(self) -> None:
        for led in self.handles:
            assert led.head == len(self.rows)
            assert led.head_digest == self.digests.get(len(self.rows), GENESIS_DIGEST)

    def _quarantined(self) -> dict[str, bytes]:
        qdir = self.dir / QUARANTINE
        return {p.name: p.read_bytes() for p in qdir.iterdir()} if qdir.is_dir() else {}


LedgerMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestLedgerStateful = LedgerMachine.TestCase


def test_a_point_read_after_a_torn_frame_was_written_over() -> None:
    """Found by the state machine: a reader indexed a torn frame whose header was whole
    (more junk followed it); a writer then cut it and wrote a bigger frame there, and the
    reader's point read of that frame's second event said None."""
    m = LedgerMachine()
    try:
        m.open_handles(segment_bytes=4096, sync="none", n=2)
        m.append(extra=[], h=0, n=1, tag=0, tick=0.0, with_id=False)
        m.tear_the_tail(cut=57, junk=b"\x00", kind="torn frame")
        m.tear_the_tail(cut=40, junk=b"\x00", kind="torn frame")
        m.read_raw(h=1, seq=1)
        m.append(extra=[], h=0, n=2, tag=0, tick=0.0, with_id=False)
        m.read_raw(h=1, seq=3)
        m.every_handle_sees_the_head()
    finally:
        m.teardown()
