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
KNOWN_SETTINGS: dict[str, tuple[str, ...]] = {
    "cache": ("ttl_seconds",),
    "store": ("max_packet_bytes", "sync"),
    "checkpoint": ("every_events", "every_seconds", "close_lag"),
    "storage": ("scope",),
}
"""Every table of config.toml and its keys: anything else is a typo, and an error."""


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
    storage_scope: str | None = None
    """``[storage] scope``: ``project`` or ``agent``; None when unset (the default applies)."""

    @classmethod
    def load(cls, path: Path) -> StoreConfig:
        return cls(**_settings(path))

    @classmethod
    def load_layered(cls, paths: list[Path]) -> tuple[StoreConfig, Path | None]:
        """Settings from several files, each a layer over the ones before it (the
        agent home's config, then the project's): a key set later wins. Also
        returns the file that set ``[storage] scope`` (None: none did)."""
        kw: dict[str, Any] = {}
        scope_from = None
        for path in paths:
            layer = _settings(path)
            if "storage_scope" in layer:
                scope_from = path
            kw.update(layer)
        return cls(**kw), scope_from


def _settings(path: Path) -> dict[str, Any]:
    """The settings ``path`` sets (validated), as StoreConfig keywords; {} if it is absent."""
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from e
    try:
        doc: dict[str, Any] = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    _no_unknown(doc, path)
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
    scope = _table(doc, "storage", path).get("scope")
    if scope is not None:
        if scope not in ("project", "agent"):
            raise ConfigError(f"{path}: [storage] scope must be project or agent")
        kw["storage_scope"] = scope
    return kw


def _no_unknown(doc: dict[str, Any], path: Path) -> None:
    """A misspelt setting would silently keep its default: refuse it, naming it."""
    for name, value in doc.items():
        keys = KNOWN_SETTINGS.get(name)
        if keys is None:
            known = ", ".join(f"[{t}]" for t in KNOWN_SETTINGS)
            raise ConfigError(f"{path}: unknown table or key {name!r} (known: {known})")
        if isinstance(value, dict):
            for key in value:
                if key not in keys:
                    raise ConfigError(
                        f"{path}: unknown setting [{name}] {key!r} (known: {', '.join(keys)})"
                    )


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
