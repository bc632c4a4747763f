"""Finding and creating the store a project root is served by (its layout).

:mod:`projections.scope` decides, from paths and settings alone, which store
serves a root; this module reads the config files that settle it and makes
the directories (0700, a ``.gitignore``) when a store is created.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from eventstore import LedgerIOError, StoreNotFoundError, private

from . import scope
from .config import StoreConfig
from .scope import STORE_DIR, Layout


def store_dir(root: str | os.PathLike[str]) -> Path:
    """``root/.ctxledger``: where a project-scope store lives (:func:`open_layout` says
    which store is in force for a root)."""
    return Path(root) / STORE_DIR


GITIGNORE = b"# ctxledger: a store is private and rebuildable; never commit it\n*\n"


def open_layout(
    root: str | os.PathLike[str],
    *,
    home: Path | None = None,
    storage_scope: str | None = None,
    config: StoreConfig | None = None,
) -> tuple[Layout, StoreConfig]:
    """The layout in force for ``root`` and the settings that apply to it.

    Settings come from the agent home's config.toml, overridden key by key by
    the project's ``.ctxledger/config.toml`` (not read for a broad or
    unresolvable root), unless ``config`` is given. ``storage_scope`` (the
    command line's ``--storage-scope``) beats both.
    """
    first = scope.resolve(root, home=home, flag=storage_scope)
    if config is None:
        cfg, source = StoreConfig.load_layered(first.config_paths)
    else:
        cfg, source = config, None
    if first.fallback or storage_scope is not None or cfg.storage_scope is None:
        return first, cfg
    layout = scope.resolve(
        root, home=first.home, setting=cfg.storage_scope, setting_from=source
    )
    return layout, cfg


def init_layout(layout: Layout, *, with_log: bool = True) -> bool:
    """Create the directories ``layout`` needs where missing; True if its log is new.

    Every directory made here is 0700, whatever the umask; existing ones are
    left as they are. A store another user owns is refused (``NotOwnerError``)
    before anything is created in it. The store directory gets a ``.gitignore``
    of ``*``, so it is never committed by accident. New entries are synced,
    best effort. Nothing is ever created at a broad root: such a layout is
    agent scope, and only the agent home is touched.
    """
    base = layout.store_dir
    private.check_owner(base)
    new = not layout.log_dir.is_dir()
    dirs = [layout.checkpoints_dir]
    if with_log:
        dirs.insert(0, layout.log_dir)
    if layout.scope == "project":
        dirs.append(layout.artifacts_dir)
    try:
        for d in dirs:
            private.make_dirs(d, sync=True)
        _write_gitignore(base / ".gitignore")
    except OSError as e:
        raise LedgerIOError(f"cannot create {base}: {e.strerror or e}") from e
    return new


def store_exists(layout: Layout) -> bool:
    """Has ``init`` (or a writer) made the store this layout names?"""
    return layout.log_dir.is_dir() and layout.marker.is_dir()


def require_store(layout: Layout) -> None:
    """Raise :class:`StoreNotFoundError` unless :func:`store_exists`; it names the
    project's own directory in agent scope, where the shared log may well exist."""
    if not store_exists(layout):
        raise StoreNotFoundError(layout.store_dir if layout.scope == "project" else layout.marker)


def _write_gitignore(path: Path) -> None:
    try:
        fd = private.create_file(path, os.O_WRONLY | os.O_EXCL | os.O_NOFOLLOW)
    except FileExistsError:
        return  # the user's own rules stay as they are
    try:
        os.write(fd, GITIGNORE)
        os.fsync(fd)
    finally:
        os.close(fd)


def init_store(root: str | os.PathLike[str], **kw: Any) -> bool:
    """Create the store in force for ``root`` (:func:`open_layout`; ``kw`` as there)."""
    return init_layout(open_layout(root, **kw)[0])
