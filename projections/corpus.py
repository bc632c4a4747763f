"""Packets cut from the running Python's standard library (demo and benchmark corpus).

One packet per module-level function, class and method, found with ``ast``:

* ``target``: ``"stdlib.<module>"`` (``stdlib.json.decoder``)
* ``summary``: the docstring's first line, else the signature
* ``paths``: the file as ``Lib/<relative path>`` (``Lib/json/decoder.py``)
* ``symbols``: the qualified name, and the class for a method
* ``tests``: real test functions from the module's test file(s) under
  ``Lib/test`` whose name mentions the symbol (``Lib/test/test_json/
  test_decode.py::test_float``), else a derived ``test_<name>``
* ``task_ids`` (``task-17``) and ``packet_types``: seeded
* ``payload``: kind, signature, first docstring paragraph (≤ 600 chars),
  line number and ``source: "python stdlib"`` (so "stdlib" is a term in
  every packet)

Files are parsed lazily in sorted order, so a few thousand packets cost only
the first few files.  The stdlib yields far fewer than 200k packets (about
60-80k with its test suite); after the first pass the generator cycles over the
same definitions again with a seeded variation (``variant`` number, different
task ids/types and a seeded ``note`` of a few words in the payload), so every
packet is distinct.  Deterministic for a given seed and Python installation.
"""

from __future__ import annotations

import ast
import os
import random
import re
import sysconfig
from collections.abc import Iterator
from typing import Any

PACKET_TYPES = ("coverage", "refactor", "bugfix", "review", "analysis", "docs", "perf")
NOTE_WORDS = (
    "revisit", "flaky", "slow", "edge", "case", "regression", "unicode", "windows", "posix",
    "timeout", "encoding", "cache", "memory", "leak", "thread", "async", "buffer", "parser",
    "error", "message", "deprecated", "api", "compat", "benchmark", "hot", "path", "cold",
    "start", "refactor", "split", "merge", "rename", "cleanup", "docs", "typo", "example",
)
_TEST_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(test\w*)\s*\(", re.M)


def stdlib_dir() -> str:
    return sysconfig.get_paths()["stdlib"]


def _source_files(root: str) -> list[str]:
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in ("site-packages", "__pycache__", "dist-packages")
                             and not d.startswith("."))
        for f in sorted(filenames):
            if f.endswith(".py"):
                out.append(os.path.join(dirpath, f))
    out.sort(key=lambda p: os.path.relpath(p, root))
    return out


class _Tests:
    """Test function names per module, from the stdlib's own test package (lazily)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.cache: dict[str, list[tuple[str, str]]] = {}

    def _files_for(self, module: str) -> list[str]:
        top = module.split(".")[0].lstrip("_")
        tdir = os.path.join(self.root, "test")
        cands = [os.path.join(tdir, f"test_{top}.py")]
        sub = os.path.join(tdir, f"test_{top}")
        if os.path.isdir(sub):
            try:
                cands += [os.path.join(sub, f) for f in sorted(os.listdir(sub))
                          if f.startswith("test") and f.endswith(".py")]
            except OSError:
                pass
        return [c for c in cands if os.path.isfile(c)]

    def for_module(self, module: str) -> list[tuple[str, str]]:
        """(test name, test id) pairs for a module's test files."""
        top = module.split(".")[0].lstrip("_")
        got = self.cache.get(top)
        if got is None:
            got = []
            for f in self._files_for(module):
                try:
                    with open(f, encoding="utf-8", errors="replace") as fh:
                        text = fh.read()
                except OSError:
                    continue
                rel = "Lib/" + os.path.relpath(f, self.root).replace(os.sep, "/")
                for name in dict.fromkeys(_TEST_DEF.findall(text)):
                    got.append((name, f"{rel}::{name}"))
            self.cache[top] = got
        return got


def _first_paragraph(doc: str, limit: int = 600) -> str:
    para = doc.strip().split("\n\n", 1)[0]
    para = " ".join(para.split())
    return para[:limit]


