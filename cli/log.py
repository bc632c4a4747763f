"""``ctxledger log``: the raw events every view is folded from (append, show, tail,
export, import, mirror)."""

from __future__ import annotations

import collections
import errno
import itertools
import os
import select
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import click

from eventstore import Event, LogBackend, Receipt, head_anchor

from .inputs import COUNT, INTERVAL, JSON_OBJECT, SEQ
from .options import Ctx, examples, group_options, split_servers, store_options
from .output import event_json, event_line, iso_time, safe


@examples("ctxledger log show --limit 5", "ctxledger --json log tail -n 3")
@click.group("log")
@group_options
def log() -> None:
    """Append and read raw events.

    The log is the source of truth that every view is folded from. In agent
    scope the log is the agent home's, shared by every project in agent scope:
    show and tail print only this project's events, append tags the event with
    the project's id, head and verify cover the whole shared log.
    """


@examples(
    "ctxledger log append --kind task.created --key t1 --data '{\"title\": \"fix login\"}'",
    "echo '{\"n\": 1}' | ctxledger log append --kind task.note --key t1 --data - --json",
)
@log.command("append")
@store_options
@click.option("--kind", required=True, help="Event kind: dotted words, e.g. task.created.")
@click.option("--key", default=None, help="Entity key (default: null).")
@click.option(
    "--data",
    required=True,
    type=JSON_OBJECT,
    help="Event data: a JSON object, '-' to read it from stdin, or @FILE.",
)
@click.option(
    "--expected-head",
    type=COUNT,
    default=None,
    metavar="N",
    help="Append only if the log's last seq is N (optimistic concurrency).",
)
@click.option(
    "--batch-id",
    default=None,
    metavar="ID",
    help="Idempotency id: a retry with an id already committed writes nothing.",
)
def log_append(
    ctx: Ctx,
    kind: str,
    key: str | None,
    data: dict[str, Any],
    expected_head: int | None,
    batch_id: str | None,
) -> None:
    """Append one event as an atomic, durable batch.

    Prints the seq it got. Meant for scripts and debugging; views write their
    own events through the library.
    """
    event = Event(kind, key, data)
    tag = ctx.layout.tag
    if tag is not None:
        from projections.scope import tag_event

        try:
            event = tag_event(event, tag)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="'--data'") from None
    stored_id = batch_id
    if tag is not None and batch_id is not None:
        from projections.scope import scoped_batch_id

        try:  # the shared log's idempotency window spans every project
            stored_id = scoped_batch_id(batch_id, tag)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="'--batch-id'") from None
    led = ctx.ledger(write=True)
    r = led.append([event], expected_head=expected_head, batch_id=stored_id)
    if stored_id != batch_id:
        r = attrs.evolve(r, batch_id=batch_id)  # the id as the caller knows it
    ctx.emit(_receipt_json(r), human=_receipt_text(r))


def _receipt_json(r: Receipt) -> dict[str, Any]:
    out: dict[str, Any] = {"first_seq": r.first_seq, "last_seq": r.last_seq, "at": r.at}
    if r.batch_id is not None:
        out.update(batch_id=r.batch_id, duplicate=r.duplicate)
    return out


def _receipt_text(r: Receipt) -> str:
    seqs = f"seq {r.first_seq}" if r.first_seq == r.last_seq else f"seqs {r.first_seq}-{r.last_seq}"
    if r.duplicate:
        return f"batch {safe(r.batch_id or '')} was already committed as {seqs}; nothing written"
    return f"appended {seqs} at {iso_time(r.at)}"


@examples("ctxledger log head", "ctxledger log head --json")
@log.command("head")
@store_options
def log_head(ctx: Ctx) -> None:
    """Print the last seq and the chain digest there: an anchor to keep elsewhere.

    Record it somewhere the store's writers cannot reach (a commit message, a
    ticket); `ctxledger verify --anchor SEQ:DIGEST` later proves the log up to
    SEQ is still the one you recorded. The head is always a batch end.
    """
    a = head_anchor(ctx.ledger())
    ctx.emit(a.to_json(), human=f"seq {a.seq} digest {a.digest.hex()}")



