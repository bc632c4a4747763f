"""``ctxledger calibration``: record token samples, show what they say.

Calibration lives in the agent home (``$CTXLEDGER_HOME``, else ``~/.ctxledger``),
shared by every project: ``--root`` is accepted like everywhere, and only
chooses the project config.toml read for ``[calibration] window``.
"""

from __future__ import annotations

from typing import Any

import click

from projections.calibration import DEFAULT_ESTIMATOR, Calibration, Profile
from projections.config import MAX_WINDOW

from .inputs import MAX_INT
from .options import Ctx, examples, group_options, store_options
from .output import safe
from .views import usage_errors


class Tokens(click.ParamType):
    """A whole number of tokens: ASCII digits only (no sign, no ``1_000``, no ``true``)."""

    name = "N"

    def __init__(self, low: int) -> None:
        self.low = low

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        text = str(value)
        if not (text.isascii() and text.isdigit()):
            why = "is negative" if text.startswith("-") else "is not a whole number"
            self.fail(f"{text!r} {why}", param, ctx)
        n = int(text)
        if n < self.low:
            self.fail(f"{text!r} must be at least {self.low}", param, ctx)
        if n > MAX_INT:
            self.fail(f"{text!r} is more than {MAX_INT}", param, ctx)
        return n


POSITIVE = Tokens(1)
NON_NEGATIVE = Tokens(0)
WINDOW = click.IntRange(1, MAX_WINDOW)


@examples("ctxledger calibration record --provider anthropic --model claude-sonnet-4 "
          "--estimated 1200 --actual 1410",
          "ctxledger calibration show --json")
@click.group("calibration")
@group_options
def calibration() -> None:
    """Token calibration: how far the chars-v1 estimate runs from billed tokens.

    Samples live in the agent home's log, shared by every project
    (docs/calibration.md); --root is accepted but the samples are the same.
    """


def _open(ctx: Ctx, *, write: bool, window: int | None = None) -> Calibration:
    """The agent home's calibration (opened lazily: a refused sample creates nothing),
    configured as a store there would be: the agent's config.toml, then the project's."""
    from projections.storedir import open_layout

    layout, cfg = open_layout(ctx.root, storage_scope=ctx.storage_scope)
    return ctx.managed(Calibration(layout.home, readonly=not write, sync=cfg.sync,
                                   window=cfg.calibration_window if window is None else window))


@examples("ctxledger calibration record --provider anthropic --model claude-sonnet-4 "
          "--estimated 1200 --actual 1410",
          "ctxledger calibration record --provider openai --model gpt-5 --estimated 800 "
          "--actual 760 --input 300 --cache-read 460 --json")
@calibration.command("record")
@store_options
@click.option("--provider", required=True, help="Who billed the call (anthropic, openai, ...).")
@click.option("--model", required=True, help="The model billed.")
@click.option("--estimated", required=True, type=POSITIVE,
              help="Input tokens the estimator predicted (> 0).")
@click.option("--actual", required=True, type=POSITIVE,
              help="Input tokens actually billed, cached ones included (> 0).")
@click.option("--estimator", default=DEFAULT_ESTIMATOR, show_default=True,
              help="The estimator that made the prediction.")
@click.option("--input", "input_", type=NON_NEGATIVE, help="Of --actual: uncached input tokens.")
@click.option("--cache-read", type=NON_NEGATIVE, help="Of --actual: tokens read from cache.")
@click.option("--cache-write", type=NON_NEGATIVE, help="Of --actual: tokens written to cache.")
def calibration_record(ctx: Ctx, provider: str, model: str, estimated: int, actual: int,
                       estimator: str, input_: int | None, cache_read: int | None,
                       cache_write: int | None) -> None:
    """Record one sample in the agent log; prints its seq."""
    cal = _open(ctx, write=True)
    with usage_errors():  # (checked before anything is opened or created)
        seq = cal.record(provider, model, estimated, actual, estimator=estimator,
                         input=input_, cache_read=cache_read, cache_write=cache_write)
    ctx.emit({"seq": seq, "provider": provider, "model": model, "estimator": estimator},
             human=f"seq {seq}")


@examples("ctxledger calibration show",
          "ctxledger calibration show --provider anthropic --model claude-sonnet-4 --json")
@calibration.command("show")
@store_options
@click.option("--provider", help="Only this provider's profile (with --model).")
@click.option("--model", help="Only this model's profile (with --provider).")
@click.option("--estimator", help=f"Only this estimator's profiles (with --provider: "
                                  f"default {DEFAULT_ESTIMATOR}).")
@click.option("--window", type=WINDOW,
              help="Use the newest N samples (default: [calibration] window, else 20).")
def calibration_show(ctx: Ctx, provider: str | None, model: str | None,
                     estimator: str | None, window: int | None) -> None:
    """Every profile (or one): samples, accepted, outliers, multiplier, capacity_multiplier."""
    if (provider is None) != (model is None):
        raise click.UsageError("--provider and --model go together")
    cal = _open(ctx, write=False, window=window)
    with usage_errors():
        if provider is not None and model is not None:
            profiles = [cal.profile(provider, model, estimator or DEFAULT_ESTIMATOR)]
        else:
            profiles = [p for p in cal.profiles() if estimator in (None, p.estimator)]
    ctx.emit({"profiles": [p.to_json() for p in profiles]},
             human=lambda _: _text(profiles))


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _text(profiles: list[Profile]) -> str:
    if not profiles:
        return "(no calibration samples)"
    lines = []
    for p in profiles:
        lines.append(f"{safe(p.provider)} / {safe(p.model)} / {safe(p.estimator)}")
        lines.append(f"  samples {p.samples}, window {p.window} (using {p.used}), "
                     f"accepted {p.accepted}, outliers {len(p.rejected)}")
        lines.append(f"  median ratio {_num(None if p.median is None else float(p.median))}, "
                     f"MAD {_num(None if p.mad is None else float(p.mad))}")
        lines.append(f"  multiplier {_num(p.multiplier)}, "
                     f"capacity_multiplier {_num(p.capacity_multiplier)}")
        if p.rejected:
            lines.append("  outliers: " + ", ".join(f"seq {o.seq} (ratio {float(o.ratio):.4g})"
                                                    for o in p.rejected))
    return "\n".join(lines)
