"""``log mirror``'s two functions without a server: eventstore/mirror.py.

``mirror_to_stream`` writes into anything with a JetStream log's ``head``,
``head_digest``, ``stream`` and ``append_raw``; :class:`FakeStream` is a
:class:`MemoryLog` that takes raw batches as a stream does (the next batch
only, its frame and digest made by the shared codec), so every branch of the
function runs here, in milliseconds. The same calls against a live cluster are
in tests/test_cli_jetstream.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eventstore import Event, Ledger, LedgerError
from eventstore.frame import encode_frame_parts, encode_raw_rows, payload_prefix
from eventstore.memory import MemoryLog
from eventstore.mirror import Mirrored, mirror_to_dir, mirror_to_stream
from eventstore.records import RawBatch


class FakeStream(MemoryLog):
    """A stream's ``append_raw`` over a memory log: the same seqs, times, batch ids and
    event bytes as the source, hence the same chain digests; anything but the next
    batch is refused."""

    def __init__(self, stream: str = "S") -> None:
        super().__init__(clock=lambda: 1.0)
        self.stream = stream
        self.appended: list[int] = []

    def append_raw(self, batch: RawBatch) -> None:
        chain = self._chain
        if batch.first_seq != chain.head + 1:
            raise LedgerError(f"batch from seq {batch.first_seq} after head {chain.head}")
        frame, digest = encode_frame_parts(
            chain.head_digest, batch.first_seq, len(batch.rows),
            (payload_prefix(batch.at, batch.batch_id), encode_raw_rows(list(batch.rows))))
        chain.add(frame, batch.first_seq, len(batch.rows), digest, batch.at, batch.batch_id)
        self.appended.append(batch.first_seq)


class WrongChain(FakeStream):
    """A destination that loses the chain (what the final digest check is there for)."""

    def append_raw(self, batch: RawBatch) -> None:
        super().append_raw(RawBatch(batch.first_seq, batch.at + 1.0, batch.batch_id,
                                    batch.rows))


def source_log(tmp_path: Path, batches: list[int], name: str = "src") -> Ledger:
    """A file log of batches of the given sizes (times 10, 20, ...; a batch id each)."""
    times = iter(float(10 * (i + 1)) for i in range(len(batches) + 5))  # and later ones
    led = Ledger.open(tmp_path / name, clock=lambda: next(times))
    for i, n in enumerate(batches):
        led.append([Event("t.ev", f"k{i}", {"i": i, "j": j}) for j in range(n)],
                   batch_id=f"b{i}")
    return led


def raw(log: object) -> list[tuple[int, float, str | None, tuple[bytes, ...]]]:
    return [(b.first_seq, b.at, b.batch_id, b.rows)
            for b in log.read_raw_batches()]  # type: ignore[attr-defined]


def test_mirror_into_an_empty_stream_copies_every_batch_as_it_is(tmp_path: Path) -> None:
    heard: list[int] = []
    with source_log(tmp_path, [2, 1, 3]) as src:
        dest = FakeStream()
        got = mirror_to_stream(src, dest, progress=heard.append)
        assert got == Mirrored(copied_events=6, copied_batches=3, already_there=0,
                               head_seq=6, head_digest=src.head_digest)
        assert heard == [2, 1, 3]
        assert raw(dest) == raw(src)
        assert dest.head_digest == src.head_digest


def test_mirror_again_copies_only_what_the_source_gained(tmp_path: Path) -> None:
    with source_log(tmp_path, [2, 1]) as src:
        dest = FakeStream()
        mirror_to_stream(src, dest)
        src.append([Event("t.more", None, {"x": 1})] * 4, batch_id="later")
        heard: list[int] = []
        got = mirror_to_stream(src, dest, progress=heard.append)
        assert got == Mirrored(4, 1, 3, 7, src.head_digest)
        assert heard == [4]
        assert dest.appended == [1, 3, 4]  # the second run starts past the stream's head
        assert raw(dest) == raw(src)
        again = mirror_to_stream(src, dest)  # nothing new: nothing written
        assert again == Mirrored(0, 0, 7, 7, src.head_digest)
        assert dest.appended == [1, 3, 4]


def test_a_stream_holding_another_log_is_refused_untouched(tmp_path: Path) -> None:
    with source_log(tmp_path, [2, 1]) as src, source_log(tmp_path, [1, 1], "other") as other:
        dest = FakeStream("ctx-a")
        mirror_to_stream(other, dest)
        with pytest.raises(LedgerError) as e:
            mirror_to_stream(src, dest)
        assert str(e.value) == ("jetstream stream 'ctx-a' holds 2 events that are not this "
                                "log's first ones; mirror into an empty stream")
        assert raw(dest) == raw(other)


def test_a_stream_longer_than_the_source_is_refused(tmp_path: Path) -> None:
    with source_log(tmp_path, [2, 2]) as longer, source_log(tmp_path, [2], "short") as short:
        dest = FakeStream()
        mirror_to_stream(longer, dest)
        with pytest.raises(LedgerError, match="holds 4 events that are not this log's first"):
            mirror_to_stream(short, dest)


def test_a_compacted_source_is_refused(tmp_path: Path) -> None:
    class Compacted(MemoryLog):
        base = 2  # the smallest base a compaction leaves

    with pytest.raises(LedgerError) as e:
        mirror_to_stream(Compacted(), FakeStream())
    assert str(e.value) == (
        "this log was compacted (its seqs start at 2); a JetStream stream starts at seq "
        "1: mirror before compacting, or export it")


def test_a_source_without_a_base_starts_at_seq_1() -> None:
    """A memory log has no ``base`` attribute: it is never compacted, so it mirrors."""
    src = MemoryLog(clock=lambda: 3.0)
    assert not hasattr(src, "base")
    src.append([Event("m.ev", None, {"n": 1})])
    dest = FakeStream()
    assert mirror_to_stream(src, dest) == Mirrored(1, 1, 0, 1, src.head_digest)
    assert raw(dest) == raw(src)


def test_a_stream_that_does_not_end_at_the_sources_digest_is_an_error(tmp_path: Path) -> None:
    with source_log(tmp_path, [1, 2]) as src:
        with pytest.raises(LedgerError) as e:
            mirror_to_stream(src, WrongChain())
        assert str(e.value) == "the mirrored stream does not end at the source's digest"


def test_mirror_to_dir_writes_the_whole_log_with_its_digests(tmp_path: Path) -> None:
    src = MemoryLog(clock=iter([5.0, 6.0, 7.0]).__next__)
    src.append([Event("a", "k", {"b": b"\x00"})], batch_id="one")
    src.append([Event("b", None, {"n": i}) for i in range(3)])
    heard: list[int] = []
    got = mirror_to_dir(src, tmp_path / "copy", progress=heard.append)
    assert got == Mirrored(4, 2, 0, 4, src.head_digest)
    assert got.to_json() == {"copied_events": 4, "copied_batches": 2, "already_there": 0,
                             "head_seq": 4, "head_digest": src.head_digest.hex()}
    assert sum(heard) == 4
    with Ledger.open(tmp_path / "copy") as led:
        assert raw(led) == raw(src)
        assert led.head_digest == src.head_digest
        assert led.verify().ok


def test_mirror_to_dir_refuses_an_empty_source_and_a_log_with_events(tmp_path: Path) -> None:
    with pytest.raises(LedgerError) as e:
        mirror_to_dir(MemoryLog(), tmp_path / "copy")
    assert str(e.value) == "the log to mirror holds no event"
    assert not (tmp_path / "copy").exists() or not any((tmp_path / "copy").iterdir())
    with source_log(tmp_path, [1]) as src, source_log(tmp_path, [1], "full") as full:
        before = raw(full)
        with pytest.raises(LedgerError, match="is not empty: log import only writes"):
            mirror_to_dir(src, tmp_path / "full")
        assert raw(full) == before
