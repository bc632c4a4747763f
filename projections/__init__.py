"""ctxledger's views: folds over the log, and the agent-facing ContextStore."""

from .answers import (
    AmbiguousKeyError,
    AsOfError,
    CacheEntry,
    EntryPage,
    EntrySummary,
    PruneResult,
    PutResult,
    UnknownKeyError,
)
from .cache import CacheState, EntryRef
from .config import ConfigError, StoreConfig
from .packet import (
    InvalidPacketError,
    cache_key_of,
    canonical_bytes,
    check_packet,
    parse_packet_json,
)
from .runner import Projection, Runner, fold
from .store import ContextStore, init_store, replay, store_dir

__all__ = [
    "AmbiguousKeyError",
    "AsOfError",
    "CacheEntry",
    "CacheState",
    "ConfigError",
    "ContextStore",
    "EntryPage",
    "EntryRef",
    "EntrySummary",
    "InvalidPacketError",
    "Projection",
    "PruneResult",
    "PutResult",
    "Runner",
    "StoreConfig",
    "UnknownKeyError",
    "cache_key_of",
    "canonical_bytes",
    "check_packet",
    "parse_packet_json",
    "fold",
    "init_store",
    "replay",
    "store_dir",
]
