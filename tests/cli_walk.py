"""Every command of the CLI, for tests that must cover each one (including commands added later)."""

from __future__ import annotations

from collections.abc import Iterator

import click

from cli.main import ctxledger


def walk(
    cmd: click.Command = ctxledger, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """``(path, command)`` of the group and everything under it, groups included."""
    yield path, cmd
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None, name
            yield from walk(sub, (*path, name))


def leaf_paths() -> set[tuple[str, ...]]:
    """The path of every command that runs something: not a group, unless the group runs
    something itself without a subcommand (``ctxledger mcp`` serves)."""
    return {path for path, cmd in walk()
            if not isinstance(cmd, click.Group) or cmd.invoke_without_command and path}


def is_unsafe(ch: str) -> bool:
    """A character a terminal acts on, or that reorders text (the test's own oracle,
    independent of ``cli.output``): C0 controls but newline, DEL, C1 controls, bidi
    marks/embeddings/overrides/isolates, line/paragraph separators, lone surrogates."""
    c = ord(ch)
    return (
        (c < 0x20 and ch != "\n")
        or 0x7F <= c <= 0x9F
        or c in (0x061C, 0x200E, 0x200F, 0x2028, 0x2029)
        or 0x202A <= c <= 0x202E
        or 0x2066 <= c <= 0x2069
        or 0xD800 <= c <= 0xDFFF
    )


def unsafe_chars(text: str) -> list[str]:
    return sorted({repr(ch) for ch in text if is_unsafe(ch)})
