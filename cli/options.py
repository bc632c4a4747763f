"""What every command shares: ``--root``/``--json``, the :class:`Ctx`, and input types.

A command is decorated with :func:`store_options` and receives a :class:`Ctx`
as its first argument. ``Ctx`` knows where the store lives, opens it (read
commands readonly, so they never create or modify a file), and prints results
with :meth:`Ctx.emit` — one JSON document with ``--json``, text otherwise::

    @log.command("show")
    @store_options
    def log_show(ctx: Ctx) -> None:
        \"\"\"Print events.\"\"\"
        led = ctx.ledger()                 # readonly; closed when the command ends
        ctx.emit({"events": [...]})
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

import attrs
import click

from eventstore import Ledger, StoreNotFoundError

from . import output

STORE_DIR = ".ctxledger"
MAX_DATA_DEPTH = 200
"""Deepest ``--data`` accepted. The CBOR decoder refuses payloads nested past 400
levels, so deeper data could be written but never read back; stop it at the door."""
ROOT_ENV = "CTXLEDGER_ROOT"

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


@attrs.define
class Ctx:
    """Per-invocation state: the store's location, the output mode, open resources."""

    root: Path
    json: bool = False

    # --- layout ---------------------------------------------------------------------

    @property
    def store_dir(self) -> Path:
        return self.root / STORE_DIR

    @property
    def log_dir(self) -> Path:
        return self.store_dir / "log"

    @property
    def checkpoints_dir(self) -> Path:
        return self.store_dir / "checkpoints"

    @property
    def artifacts_dir(self) -> Path:
        return self.store_dir / "artifacts"

    def require_store(self) -> None:
        """Fail with one clear line unless ``ctxledger init`` has run at this root."""
        if not self.log_dir.is_dir():
            raise StoreNotFoundError(self.store_dir)

    # --- resources ------------------------------------------------------------------

    def ledger(self, *, write: bool = False) -> Ledger:
        """The project log, closed when the command ends.

        Readonly unless ``write``: a read command never creates or changes a file.
        Either way the store must exist; only ``init`` creates one.
        """
        self.require_store()
        return self.managed(Ledger.open(self.log_dir, readonly=not write))

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
        if text:
            click.echo(text)

    def emit_lines(self, lines: Iterable[str]) -> None:
        """Stream text lines (human forms of long listings) without holding them all."""
        out = sys.stdout
        for line in lines:
            out.write(line + "\n")
        out.flush()

    def emit_jsonl(self, obj: Any) -> None:
        """One compact JSON object on one line (``log tail --follow --json`` only)."""
        click.echo(output.dumps(obj, compact=True))
        sys.stdout.flush()

    def warn(self, warnings: Iterable[str]) -> None:
        """For people, one ``warning: ...`` line each on stderr (``--json`` carries them
        in its document instead); never changes the exit code."""
        if not self.json:
            for w in warnings:
                click.echo(f"warning: {w}", err=True)

    def exit(self, code: int) -> None:
        """End the command with ``code`` after its output (e.g. 1 from a failed verify)."""
        raise click.exceptions.Exit(code)


def read_stdin_bytes() -> bytes:
    """All of stdin as bytes (click 8.5 deprecates ``get_binary_stream``)."""
    stream = getattr(sys.stdin, "buffer", sys.stdin)
    data = stream.read()
    return data.encode() if isinstance(data, str) else data


def resolve_root(root: Path | None) -> Path:
    """``--root``, else ``$CTXLEDGER_ROOT``, else the current directory; made absolute."""
    if root is None:
        env = os.environ.get(ROOT_ENV)
        root = Path(env) if env else Path.cwd()
    return Path(os.path.abspath(root))


def store_options(f: F) -> F:
    """Add ``--root`` and ``--json`` to a command and pass it a :class:`Ctx` first."""

    @click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
    @click.option(
        "--root",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help=f"Project root; the store is ROOT/{STORE_DIR}/. "
        f"Default: ${ROOT_ENV}, else the current directory.",
    )
    @functools.wraps(f)
    def command(*args: Any, root: Path | None, as_json: bool, **kwargs: Any) -> Any:
        return f(Ctx(resolve_root(root), as_json), *args, **kwargs)

    return command  # type: ignore[return-value]


# --- input types --------------------------------------------------------------------


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class JsonObject(click.ParamType):
    """A JSON object inline, as ``-`` (stdin) or ``@FILE``; anything else is a usage error."""

    name = "JSON"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dict):
            return value
        text = self._read(value, param, ctx)
        try:
            obj = json.loads(text, parse_constant=_no_constants)
        except RecursionError:
            self.fail("JSON is nested too deeply", param, ctx)
        except ValueError as e:  # JSONDecodeError, bad encoding, NaN/Infinity
            self.fail(f"not valid JSON ({e})", param, ctx)
        if not isinstance(obj, dict):
            self.fail(f"must be a JSON object ({{...}}), not {_json_type(obj)}", param, ctx)
        if _depth(obj) > MAX_DATA_DEPTH:
            self.fail(f"JSON is nested deeper than {MAX_DATA_DEPTH} levels", param, ctx)
        return obj

    def _read(
        self, value: str, param: click.Parameter | None, ctx: click.Context | None
    ) -> str | bytes:
        if value == "-":
            return read_stdin_bytes()
        if value.startswith("@"):
            path = value[1:]
            try:
                with open(path, "rb") as fh:
                    return fh.read()
            except OSError as e:
                self.fail(f"cannot read {path}: {e.strerror}", param, ctx)
        return value


def _depth(obj: object) -> int:
    """Nesting depth of parsed JSON (iterative: the input may be deep)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def _json_type(obj: object) -> str:
    if isinstance(obj, list):
        return "an array"
    if isinstance(obj, str):
        return "a string"
    if isinstance(obj, bool):
        return "a boolean"
    if isinstance(obj, (int, float)):
        return "a number"
    return "null"


JSON_OBJECT = JsonObject()
SEQ = click.IntRange(min=1)
COUNT = click.IntRange(min=0)
