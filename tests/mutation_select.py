"""Which tests can kill a mutant: the ones that run the line it changes (.ci/mutate).

mutmut runs, per mutant, every test that called the mutated *function*; for the
log's core functions that is nearly the whole selection (a minute and more), and
each surviving mutant pays all of it. A test that never runs the changed line
cannot tell the mutant from the original: under mutmut every test is
deterministic (tests/conftest.py derandomizes hypothesis), so it takes the same
path up to that line and never reaches it. So ``.ci/mutate`` first records, in
one coverage run of the same test selection, which tests run each statement
(``collect``); then, in each mutant's pytest run, the conftest keeps only the
tests that run a statement the mutant changes (``narrow``).

Each map keeps a copy of the source it was made from, and a mutant is placed in
that copy: the working tree may change while a run goes on. Where the answer is
not sure the selection is left as mutmut made it: no map, a mutated function
that reads otherwise than when the map was made, a change in a function's signature
or decorators (evaluated when the module loads, not when a test runs), or a
mutant whose lines cannot be found, or one whose statements no test ran under
coverage: coverage does not follow a thread started with ``_thread`` (the
checkpoint prefetch's), so "no test" may mean "not seen", and mutmut's own
selection (the tests that called the function) decides.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import math
import os
import shutil
import sys
from functools import cache
from pathlib import Path
from typing import Any

MAP_DIR = "line-tests"
MAP_VERSION = 2
SNAPSHOT = ".src"  # beside each map, the source it was made from
SECONDS = "seconds.json"  # each test's time in the coverage run (setup, call, teardown)
EQUIVALENT = ".ci/mutants-equivalent"  # the mutants no test can tell apart (and why)
SKIPPED = 34  # the exit code mutmut counts as "skipped": a listed equivalent mutant
#: Sources whose code also runs on threads started with ``_thread`` (the checkpoint
#: prefetch's), which coverage does not follow: there a statement no test ran under
#: coverage may still run, so mutmut's own selection decides for their mutants.
UNFOLLOWED_THREADS = frozenset({"projections/checkpoints.py"})
# A mutant's run may spend BUDGET_FACTOR x what its tests took in the coverage run, plus
# BUDGET_SLACK seconds, of CPU time by the end of each test (see cpu_limits)
BUDGET_FACTOR = 3.0
BUDGET_SLACK = 3.0


def _digest(path: Path) -> str:
    return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()


# -- collect: one coverage run, statement -> tests ------------------------------------


def collect(root: Path, out: Path, sources: list[str], pytest_args: list[str]) -> int:
    """Run pytest over ``pytest_args`` in this process under coverage, one context per
    test (its node id), and write one map per source file under ``out`` (its digest,
    and per statement line the tests that ran it: a mutant's run reads only its own
    file's map). Returns pytest's exit code."""
    import coverage
    import pytest

    cov = coverage.Coverage(data_file=None, source=[str(root / s) for s in sources])
    # A fixture wider than a function is set up under the first test that needs it and
    # torn down under the last: what its setup and teardown run counts under a context
    # of its own, then for every test that uses it (a narrowed run of any one of them
    # sets it up again). Only those lines are shared: a session fixture that runs no
    # project code (tmp_path_factory, which every test's home needs) shares nothing.
    users: dict[str, set[str]] = {}  # fixture context -> the tests using the fixture
    current = [""]  # the test being run, then the fixture contexts open inside it
    seconds: dict[str, float] = {}  # node id -> its setup, call and teardown time

    def fixture_context(fixturedef: Any, nodeid: str) -> str | None:
        if fixturedef.scope == "function":
            return None
        # a package or session fixture: one instance for every test using it
        where = nodeid.split("::")[0] if fixturedef.scope in ("module", "class") else ""
        return f"fixture {fixturedef.argname} {where}"

    class Contexts:
        """Each test's setup, call and teardown count under its node id; a wider
        fixture's setup and teardown under its own context."""

        @pytest.hookimpl(tryfirst=True)  # before any fixture of the test is set up
        def pytest_runtest_setup(self, item: pytest.Item) -> None:
            current[:] = [item.nodeid]
            cov.switch_context(item.nodeid)
            info = getattr(item, "_fixtureinfo", None)
            for defs in (info.name2fixturedefs.values() if info is not None else ()):
                ctx = fixture_context(defs[-1], item.nodeid) if defs else None
                if ctx is not None:
                    users.setdefault(ctx, set()).add(item.nodeid)

        @pytest.hookimpl(wrapper=True)
        def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Any:
            ctx = fixture_context(fixturedef, current[0])
            if ctx is None:
                return (yield)
            current.append(ctx)
            cov.switch_context(ctx)
            try:
                return (yield)
            finally:
                current.pop()
                cov.switch_context(current[-1])
                # finalizers run last-added first: this one before the fixture's own
                # teardown, pytest_fixture_post_finalizer (below) after all of them
                fixturedef.addfinalizer(lambda: cov.switch_context(ctx))

        def pytest_fixture_post_finalizer(self, fixturedef: Any, request: Any) -> None:
            if fixture_context(fixturedef, current[0]) is not None:
                cov.switch_context(current[-1])

        def pytest_runtest_logreport(self, report: Any) -> None:
            seconds[report.nodeid] = seconds.get(report.nodeid, 0.0) + report.duration

    cov.start()
    try:
        code = int(pytest.main(pytest_args, plugins=[Contexts()]))
    finally:
        cov.stop()
    data = cov.get_data()
    for measured in sorted(data.measured_files()):
        rel = Path(measured).resolve().relative_to(root.resolve()).as_posix()
        tests: dict[str, int] = {}
        lines: dict[str, list[int]] = {}
        for line, contexts in sorted(data.contexts_by_lineno(measured).items()):
            ran = {c for c in contexts if c and c not in users}
            ran.update(*(users[c] for c in contexts if c in users))
            ids = sorted({tests.setdefault(c, len(tests)) for c in ran})
            if ids:
                lines[str(line)] = ids
        target = out / (rel + ".json")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps({"version": MAP_VERSION, "digest": _digest(Path(measured)),
                                      "tests": sorted(tests, key=tests.__getitem__),
                                      "lines": lines}))
        # the source the map's line numbers are of: a mutant is placed in it, not in the
        # working tree, which may change while a run goes on
        shutil.copyfile(measured, out / (rel + SNAPSHOT))
    (out / SECONDS).write_text(json.dumps(seconds))
    return code


