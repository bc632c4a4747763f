"""Where the log ends, as one handle sees it, and following other writers there.

Many processes append to one log; a handle learns of their frames only by
looking. :class:`Tip` holds the active (last) segment this handle knows and
its valid end, and catches up: new frames past that end, a segment that was
rolled, a frame that was cut again. It never modifies files; corruption it
meets is remembered in :attr:`Tip.fault` (the handle then fails closed).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from .errors import CorruptLogError, LedgerError, LedgerIOError
from .frame import (
    FOOTER_SIZE,
    FRAME_HEADER_SIZE,
    GENESIS_DIGEST,
    PREALLOC_VERSION,
    SEGMENT_HEADER_SIZE,
    SegmentHeader,
    footer_frame_len,
    segment_header_is_torn,
)
from .segments import (
    Tail,
    data_end,
    fast_tail,
    header_is_torn,
    last_segment_is_torn,
    list_generation,
    open_segment,
    pread_all,
    read_header,
    scan_tail,
    segment_name,
)
from .window import BatchWindow

#: At most this long (seconds) between two looks for a newer generation by a handle
#: that saw no seal (a compaction that died between its commit and its seal).
GEN_CHECK_INTERVAL = 0.1


def check_start(base: int, path: Path, hdr: SegmentHeader) -> None:
    """The first segment of the current generation starts it soundly.

    A compaction's or a salvage's generation starts where its header says, from the
    digest it says. Any other log starts at seq 1 from the genesis digest: a first
    segment past seq 1 means the ones before it are gone, and another digest means
    its chain does not start where logs start (what ``verify`` and readers check). A
    handle refuses both, whether it opens the log or sees its first segment appear.
    """
    if hdr.generation_start:
        return
    if base != 1:
        raise CorruptLogError(path, 0, f"segments before seq {base} are missing")
    if hdr.prev_digest != GENESIS_DIGEST:
        raise CorruptLogError(path, 0, "the first segment does not start from the genesis digest")


class Tip:
    """The active segment as this handle last saw it, and the fd it holds on it."""

    def __init__(self, log_dir: Path, window: BatchWindow, roll_at: int) -> None:
        # Placeholders, and their mutants equivalent: until the tip has a segment
        # (``path`` None) nothing reads base, roll_at, end, fd_writable, checked,
        # end_stable, may_preallocate or alloc_hint, and set_active sets them all with
        # the segment; load() sets gen_base; the handle sets on_leave and
        # on_new_generation just after this; torn_seg "" costs one failed open("").
        self.log_dir = log_dir
        self.window = window
        #: Called before the handle leaves the active segment (the writer syncs it).
        self.on_leave: Callable[[], None] = lambda: None
        self.fault: LedgerError | None = None
        self.base = 0
        self.path: Path | None = None
        self.roll_at = roll_at
        self.fd = -1  # on the active segment: O_RDONLY until this handle writes to it
        self.fd_writable = False
        self.end = 0
        self.head = 0
        self.digest = GENESIS_DIGEST
        self.last_at = 0.0
        self.torn: tuple[int, str] | None = None
        # a last segment with a torn header (power cut while it was created): ignored,
        # and moved to quarantine/ by this handle's next append
        self.torn_seg: Path | None = None
        # False while the active segment was only fast-scanned (footer of the last
        # frame); a writer walks it fully before its first write (see check_active)
        self.checked = True
        # True when the frame ending at ``end`` cannot vanish any more: this handle
        # wrote it, or saw it while holding the writer lock (see refresh)
        self.end_stable = True
        # zeros past the last frame are free space from format version 2 on
        self.may_preallocate = False
        self.alloc_hint = 0  # the active segment's size as this handle last knew it
        #: The first seq of the generation this handle follows (format.md §12).
        self.gen_base = 1
        #: Called when this handle moved to a newer generation (compaction, salvage):
        #: caches keyed by segment (frame indexes, open segments, batch ids) are stale.
        self.on_new_generation: Callable[[], None] = lambda: None
        self._gen_checked = time.monotonic()  # the last check_generation

    # --- opening --------------------------------------------------------------------

    def load(self) -> None:
        """Find the last segment and its valid end (corruption goes to :attr:`fault`)."""
        try:
            segs, gen = list_generation(self.log_dir)
            self.gen_base = segs[0][0] if gen else 1
            for k, (base, path) in enumerate(segs[:-1]):
                hdr = read_header(path)
                if k == 0:
                    check_start(base, path, hdr)
            if segs and not self._load_active(*segs[-1], may_be_torn=True,
                                              first=len(segs) == 1):
                self.torn_seg = segs[-1][1]  # a torn new segment: the one before is the last
                if len(segs) > 1:  # (may_be_torn True or None: equivalent mutants,
                    # its header was read whole in the loop above)
                    self._load_active(*segs[-2], may_be_torn=False)
        except LedgerError as e:
            if isinstance(e, LedgerIOError):
                raise
            self.fault = e

    def _load_active(self, base: int, path: Path, *, may_be_torn: bool,
                     first: bool = False) -> bool:
        """Take the last segment as the active one (False: its header is torn).

        ``first``: it is also the generation's first segment (see :func:`check_start`).
        """
        fd = open_segment(path)
        try:
            try:
                head = pread_all(fd, SEGMENT_HEADER_SIZE, 0)
                size = data_end(fd, os.fstat(fd).st_size)
            except OSError as e:
                raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
            if may_be_torn and header_is_torn(path, fd, size, head):
                return False
            # (read_header(path) without ``head``, an equivalent mutant: the same bytes)
            hdr = read_header(path, head)
            if first:
                check_start(base, path, hdr)
            self.set_active(base, path, hdr.roll_bytes, hdr.version)
            tail = fast_tail(path, fd, size, hdr.prev_digest, base)
            if tail is None:  # unclear ending: walk the whole segment
                try:
                    data = pread_all(fd, size, 0)
                except OSError as e:
                    raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
                tail = scan_tail(path, data, SEGMENT_HEADER_SIZE, hdr.prev_digest, base)
            else:
                self.checked = False  # (None: as false; an equivalent mutant)
            self.adopt(tail)
            self.end_stable = False  # (None: the same)
            return True
        finally:
            os.close(fd)

    def set_active(self, base: int, path: Path, roll_bytes: int, version: int) -> None:
        """Make ``path`` the active segment, empty until the caller adopts its tail."""
        self.close_fd()
        self.base, self.path, self.roll_at = base, path, roll_bytes
        # a version 1 segment is never preallocated, so older readers never meet zeros
        self.may_preallocate = version >= PREALLOC_VERSION
        self.alloc_hint = 0  # (1: an equivalent mutant, every frame ends past byte 64)
        self.end, self.torn = SEGMENT_HEADER_SIZE, None
        self.checked = True  # new, or about to be walked in full by the caller

    def close_fd(self) -> None:
        """Leave the active segment's fd (the writer syncs what it left there first)."""
        if self.fd >= 0:
            self.on_leave()
            self.drop_fd()

    def drop_fd(self) -> None:
        """Close the active segment's fd, no sync: the handle is closing, and synced
        what it must already. (-2 or True below: equivalent mutants, any negative fd
        means none, and ``fd_writable`` is read only beside an fd.)"""
        if self.fd >= 0:  # (descriptor 0 too: a process without stdin gets it)
            os.close(self.fd)
            self.fd, self.fd_writable = -1, False

    def adopt(self, tail: Tail, data_offset: int = 0) -> None:
        """Take ``tail`` (found in data starting at ``data_offset``) as our state."""
        # (>=: an equivalent mutant, it assigns the value it has)
        if tail.at is not None and tail.at > self.last_at:
            self.last_at = tail.at
        self.end, self.head, self.digest = tail.end + data_offset, tail.head, tail.digest
        self.torn = None if tail.torn is None else (tail.torn[0] + data_offset, tail.torn[1])

    def active_fd(self, write: bool = False) -> int:
        """The descriptor on the active segment (read-only until a write needs it)."""
        if self.fd >= 0 and (self.fd_writable or not write):
            return self.fd
        assert self.path is not None
        try:
            fd = os.open(self.path, os.O_RDWR if write else os.O_RDONLY)
        except OSError as e:
            raise LedgerIOError(f"cannot open {self.path}: {e.strerror}") from e
        if self.fd >= 0:  # a read-only one: nothing was written through it
            os.close(self.fd)
        self.fd, self.fd_writable = fd, write
        return fd

    # --- following other writers ------------------------------------------------------

    def refresh(self) -> None:
        """Catch up with frames other processes appended (never modifies files)."""
        try:
            self._refresh()
        except CorruptLogError as e:
            self.fault = e
            raise

    def check_active(self) -> None:
        """Walk the active segment in full before this handle first writes to it.

        Opening trusts a clean ending (the fast path), which cannot see bad bytes
        in the middle of the segment. A writer must not append behind media
        corruption (failure rule 3, docs/architecture.md: fail closed, never modify the
        damaged file).
        """
        if self.checked or self.path is None:
            return
        try:
            self._rescan()
        except CorruptLogError as e:
            self.fault = e
            raise

    def _refresh(self) -> None:
        if self.path is None:
            segs, gen = list_generation(self.log_dir)
            if not segs:
                return
            if gen:
                self.gen_base = segs[0][0]
            if not self._switch_to(segs[0], None, segs[0][0], len(segs) == 1):
                return
        assert self.path is not None
        try:
            fd = self.active_fd()
        except LedgerIOError as e:
            if isinstance(e.__cause__, FileNotFoundError):  # removed by a new generation
                self.reload()
                return
            raise
        try:
            # Zeros at ``end`` (preallocated space) mean nothing new: a frame another
            # process writes always starts with its non-zero magic (junk that a power
            # cut leaves behind zeros is found by the full walk of every handle that
            # opens after it). Only then is the file's size needed: a stat between
            # two durable appends measurably slows the second fdatasync, so the
            # append path never stats. A torn tail we saw may itself start with
            # zeros: then only the size tells whether it is still there.
            if self.end_stable or self.end <= SEGMENT_HEADER_SIZE:
                peek, intact = pread_all(fd, 4, self.end), True
            else:  # one read: our last frame's footer and the 4 bytes after it
                around = pread_all(fd, FOOTER_SIZE + 4, self.end - FOOTER_SIZE)
                peek = around[FOOTER_SIZE:]
                intact = self._last_frame_still_there(fd, around[:FOOTER_SIZE])
            look = peek != b"\0\0\0\0" or not intact or self.torn is not None
            # (-2: an equivalent mutant, any negative size means "not looked")
            size = os.fstat(fd).st_size if look else -1
            if size > self.end and intact:
                size = data_end(fd, size)
        except OSError as e:
            raise LedgerIOError(f"cannot read {self.path}: {e.strerror}") from e
        if not intact or 0 <= size < self.end:
            # A frame we saw was cut again: its writer's fsync failed and it truncated
            # (see SegmentWriter.after_failed_sync). Forget it and walk the segment
            # afresh, or we would chain to a frame that is gone, or cut the frames
            # written since.
            self._rescan()
        elif size > self.end:
            try:
                data = pread_all(fd, size - self.end, self.end)
            except OSError as e:
                raise LedgerIOError(f"cannot read {self.path}: {e.strerror}") from e
            try:
                tail = scan_tail(self.path, data, 0, self.digest, self.head + 1)
                self.window.note_batches(self.path, data, tail, 0, self.head + 1)
            except CorruptLogError as e:
                raise CorruptLogError(e.segment, e.offset + self.end, e.reason) from None
            self.adopt(tail, self.end)
            self.end_stable = False  # (None: as false; an equivalent mutant)
        else:  # nothing past ``end`` but zeros: another writer cut any torn tail we saw
            self.torn = None
        # Where a new generation could have begun (format.md §12): past a torn tail (the
        # seal a compaction writes at the end of the segment it replaces looks like one)
        # and, for the instant between a commit and its seal (a crash there), at most
        # GEN_CHECK_INTERVAL after the last look. Past a full segment only a roll can
        # be new: one stat for the next segment (a removed segment shows its seal
        # first, as a segment not yet full does). So the usual look at the head costs
        # no extra system call, and a look at a full segment one.
        if self.torn is not None or self._gen_check_due():
            self.check_generation()
        elif self.end >= self.roll_at and self._next_segment_exists():
            self._move_on()

    def _gen_check_due(self) -> bool:
        now = time.monotonic()
        if now - self._gen_checked < GEN_CHECK_INTERVAL:
            return False
        # (None: an equivalent mutant; check_generation, which a due check always
        # calls, sets it again)
        self._gen_checked = now
        return True

    def check_generation(self) -> None:
        """Move on to a segment that starts at ``head + 1`` (a roll, or a new generation
        at our head), or reload if our segment was removed (we were behind a cut, or two
        came by). Two ``stat``s; a writer runs it whenever the lock file says a
        generation was written since it last looked."""
        assert self.path is not None
        self._gen_checked = time.monotonic()
        if self._next_segment_exists():
            self._move_on()
        elif not os.path.exists(self.path):
            self.reload()

    def _move_on(self) -> None:
        """A segment starts at ``head + 1``: a roll, or a new generation at our head."""
        segs, gen = list_generation(self.log_dir)
        if gen and segs[0][0] > self.gen_base:
            base, path = segs[0]
            if base != self.head + 1 or read_header(path).prev_digest != self.digest:
                self.reload()  # behind the cut, or a salvage: start over in the new one
                return
            # a generation that starts at our head and chains to our digest (a
            # compaction's): follow it like a roll
            self.gen_base = base
            self.window.reset()
            self.on_new_generation()
        elif self.end < self.roll_at or self.torn is not None:
            # (``and``: an equivalent mutant. A segment at head + 1 that starts no
            # generation follows only a full segment with no torn tail: writers roll
            # only past roll_at, and the one torn tail past it, a compaction's seal,
            # comes with a new generation, the branch above)
            return  # a roll happens only from a full segment: not for us yet
        # a full segment is followed by the one starting at head + 1 or by none
        for k, (base, path) in enumerate(segs):
            if base <= self.base:
                continue
            last = k == len(segs) - 1
            if base != self.head + 1 and not (last and last_segment_is_torn(path)):
                raise CorruptLogError(
                    path, 0, f"segment starts at seq {base}, expected {self.head + 1}"
                )
            if not self._switch_to((base, path), self.digest, base, last):
                break  # (return: an equivalent mutant, nothing follows the loop)

    def reload(self) -> None:
        """Forget everything about the old generation and open the current one afresh."""
        self.close_fd()
        self.path, self.base, self.head, self.digest = None, 0, 0, GENESIS_DIGEST
        self.torn, self.torn_seg, self.last_at = None, None, 0.0
        self.end, self.end_stable = 0, True
        self.window.reset()
        self.on_new_generation()
        self.load()
        if self.fault is not None:
            raise self.fault

    def _next_segment_exists(self) -> bool:
        """Is there a segment starting at ``head + 1``? One stat (a refresh asks this on
        every look at the head once the active segment is full)."""
        # (the log directory for the path, an equivalent mutant: a move-on that finds no
        # segment past ours changes nothing)
        return os.path.exists(os.path.join(self.log_dir, segment_name(self.head + 1)))

    def _last_frame_still_there(self, fd: int, foot: bytes) -> bool:
        """Does the frame we believe ends at ``end`` still end there, with our digest?

        ``foot``: the 8 bytes before ``end`` as the caller read them (fewer: the file
        was cut). Asked only past the segment's header, once a frame was adopted.
        """
        try:
            # (room end + header, an equivalent mutant: the digest read checks the frame)
            flen = footer_frame_len(foot, FOOTER_SIZE, self.end - SEGMENT_HEADER_SIZE)
            return flen is not None and pread_all(
                fd, 32, self.end - flen + FRAME_HEADER_SIZE - 32) == self.digest
        except OSError as e:
            raise LedgerIOError(f"cannot read {self.path}: {e.strerror}") from e

    def read_active(self) -> bytes:
        """The active segment's content (without preallocated zeros)."""
        assert self.path is not None
        fd = self.active_fd()
        try:
            return pread_all(fd, data_end(fd, os.fstat(fd).st_size), 0)
        except OSError as e:
            raise LedgerIOError(f"cannot read {self.path}: {e.strerror}") from e

    def _rescan(self) -> None:
        assert self.path is not None
        data = self.read_active()
        # (read_header(path) without ``data``, an equivalent mutant: it reads the same bytes)
        hdr = read_header(self.path, data)
        tail = scan_tail(self.path, data, SEGMENT_HEADER_SIZE, hdr.prev_digest, self.base)
        self.window.reset()  # it may hold the vanished batch's id: rebuild on demand
        self.adopt(tail)
        # (equivalent mutants: ``checked`` false, so a writer walks the segment once more
        # before it writes; None for False, read as a truth value)
        self.checked = True
        self.end_stable = False

    def _switch_to(
        self, seg: tuple[int, Path], prev_digest: bytes | None, next_seq: int, last: bool
    ) -> bool:
        """Move on to a newer segment (False: it is the last one and its header is torn).

        ``prev_digest`` None: ``seg`` starts the generation; its header says the digest
        (checked by :func:`check_start`).
        """
        base, path = seg
        fd = open_segment(path)
        try:
            data = pread_all(fd, data_end(fd, os.fstat(fd).st_size), 0)
        except OSError as e:
            raise LedgerIOError(f"cannot read {path}: {e.strerror}") from e
        finally:
            os.close(fd)
        if last and segment_header_is_torn(data):
            self.torn_seg = path
            return False
        # (read_header(path) without ``data``, an equivalent mutant: it reads the same bytes)
        hdr = read_header(path, data)
        if prev_digest is None:
            check_start(base, path, hdr)
            prev_digest = hdr.prev_digest
        elif hdr.prev_digest != prev_digest:
            raise CorruptLogError(path, 0, "segment does not chain to the one before it")
        self.set_active(base, path, hdr.roll_bytes, hdr.version)
        # (head and digest come from the tail below: base - 1 and prev_digest when the
        # segment holds no frame yet)
        tail = scan_tail(path, data, SEGMENT_HEADER_SIZE, prev_digest, next_seq)
        self.window.note_batches(path, data, tail, SEGMENT_HEADER_SIZE, base)
        # (!= for ==, or "" for None: equivalent mutants. A torn_seg left set costs one
        # look at the next append: set_aside_torn_segment finds the header whole, or
        # fails to open "", and clears it)
        if self.torn_seg == path:
            self.torn_seg = None
        self.adopt(tail)
        self.end_stable = False  # (None: as false; an equivalent mutant)
        return True
