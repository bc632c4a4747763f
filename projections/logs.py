"""Which log a store folds from, and opening it: the one place that knows both backends.

The file log under the store is the default. ``[storage] backend = "jetstream"``
(or ``--backend jetstream`` with ``--servers``) keeps the log in a NATS
JetStream stream instead, shared by every machine that names it; the views,
checkpoints and artifacts stay on each machine (docs/architecture.md, "The
JetStream backend").
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

import attrs

from eventstore import Ledger, LogBackend

from .config import BACKENDS, ConfigError, StoreConfig, server_url_error
from .scope import Layout


@attrs.frozen
class LogChoice:
    """The backend in force for a store, with what it needs to open."""

    backend: str
    servers: tuple[str, ...] = ()
    stream: str = ""
    replicas: int = 1
    prefix: str = ""
    """The subjects a new stream gets: ``<prefix>.>``."""

    @property
    def is_file(self) -> bool:
        return self.backend == "file"

    def to_json(self) -> dict[str, object]:
        if self.is_file:
            return {"backend": "file"}
        return {"backend": self.backend, "servers": list(self.servers), "stream": self.stream,
                "replicas": self.replicas}


def log_choice(
    layout: Layout, cfg: StoreConfig, *, backend: str | None = None,
    servers: Sequence[str] = (),
) -> LogChoice:
    """The config's choice, with the command line's ``backend`` and ``servers`` over it."""
    name = backend or cfg.storage_backend
    if name not in BACKENDS:
        raise ValueError(f"unknown log backend {name!r} (known: {', '.join(BACKENDS)})")
    if name == "file":
        return LogChoice("file")
    for url in servers:
        why = server_url_error(url)
        if why is not None:
            raise ValueError(f"--servers: {why}")
    urls = tuple(servers) or cfg.storage_servers
    if not urls:
        raise ConfigError("the jetstream backend needs its servers: [storage] servers = "
                          "[\"nats://host:4222\"] in config.toml, or --servers URL")
    # the project's own id names the stream when the config names none; an agent home
    # (one log for many projects) is named by its path, so two agents do not share one
    owner = (hashlib.sha256(os.fsencode(str(layout.home))).hexdigest()[:16]
             if layout.scope == "agent" else layout.project_id[:16])
    kind = "agent" if layout.scope == "agent" else "project"
    stream = cfg.storage_stream or f"ctxledger_{kind}_{owner}"
    # subjects unique to the stream: two streams of one project (a backup, a move
    # between clusters) may live on one cluster without their subjects overlapping
    prefix = f"ctx.{layout.project_id if kind == 'project' else 'agent'}.{stream}"
    return LogChoice(name, urls, stream, cfg.storage_replicas, prefix)


def open_log(layout: Layout, choice: LogChoice, *, readonly: bool, sync: str = "always",
             create: bool | None = None) -> LogBackend:
    """Open the chosen log; a read-only open never creates a stream or a file, nor does
    a write open with ``create=False`` (a command other than ``init``)."""
    if choice.is_file:
        return Ledger.open(layout.log_dir, readonly=readonly, sync=sync)  # type: ignore[arg-type]
    from eventstore.jetstream import JetStreamLog

    return JetStreamLog(list(choice.servers), choice.stream, prefix=choice.prefix,
                        replicas=choice.replicas,
                        create=(not readonly) if create is None else create and not readonly)
