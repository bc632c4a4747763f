"""The ``ctxledger`` command: the click group, lazy command loading, and the one error boundary.

Adding a command is one line in :data:`COMMANDS` (``name -> "module:attribute"``);
its module is imported only when that command runs (or help lists it), so a
cold ``ctxledger store get`` does not pay for recall or the demo.

:meth:`CtxGroup.main` is the only place that turns exceptions into exit codes:

====================================  ===============================  =====
raised                                printed on stderr                 exit
====================================  ===============================  =====
``LedgerError``, ``OSError``          ``error: <message>``              1
``click.ClickException``              ``error: <message>``              1
click usage errors                    ``error: <message> (try ...)``    2
``KeyboardInterrupt`` (Ctrl-C)        nothing                           130
stdout closed early (``| head``)      nothing                           1
anything else                         ``error: internal error: ...``    1
====================================  ===============================  =====

``CTXLEDGER_DEBUG=1`` re-raises unexpected exceptions with their traceback.
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from eventstore import LedgerError

from .options import examples, group_options
from .output import safe

COMMANDS: dict[str, str] = {
    "init": "cli.core:init",
    "log": "cli.log:log",
    "verify": "cli.core:verify",
    "store": "cli.store:store",
    "replay": "cli.maintain:replay",
    "rebuild": "cli.maintain:rebuild",
    "checkpoint": "cli.maintain:checkpoint",
    "demo": "cli.demo:demo",
    "recall": "cli.recall:recall",
    "task": "cli.task:task",
    "agent": "cli.agent:agent",
    "artifact": "cli.artifact:artifact",
    "calibration": "cli.calibration:calibration",
    "mcp": "cli.mcp:mcp",
    "storage": "cli.storage:storage",
    "compact": "cli.compact:compact",
    "salvage": "cli.compact:salvage",
}
"""Every top-level command: name -> ``"module:attribute"`` of a click command or group."""

DEBUG_ENV = "CTXLEDGER_DEBUG"
_NO_ARGS_IS_HELP: type[click.UsageError] | tuple[()] = getattr(
    click.exceptions, "NoArgsIsHelpError", ()
)  # click >= 8.2
EXIT_INTERRUPTED = 130


class CtxGroup(click.Group):
    """A group that loads its commands lazily and owns the error boundary."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            self.add_command(self._load(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def _load(self, name: str) -> click.Command:
        """Import one command; one that cannot load must not take ``--help`` down with it."""
        target = self.lazy[name]
        module, _, attr = target.partition(":")
        try:
            cmd = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            return _unavailable(name, f"{type(e).__name__}: {e}")
        if not isinstance(cmd, click.Command):
            return _unavailable(name, f"{target} is not a click command")
        return cmd

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command; map every failure to one stderr line and an exit code."""
        code = run_guarded(
            lambda: super(CtxGroup, self).main(
                args, prog_name or "ctxledger", complete_var, standalone_mode=False, **extra
            )
        )
        if standalone_mode:
            sys.exit(code)
        return code


def _unavailable(name: str, why: str) -> click.Command:
    """A stand-in for a command whose module failed to import: it fails with the reason."""

    def fail() -> None:
        raise click.ClickException(f"command '{name}' is unavailable ({why})")

    cmd = click.Command(name, callback=fail, help=f"(unavailable: {why})")
    cmd.unavailable = why  # type: ignore[attr-defined]
    return cmd


def run_guarded(invoke: Any) -> int:
    """Call ``invoke`` (click's non-standalone main) and return the process exit code."""
    try:
        try:
            rv = invoke()
            code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
            return _finish_stdout(code)
        except click.exceptions.Abort:  # click's wrapper around Ctrl-C
            return EXIT_INTERRUPTED
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
        except _NO_ARGS_IS_HELP as e:  # bare `ctxledger` / `ctxledger log`: help, as click does
            e.show()
            return e.exit_code
        except click.UsageError as e:
            hint = f" (try '{e.ctx.command_path} --help')" if e.ctx is not None else ""
            return _fail(e.format_message() + hint, e.exit_code)
        except click.ClickException as e:
            return _fail(e.format_message(), e.exit_code)
        except LedgerError as e:
            return _fail(str(e), 1)
        except OSError as e:
            if _is_broken_pipe(e):
                return _silence_stdout()
            return _fail(_os_message(e), 1)
        except SystemExit as e:  # click exits 1 itself on EPIPE; keep it quiet
            return _finish_stdout(e.code if isinstance(e.code, int) else 1)
        except Exception as e:
            if os.environ.get(DEBUG_ENV):
                raise
            return _fail(
                f"internal error: {type(e).__name__}: {e} (set {DEBUG_ENV}=1 for a traceback)", 1
            )
    except KeyboardInterrupt:  # Ctrl-C while printing the error itself
        return EXIT_INTERRUPTED


def _fail(message: str, code: int) -> int:
    # one line, whatever the message held: it may quote input (or a stored string)
    line = safe(str(message).strip())
    try:
        click.echo(f"error: {line}", err=True)
    except OSError:
        pass
    return code


def _os_message(e: OSError) -> str:
    what = e.strerror or str(e)
    return f"{what}: {e.filename}" if e.filename else what


def _is_broken_pipe(e: BaseException) -> bool:
    return isinstance(e, BrokenPipeError) or getattr(e, "errno", None) == errno.EPIPE


def _finish_stdout(code: int) -> int:
    """Flush stdout now, so a reader that went away is noticed here, not at interpreter exit."""
    for stream in (sys.stdout, sys.__stdout__):
        try:
            if stream is not None:
                stream.flush()
        except ValueError:  # already closed
            pass
        except OSError as e:
            if _is_broken_pipe(e):
                return _silence_stdout()
            return _fail(f"cannot write output: {_os_message(e)}", 1)
    return code


def _silence_stdout() -> int:
    """Point fd 1 at /dev/null so buffered output does not fail again at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (a test runner's buffer): nothing to silence
    return 1


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``; importlib.metadata loads only here (it costs ~10 ms of every start)."""
    if not value or ctx.resilient_parsing:
        return
    from importlib import metadata

    try:
        version = metadata.version("ctxledger")
    except metadata.PackageNotFoundError:
        version = "unknown"
    click.echo(f"ctxledger {version}")
    ctx.exit()


@examples("ctxledger init && ctxledger store list", "ctxledger --json --root ~/src/project verify")
@click.group(
    cls=CtxGroup,
    name="ctxledger",
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@group_options
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def ctxledger() -> None:
    """ctxledger: an event-sourced context store for coding agents.

    Every change is an append-only, checksummed, hash-chained event in
    ROOT/.ctxledger/log/; every view is rebuilt from that log. Each command
    takes --root DIR and --json (one JSON document on stdout), before or after
    its name. Exit codes: 0 ok, 1 operation failed, 2 usage error.
    """


ENV_DEFAULTS = {"OPENBLAS_NUM_THREADS": "1"}
"""Set by :func:`main` unless the caller set them, before anything imports numpy.

numpy's OpenBLAS starts a thread pool per core when numpy is imported and
stops it at exit; ctxledger does no linear algebra. On this 2-core machine,
busy, ``python -c "import numpy"`` took 150-220 ms with the pool and 75-100 ms
without (docs/architecture.md, "Cold start")."""


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point (``ctxledger = "cli.main:main"``).

    Ends the process with ``os._exit`` once the command is done and its output
    flushed: the interpreter's teardown (freeing every module and object,
    numpy's included) costs a cold ``recall`` 20-35 ms here and has nothing
    left to do. By then click has closed every resource of the command (the
    store, the log, their locks), and ctxledger writes files with ``os.write``
    and ``fsync``, never through buffers left to a finalizer.
    """
    for name, value in ENV_DEFAULTS.items():
        os.environ.setdefault(name, value)
    code = ctxledger.main(argv, prog_name="ctxledger", standalone_mode=False)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away: already reported
            pass
    os._exit(code)
