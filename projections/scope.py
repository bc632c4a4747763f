"""Where a project's events, views and artifacts live: project scope or agent scope.

Pure path logic: nothing here creates, opens or writes a file (config files
are read by :mod:`projections.config`). Two places can hold a project's
context:

* **project scope** (the default): ``<canonical root>/.ctxledger/``, one store
  per project, its own log;
* **agent scope**: the agent home (``$CTXLEDGER_HOME``, default
  ``~/.ctxledger/``). Its log is shared by every project in agent scope; each
  event a project appends there carries the project's id, and every view of
  that project folds only its own events.

The agent home always holds the agent log, whatever the scope: token
calibration lives there, shared by every project. A broad root (the home
directory, the filesystem root) or a root that cannot be resolved never gets a
store of its own: it falls back to agent scope, and :class:`Layout` says why.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

import attrs

from eventstore import Event

HOME_ENV = "CTXLEDGER_HOME"
STORE_DIR = ".ctxledger"
SCOPES = ("project", "agent")
PROJECT_TAG = "project"
"""The data field that names an event's project in the agent log (agent scope)."""


def agent_home(env: Mapping[str, str] | None = None) -> Path:
    """``$CTXLEDGER_HOME`` made absolute, else ``~/.ctxledger``."""
    env = os.environ if env is None else env
    raw = env.get(HOME_ENV)
    if raw:
        return Path(os.path.abspath(os.path.expanduser(raw)))
    return Path(os.path.expanduser("~")) / STORE_DIR


def agent_log_dir(home: Path) -> Path:
    """The agent log: token calibration (whatever the scope), and agent-scope projects."""
    return home / "log"


def agent_checkpoints_dir(home: Path) -> Path:
    """Checkpoints of the agent's own views (calibration)."""
    return home / "checkpoints"


def canonical_root(root: str | os.PathLike[str]) -> Path | None:
    """``root`` absolute with every symlink resolved (a missing tail is kept as
    given); None when it cannot be resolved (a symlink loop, an unreadable or
    undecodable component)."""
    try:
        return Path(os.path.abspath(root)).resolve(strict=False)
    except (OSError, RuntimeError, ValueError):  # RuntimeError: a symlink loop (3.11, 3.12)
        return None


def project_id(canonical: Path) -> str:
    """The project's id: the first 32 hex digits of sha256 of its canonical root path."""
    raw = os.fsencode(str(canonical))
    return hashlib.sha256(raw).hexdigest()[:32]


def broad_root(canonical: Path) -> str | None:
    """Why ``canonical`` is too broad to hold a project store, or None if it is not."""
    if canonical == Path(canonical.anchor):
        return "the filesystem root"
    home = canonical_root(os.path.expanduser("~"))
    if home is not None and canonical == home:
        return "the home directory"
    return None


@attrs.frozen
class Layout:
    """The scope in force for one project root and the paths that follow from it."""

    root: Path
    """The root as given, made absolute."""
    canonical: Path
    """The root with symlinks resolved (the root as given when it cannot be)."""
    project_id: str
    scope: str
    """``project`` or ``agent``."""
    reason: str
    """Why this scope: ``default``, ``flag``, ``project config``, ``agent config``,
    ``config`` (a config object the caller passed), ``broad root`` or ``unresolvable root``."""
    detail: str
    """One line for people, saying the same with paths."""
    home: Path

    @property
    def fallback(self) -> bool:
        """Agent scope forced by the root itself (broad or unresolvable)."""
        return self.reason in ("broad root", "unresolvable root")

    @property
    def project_dir(self) -> Path:
        """``<canonical root>/.ctxledger``: the project store's place (used in project scope;
        its config.toml is read in either scope, unless the root is a fallback)."""
        return self.canonical / STORE_DIR

    @property
    def store_dir(self) -> Path:
        """The directory whose ``log/`` holds this project's events."""
        return self.project_dir if self.scope == "project" else self.home

    @property
    def log_dir(self) -> Path:
        return self.store_dir / "log"

    @property
    def marker(self) -> Path:
        """The directory whose existence says ``init`` ran for this project: its log in
        project scope; in agent scope, its own directory in the agent home (the shared
        log alone says nothing about which projects were initialised)."""
        if self.scope == "project":
            return self.log_dir
        return self.home / "projects" / self.project_id

    @property
    def checkpoints_dir(self) -> Path:
        if self.scope == "project":
            return self.project_dir / "checkpoints"
        return self.marker / "checkpoints"

    @property
    def artifacts_dir(self) -> Path:
        if self.scope == "project":
            return self.project_dir / "artifacts"
        return self.home / "artifacts" / self.project_id

    @property
    def tag(self) -> str | None:
        """The project id events carry in the shared agent log; None in project scope."""
        return self.project_id if self.scope == "agent" else None

    @property
    def agent_log_dir(self) -> Path:
        """The agent log (calibration, whatever the scope)."""
        return agent_log_dir(self.home)

    @property
    def config_paths(self) -> list[Path]:
        """Config files in force, weakest first: the agent's, then the project's."""
        paths = [self.home / "config.toml"]
        if not self.fallback:
            paths.append(self.project_dir / "config.toml")
        return paths


