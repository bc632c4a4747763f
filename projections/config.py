"""``.ctxledger/config.toml``: optional settings, read once at open."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

import attrs

from eventstore import LedgerError

from .packet import DEFAULT_MAX_PACKET_BYTES

DEFAULT_TTL = 86_400


class ConfigError(LedgerError):
    """config.toml exists but cannot be used."""


@attrs.frozen
class StoreConfig:
    ttl_seconds: float = DEFAULT_TTL
    max_packet_bytes: int = DEFAULT_MAX_PACKET_BYTES
    sync: str = "always"
    checkpoint_every_events: int = 50_000
    checkpoint_every_seconds: float = 30.0
    checkpoint_close_lag: int = 256

    @classmethod
    def load(cls, path: Path) -> StoreConfig:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls()
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror}") from e
        try:
            doc: dict[str, Any] = tomllib.loads(raw.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: invalid TOML: {e}") from None
        cache, store, ckpt = (_table(doc, n, path) for n in ("cache", "store", "checkpoint"))
        kw: dict[str, Any] = {}
        _num(kw, "ttl_seconds", cache.get("ttl_seconds"), path, positive=True)
        _num(
            kw, "max_packet_bytes", store.get("max_packet_bytes"), path, positive=True, integer=True
        )
        _num(
            kw,
            "checkpoint_every_events",
            ckpt.get("every_events"),
            path,
            positive=True,
            integer=True,
        )
        _num(kw, "checkpoint_every_seconds", ckpt.get("every_seconds"), path, positive=True)
        _num(kw, "checkpoint_close_lag", ckpt.get("close_lag"), path, positive=True, integer=True)
        sync = store.get("sync")
        if sync is not None:
            if sync not in ("always", "batch", "none"):
                raise ConfigError(f"{path}: [store] sync must be always, batch or none")
            kw["sync"] = sync
        return cls(**kw)


def _table(doc: dict[str, Any], name: str, path: Path) -> dict[str, Any]:
    value = doc.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {name} must be a table ([{name}])")
    return value


def _num(
    kw: dict[str, Any],
    name: str,
    value: object,
    path: Path,
    *,
    positive: bool,
    integer: bool = False,
) -> None:
    if value is None:
        return
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    ok = ok and math.isfinite(value)  # type: ignore[arg-type]  # inf/nan: TOML has both
    if not ok or isinstance(value, bool) or (positive and value <= 0):  # type: ignore[operator]
        kind = "a positive integer" if integer else "a positive number"
        raise ConfigError(f"{path}: {name} must be {kind}")
    kw[name] = value
