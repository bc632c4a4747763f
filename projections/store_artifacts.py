"""ContextStore's artifacts: entries written as content-addressed files (``--json=handle``).

A mixin of :class:`projections.store.ContextStore`. Artifacts are a cache beside
the log, not a change to the store: a readonly store writes and collects them
too (``store get`` opens readonly). See :mod:`projections.artifacts`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .answers import UnknownKeyError

if TYPE_CHECKING:
    from .artifacts import ArtifactDir, ArtifactRef, GcResult
    from .store import ContextStore


class Artifacts:
    """The artifact methods of :class:`ContextStore`."""

    @property
    def artifacts_dir(self: ContextStore) -> Path:
        """This store's artifact directory: every artifact path comes from here
        (``<store>/artifacts/`` in project scope, ``<agent home>/artifacts/<project id>/``
        in agent scope)."""
        return self.layout.artifacts_dir

    @property
    def artifacts(self: ContextStore) -> ArtifactDir:
        from .artifacts import ArtifactDir  # (hashlib loads OpenSSL: only when used)

        return ArtifactDir(self.artifacts_dir)

    def write_artifact(self: ContextStore, key: str) -> ArtifactRef:
        """Store the live entry ``key`` (or a unique prefix) as an artifact: the document
        ``store get --json`` prints, named by its sha256."""
        full = self.resolve_key(key)
        entry = self.get(full)
        if entry is None:  # expired since it was resolved
            raise UnknownKeyError(full)
        from .artifacts import entry_document

        return self.artifacts.write(entry_document(entry))

    def artifact_gc(self: ContextStore, dry_run: bool = False) -> GcResult:
        """Remove artifacts whose entry is not live here (pruned or expired), and damaged ones."""
        return self.artifacts.gc(self._live_key_now(), dry_run=dry_run)

    def artifact_stats(self: ContextStore) -> dict[str, Any]:
        """Count, bytes, orphans and damaged artifacts (for storage diagnostics)."""
        return self.artifacts.stats(self._live_key_now())

    def _live_key_now(self: ContextStore) -> Callable[[str], bool]:
        """``is_live(cache_key)`` for the cache as it is now (synced once, here)."""
        self._sync()
        live_after = self._live_after()
        state = self._cache()

        def is_live(key: str) -> bool:
            ref = state.get(key)
            self._check_mapped()  # a gc decision is never made from a rewritten view
            return ref is not None and ref.created_at > live_after

        return is_live
