"""stdin and stdout as event-loop pipes: the protocol without a thread hop per message.

The SDK's stdio transport reads each request line and writes (then flushes)
each answer on a worker thread: three hand-offs between threads per round
trip, which cost more than a warm recall when the machine is busy
(docs/benchmarks.md, "MCP"). When stdin and stdout are pipes or sockets (how
every MCP client starts a server), :func:`loop_stdio` gives the SDK's
``stdio_server`` two objects that read and write them on the event loop
instead. Anything else (a terminal, a file) keeps the SDK's own transport.

It claims the descriptors as the SDK does, so that the protocol owns the
wire: the real stdin and stdout move to private descriptors, fd 0 then reads
the null device and fd 1 writes to stderr (a stray ``print`` in a library
cannot corrupt the stream), and both are put back on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections.abc import AsyncIterator

import anyio

MAX_LINE = 1 << 30
"""Longest request line read (bytes): as good as unbounded, like the SDK's reader;
each tool bounds what it accepts (docs/cli.md, "Limits")."""


def is_stream(fd: int) -> bool:
    """True when ``fd`` is a pipe or a socket, which the event loop can wait on."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class LineReader:
    """``async for line in reader``: the request lines, decoded as the SDK decodes them."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class LineWriter:
    """``await writer.write(text)``; ``flush`` waits until the pipe took the bytes.

    A client that closed its end (it went away) ends the SDK's writer as a
    closed stream does (``anyio.ClosedResourceError``), not as an error.
    """

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        if self._writer.is_closing():
            raise anyio.ClosedResourceError
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        try:
            await self._writer.drain()
        except (BrokenPipeError, ConnectionResetError) as e:
            raise anyio.ClosedResourceError from e


@contextlib.asynccontextmanager
async def loop_stdio() -> AsyncIterator[tuple[LineReader, LineWriter] | None]:
    """The claimed stdin/stdout as loop pipes, or None when either is not a pipe/socket."""
    if not (is_stream(0) and is_stream(1)):
        yield None
        return
    sys.stdout.flush()
    in_fd, out_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    blocking = os.get_blocking(in_fd), os.get_blocking(out_fd)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    writer: asyncio.StreamWriter | None = None
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                     os.fdopen(in_fd, "rb", buffering=0, closefd=False))
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(out_fd, "wb", buffering=0, closefd=False))
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        yield LineReader(reader), LineWriter(writer)
    finally:
        if writer is not None:
            with contextlib.suppress(OSError, RuntimeError):
                await writer.drain()
            writer.close()
        sys.stdout.flush()
        for fd, was in zip((in_fd, out_fd), blocking, strict=True):
            with contextlib.suppress(OSError):
                os.set_blocking(fd, was)
        os.dup2(in_fd, 0)
        os.dup2(out_fd, 1)
        os.close(in_fd)
        os.close(out_fd)
