"""Each benchmark script owns one marked section of docs/benchmarks.md."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"

INTRO = """# Benchmarks

Side-by-side measurements of ctxledger against well-understood baselines.
Benchmarks are not part of the test suite or CI; each section below is written
by the script named in it, and says how to reproduce it. Figures from a shared
or busy machine are noisy: compare ratios measured in the same run, not
absolute numbers across runs.

"""


def write_section(name: str, title: str, section: str, doc: Path = DOC) -> None:
    """Replace only the text between ``<!-- name:start -->`` and ``<!-- name:end -->``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    body = f"{start}\n## {title}\n\n{section}{end}\n"
    text = doc.read_text() if doc.exists() else INTRO
    if start in text and end in text:
        pre, rest = text.split(start, 1)
        post = rest.split(end, 1)[1].lstrip("\n")
        text = pre + body + ("\n" + post if post else "")
    else:
        text = text.rstrip("\n") + "\n\n" + body
    doc.parent.mkdir(parents=True, exist_ok=True)
    tmp = doc.with_suffix(".md.tmp")
    tmp.write_text(text)
    os.replace(tmp, doc)


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo), for the machine lines of a section."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def log(msg: str) -> None:
    """Progress for the person running a benchmark: stderr, so stdout stays the report."""
    print(msg, file=sys.stderr, flush=True)


def loadavg() -> float:
    """The 1-minute load average (NaN where the OS has none): printed beside every run."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")
