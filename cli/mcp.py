"""``ctxledger mcp``: serve the store to MCP clients (coding agents) over stdio.

The server itself is ``ctxledger_mcp`` and needs the ``mcp`` extra; it is
imported only when serving, so ``ctxledger --help`` and ``mcp config`` work
without it, and serving without it is one line saying how to install it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from projections.scope import HOME_ENV

from .options import Ctx, examples, group_options, store_options
from .output import safe
from .views import open_store

INSTALL = "pip install 'ctxledger[mcp]'"
SERVER_NAME = "ctxledger"
CLIENTS = ("claude", "cursor", "generic")


@examples("ctxledger mcp --root ~/src/project",
          "ctxledger mcp config --client claude > .mcp.json")
@click.group("mcp", invoke_without_command=True)
@group_options
@click.pass_context
def mcp(cctx: click.Context) -> None:
    """Serve the store to an MCP client (Claude Code, Cursor, ...) over stdin/stdout.

    Tools: recall, put, get, list, stats, task_*, handoff, bootstrap,
    latest_handoff, verify (docs/mcp.md). stdout carries only the protocol; logs
    go to stderr. Runs until stdin closes or SIGTERM, then closes the store
    (checkpoints written). `mcp config` prints what a client needs to start it.
    """
    if cctx.invoked_subcommand is None:
        cctx.invoke(serve)


@click.command("serve")
@store_options
def serve(ctx: Ctx) -> None:
    """Serve the store over stdio (``ctxledger mcp`` without a subcommand)."""
    ctx.require_store()  # before the import (~0.6 s): a mistyped --root fails at once
    try:
        from ctxledger_mcp import server
    except ImportError as e:
        raise click.ClickException(f"the MCP server needs the mcp package ({e}): {INSTALL}") \
            from None
    store = open_store(ctx, write=True)  # long-lived: checkpoints read, not mapped
    log = "" if ctx.log_choice.is_file else f", log in {ctx.log_name()}"
    click.echo(f"ctxledger mcp: serving {safe(str(ctx.store_dir) + log)} over stdio (pid "
               f"{os.getpid()})", err=True)
    if sys.stdin.isatty():  # a person ran it: the protocol is for a client to speak
        click.echo("ctxledger mcp: an MCP client starts this command and speaks JSON-RPC on "
                   "stdin; `ctxledger mcp config` prints how to register it. Ctrl-C to stop.",
                   err=True)
    server.serve(store)


@examples("ctxledger mcp config --client claude > .mcp.json",
          "ctxledger mcp config --root ~/src/project --client cursor")
@mcp.command("config")
@store_options
@click.option("--client", type=click.Choice(CLIENTS), default="generic", show_default=True,
              help="claude: a .mcp.json file; cursor: .cursor/mcp.json; generic: one server's "
                   "command, args and env (`claude mcp add-json`, other clients).")
def mcp_config(ctx: Ctx, client: str) -> None:
    """Print the JSON a client needs to start this store's MCP server.

    The command is the ctxledger console script beside this Python (else this
    Python with -m cli), with absolute paths, so the client needs no PATH.
    """
    ctx.require_store()
    try:
        root = os.fsencode(ctx.root).decode("utf-8")
    except UnicodeDecodeError:
        raise click.ClickException(
            f"the root {safe(str(ctx.root))} is not UTF-8 text, which a JSON config cannot "
            "hold; use a root whose path is") from None
    cmd = server_command(root, ctx.storage_scope, os.environ.get(HOME_ENV), ctx.backend,
                         ctx.servers)
    click.echo(json.dumps(client_config(client, cmd), indent=2))


def server_command(root: str, storage_scope: str | None = None,
                   home: str | None = None, backend: str | None = None,
                   servers: tuple[str, ...] = ()) -> dict[str, Any]:
    """``{"command", "args", "env"}`` that start ``ctxledger mcp --root ROOT`` (with the
    ``--storage-scope``, ``--backend``, ``--servers`` and ``$CTXLEDGER_HOME`` this
    command was given, so the server opens the same store)."""
    exe = os.path.abspath(sys.executable)  # not resolved: a venv's python is a symlink
    script = Path(exe).parent / "ctxledger"
    args = ["mcp", "--root", root]
    if storage_scope is not None:
        args += ["--storage-scope", storage_scope]
    if backend is not None:
        args += ["--backend", backend]
    for url in servers:
        args += ["--servers", url]
    env: dict[str, str] = {}
    if home:
        env[HOME_ENV] = os.path.abspath(home)
    if script.is_file() and os.access(script, os.X_OK):
        return {"command": str(script), "args": args, "env": env}
    if not _installed():  # running from a checkout: the client's Python must find cli/
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    return {"command": exe, "args": ["-m", "cli", *args], "env": env}


def client_config(client: str, cmd: dict[str, Any]) -> dict[str, Any]:
    """The snippet for ``client``: its file format around the server's command."""
    if client == "claude":  # .mcp.json (project scope) / ~/.claude.json
        return {"mcpServers": {SERVER_NAME: {"type": "stdio", **cmd}}}
    if client == "cursor":  # .cursor/mcp.json / ~/.cursor/mcp.json
        return {"mcpServers": {SERVER_NAME: cmd}}
    return {"type": "stdio", **cmd}


def _installed() -> bool:
    from importlib import metadata

    try:
        metadata.distribution("ctxledger")
    except metadata.PackageNotFoundError:
        return False
    return True
