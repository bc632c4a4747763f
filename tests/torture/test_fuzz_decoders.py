"""Fuzz the frame, segment and checkpoint decoders: only the documented errors.

Inputs are arbitrary bytes and damaged valid encodings (``strategies.damaged``).
The documented outcomes, per decoder:

- ``frame.decode_segment_header``: a header or ``SegmentHeaderError``;
  ``segments.read_header``: ``CorruptLogError`` or ``UnsupportedFormatError``;
- ``frame.walk_frames``/``iter_frames``/``read_frame_header``: ``FrameError``;
  ``segments.scan_tail``: a ``Tail`` or ``CorruptLogError``; the probes
  (``parse_frame_head``, ``footer_frame_len``, ``content_end``,
  ``has_valid_frame_after``, ``segment_header_is_torn``) never raise;
- ``frame.decode_payload``/``payload_head``: ``ValueError``; the fast paths
  (``payload_head_fast``, ``payload_layout``, ``decode_rows_at``,
  ``row_bounds``) return None when unsure, never raise;
- a whole log whose segment is the input (``reader.py`` behind
  ``Ledger.read``/``read_raw``/``verify``): ``LedgerError`` only;
- ``checkpoints._decode`` and ``CheckpointDir.load``: refuse (a reason), never
  raise; a checkpoint whose *body* is damaged but whose checksum and watermark
  are right (a forgery, architecture.md "Checkpoint integrity"): the store
  opens and answers, or raises ``LedgerError``; never another exception.
"""

from __future__ import annotations

import random
import shutil
import struct
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3
import hypothesis
import pytest
from harness import OPS, answers, keys_and_tasks
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from soak import Budget
from strategies import damaged

from eventstore import CorruptLogError, Ledger, LedgerError, UnsupportedFormatError
from eventstore.frame import (
    SEGMENT_HEADER_SIZE,
    FrameError,
    SegmentHeaderError,
    content_end,
    decode_payload,
    decode_rows_at,
    decode_segment_header,
    footer_frame_len,
    has_valid_frame_after,
    iter_frames,
    parse_frame_head,
    payload_head,
    payload_head_fast,
    payload_layout,
    payload_of,
    read_frame_header,
    row_bounds,
    segment_header_is_torn,
    walk_frames,
)
from eventstore.segments import read_header, scan_tail
from projections import ContextStore
from projections.checkpoints import MAGIC, CheckpointDir, _decode
from projections.config import StoreConfig

CI_EXAMPLES = 300  # per decoder (a whole store per example: fewer, see below)


class Samples:
    """Valid encodings to damage: a store's segments, payloads and checkpoints."""

    def __init__(self, root: Path) -> None:
        rng = random.Random(14)
        cfg = StoreConfig(checkpoint_every_events=1 << 30, checkpoint_every_seconds=1e9,
                          checkpoint_close_lag=1)
        log = Ledger.open(root / ".ctxledger" / "log", segment_bytes=4096)
        with ContextStore.open(root, config=cfg, log=log) as store:
            for n in range(10):
                OPS[rng.choice(("put", "put_many", "task"))](store, rng, f"f{n}")
        log.close()
        self.root = root
        self.log_dir = root / ".ctxledger" / "log"
        self.segments = [p.read_bytes() for p in sorted(self.log_dir.glob("*.seg"))]
        assert len(self.segments) >= 2
        first = self.segments[0]
        self.frames = list(iter_frames(first, SEGMENT_HEADER_SIZE, bytes(32), 1))
        self.payloads = [bytes(payload_of(first, f)) for f in self.frames]
        self.checkpoints = {p.name.split(".")[0]: p.read_bytes()
                            for p in sorted((root / ".ctxledger" / "checkpoints").glob("*.ckpt"))}
        with Ledger.open(self.log_dir, readonly=True) as ro:
            events = list(ro.read())
        self.keys, self.tasks = keys_and_tasks(events)
        self.now = events[-1].at + 1.0  # a clock at which every entry is live


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Samples:
    return Samples(tmp_path_factory.mktemp("fuzz-samples"))


