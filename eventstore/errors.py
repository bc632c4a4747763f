"""The errors ctxledger raises on purpose.

Every error a user can meet is a :class:`LedgerError`; the CLI turns one into a
single line on stderr and exit code 1. Each carries what a user needs to act.
"""

from __future__ import annotations

from pathlib import Path


class LedgerError(Exception):
    """Base of every error ctxledger raises on purpose."""


class InvalidEventError(LedgerError, ValueError):
    """An event (or its data) that may not be written; nothing was written."""


class CorruptLogError(LedgerError):
    """Media corruption: bad bytes followed by valid frames, or a damaged header."""

    def __init__(self, segment: Path | str, offset: int, reason: str) -> None:
        self.segment = Path(segment)
        self.offset = offset
        self.reason = reason
        super().__init__(
            f"{self.segment.name}: corrupt log at byte {offset} ({reason}); "
            "run `ctxledger verify` for a report"
        )


class UnsupportedFormatError(LedgerError):
    """A segment written by a newer ctxledger than this one."""

    def __init__(self, segment: Path | str, version: int, known: int) -> None:
        self.segment = Path(segment)
        self.version = version
        super().__init__(
            f"{self.segment.name}: log format version {version} is newer than this "
            f"ctxledger understands (<= {known}); upgrade ctxledger"
        )


class LockTimeout(LedgerError):
    """Another writer held the log lock for longer than the bounded wait."""

    def __init__(self, lock_path: Path | str, holder_pid: int | None, waited: float) -> None:
        self.lock_path = Path(lock_path)
        self.holder_pid = holder_pid
        self.waited = waited
        who = f"process {holder_pid}" if holder_pid else "another process"
        super().__init__(
            f"log is locked by {who} ({self.lock_path}); gave up after {waited:.1f}s"
        )


class HeadMismatchError(LedgerError):
    """Optimistic concurrency: the log moved on since the caller looked."""

    def __init__(self, expected: int, actual: int) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(f"expected log head {expected}, but it is {actual}; nothing written")


class LedgerIOError(LedgerError):
    """An operating-system error at the storage boundary (disk full, EIO, ...)."""


class GenerationChangedError(LedgerError):
    """A read met a segment that a compaction or salvage removed meanwhile: read again."""

    def __init__(self, segment: Path | str) -> None:
        self.segment = Path(segment)
        super().__init__(
            f"{self.segment.name} was removed while it was read: the log moved to a new "
            "generation (ctxledger compact or salvage); run the command again"
        )


class CompactionRefusedError(LedgerError):
    """Compaction or salvage cannot proceed; the log is left as it was."""


class ImportRefusedError(LedgerError):
    """A file ``log import`` refuses (it does not parse or does not chain); nothing
    was written."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}; nothing was imported")
        self.line, self.reason = line, reason


class WriterPoisonedError(LedgerIOError):
    """A sync failed earlier; this handle refuses appends until the log is reopened."""


class LedgerClosedError(LedgerError):
    """The ledger handle was closed."""


class NotOwnerError(LedgerError):
    """The store (or its log) belongs to another user: ctxledger will not write to it."""

    def __init__(self, path: Path | str, owner_uid: int, euid: int) -> None:
        self.path = Path(path)
        self.owner_uid = owner_uid
        self.euid = euid
        super().__init__(
            f"{self.path} belongs to uid {owner_uid}, not to this user (uid {euid}); "
            "ctxledger does not write to a store another user owns (its owner controls "
            "what you would read back): run as that user, or chown the store"
        )


class StoreNotFoundError(LedgerError):
    """No store at the given root (and the command does not create one)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        super().__init__(f"no ctxledger store at {self.path} (run `ctxledger init` first)")


class LogUnavailableError(LedgerError):
    """A replicated log that did not answer in time (no quorum, no server): nothing was
    acknowledged. An append may still land later; retrying it with the same
    ``batch_id`` is safe and says which."""