# -- narrow: a mutant's statements -> the tests that run them --------------------------


def mutant_file(mutant: str) -> tuple[str, str]:
    """(source path, generated function name) of a mutmut mutant name, e.g.
    ``eventstore.anchor.x_check_anchor__mutmut_1`` -> (``eventstore/anchor.py``,
    ``x_check_anchor__mutmut_1``); a method is ``x\u01c1Class\u01c1name__mutmut_N``."""
    module, _, func = mutant.rpartition(".")
    if not module or not func.startswith(("x_", "x\u01c1")):
        raise ValueError(f"not a mutant name: {mutant!r}")
    return module.replace(".", "/") + ".py", func


def _def_index(lines: list[str], name: str) -> int:
    """Index of the ``def name(`` line among ``lines``."""
    for i, text in enumerate(lines):
        stripped = text.lstrip()
        if stripped.startswith((f"def {name}(", f"async def {name}(")):
            return i
    raise ValueError(f"no def of {name}")


def _original_function(tree: ast.Module, func: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The function (or method) of the source that mutmut's generated name stands for."""
    base = func.rpartition("__mutmut_")[0]
    fn_types = (ast.FunctionDef, ast.AsyncFunctionDef)
    if base.startswith("x\u01c1"):
        _, cls_name, name = base.split("\u01c1", 2)
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == cls_name:
                for sub in node.body:
                    if isinstance(sub, fn_types) and sub.name == name:
                        return sub
    else:
        name = base[2:]
        for node in tree.body:
            if isinstance(node, fn_types) and node.name == name:
                return node
    raise ValueError(f"no function for {func}")


def _statement_line(fn: ast.FunctionDef | ast.AsyncFunctionDef, line: int) -> int | None:
    """First line of the innermost statement of ``fn``'s body holding ``line`` (what
    coverage records for a statement over several lines); None outside the body."""
    best: ast.stmt | None = None
    for node in ast.walk(fn):
        if node is fn or not isinstance(node, ast.stmt):
            continue
        end = node.end_lineno if node.end_lineno is not None else node.lineno
        if node.lineno <= line <= end and (best is None or node.lineno >= best.lineno):
            best = node
    return None if best is None else best.lineno


@cache
def _snapshot(mutants_dir: str, path: str) -> tuple[ast.Module, list[str]]:
    """The source a map was made from (``collect`` keeps a copy): its tree and lines."""
    text = (Path(mutants_dir) / MAP_DIR / (path + SNAPSHOT)).read_text()
    return ast.parse(text, path), text.split("\n")


def _generated(mutants_dir: Path, mutant: str) -> tuple[list[str], list[str]]:
    """The lines of the original function mutmut copied and of ``mutant``, as it
    generated them under mutants/, the mutant's ``def`` line given the original's name."""
    path, func = mutant_file(mutant)
    spans = json.loads((mutants_dir / (path + ".spans")).read_text())["spans"]
    orig_name = func.rpartition("__mutmut_")[0] + "__mutmut_orig"
    text = (mutants_dir / path).read_text().split("\n")
    (o0, o1), (m0, m1) = spans[orig_name], spans[func]
    orig, mut = text[o0 - 1 : o1], text[m0 - 1 : m1]
    _def_index(orig, orig_name)  # both must be there
    mi = _def_index(mut, func)
    mut[mi] = mut[mi].replace(f"def {func}(", f"def {orig_name}(", 1)
    return orig, mut


def change_digest(mutants_dir: Path, mutant: str) -> str:
    """A digest of what ``mutant`` changes: its diff against the original function with
    two lines of context, names and line numbers left out. mutmut numbers a function's
    mutants in order, so an edit to the function can give a name another change: a
    mutant listed as equivalent is skipped only while its name names the listed diff."""
    orig, mut = _generated(mutants_dir, mutant)
    diff = list(difflib.unified_diff(orig, mut, n=2, lineterm=""))[2:]  # no file headers
    text = "\n".join(line for line in diff if not line.startswith("@@"))
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def load_equivalent(path: Path) -> dict[str, str]:
    """The listed equivalent mutants, name -> change digest: one per line, ``NAME DIGEST``
    then a comment; ``#`` starts a comment, blank lines are skipped."""
    listed: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2:
            raise ValueError(f"{path}:{number}: want NAME DIGEST, got {line!r}")
        listed[words[0]] = words[1]
    return listed


def listed_equivalent(mutant: str, mutants_dir: Path) -> bool:
    """Whether ``mutant`` is listed as equivalent in the copy of .ci/mutants-equivalent
    under ``mutants_dir`` with the digest of the change it makes now (a stale entry is
    run like any mutant, and .ci/mutate's figures name it)."""
    try:
        want = load_equivalent(mutants_dir / EQUIVALENT).get(mutant)
        return want is not None and change_digest(mutants_dir, mutant) == want
    except (OSError, ValueError, KeyError):
        return False


def changed_statements(mutants_dir: Path, mutant: str) -> tuple[str, set[int]] | None:
    """(source path, first lines of the statements ``mutant`` changes in the source the
    map was made from), or None when that cannot be told for sure (see the module
    docstring; the mutated function must read as it did when the map was made)."""
    path, func = mutant_file(mutant)
    orig, mut = _generated(mutants_dir, mutant)
    orig_name = func.rpartition("__mutmut_")[0] + "__mutmut_orig"
    oi, mi = _def_index(orig, orig_name), _def_index(mut, orig_name)
    # the def lines differ by name only: compare what follows them
    ops = difflib.SequenceMatcher(None, orig[oi + 1 :], mut[mi + 1 :], autojunk=False).get_opcodes()
    changed: set[int] = set()
    for tag, i1, i2, _j1, _j2 in ops:
        if tag != "equal":
            changed.update(range(i1, max(i2, i1 + 1)))
    if not changed:
        return None  # the change is on the def line itself (a default value)
    tree, source = _snapshot(str(mutants_dir), path)
    fn = _original_function(tree, func)
    if orig[oi + 1 :] != source[fn.lineno : fn.end_lineno]:
        return None  # the function changed since the map was made
    stmts: set[int] = set()
    for i in changed:
        stmt = _statement_line(fn, fn.lineno + 1 + i)
        if stmt is None:
            return None  # in the signature or decorators: evaluated at import
        stmts.add(stmt)
    return path, stmts


def _load_map(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == MAP_VERSION else None


def narrow(mutant: str, mutants_dir: Path) -> set[str] | None:
    """The node ids of the tests that run a statement ``mutant`` changes, or None: keep
    mutmut's own selection (no map, an unknown mutant, a changed function, ...)."""
    try:
        got = changed_statements(mutants_dir, mutant)
    except (OSError, ValueError, KeyError, SyntaxError):
        return None
    if got is None:
        return None
    path, stmts = got
    data = _load_map(mutants_dir / MAP_DIR / (path + ".json"))
    if data is None:
        return None  # not measured
    tests = data["tests"]
    keep = {tests[i] for s in stmts for i in data["lines"].get(str(s), ())}
    if not keep and path in UNFOLLOWED_THREADS:
        # no test ran them under coverage, but code on a thread coverage does not
        # follow looks the same as code no test reaches: mutmut's own selection decides
        return None
    # (empty: no test runs the change, so none can see it; pytest then collects nothing
    # and mutmut records "no tests", which the figures count as not killed, at the cost
    # of a pytest start instead of every test that calls the function)
    return keep


# -- a mutant that loops: stopped by its tests' own times ------------------------------


def cpu_limits(order: list[str], seconds: dict[str, float], start: float,
               factor: float = BUDGET_FACTOR, slack: float = BUDGET_SLACK) -> dict[str, int]:
    """Per test of a mutant's run (in run order), the process CPU seconds it may have
    used by the end of that test: ``start`` + ``slack`` + ``factor`` x the coverage-run
    times of the tests so far. A mutant that loops is stopped (SIGXCPU, which mutmut
    counts as a timeout) in the first test it loops in, not at mutmut's limit for the
    whole unnarrowed selection (minutes for the frame codec). From the first test with
    no recorded time on, no limit of ours (mutmut's stays)."""
    limits: dict[str, int] = {}
    spent = 0.0
    for nodeid in order:
        took = seconds.get(nodeid)
        if took is None:
            break
        spent += took
        limits[nodeid] = math.ceil(start + slack + factor * spent)
    return limits


def load_seconds(mutants_dir: Path) -> dict[str, float]:
    """The tests' coverage-run times ``collect`` wrote (empty without them)."""
    try:
        data = json.loads((mutants_dir / MAP_DIR / SECONDS).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def cpu_used() -> float:
    """This process's CPU time (user + system): what RLIMIT_CPU is measured against."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def limit_cpu(limit: int | None, ceiling: int) -> None:
    """Set RLIMIT_CPU's soft limit to ``limit``, never above ``ceiling`` (the soft limit
    mutmut set: it stays the outer bound); None sets ``ceiling`` back."""
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if limit is None or (ceiling != resource.RLIM_INFINITY and limit > ceiling):
        limit = ceiling
    resource.setrlimit(resource.RLIMIT_CPU, (limit, hard))


def main(argv: list[str]) -> int:
    """In the project root:

    ``python tests/mutation_select.py collect``: the maps for the tests and source paths
    ``[tool.mutmut]`` in pyproject.toml names, in mutants/line-tests.

    ``python tests/mutation_select.py digest NAME...``: each mutant's ``NAME DIGEST``, as
    .ci/mutants-equivalent lists it (of the mutants a run generated under mutants/)."""
    import tomllib

    if argv[:1] == ["digest"] and len(argv) > 1:
        for name in argv[1:]:
            try:
                print(name, change_digest(Path("mutants"), name))
            except (OSError, ValueError, KeyError) as e:
                print(f"{name}: no such mutant under mutants/ ({e!r})", file=sys.stderr)
                return 1
        return 0
    if argv != ["collect"]:
        print(main.__doc__, file=sys.stderr)
        return 2
    root = Path.cwd()
    sys.path.insert(0, str(root))  # as ``python -m pytest`` has it (tests import tests.x)
    cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["mutmut"]
    out = root / "mutants" / MAP_DIR
    tmp = out.with_name(MAP_DIR + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # as under mutmut: the conftest caps and derandomizes hypothesis when this is set
    os.environ["MUTANT_UNDER_TEST"] = "collect"
    args = ["-q", "-p", "no:randomly", "-p", "no:random-order", *cfg["pytest_add_cli_args"]]
    code = collect(root, tmp, list(cfg["source_paths"]), args)
    if code == 0:  # only whole maps count: a run that failed leaves none
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