def resolve(
    root: str | os.PathLike[str],
    *,
    home: Path | None = None,
    flag: str | None = None,
    setting: str | None = None,
    setting_from: Path | None = None,
) -> Layout:
    """The layout for ``root``.

    ``flag`` (``--storage-scope``) beats ``setting`` (``[storage] scope`` as the
    config files set it, read by the caller: this function reads nothing;
    ``setting_from`` is the file that set it), which beats the default
    (``project``). A broad or unresolvable root is agent scope whatever was asked.
    """
    for value in (flag, setting):
        if value is not None and value not in SCOPES:
            raise ValueError(f"storage scope must be project or agent, not {value!r}")
    home = agent_home() if home is None else home
    given = Path(os.path.abspath(root))
    canon = canonical_root(given)
    pid = project_id(canon if canon is not None else given)

    def layout(scope: str, reason: str, detail: str) -> Layout:
        return Layout(given, canon or given, pid, scope, reason, detail, home)

    if canon is None:
        return layout("agent", "unresolvable root",
                      f"{given} cannot be resolved: its context lives in the agent home")
    broad = broad_root(canon)
    if broad is None and canonical_root(home) == canon / STORE_DIR:
        broad = "where the agent home is (its store would be the shared agent log)"
    if broad is not None:
        return layout("agent", "broad root",
                      f"{canon} is {broad}: no project store is made there; "
                      "its context lives in the agent home")
    if flag is not None:
        return layout(flag, "flag", f"--storage-scope {flag}")
    if setting is not None:
        if setting_from is None:
            return layout(setting, "config", f"[storage] scope = {setting!r} (the config given)")
        reason = "agent config" if setting_from == home / "config.toml" else "project config"
        return layout(setting, reason, f"[storage] scope = {setting!r} in {setting_from}")
    return layout("project", "default", "project scope is the default")


def tag_event(event: Event, project: str) -> Event:
    """``event`` with ``project`` in its data, for the shared agent log.

    Refuses (``ValueError``) data that already names another project: the field
    is reserved in agent scope.
    """
    data = event.data
    have = data.get(PROJECT_TAG, project)
    if have != project:
        raise ValueError(
            f"data field {PROJECT_TAG!r} is reserved in agent scope (it names the project)"
        )
    if PROJECT_TAG in data:
        return event
    return attrs.evolve(event, data={PROJECT_TAG: project, **data})


MAX_BATCH_ID = 200
"""The log's limit on an idempotency id (``eventstore``), the project prefix included."""


def scoped_batch_id(batch_id: str, project: str | None) -> str:
    """The idempotency id an append stores: in agent scope ``<project id>:<batch_id>``.

    The shared log's idempotency window spans every project: unprefixed, one
    project's retry of ``setup-1`` would be taken for another project's
    ``setup-1`` and silently not written. ``ValueError`` when the prefixed id
    is longer than the log accepts.
    """
    if project is None:
        return batch_id
    scoped = f"{project}:{batch_id}"
    if len(scoped) > MAX_BATCH_ID:
        raise ValueError(f"a batch id has at most {MAX_BATCH_ID - len(project) - 1} "
                         "characters in agent scope")
    return scoped


def is_project_event(event: Event, project: str) -> bool:
    """Does ``event`` belong to ``project`` in the shared agent log?"""
    data = event.data
    return isinstance(data, dict) and data.get(PROJECT_TAG) == project