def _signature(node: ast.AST) -> str:
    if isinstance(node, ast.ClassDef):
        bases = ", ".join(_safe_unparse(b) for b in node.bases)
        return f"class {node.name}({bases})" if bases else f"class {node.name}"
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    ret = f" -> {_safe_unparse(node.returns)}" if node.returns is not None else ""
    return f"{prefix} {node.name}({_safe_unparse(node.args)}){ret}"


def _safe_unparse(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001 - any odd node: skip its text
        return "..."


def _definitions(path: str, root: str) -> list[dict[str, Any]]:
    """Base records of one file (no seeded fields); [] when unreadable."""
    try:
        with open(path, "rb") as fh:
            src = fh.read()
        tree = ast.parse(src, filename=path)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    rel = os.path.relpath(path, root).replace(os.sep, "/")
    module = rel[:-3].replace("/", ".")
    if module.endswith(".__init__"):
        module = module[: -len(".__init__")]
    out: list[dict[str, Any]] = []

    def visit(body: list[ast.stmt], cls: str | None) -> None:
        for node in body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            qual = f"{cls}.{node.name}" if cls else node.name
            doc = ast.get_docstring(node, clean=False) or ""
            kind = "class" if isinstance(node, ast.ClassDef) else ("method" if cls else "function")
            out.append({
                "module": module, "path": "Lib/" + rel, "name": node.name, "qual": qual,
                "cls": cls, "kind": kind, "sig": _signature(node), "doc": doc,
                "lineno": getattr(node, "lineno", 0),
            })
            if isinstance(node, ast.ClassDef) and cls is None:
                visit(node.body, node.name)

    visit(tree.body, None)
    return out


def _packet(rec: dict[str, Any], tests: _Tests, rng: random.Random, variant: int) -> dict[str, Any]:
    doc = rec["doc"]
    first = doc.strip().splitlines()[0].strip() if doc.strip() else ""
    summary = first or rec["sig"]
    name = rec["name"]
    key = name.lower().strip("_").replace("_", "")
    found = []
    if key and len(key) >= 3:
        for tname, tid in tests.for_module(rec["module"]):
            if key in tname.lower().replace("_", ""):
                found.append(tid)
                if len(found) >= 3:
                    break
    test_names = tuple(found) if found else (f"test_{name.strip('_') or name}",)
    symbols = (rec["qual"],) + ((rec["cls"],) if rec["cls"] else ())
    ntask = rng.choice((0, 1, 1, 1, 2))
    task_ids = sorted({f"task-{rng.randrange(1000)}" for _ in range(ntask)})
    ptypes = sorted(set(rng.sample(PACKET_TYPES, rng.choice((1, 1, 2)))))
    payload: dict[str, Any] = {
        "kind": rec["kind"],
        "signature": rec["sig"],
        "doc": _first_paragraph(doc),
        "lineno": rec["lineno"],
        "source": "python stdlib",
    }
    if variant:
        payload["variant"] = variant
        payload["note"] = " ".join(rng.choice(NOTE_WORDS) for _ in range(rng.randint(2, 5)))
    return {
        "target": f"stdlib.{rec['module']}",
        "summary": summary,
        "paths": [rec["path"]],
        "symbols": list(symbols),
        "tests": list(test_names),
        "task_ids": task_ids,
        "packet_types": ptypes,
        "payload": payload,
    }


def stdlib_packets(limit: int | None = None, seed: int = 0,
                   root: str | None = None) -> Iterator[dict[str, Any]]:
    """Yield packets cut from the stdlib (see module doc); ``limit=None``: one full pass."""
    root = root or stdlib_dir()
    rng = random.Random(seed)
    tests = _Tests(root)
    files = _source_files(root)
    seen: list[dict[str, Any]] = []
    count = 0
    for f in files:
        for rec in _definitions(f, root):
            if limit is not None and count >= limit:
                return
            seen.append(rec)
            yield _packet(rec, tests, rng, 0)
            count += 1
    if limit is None or not seen:
        return
    variant = 0
    while count < limit:
        variant += 1
        for rec in seen:
            if count >= limit:
                return
            yield _packet(rec, tests, rng, variant)
            count += 1
