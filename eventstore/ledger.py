"""The file-backed ledger: append-only, checksummed, hash-chained segments.

:class:`Ledger` is the public face; the work is done by small collaborators
with their own state: :class:`~eventstore.tip.Tip` (where the log ends, and
following other writers), :class:`~eventstore.writer.SegmentWriter` (the
active segment's frames), :class:`~eventstore.window.BatchWindow` (idempotent
retries) and :class:`~eventstore.reader.Reader` (reads and frame indexes).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import attrs
import blake3
import cbor2

from . import _osio, private
from .errors import (
    CompactionRefusedError,
    CorruptLogError,
    GenerationChangedError,
    HeadMismatchError,
    LedgerClosedError,
    LedgerError,
    LedgerIOError,
    StoreNotFoundError,
    WriterPoisonedError,
)
from .event import Event, Receipt, encode_batch
from .export import Imported, export_log
from .frame import GENESIS_DIGEST
from .generation import (
    ANCHOR_ENTRY,
    RawRows,
    Written,
    anchor_digest,
    anchors_name,
    build_anchors,
    chain,
    is_marker,
    marker_row,
    open_for_seal,
    read_anchors,
    remove_older,
    seal_segment,
    write_generation,
)
from .lock import WriterLock
from .point import PointReader
from .reader import BATCHES, DIGESTS, EVENTS, RAW, Reader
from .records import Batch, RawBatch, StoredEvent
from .salvage import SALVAGED, SalvageReport
from .salvage import scan as salvage_scan
from .segments import (
    list_all_segments,
    list_generation,
    quarantine_bytes,
    read_header,
    segment_content,
)
from .tip import Tip
from .verify import VerifyReport, verify_log
from .window import BatchWindow
from .writer import SegmentWriter, SyncMode

SYNC_MODES = ("always", "batch", "none")
DEFAULT_SEGMENT_BYTES = 16 * 1024 * 1024
DEFAULT_LOCK_TIMEOUT = 5.0
DEFAULT_BATCH_WINDOW = 10_000
DEFAULT_SYNC_INTERVAL = 0.2

__all__ = ["SYNC_MODES", "Ledger", "SyncMode"]


class Ledger:
    """One log directory. Thread-safe; many processes may append at once.

    Open it with :meth:`open`. Appends take the writer lock per call, catch up
    with frames other writers added, write one frame per batch and sync as
    ``sync`` says. Readers take no lock and see only whole batches.
    """

    def __init__(
        self,
        log_dir: Path,
        *,
        sync: SyncMode,
        segment_bytes: int,
        lock_timeout: float,
        readonly: bool,
        batch_window: int,
        sync_interval: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.log_dir = log_dir
        self.sync = sync
        self.segment_bytes = segment_bytes
        self.lock_timeout = lock_timeout
        self.readonly = readonly
        self.batch_window = batch_window
        self.sync_interval = sync_interval
        self.clock = clock
        self._mutex = threading.RLock()  # guards everything below but the reader
        self._lock: WriterLock | None = None
        self._closed = False  # (None: an equivalent mutant, as false)
        self._window = BatchWindow(log_dir, batch_window)
        # (roll_at None: an equivalent mutant, it is read only beside a segment, and
        # the tip takes a segment's roll size with the segment)
        self._tip = Tip(log_dir, self._window, segment_bytes)
        self._reader = Reader(log_dir)
        self._points = PointReader(log_dir)
        self._writer = SegmentWriter(
            self._tip,
            sync=sync,
            sync_interval=sync_interval,
            segment_bytes=segment_bytes,
            clock=lambda: self.clock(),  # read per append: a test may move it
            forget_segment=self._reader.drop_index,
        )
        self._tip.on_new_generation = self._forget_generation
        # the lock file's generation field last seen ("": an equivalent mutant, one more
        # generation check at the first append)
        self._lock_gen: int | None = None

    # --- opening ------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        log_dir: str | os.PathLike[str],
        *,
        sync: SyncMode = "always",
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        readonly: bool = False,
        batch_window: int = DEFAULT_BATCH_WINDOW,
        sync_interval: float = DEFAULT_SYNC_INTERVAL,
        clock: Callable[[], float] = time.time,
    ) -> Ledger:
        """Open (and unless ``readonly``, create) the log in ``log_dir``.

        ``clock`` gives the unix time a batch is stamped with (``at``; never
        before the last batch's), so tests can move time without sleeping;
        the :attr:`clock` attribute may be replaced while the log is open.
        A corrupt log still opens, so that :meth:`verify` can report on it;
        reads, appends and :attr:`head` then raise :class:`CorruptLogError`.
        """
        if sync not in SYNC_MODES:
            raise ValueError(f"sync must be one of {', '.join(SYNC_MODES)}, not {sync!r}")
        if segment_bytes < 4096:
            raise ValueError("segment_bytes must be at least 4096")
        path = Path(log_dir)
        if readonly:
            if not path.is_dir():
                raise StoreNotFoundError(path)
        else:
            try:
                private.make_dirs(path)
            except OSError as e:  # name the parent that failed, when it was one
                where = f"{e.filename}: " if e.filename and Path(e.filename) != path else ""
                raise LedgerIOError(f"cannot create {path}: {where}{e.strerror}") from e
            private.check_owner(path)
        led = cls(
            path,
            sync=sync,
            segment_bytes=segment_bytes,
            lock_timeout=lock_timeout,
            readonly=readonly,
            batch_window=batch_window,
            sync_interval=sync_interval,
            clock=clock,
        )
        led._tip.load()
        return led

    # --- state ----------------------------------------------------------------------

    @property
    def head(self) -> int:
        """The last committed seq (0 when empty), including other writers' appends."""
        with self._mutex:
            self._check_open()
            self._tip.refresh()
            return self._tip.head

    @property
    def base(self) -> int:
        """The first seq of the log's current generation: 1, or past a compaction's cut
        (format.md §12). Reads start here; seqs below it are gone."""
        with self._mutex:
            self._check_open()
            self._tip.refresh()
            return self._tip.gen_base

    def _forget_generation(self) -> None:
        """The tip moved to a newer generation: caches keyed by segment are stale."""
        self._reader.clear()
        self._points.reset()

    @property
    def head_digest(self) -> bytes:
        """The chain digest at :attr:`head` (32 zero bytes when empty)."""
        with self._mutex:
            self._check_open()
            self._tip.refresh()
            return self._tip.digest

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosedError("ledger is closed")
        if self._tip.fault is not None:
            raise self._tip.fault

    # --- appending ----------------------------------------------------------------

    def append(
        self,
        events: Iterable[Event],
        *,
        expected_head: int | None = None,
        batch_id: str | None = None,
    ) -> Receipt:
        """Append ``events`` as one atomic batch and return its :class:`Receipt`.

        ``expected_head`` makes the append conditional (optimistic concurrency);
        ``batch_id`` makes a retry idempotent within the last ``batch_window``
        batches: a committed id writes nothing and returns the original receipt.
        """
        encoded, count = encode_batch(events, batch_id)  # every refusal, before a byte
        with self._mutex:
            self._check_writable()
            lock = self._writer_lock()
            lock.acquire()
            try:
                return self._append_locked(encoded, count, expected_head, batch_id)
            finally:
                lock.release()

    def _check_writable(self) -> None:
        self._check_open()
        if self.readonly:
            raise LedgerError("ledger was opened read-only")
        if self._writer.poisoned:
            raise WriterPoisonedError(self._writer.poisoned)

    def _writer_lock(self) -> WriterLock:
        if self._lock is None:
            self._lock = WriterLock(self.log_dir / "LOCK", self.lock_timeout)
        return self._lock

    def _append_locked(
        self, rows: bytes, count: int, expected_head: int | None, batch_id: str | None
    ) -> Receipt:
        tip = self._tip
        tip.refresh()
        lock = self._lock
        if lock is not None and lock.generation != self._lock_gen and tip.path is not None:
            tip.check_generation()  # a compaction or salvage ran since we last looked
        if lock is not None:
            self._lock_gen = lock.generation
        tip.check_active()
        # under the lock nobody can cut what we see now: the next look reads 4 bytes
        # past our end, not the last frame's footer (tests/test_tip_looks.py)
        tip.end_stable = True
        if batch_id is not None:
            r = self._window.lookup(batch_id, tip.base, tip.path, tip.end)
            if r is not None:
                return Receipt(r.first_seq, r.last_seq, r.at, batch_id, duplicate=True)
        if expected_head is not None and expected_head != tip.head:
            raise HeadMismatchError(expected_head, tip.head)
        receipt = self._writer.append(rows, count, batch_id)
        self._window.note_frame(receipt.first_seq, receipt.last_seq, receipt.at, batch_id)
        return receipt

    # --- generations ----------------------------------------------------------------

    def start_generation(
        self,
        expected_head: int,
        info: dict[str, Any],
        batches: Iterable[RawRows],
        *,
        at: float,
        progress: Callable[[int], None] | None = None,
    ) -> Written:
        """Replace the log by a new generation holding ``batches`` (format.md §12).

        Under the writer lock (other writers wait, bounded by their own
        ``lock_timeout``): if the head is still ``expected_head`` (else
        :class:`HeadMismatchError`, nothing written), write the anchors file
        and the new generation's segment: ``ledger.compacted`` (``info`` plus the
        old base, head and digest and the anchors file's blake3), stamped
        ``at``, then ``batches`` in order; sync it; commit it by rename; then
        remove the older generation. ``batches`` is consumed under the lock.
        """
        with self._mutex:
            self._check_writable()
            lock = self._writer_lock()
            lock.acquire()
            try:
                tip = self._tip
                tip.refresh()
                tip.check_active()
                if expected_head != tip.head:
                    raise HeadMismatchError(expected_head, tip.head)
                if tip.head == 0:
                    raise CompactionRefusedError("the log is empty: there is nothing to compact")
                old_base, old_head, old_digest = tip.gen_base, tip.head, tip.digest
                # opened before anything moves: after the commit its name may be reused
                seal_fd, seal_at = open_for_seal(tip.path), tip.end
                try:
                    self._clear_next_name()
                    # (read at base 1 too, equivalent mutants: a log's first generation
                    # has no anchors file, every later one starts past seq 1)
                    older = read_anchors(self.log_dir, old_base) if old_base > 1 else b""
                    # (old_head is the head under the lock: reading on past it, to None,
                    # is an equivalent mutant)
                    anchors = build_anchors(older, self.read_digests(old_base, old_head))
                    data = {
                        **info,
                        "old_base": old_base,
                        "old_head": old_head,
                        "old_digest": old_digest.hex(),
                        "anchors_blake3": blake3.blake3(anchors).hexdigest(),
                        "anchors_frames": len(anchors) // ANCHOR_ENTRY.size,
                    }
                    first = (at, None, [marker_row(data)])
                    self._announce_generation(lock, old_head + 1)
                    written = write_generation(
                        self.log_dir, old_head + 1, old_digest, self.segment_bytes,
                        chain([first], batches), anchors, progress,
                    )
                    self._writer.generation_written()
                    seal_segment(seal_fd, seal_at, written.base)
                finally:
                    if seal_fd >= 0:
                        os.close(seal_fd)
                tip.refresh()
                tip.check_generation()  # follows the new generation (at our head + 1)
                removed = remove_older(self.log_dir, written.base)
                return attrs.evolve(written, removed=tuple(removed))
            finally:
                lock.release()

    def _announce_generation(self, lock: WriterLock, base: int) -> None:
        """Tell every writer, through the lock file, that a generation is being written
        (before its commit: a writer that reads it checks where the log is)."""
        try:
            lock.set_generation(base)
        except OSError as e:
            raise LedgerIOError(f"cannot write {lock.path}: {e.strerror or e}") from e
        self._lock_gen = base  # (None: an equivalent mutant, one more generation check)

    def _clear_next_name(self) -> None:
        """Under the lock, before a generation is written at ``head + 1``: a segment that
        holds no frame may have that name (a roll whose first frame failed, or a crash
        right after the roll). A torn one goes to quarantine/ as a writer would move it;
        one with a whole header and no frame holds nothing and is removed."""
        tip = self._tip
        if tip.torn_seg is not None:
            self._writer.set_aside_torn_segment()
        if tip.path is not None and tip.base == tip.head + 1:
            path = tip.path
            try:
                os.unlink(path)
                _osio.fsync_dir(self.log_dir)
            except OSError as e:
                raise LedgerIOError(f"cannot remove the empty segment {path.name}: "
                                    f"{e.strerror or e}") from e

    def import_log(
        self, imported: Imported, progress: Callable[[int], None] | None = None
    ) -> Written:
        """Write a checked export (:func:`export.check_import`) into this log, which must
        be empty (no segment at all): one segment, committed by one rename, seqs and
        digests as in the file. Under the writer lock."""
        with self._mutex:
            self._check_writable()
            lock = self._writer_lock()
            lock.acquire()
            try:
                self._tip.refresh()
                if self._tip.head or list_all_segments(self.log_dir):
                    raise LedgerError(f"{self.log_dir} is not empty: log import only "
                                      "writes into a store whose log has no event")
                base = imported.batches[0].first_seq
                written = write_generation(
                    self.log_dir, base, imported.prev_digest, self.segment_bytes,
                    ((b.at, b.batch_id, list(b.rows)) for b in imported.batches),
                    imported.anchors, progress,
                )
                if written.digest != imported.head_digest:  # checked already: a bug if not
                    raise LedgerError("imported log does not end at the file's digest")
                self._tip.refresh()
                return written
            finally:
                lock.release()

    def export_lines(
        self, from_seq: int = 1, to_seq: int | None = None, kind: str | None = None
    ) -> Iterator[str]:
        """The log (or the frames overlapping a seq range) as JSON Lines (``export.py``)."""
        base = self.base
        start = max(from_seq, base)

        def prev_of(first_seq: int) -> bytes:
            if first_seq == base:
                segs, gen = list_generation(self.log_dir)
                # (the header read without a generation, an equivalent mutant: the first
                # segment of a log never compacted starts at the genesis digest)
                return read_header(segs[0][1]).prev_digest if gen else GENESIS_DIGEST
            got = self.digest_at(first_seq - 1)
            if got is None:
                raise GenerationChangedError(self.log_dir)
            return got

        # anchors go on a generation's marker, the first row at its base (> 1); read at
        # base 1 (b"": no file there) or for a range past the marker, they are never
        # written out: equivalent mutants
        anchors = read_anchors(self.log_dir, base) if base > 1 and start == base else None
        # (export_log stops past to_seq itself: without the bound here, an equivalent mutant
        # reads more)
        return export_log(self.read_raw_batches(start, to_seq), prev_of, from_seq=from_seq,
                          to_seq=to_seq, kind=kind, anchors=anchors)

    def salvage(
        self, clock: Callable[[], float] = time.time,
        progress: Callable[[int], None] | None = None,
        rewrite: Callable[[bytes, Mapping[int, int]], bytes] | None = None,
    ) -> SalvageReport:
        """Repair mid-log corruption: keep every frame that checks out (salvage.py) in a
        new generation starting past the highest seq seen, whose first event
        ``ledger.salvaged`` lists the lost seq ranges; copy each damaged segment to
        ``quarantine/`` first (never deleted before its copy is synced). A log with
        nothing lost and nothing damaged is left as it is (``salvaged`` false).
        ``progress`` hears of each segment read. The kept events are renumbered (the
        new generation starts past every seq seen); ``rewrite(row, new_seq)`` may
        change a row that names other events by seq (``new_seq``: old seq -> new)."""
        with self._mutex:
            if self._closed:
                raise LedgerClosedError("ledger is closed")
            if self.readonly:
                raise LedgerError("ledger was opened read-only")
            lock = self._writer_lock()
            lock.acquire()
            try:
                segs, gen = list_generation(self.log_dir)
                contents = []
                for _b, p in segs:
                    contents.append((p, segment_content(p)))
                    if progress is not None:
                        progress(1)
                start_seq, start_digest = 1, GENESIS_DIGEST
                # (equivalent mutants: base 2 or an anchors file read at base 1, which no
                # log has; see start_generation)
                first_base = segs[0][0] if segs else 1
                anchors0 = read_anchors(self.log_dir, first_base) if first_base > 1 else b""
                if gen or anchors0:
                    try:
                        # (read from the file again, an equivalent mutant: the same bytes,
                        # under the writer lock)
                        hdr = read_header(segs[0][1], contents[0][1])
                        start_seq, start_digest = hdr.base_seq, hdr.prev_digest
                    except CorruptLogError:
                        # a generation start whose header is damaged: its name says where
                        # it starts, its anchors file's last entry the digest before it
                        if len(anchors0) < ANCHOR_ENTRY.size:
                            raise
                        start_seq, start_digest = first_base, anchors0[-32:]
                    gen = True
                found = salvage_scan(contents, start_seq, start_digest)
                if not found.lost and not found.damaged:
                    return SalvageReport(found, False)
                quarantined = []
                for path, data in contents:
                    if path.name in found.damaged:
                        try:
                            q = quarantine_bytes(self.log_dir, path.name, data, "damaged")
                        except OSError as e:
                            raise LedgerIOError(f"cannot copy {path.name} to quarantine/: "
                                                f"{e.strerror or e}") from e
                        quarantined.append(q.name)
                old_base = segs[0][0] if gen else 1
                older = read_anchors(self.log_dir, old_base) if gen else b""  # (the same)
                anchors = older + b"".join(ANCHOR_ENTRY.pack(s, d) for s, d in found.frames)
                # above every seq and every segment name the damaged log has, so names and
                # seqs only grow (a last segment may hold no readable frame)
                # (something was lost or damaged: there is a segment)
                base = max(found.head, segs[-1][0]) + 1
                marker = {
                    "old_base": old_base, "old_head": base - 1,
                    "old_digest": found.head_digest.hex(),
                    "anchors_blake3": blake3.blake3(anchors).hexdigest(),
                    "anchors_frames": len(anchors) // ANCHOR_ENTRY.size,
                    "lost": found.lost, "lost_events": found.lost_events,
                    "kept_events": sum(len(b.rows) for b in found.batches),
                    "quarantined": quarantined, "salvaged_at": clock(),
                }
                # the old generation's own marker is not copied: the new marker and
                # anchors file cover it, and one mid-log would read as a cut
                copied: list[RawRows] = []
                new_seq: dict[int, int] = {}
                for b in found.batches:
                    kept = [(b.first_seq + i, r) for i, r in enumerate(b.rows)
                            if not is_marker(r)]
                    for s, _r in kept:
                        new_seq[s] = base + 1 + len(new_seq)
                    if kept:
                        copied.append((b.at, b.batch_id, [r for _s, r in kept]))

                def rows(rs: list[bytes]) -> list[bytes]:
                    if rewrite is None:
                        return rs
                    return [rewrite(r, new_seq) for r in rs]

                at = found.batches[0].at if found.batches else clock()
                first = (at, None, [cbor2.dumps([SALVAGED, None, marker])])
                self._announce_generation(lock, base)
                seal_fd = open_for_seal(contents[-1][0])
                try:
                    written = write_generation(
                        self.log_dir, base, found.head_digest, self.segment_bytes,
                        chain([first], ((at_, bid, rows(rs)) for at_, bid, rs in copied)),
                        anchors,
                    )
                    seal_segment(seal_fd, len(contents[-1][1]), base)
                finally:
                    if seal_fd >= 0:
                        os.close(seal_fd)
                removed = remove_older(self.log_dir, written.base)
                self._tip.fault = None
                self._tip.reload()
                return SalvageReport(found, True, attrs.evolve(written, removed=tuple(removed)),
                                     tuple(quarantined))
            finally:
                lock.release()

    def remove_leftovers(self) -> list[str]:
        """Remove what an interrupted compaction left (older generations' segments and
        anchors files, a generation never committed): under the writer lock."""
        with self._mutex:
            self._check_writable()
            lock = self._writer_lock()
            lock.acquire()
            try:
                self._tip.refresh()
                return remove_older(self.log_dir, self._tip.gen_base)
            finally:
                lock.release()

    def anchor_digest(self, seq: int) -> bytes | None:
        """The digest the current generation's anchors file records at ``seq`` (a frame
        end of an older generation; None otherwise). The file is checked against the
        blake3 its ``ledger.compacted`` event records first."""
        base = self.base
        if base == 1 or seq >= base:
            return None
        anchors = read_anchors(self.log_dir, base)
        for ev in self.read(base, base):
            if ev.data.get("anchors_blake3") != blake3.blake3(anchors).hexdigest():
                raise CorruptLogError(self.log_dir / anchors_name(base), 0,
                                      "anchors file does not match ledger.compacted")
        return anchor_digest(anchors, seq)

    # --- reading --------------------------------------------------------------------
    # Reads take no lock: they go to the Reader, which walks segments itself.

    def read(self, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Event]:
        """Events with ``from_seq <= seq <= to_seq``, checked against the chain."""
        # (cast(None, ...): an equivalent mutant, cast does nothing at run time)
        return cast(Iterator[Event], self._scan(max(1, from_seq), to_seq, EVENTS))

    def read_batches(self, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Batch]:
        """Whole batches overlapping the range, in order, checked against the chain."""
        # (cast(None, ...): an equivalent mutant, cast does nothing at run time)
        return cast(Iterator[Batch], self._scan(max(1, from_seq), to_seq, BATCHES))

    def read_raw_batches(self, from_seq: int = 1, to_seq: int | None = None) -> Iterator[RawBatch]:
        """Whole batches overlapping the range, each event as its stored bytes,
        chain-checked as :meth:`read` is (what compaction and export copy)."""
        # (cast(None, ...): an equivalent mutant, cast does nothing at run time)
        return cast(Iterator[RawBatch], self._scan(max(1, from_seq), to_seq, RAW))

    def read_digests(
        self, from_seq: int = 1, to_seq: int | None = None
    ) -> Iterator[tuple[int, int, bytes]]:
        """``(first_seq, last_seq, chain digest)`` of every frame in the range."""
        return cast(Iterator[tuple[int, int, bytes]],
                    self._scan(max(1, from_seq), to_seq, DIGESTS))

    def read_raw(self, seq: int) -> StoredEvent | None:
        """Event ``seq`` alone, at about the cost of its own bytes (see ``point.py``).

        The frame header and the event's bounds are checked, the batch's chain
        digest is not: authenticate the content (a cache body by its content
        address) or use :meth:`read`. None when the log has no such seq. A
        batch written before per-event offsets existed is read in full instead.
        """
        with self._mutex:
            self._check_open()
            # (>= for >, an equivalent mutant: one more look at the tip)
            if seq > self._tip.head:
                self._tip.refresh()
            # (``and``: an equivalent mutant; the point read finds no frame for a seq
            # outside the generation either, and gives None the same way)
            if seq < self._tip.gen_base or seq > self._tip.head:
                return None
        try:
            return self._points.read(seq)
        except ValueError:
            # verified, names the damage if any (read on past seq, equivalent mutants: the
            # first event read is seq's)
            for ev in self.read(seq, seq):
                return StoredEvent(seq, ev.at, cbor2.dumps([ev.kind, ev.key, ev.data]))
            return None

    def digest_at(self, seq: int) -> bytes | None:
        """The chain digest after the batch ending exactly at ``seq`` (None otherwise)."""
        with self._mutex:
            self._check_open()
            self._tip.refresh()
            if seq == self._tip.head:
                return self._tip.digest
            head, base = self._tip.head, self._tip.gen_base
        if seq == 0 and base == 1:
            return GENESIS_DIGEST
        # (below a generation's cut: see anchor.py.) Equivalent mutants: `and`, `>= head`
        # (head was answered above) and a scan to None: a scan outside the log finds no
        # batch, and the first batch it yields is the one holding seq either way; and
        # cast(None, ...), which does nothing at run time
        if seq < base or seq > head:
            return None
        for _first, last, digest in self._scan(seq, seq, DIGESTS):
            return cast(bytes, digest) if last == seq else None
        return None

    def _scan(self, from_seq: int, to_seq: int | None, mode: int) -> Iterator[Any]:
        return self._reader.scan(from_seq, to_seq, mode, self._check_open_locked, self._corrupt)

    def _check_open_locked(self) -> None:
        with self._mutex:
            self._check_open()

    def _corrupt(self, e: CorruptLogError) -> None:
        """Media corruption seen by a read closes this handle for appends too: a writer
        that made the segment never re-walks it and would append behind it."""
        with self._mutex:
            if self._tip.fault is None:
                self._tip.fault = e

    def verify(self, progress: Callable[[int], None] | None = None) -> VerifyReport:
        """Check every byte of every segment; never modifies anything (``progress``
        hears of each segment checked)."""
        with self._mutex:
            if self._closed:
                raise LedgerClosedError("ledger is closed")
        return verify_log(self.log_dir, progress)

    # --- lifecycle ------------------------------------------------------------------

    def flush(self) -> None:
        """Make every acknowledged append durable now (for ``sync="batch"|"none"``)."""
        with self._mutex:
            self._writer.flush()

    def close(self) -> None:
        with self._mutex:
            if self._closed:
                return
            try:
                if self.sync == "batch":
                    self._writer.flush()
                self._writer.trim_on_close(self._lock)
            finally:
                self._closed = True
                self._tip.drop_fd()
                if self._lock is not None:
                    self._lock.close()
                self._reader.clear()
                self._points.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({str(self.log_dir)!r}, head={self._tip.head})"

