"""What every command shares: ``--root``/``--json``, the :class:`Ctx`, help examples.

A command is decorated with :func:`store_options` and receives a :class:`Ctx`
as its first argument. ``Ctx`` knows where the store lives, opens it (read
commands readonly, so they never create or modify a file), and prints results
with :meth:`Ctx.emit` — one JSON document with ``--json``, text otherwise::

    @examples("ctxledger log show --kind task.created --limit 5")
    @log.command("show")
    @store_options
    def log_show(ctx: Ctx) -> None:
        \"\"\"Print events.\"\"\"
        led = ctx.ledger()                 # readonly; closed when the command ends
        ctx.emit({"events": [...]})

A group takes :func:`group_options`, so ``ctxledger --json store list`` and
``ctxledger store --root D list`` mean what ``ctxledger store list --json``
does (the value nearest the command wins). Input types live in :mod:`cli.inputs`.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import click

from eventstore import Ledger

from . import output
from .inputs import COUNT as COUNT  # (re-exported: commands written before cli.inputs)
from .inputs import JSON_OBJECT as JSON_OBJECT
from .inputs import SEQ as SEQ
from .inputs import check_text_arguments
from .inputs import read_stdin_bytes as read_stdin_bytes

STORE_DIR = ".ctxledger"
ROOT_ENV = "CTXLEDGER_ROOT"
_ROOT_META, _JSON_META = "ctxledger.root", "ctxledger.json"  # set by a group's options
_SCOPE_META = "ctxledger.storage_scope"
_BACKEND_META, _SERVERS_META = "ctxledger.backend", "ctxledger.servers"
SCOPE_CHOICES = ("project", "agent")

if TYPE_CHECKING:
    from eventstore import LogBackend
    from projections.logs import LogChoice
    from projections.scope import Layout

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=click.Command)
T = TypeVar("T")


@attrs.define
class Ctx:
    """Per-invocation state: the store's location, the output mode, open resources."""

    root: Path
    json: bool = False
    root_given: bool = False  # --root (at any level) or $CTXLEDGER_ROOT chose the root
    storage_scope: str | None = None  # --storage-scope, if given
    backend: str | None = None  # --backend, if given
    servers: tuple[str, ...] = ()  # --servers, if given
    _layout: Layout | None = None
    _choice: LogChoice | None = None
    json_mode: str | None = None
    """With :func:`json_modes`: the ``--json=MODE`` asked for (None without --json)."""

    # --- layout ---------------------------------------------------------------------

    @property
    def layout(self) -> Layout:
        """Which store is in force for the root, and why (project or agent scope)."""
        if self._layout is None:
            from projections.logs import log_choice
            from projections.storedir import open_layout  # config files are read here, once

            self._layout, cfg = open_layout(self.root, storage_scope=self.storage_scope)
            try:
                self._choice = log_choice(self._layout, cfg, backend=self.backend,
                                          servers=self.servers)
            except ValueError as e:
                raise click.UsageError(str(e)) from None
        return self._layout

    @property
    def log_choice(self) -> LogChoice:
        """The log backend in force: config ``[storage] backend``, or ``--backend``."""
        self.layout  # noqa: B018 - settles the choice with the layout
        assert self._choice is not None
        return self._choice

    def store_options(self) -> dict[str, Any]:
        """What :meth:`ContextStore.open` and ``replay`` take from the command line."""
        return {"storage_scope": self.storage_scope, "backend": self.backend,
                "servers": self.servers}

    @property
    def store_dir(self) -> Path:
        """The directory whose ``log/`` holds this project's events."""
        return self.layout.store_dir

    @property
    def log_dir(self) -> Path:
        return self.layout.log_dir

    @property
    def checkpoints_dir(self) -> Path:
        return self.layout.checkpoints_dir

    @property
    def artifacts_dir(self) -> Path:
        return self.layout.artifacts_dir

    def require_store(self) -> None:
        """Fail with one clear line unless ``ctxledger init`` has run at this root (for a
        JetStream log, opening it says whether its stream exists)."""
        from projections.storedir import require_store

        if self.log_choice.is_file:
            require_store(self.layout)

    # --- resources ------------------------------------------------------------------

    def ledger(self, *, write: bool = False) -> LogBackend:
        """The project log, whichever backend it is, closed when the command ends.

        Readonly unless ``write``: a read command never creates or changes a file
        (or a stream). Either way the store must exist; only ``init`` creates one.
        """
        from projections.logs import open_log

        self.require_store()
        return self.managed(open_log(self.layout, self.log_choice, readonly=not write,
                                     create=False))

    def file_ledger(self, what: str, *, write: bool = False) -> Ledger:
        """The project's file log, for the commands that work on files (``what``)."""
        choice = self.log_choice
        if not choice.is_file:
            raise click.ClickException(
                f"{what} works on the file log; this store's log is the {choice.backend} "
                f"stream {choice.stream!r} (see `ctxledger log mirror`)")
        self.require_store()
        return self.managed(Ledger.open(self.log_dir, readonly=not write))

    def log_name(self) -> str:
        """Where the log is, for messages: its directory, or its stream."""
        choice = self.log_choice
        return str(self.log_dir) if choice.is_file else f"{choice.backend} stream {choice.stream}"

    def managed(self, resource: T) -> T:
        """Close ``resource`` (anything with ``close()`` or a context manager) at command end."""
        cctx = click.get_current_context()
        if isinstance(resource, AbstractContextManager):
            cctx.with_resource(resource)
        else:
            cctx.call_on_close(resource.close)  # type: ignore[attr-defined]
        return resource

    # --- output ---------------------------------------------------------------------

    def emit(self, obj: Any, human: str | Callable[[Any], str] | None = None) -> None:
        """Print ``obj``: one JSON document with ``--json``; else ``human`` (or a default form)."""
        if self.json:
            click.echo(output.dumps(obj))
            return
        text = human(obj) if callable(human) else human if human is not None else output.human(obj)
        if text:  # formatters escape each field; this keeps anything they missed inert
            click.echo(output.safe(text, multiline=True))

    def emit_lines(self, lines: Iterable[str]) -> None:
        """Stream text lines (human forms of long listings) without holding them all."""
        out = sys.stdout
        safe = output.safe
        for line in lines:
            out.write(safe(line) + "\n")
        out.flush()

    def emit_jsonl(self, obj: Any) -> None:
        """One compact JSON object on one line (``log tail --follow --json`` only)."""
        click.echo(output.dumps(obj, compact=True))
        sys.stdout.flush()

    def warn(self, warnings: Iterable[str]) -> None:
        """For people, one ``warning: ...`` line each on stderr (``--json`` carries them
        in its document instead); never changes the exit code."""
        if not self.json:
            for w in warnings:  # they name paths and stored text: escaped like any output
                click.echo(f"warning: {output.safe(w)}", err=True)

    def exit(self, code: int) -> None:
        """End the command with ``code`` after its output (e.g. 1 from a failed verify)."""
        raise click.exceptions.Exit(code)