def seq_range_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--from``/``--to``/``--kind``: the events `log show` prints and `log export` writes."""
    fn = click.option("--kind", default=None, help="Only events of exactly this kind.")(fn)
    fn = click.option("--to", "to_seq", type=SEQ, default=None,
                      help="Last seq (default: the head).")(fn)
    return click.option("--from", "from_seq", type=SEQ, default=1, show_default=True,
                        help="First seq.")(fn)

@examples(
    "ctxledger log show --from 100 --to 200",
    "ctxledger log show --kind task.created --limit 5 --json",
)
@log.command("show")
@store_options
@seq_range_options
@click.option("--key", default=None, help="Only events with exactly this key.")
@click.option("--limit", type=COUNT, default=None, metavar="N", help="At most N events.")
def log_show(
    ctx: Ctx,
    from_seq: int,
    to_seq: int | None,
    kind: str | None,
    key: str | None,
    limit: int | None,
) -> None:
    """Print events in seq order, filtered by seq range, kind and key.

    Human output streams one line per event; --json prints them in one document
    only after every event was read and checked.
    """
    if to_seq is not None and to_seq < from_seq:
        raise click.BadParameter(f"{to_seq} is before --from {from_seq}", param_hint="'--to'")
    events = own_events(ctx, ctx.ledger().read(from_seq, to_seq))
    _emit_events(ctx, _select(events, kind, key, limit))


def own_events(ctx: Ctx, events: Iterable[Event]) -> Iterable[Event]:
    """In agent scope, only this project's events of the shared log; else all of them
    (every command that reads the raw log for people goes through here)."""
    tag = ctx.layout.tag
    if tag is None:
        return events
    from projections.scope import is_project_event

    return (e for e in events if is_project_event(e, tag))


def _select(
    events: Iterable[Event], kind: str | None, key: str | None, limit: int | None
) -> Iterator[Event]:
    chosen = (
        e for e in events if (kind is None or e.kind == kind) and (key is None or e.key == key)
    )
    return itertools.islice(chosen, limit)


def _emit_events(ctx: Ctx, events: Iterable[Event]) -> None:
    if ctx.json:
        ctx.emit({"events": [event_json(e) for e in events]})
    else:
        ctx.emit_lines(event_line(e) for e in events)


@examples("ctxledger log tail -n 20", "ctxledger log tail --follow --json | jq -c .kind")
@log.command("tail")
@store_options
@click.option(
    "-n",
    "--lines",
    "count",
    type=COUNT,
    default=10,
    show_default=True,
    metavar="N",
    help="How many of the newest events to print.",
)
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="Keep printing events as they are committed, until Ctrl-C (exit 130).",
)
@click.option(
    "--interval",
    type=INTERVAL,
    default=0.2,
    show_default=True,
    metavar="SECONDS",
    help="How often --follow polls the log (0.01 to 3600 seconds).",
)
def log_tail(ctx: Ctx, count: int, follow: bool, interval: float) -> None:
    """Print the newest events; --follow keeps printing new ones.

    With --follow --json the output is JSON lines (one object per event), the one
    exception to "one JSON document", since the stream has no end.
    """
    led = ctx.ledger()
    head = led.head
    recent: Iterable[Event]
    if ctx.layout.tag is None:
        recent = led.read(max(1, head - count + 1), head) if count and head else iter(())
    else:  # the project's newest events may be anywhere in the shared log
        recent = collections.deque(own_events(ctx, led.read(1, head)), maxlen=count) if count \
            else iter(())
    if not follow:
        _emit_events(ctx, recent)
        return
    for e in itertools.chain(recent, own_events(ctx, follow_log(led, head, interval))):
        if ctx.json:
            ctx.emit_jsonl(event_json(e))
        else:
            ctx.emit_lines([event_line(e)])


def follow_log(led: LogBackend, after: int, interval: float) -> Iterator[Event]:
    """Events committed after seq ``after``, forever; polls the (readonly) head.

    A new generation (``ledger.compacted``, ``ledger.salvaged``) is printed as its
    marker event alone: the events after it copy ones committed before.

    Stops (BrokenPipeError) when stdout is a pipe whose reader has gone."""
    from eventstore.generation import MARKERS

    skip = 0  # copies a new generation made of events already committed (not new ones)
    while True:
        head = led.head
        if head > after:
            for e in led.read(after + 1, head):
                if skip:
                    skip -= 1
                elif e.kind in MARKERS:  # compact/salvage: print the marker, not the copies
                    kept = e.data.get("kept_events")
                    skip = kept if type(kept) is int and kept > 0 else 0
                    yield e
                else:
                    yield e
            after = head
        elif _reader_gone():  # `tail -f | head -1`: stop now, not at the next event
            raise BrokenPipeError(errno.EPIPE, "stdout was closed")
        else:
            time.sleep(interval)


def _reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has exited (POLLERR on the write end)."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # not a real file (a test runner's buffer)
        return False
    if not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(fd, 0)  # no events asked for: only errors and hang-ups are reported
    return any(ev & (select.POLLERR | select.POLLHUP) for _fd, ev in poller.poll(0))


@examples(
    "ctxledger log export > backup.jsonl",
    "ctxledger log export --from 100 --to 200 --kind task.note",
)
@log.command("export")
@store_options
@seq_range_options
def log_export(ctx: Ctx, from_seq: int, to_seq: int | None, kind: str | None) -> None:
    """Print the log as JSON Lines, one event a line, exactly enough to rebuild it.

    Each line has seq, kind, key, at, data (as --json shows it), cbor (the
    event's stored bytes), batch, digest (its frame's chain digest) and, on a
    frame's first event, prev_digest. The whole log (no filter) is what `log
    import` takes. In agent scope this is the whole shared log. The output is
    JSON Lines with or without --json.
    """
    if to_seq is not None and to_seq < from_seq:
        raise click.BadParameter(f"{to_seq} is before --from {from_seq}", param_hint="'--to'")
    from .progress import progress_bar, show_progress

    led = ctx.ledger()
    base = getattr(led, "base", 1)
    total = led.head - max(from_seq, base) + 1 if show_progress(ctx) else 0
    out = sys.stdout
    with progress_bar(ctx, total, "exporting") as bar:
        for line in led.export_lines(from_seq, to_seq, kind):
            out.write(line + "\n")
            if bar is not None:
                bar(1)
    out.flush()


@examples("ctxledger log import backup.jsonl", "ctxledger log import backup.jsonl --json")
@log.command("import")
@store_options
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=False))
def log_import(ctx: Ctx, file: str) -> None:
    """Load a `log export` file into this store's empty log, seqs and digests kept.

    The whole file is read and checked first (JSON, line size, that each
    line's data is what its cbor holds, gapless seqs, every frame's chain
    digest); a file that does not chain is refused and nothing is written.
    Then it is written as one segment that appears by one rename. The log
    must hold no event (run `ctxledger init` first).
    """
    from eventstore.export import check_import

    from .progress import progress_bar

    led = ctx.file_ledger("log import", write=True)
    with open(file, "rb") as f:
        imported = check_import(f)
    n = sum(len(b.rows) for b in imported.batches)
    with progress_bar(ctx, n, "importing") as bar:
        written = led.import_log(imported, progress=bar)
    doc = {"imported_events": written.events, "frames": written.frames,
           "first_seq": written.base, "head_seq": written.head,
           "head_digest": written.digest.hex()}
    ctx.emit(doc, human=f"imported {written.events} events (seqs {written.base}.."
             f"{written.head}) into {safe(str(ctx.log_dir))}")


def _stream_name(_c: click.Context, _p: click.Parameter, value: str | None) -> str | None:
    from projections.config import STREAM_NAME

    if value is not None and not STREAM_NAME.fullmatch(value):
        raise click.BadParameter("a stream name is 1 to 64 letters, digits, '_' or '-'")
    return value


@examples(
    "ctxledger log mirror --to jetstream --to-servers nats://nats1:4222 --to-stream team-ctx",
    "ctxledger --backend jetstream log mirror --to file",
    "ctxledger log mirror --to file --to-dir /backup/ctx-log --json",
)
@log.command("mirror")
@store_options
@click.option("--to", "to", type=click.Choice(("jetstream", "file")), required=True,
              help="The kind of log to copy into.")
@click.option("--to-servers", multiple=True, metavar="URL",
              help="NATS server URL(s) of the destination (repeat, or separate with commas). "
              "Default: [storage] servers in config.")
@click.option("--to-stream", metavar="NAME", callback=_stream_name,
              help="Destination stream. Default: [storage] stream in config, else the one "
              "named after the project.")
@click.option("--to-replicas", type=click.IntRange(1, 5), default=None,
              help="Replicas of a stream the mirror creates. Default: [storage] replicas.")
@click.option("--to-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Destination directory of a file log (must hold no event). Default: this "
              "store's own log directory.")
def log_mirror(ctx: Ctx, to: str, to_servers: tuple[str, ...], to_stream: str | None,
               to_replicas: int | None, to_dir: Path | None) -> None:
    """Copy this store's log into another backend, seqs, times and digests kept.

    To JetStream: every batch is published as it is here, so the stream's
    chain digests are this log's, and running the mirror again copies only
    what was appended since (the stream must hold a prefix of this log). To a
    file log: the log is checked as `log import` checks a file and written as
    one segment, into a log with no event. Then point the store at the copy
    ([storage] backend in config.toml) to switch backends.
    """
    from eventstore.mirror import mirror_to_dir, mirror_to_stream
    from projections.logs import log_choice, open_log

    from .progress import progress_bar, show_progress

    source = ctx.ledger()
    total = source.head if show_progress(ctx) else 0
    here = ctx.log_choice
    if to == "file":
        target = Path(os.path.abspath(to_dir)) if to_dir is not None else ctx.log_dir
        if here.is_file and target == ctx.log_dir:
            raise click.UsageError("this store's log is already the file log in "
                                   f"{ctx.log_dir}: give --to-dir")
        with progress_bar(ctx, total, "mirroring") as bar:
            done = mirror_to_dir(source, target, bar)
        where = str(target)
    else:
        from projections.storedir import open_layout

        layout, cfg = open_layout(ctx.root, storage_scope=ctx.storage_scope)
        cfg = attrs.evolve(cfg, storage_stream=to_stream or cfg.storage_stream,
                           storage_replicas=to_replicas or cfg.storage_replicas)
        try:
            dest = log_choice(layout, cfg, backend="jetstream",
                              servers=split_servers(to_servers))
        except ValueError as e:
            raise click.UsageError(str(e)) from None
        if not here.is_file and (dest.stream, dest.servers) == (here.stream, here.servers):
            raise click.UsageError(f"this store's log is already the stream {dest.stream!r}: "
                                   "give --to-stream or --to-servers")
        log = ctx.managed(open_log(layout, dest, readonly=False))
        with progress_bar(ctx, total, "mirroring") as bar:
            done = mirror_to_stream(source, log, bar)
        where = f"jetstream stream {dest.stream} on {', '.join(dest.servers)}"
    doc = {"to": to, "destination": where, **done.to_json()}
    ctx.emit(doc, human=f"mirrored {done.copied_events} events in {done.copied_batches} "
             f"batches to {safe(where)} ({done.already_there} already there); head seq "
             f"{done.head_seq} digest {done.head_digest.hex()}")
