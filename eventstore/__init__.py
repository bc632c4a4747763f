"""ctxledger's log: an append-only, checksummed, hash-chained event log."""

from .anchor import Anchor, check_anchor, head_anchor
from .backend import LogBackend
from .errors import (
    CompactionRefusedError,
    CorruptLogError,
    GenerationChangedError,
    HeadMismatchError,
    ImportRefusedError,
    InvalidEventError,
    LedgerClosedError,
    LedgerError,
    LedgerIOError,
    LockTimeout,
    LogUnavailableError,
    NotOwnerError,
    StoreNotFoundError,
    UnsupportedFormatError,
    WriterPoisonedError,
)
from .event import Event, Receipt
from .ledger import SYNC_MODES, Ledger
from .memory import MemoryLog
from .records import Batch, StoredEvent
from .verify import Problem, VerifyReport

__all__ = [
    "SYNC_MODES",
    "Anchor",
    "Batch",
    "CompactionRefusedError",
    "CorruptLogError",
    "Event",
    "GenerationChangedError",
    "HeadMismatchError",
    "ImportRefusedError",
    "InvalidEventError",
    "Ledger",
    "LedgerClosedError",
    "LedgerError",
    "LedgerIOError",
    "LockTimeout",
    "LogBackend",
    "LogUnavailableError",
    "MemoryLog",
    "NotOwnerError",
    "Problem",
    "Receipt",
    "StoredEvent",
    "StoreNotFoundError",
    "UnsupportedFormatError",
    "VerifyReport",
    "WriterPoisonedError",
    "check_anchor",
    "head_anchor",
]