def resolve_root(root: Path | None) -> Path:
    """``--root``, else ``$CTXLEDGER_ROOT``, else the current directory; made absolute."""
    if root is None:
        env = os.environ.get(ROOT_ENV)
        root = Path(env) if env else Path.cwd()
    return Path(os.path.abspath(root))


_ROOT_HELP = (
    f"Project root; the store is ROOT/{STORE_DIR}/. "
    f"Default: ${ROOT_ENV}, else the current directory."
)
_JSON_HELP = "Print one JSON document on stdout."
_SCOPE_HELP = (
    "Where the project's context lives: project (ROOT/.ctxledger/) or agent (the agent "
    "home, $CTXLEDGER_HOME or ~/.ctxledger/). Default: [storage] scope in config, else project."
)


_BACKEND_HELP = ("Where the log lives: file (ROOT/.ctxledger/log/) or jetstream (a NATS "
                 "JetStream stream, shared by machines). Default: [storage] backend in config, "
                 "else file.")
_SERVERS_HELP = ("NATS server URL for --backend jetstream (repeat it, or separate URLs with "
                 "commas). Default: [storage] servers in config.")


def _backend_options(*, group: bool = False) -> Callable[[F], F]:
    """``--backend`` and ``--servers``; on a group, remembered for every command below."""
    tail = " (For every command below.)" if group else ""

    def kw(meta: str) -> dict[str, Any]:
        return {"expose_value": False, "callback": _remember(meta)} if group else {}

    def add(f: F) -> F:
        f = click.option("--servers", multiple=True, metavar="URL", help=_SERVERS_HELP + tail,
                         **kw(_SERVERS_META))(f)
        return click.option("--backend", type=click.Choice(("file", "jetstream")),
                            default=None, help=_BACKEND_HELP + tail, **kw(_BACKEND_META))(f)

    return add