def fuzz(budget: Budget, seed: int, tally: Counter[str], name: str,
         strategy: st.SearchStrategy[Any], check: Callable[[Any], None],
         examples: int = CI_EXAMPLES) -> None:
    """Run ``check`` on ``examples`` inputs per round: derandomized in CI; under
    ``--soak``, round after round, hypothesis seeded from the test's seed."""
    soak = budget.soak is not None

    @settings(max_examples=examples, derandomize=not soak, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(data: Any) -> None:
        tally[f"inputs_{name}"] += 1
        check(data)

    for rnd in budget.rounds(1):
        (hypothesis.seed(seed + rnd)(run) if soak else run)()


def test_segment_headers(
    samples: Samples, budget: Budget, seed: int, tally: Counter[str]
) -> None:
    def check(data: bytes) -> None:
        try:
            decode_segment_header(data)
        except SegmentHeaderError:
            pass
        try:
            read_header(samples.log_dir / "00000000000000000001.seg", data)
        except (CorruptLogError, UnsupportedFormatError):
            pass
        segment_header_is_torn(data)

    header = samples.segments[1][:SEGMENT_HEADER_SIZE]
    fuzz(budget, seed, tally, "segment_header", damaged(header), check)


def test_frames(
    samples: Samples, budget: Budget, seed: int, tally: Counter[str]
) -> None:
    f0 = samples.frames[0]
    second = samples.segments[1]
    hdr = decode_segment_header(second[:SEGMENT_HEADER_SIZE])

    def check(data: bytes) -> None:
        start = min(SEGMENT_HEADER_SIZE, len(data))
        for verify in (True, False):
            try:
                list(walk_frames(data, start, hdr.prev_digest, hdr.base_seq, verify=verify))
            except FrameError:
                pass
        try:
            read_frame_header(data, start)
        except FrameError:
            pass
        try:
            scan_tail(Path("fuzz.seg"), data, start, hdr.prev_digest, hdr.base_seq)
        except CorruptLogError:
            pass
        parse_frame_head(data, start)
        footer_frame_len(data, len(data), len(data))
        content_end(data, start)
        has_valid_frame_after(data, start - 1, 0)
        has_valid_frame_after(data, -1, hdr.base_seq)

    assert f0.count >= 1
    fuzz(budget, seed, tally, "frames", damaged(second), check)


def test_payloads(
    samples: Samples, budget: Budget, seed: int, tally: Counter[str]
) -> None:
    def check(data: bytes) -> None:
        for decode in (decode_payload, payload_head):
            try:
                decode(data)
            except ValueError:
                pass
        payload_head_fast(data)
        for count in (0, 1, 3, 1 << 20):
            payload_layout(data, count)
        decode_rows_at(data, 0, 3)
        decode_rows_at(data, 2, 1)
        row_bounds(data, 0)
        row_bounds(data, 5)

    strategy = st.sampled_from(samples.payloads).flatmap(damaged)
    fuzz(budget, seed, tally, "payloads", strategy, check)


def test_a_log_whose_segment_is_damaged(samples: Samples, budget: Budget, seed: int,
                                        tally: Counter[str]) -> None:
    """Readers behind Ledger.read, read_raw and verify: LedgerError or answers."""
    segs = sorted(samples.log_dir.glob("*.seg"))

    def check(case: tuple[int, bytes]) -> None:
        which, data = case
        d = Path(tempfile.mkdtemp(prefix="fuzzlog"))
        try:
            for i, seg in enumerate(segs):
                (d / seg.name).write_bytes(data if i == which else seg.read_bytes())
            try:
                with Ledger.open(d, readonly=True) as ro:
                    ro.verify()
                    head = ro.head
                    list(ro.read())
                    for seq in {1, head // 2, head}:
                        ro.read_raw(seq)
                        list(ro.read(seq, seq))
                        ro.digest_at(seq)
            except LedgerError:
                pass
        finally:
            shutil.rmtree(d)

    strategy = st.integers(0, len(segs) - 1).flatmap(
        lambda i: st.tuples(st.just(i), damaged(segs[i].read_bytes())))
    fuzz(budget, seed, tally, "segment_files", strategy, check, CI_EXAMPLES // 2)


def test_checkpoint_files(
    samples: Samples, budget: Budget, seed: int, tally: Counter[str]
) -> None:
    names = sorted(samples.checkpoints)

    def check(case: tuple[str, bytes]) -> None:
        name, data = case
        ck, why = _decode(memoryview(data), name, "primary")
        assert (ck is None) == bool(why)
        d = Path(tempfile.mkdtemp(prefix="fuzzckpt"))
        try:
            (d / f"{name}.ckpt").write_bytes(data)
            refused: list[str] = []
            for mapped in (False, True):
                list(CheckpointDir(d, readonly=True, mapped=mapped).load(name, refused))
        finally:
            shutil.rmtree(d)

    strategy = st.sampled_from(names).flatmap(
        lambda n: st.tuples(st.just(n), damaged(samples.checkpoints[n])))
    fuzz(budget, seed, tally, "checkpoint_files", strategy, check)


def forge(raw: bytes, body: bytes) -> bytes:
    """``raw``'s header with ``body`` in place of its body, and a checksum that fits
    (the layout of checkpoints.py: magic, u32 header length, CBOR header, body, sum)."""
    (hlen,) = struct.unpack_from("<I", raw, len(MAGIC))
    prefix = raw[: len(MAGIC) + 4 + hlen]
    return prefix + body + blake3.blake3(prefix + body).digest()


def test_forged_checkpoint_bodies(samples: Samples, budget: Budget, seed: int,
                                  tally: Counter[str], tmp_path: Path) -> None:
    """A damaged body under a right checksum and watermark: the view's own decoder and
    then every answer; a LedgerError or an answer, nothing else."""
    names = sorted(samples.checkpoints)
    store = tmp_path / "store"
    shutil.copytree(samples.root, store)
    ckdir = store / ".ctxledger" / "checkpoints"
    for bak in ckdir.glob("*.bak"):
        bak.unlink()
    def check(case: tuple[str, bytes]) -> None:
        name, body = case
        raw = samples.checkpoints[name]
        path = ckdir / f"{name}.ckpt"
        path.write_bytes(forge(raw, body))
        try:
            with ContextStore.open(store, readonly=True, clock=lambda: samples.now) as ro:
                answers(ro, samples.keys, samples.tasks)
        except LedgerError:
            tally["forged_refused_by_error"] += 1
        finally:
            path.write_bytes(raw)

    def body_of(raw: bytes) -> bytes:
        (hlen,) = struct.unpack_from("<I", raw, len(MAGIC))
        return raw[len(MAGIC) + 4 + hlen : -32]

    strategy = st.sampled_from(names).flatmap(
        lambda n: st.tuples(st.just(n), damaged(body_of(samples.checkpoints[n]))))
    fuzz(budget, seed, tally, "forged_checkpoint_bodies", strategy, check, CI_EXAMPLES // 3)
