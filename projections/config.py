"""``.ctxledger/config.toml``: optional settings, read once at open."""

from __future__ import annotations

import math
import re
import tomllib
import unicodedata
from pathlib import Path
from typing import Any

import attrs

from eventstore import LedgerError

from .packet import DEFAULT_MAX_PACKET_BYTES

DEFAULT_TTL = 86_400
# when a writer checkpoints its views (docs/architecture.md, "When checkpoints are written")
CHECKPOINT_EVERY_EVENTS = 50_000
CHECKPOINT_EVERY_SECONDS = 30.0
CHECKPOINT_CLOSE_LAG = 256
KNOWN_SETTINGS: dict[str, tuple[str, ...]] = {
    "cache": ("ttl_seconds",),
    "store": ("max_packet_bytes", "sync"),
    "checkpoint": ("every_events", "every_seconds", "close_lag"),
    "storage": ("scope", "backend", "servers", "stream", "replicas"),
    "calibration": ("window",),
    "recall": ("provider", "model", "tier_bonus", "tier_penalty", "recency_weight"),
}
"""Every table of config.toml and its keys: anything else is a typo, and an error."""


class ConfigError(LedgerError):
    """config.toml exists but cannot be used."""


@attrs.frozen
class StoreConfig:
    ttl_seconds: float = DEFAULT_TTL
    max_packet_bytes: int = DEFAULT_MAX_PACKET_BYTES
    sync: str = "always"
    checkpoint_every_events: int = CHECKPOINT_EVERY_EVENTS
    checkpoint_every_seconds: float = CHECKPOINT_EVERY_SECONDS
    checkpoint_close_lag: int = CHECKPOINT_CLOSE_LAG
    storage_scope: str | None = None
    """``[storage] scope``: ``project`` or ``agent``; None when unset (the default applies)."""
    storage_backend: str = "file"
    """``[storage] backend``: ``file`` (the log under the store) or ``jetstream``."""
    storage_servers: tuple[str, ...] = ()
    """``[storage] servers``: NATS URLs of the JetStream cluster (any of its nodes)."""
    storage_stream: str | None = None
    """``[storage] stream``: the JetStream stream; None: one named after the project."""
    storage_replicas: int = 1
    """``[storage] replicas``: copies of a stream this store creates (1 to 5)."""
    calibration_window: int = 20
    """``[calibration] window``: how many of a profile's newest samples its multiplier uses."""
    recall_provider: str | None = None
    """``[recall] provider``: whose calibration recall's budget estimate uses by default."""
    recall_model: str | None = None
    """``[recall] model``: with ``provider``, the calibration profile recall uses by default."""
    recall_tier_bonus: float = 0.5
    """``[recall] tier_bonus``: added to the score of a packet of the preferred source
    tier (curated; telemetry in telemetry mode). docs/recall.md, "Memory and scoring"."""
    recall_tier_penalty: float = 0.25
    """``[recall] tier_penalty``: taken from the score of a packet of the other tier."""
    recall_recency_weight: float = 0.0
    """``[recall] recency_weight``: w in the recency term w / (1 + age in days); 0 (the
    default): off. Packet28 uses 0.25; docs/recall.md says what it costs."""

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
    _storage_log(kw, _table(doc, "storage", path), path)
    _num(kw, "calibration_window", _table(doc, "calibration", path).get("window"), path,
         positive=True, integer=True)
    if kw.get("calibration_window", 0) > MAX_WINDOW:
        raise ConfigError(f"{path}: [calibration] window must be at most {MAX_WINDOW} "
                          "(the samples kept per profile)")
    recall = _table(doc, "recall", path)
    for key in ("provider", "model"):
        value = recall.get(key)
        if value is not None:
            why = label_error(value)
            if why is not None:
                raise ConfigError(f"{path}: [recall] {key} {why}")
            kw[f"recall_{key}"] = value
    for key in ("tier_bonus", "tier_penalty", "recency_weight"):
        value = recall.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value) or not 0 <= value <= MAX_ADJUSTMENT:
            raise ConfigError(f"{path}: [recall] {key} must be a number from 0 to "
                              f"{MAX_ADJUSTMENT}")
        kw[f"recall_{key}"] = float(value)
    return kw


BACKENDS = ("file", "jetstream")
MAX_REPLICAS = 5
"""JetStream keeps at most five replicas of a stream."""
STREAM_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""Stream names this accepts: JetStream forbids spaces, dots, ``*``, ``>`` and slashes."""


def _storage_log(kw: dict[str, Any], storage: dict[str, Any], path: Path) -> None:
    """``[storage] backend``, ``servers``, ``stream`` and ``replicas``, checked."""
    backend = storage.get("backend")
    if backend is not None:
        if backend not in BACKENDS:
            raise ConfigError(f"{path}: [storage] backend must be file or jetstream")
        kw["storage_backend"] = backend
    servers = storage.get("servers")
    if servers is not None:
        if isinstance(servers, str):
            servers = [servers]
        if not isinstance(servers, list) or not servers:
            raise ConfigError(f"{path}: [storage] servers must be a list of NATS URLs")
        for url in servers:
            why = server_url_error(url)
            if why is not None:
                raise ConfigError(f"{path}: [storage] servers: {why}")
        kw["storage_servers"] = tuple(servers)
    stream = storage.get("stream")
    if stream is not None:
        if not isinstance(stream, str) or not STREAM_NAME.fullmatch(stream):
            raise ConfigError(f"{path}: [storage] stream must be 1 to 64 letters, digits, "
                              "'_' or '-'")
        kw["storage_stream"] = stream
    replicas = storage.get("replicas")
    if replicas is not None:
        if type(replicas) is not int or not 1 <= replicas <= MAX_REPLICAS:
            raise ConfigError(f"{path}: [storage] replicas must be an integer from 1 to "
                              f"{MAX_REPLICAS}")
        kw["storage_replicas"] = replicas


def server_url_error(url: object) -> str | None:
    """Why ``url`` is no NATS server URL (None: it is one): ``nats://host:port``,
    ``tls://``, ``ws://`` or ``wss://``, or a bare ``host:port``."""
    if type(url) is not str or not url:
        return "each server must be a non-empty string"
    if any(c.isspace() or unicodedata.category(c) == "Cc" for c in url) or "," in url:
        return f"{url!r} is not a URL (one URL per list item)"
    rest = url.split("://", 1)[1] if "://" in url else url
    scheme = url.split("://", 1)[0] if "://" in url else "nats"
    if scheme not in ("nats", "tls", "ws", "wss") or not rest or rest.startswith(":"):
        return f"{url!r} is not a NATS URL (nats://host:port)"
    return None


MAX_ADJUSTMENT = 100
"""Largest ``[recall]`` score adjustment: BM25 scores are of order 1 to 30."""


MAX_LABEL = 200
MAX_WINDOW = 200
"""The most samples a calibration profile keeps, hence the largest useful window."""


def label_error(value: object) -> str | None:
    """Why ``value`` is no provider, model or estimator name (None: it is one).

    A name is printed and compared: a non-empty string of at most 200
    characters with no control character (Unicode category Cc) and no lone
    surrogate (which no encoding can write).
    """
    if type(value) is not str:
        return "must be a string"
    if not value:
        return "must not be empty"
    if len(value) > MAX_LABEL:
        return f"must be at most {MAX_LABEL} characters"
    if not value.isprintable() and any(
        unicodedata.category(c) in ("Cc", "Cs") for c in value
    ):
        return "must not contain control characters"
    return None


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