def split_servers(values: Iterable[str]) -> tuple[str, ...]:
    """``--servers a --servers b,c`` -> (a, b, c)."""
    return tuple(u.strip() for v in values for u in v.split(",") if u.strip())


def _scope_option(**kw: Any) -> Callable[[F], F]:
    return click.option(
        "--storage-scope", type=click.Choice(SCOPE_CHOICES), default=None, **kw
    )


def _root_option(**kw: Any) -> Callable[[F], F]:
    return click.option(
        "--root", type=click.Path(file_okay=False, path_type=Path), default=None, **kw
    )


def store_options(f: F) -> F:
    """Add ``--root`` and ``--json`` to a command and pass it a :class:`Ctx` first.

    Values given to an enclosing group (:func:`group_options`) count too; the
    command's own win. Text arguments are checked to be UTF-8 here, once for all.
    """
    return _with_store_options(f, ())


def json_modes(*modes: str, help: str) -> Callable[[F], F]:
    """:func:`store_options` whose ``--json`` takes an optional ``=MODE`` (one of ``modes``).

    ``--json`` alone (or a group's ``--json``) means the first mode, so the
    command reads as every other; ``--json=MODE`` picks another; any other value
    is a usage error. The mode reaches the command as ``ctx.json_mode``.
    """
    return lambda f: _with_store_options(f, modes, help)


def _with_store_options(f: F, modes: tuple[str, ...], json_help: str = _JSON_HELP) -> F:
    json_option = (
        click.option("--json", "as_json", type=click.Choice(modes), is_flag=False,
                     flag_value=modes[0], default=None, metavar=f"[={'|'.join(modes)}]",
                     help=json_help)
        if modes else click.option("--json", "as_json", is_flag=True, help=json_help)
    )

    @json_option
    @_backend_options()
    @_scope_option(help=_SCOPE_HELP)
    @_root_option(help=_ROOT_HELP)
    @functools.wraps(f)
    def command(
        *args: Any, root: Path | None, as_json: bool | str | None, storage_scope: str | None,
        backend: str | None, servers: tuple[str, ...], **kwargs: Any,
    ) -> Any:
        cctx = click.get_current_context()
        check_text_arguments(cctx, kwargs)
        if root is None:
            root = cctx.meta.get(_ROOT_META)
        given = root is not None or bool(os.environ.get(ROOT_ENV))
        if not as_json and cctx.meta.get(_JSON_META):
            as_json = modes[0] if modes else True
        mode = as_json if isinstance(as_json, str) else None
        scope = storage_scope or cctx.meta.get(_SCOPE_META)
        backend = backend or cctx.meta.get(_BACKEND_META)
        urls = split_servers(servers or cctx.meta.get(_SERVERS_META, ()))
        return f(Ctx(resolve_root(root), bool(as_json), given, scope, backend, urls,
                     json_mode=mode), *args, **kwargs)

    return command  # type: ignore[return-value]


def _remember(key: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value:  # ctx.meta is shared by every context under this one
            ctx.meta[key] = value

    return callback


def group_options(f: F) -> F:
    """``--root``/``--json`` on a group, for every command under it (which may override)."""
    f = click.option(
        "--json", is_flag=True, expose_value=False, callback=_remember(_JSON_META),
        help=f"{_JSON_HELP} (For every command below.)",
    )(f)
    f = _scope_option(
        expose_value=False, callback=_remember(_SCOPE_META),
        help=f"{_SCOPE_HELP} (For every command below.)",
    )(f)
    f = _backend_options(group=True)(f)
    return _root_option(
        expose_value=False, callback=_remember(_ROOT_META),
        help=f"{_ROOT_HELP} (For every command below.)",
    )(f)


def examples(*lines: str) -> Callable[[C], C]:
    """End a command's ``--help`` with ``Examples:`` and these command lines, unwrapped.

    Put it above ``@click.command`` (it sets the command's epilog); a test walks
    every command and checks each has examples that name real options.
    """

    def add(cmd: C) -> C:
        cmd.epilog = "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)
        return cmd

    return add
