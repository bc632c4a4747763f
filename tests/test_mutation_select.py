"""The mutation run's test selection (tests/mutation_select.py): a mutant's changed
lines map to the right statements of the original source, and only to tests sure
to run them; anything unsure keeps mutmut's own selection (None)."""

from __future__ import annotations

import json
from pathlib import Path

import mutation_select
import pytest
from mutation_select import (
    EQUIVALENT,
    MAP_DIR,
    MAP_VERSION,
    SECONDS,
    SKIPPED,
    SNAPSHOT,
    _digest,
    _snapshot,
    change_digest,
    changed_statements,
    cpu_limits,
    listed_equivalent,
    load_equivalent,
    load_seconds,
    mutant_file,
    narrow,
)

SOURCE = '''\
import os


def f(a, b=1):
    """Doc."""
    x = a + b
    if (x > 2
            and a):
        return "big " + str(
            x)
    return os.fspath(str(x))


class C:
    def m(self, y):
        z = [y,
             y + 1]
        return z
'''

# mutmut's layout: a copy named ..__mutmut_orig, then each mutant, spans 1-based
F_ORIG = SOURCE.split("\n")[3:11]
M_ORIG = SOURCE.split("\n")[14:18]


def _variant(lines: list[str], new: str, old: str, change: tuple[str, str] | None
             ) -> list[str]:
    out = [line.replace(f"def {old}(", f"def {new}(") for line in lines]
    if change is not None:
        out = [line.replace(*change) for line in out]
    return out


def _fake(tmp_path: Path, f_changes: list[tuple[str, str]], m_changes: list[tuple[str, str]]
          ) -> tuple[Path, Path]:
    root = tmp_path / "root"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text(SOURCE)
    mutants = root / "mutants"
    (mutants / "pkg").mkdir(parents=True)
    text: list[str] = ["import os", ""]
    spans: dict[str, list[int]] = {}

    def add(name: str, lines: list[str]) -> None:
        text.append("")
        start = len(text) + 1
        text.extend(lines)
        spans[name] = [start, len(text)]

    add("x_f__mutmut_orig", _variant(F_ORIG, "x_f__mutmut_orig", "f", None))
    for n, ch in enumerate(f_changes, 1):
        add(f"x_f__mutmut_{n}", _variant(F_ORIG, f"x_f__mutmut_{n}", "f", ch))
    sep = "\u01c1"
    add(f"x{sep}C{sep}m__mutmut_orig", _variant(M_ORIG, f"x{sep}C{sep}m__mutmut_orig", "m",
                                               None))
    for n, ch in enumerate(m_changes, 1):
        add(f"x{sep}C{sep}m__mutmut_{n}", _variant(M_ORIG, f"x{sep}C{sep}m__mutmut_{n}", "m",
                                                  ch))
    (mutants / "pkg" / "mod.py").write_text("\n".join(text) + "\n")
    (mutants / "pkg" / "mod.py.spans").write_text(json.dumps({"version": 1, "spans": spans}))
    snapshot = mutants / MAP_DIR / "pkg" / ("mod.py" + SNAPSHOT)  # as collect keeps it
    snapshot.parent.mkdir(parents=True)
    snapshot.write_text(SOURCE)
    return root, mutants


F_CHANGES = [
    ("a + b", "a - b"),            # 1: line 6, a one-line statement
    ("and a):", "or a):"),         # 2: line 8, the if's header: the if statement (line 7)
    ("            x)", "            x + 1)"),  # 3: line 10, inside a return on lines 9-10
    ("b=1", "b=2"),                # 4: the signature: evaluated at import, no narrowing
    ("os.fspath(str(x))", "None"),  # 5: line 11
]
M_CHANGES = [("y + 1]", "y - 1]")]  # line 17, inside an assignment on lines 16-17


def test_a_mutant_name_names_its_file_and_function() -> None:
    assert mutant_file("eventstore.anchor.x_check_anchor__mutmut_1") == (
        "eventstore/anchor.py", "x_check_anchor__mutmut_1")
    sep = "\u01c1"
    assert mutant_file(f"projections.recall.match.x{sep}A{sep}b__mutmut_7") == (
        "projections/recall/match.py", f"x{sep}A{sep}b__mutmut_7")
    with pytest.raises(ValueError):
        mutant_file("eventstore.anchor.check_anchor")


def test_changed_lines_map_to_the_statements_coverage_records(tmp_path: Path) -> None:
    root, mutants = _fake(tmp_path, F_CHANGES, M_CHANGES)
    got = {n: changed_statements(mutants, f"pkg.mod.x_f__mutmut_{n}")
           for n in range(1, 6)}
    assert got == {1: ("pkg/mod.py", {6}), 2: ("pkg/mod.py", {7}), 3: ("pkg/mod.py", {9}),
                   4: None, 5: ("pkg/mod.py", {11})}
    sep = "\u01c1"
    assert changed_statements(mutants, f"pkg.mod.x{sep}C{sep}m__mutmut_1") == (
        "pkg/mod.py", {16})


def _write_map(root: Path, mutants: Path, lines: dict[int, list[str]]) -> None:
    tests = sorted({t for ts in lines.values() for t in ts})
    out = mutants / MAP_DIR / "pkg" / "mod.py.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "version": MAP_VERSION,
        "digest": _digest(root / "pkg" / "mod.py"),
        "tests": tests,
        "lines": {str(k): [tests.index(t) for t in v] for k, v in lines.items()}}))


def test_narrow_keeps_the_tests_that_run_the_changed_statement(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, mutants = _fake(tmp_path, F_CHANGES, M_CHANGES)
    assert narrow("pkg.mod.x_f__mutmut_1", mutants) is None  # no map yet
    _write_map(root, mutants, {6: ["t::a", "t::b"], 7: ["t::b"], 11: ["t::a"]})
    assert narrow("pkg.mod.x_f__mutmut_1", mutants) == {"t::a", "t::b"}
    assert narrow("pkg.mod.x_f__mutmut_2", mutants) == {"t::b"}
    # line 9: no test ran it under coverage: none to run (mutmut: "no tests")
    assert narrow("pkg.mod.x_f__mutmut_3", mutants) == set()
    # ... unless the file's code also runs on threads coverage does not follow
    monkeypatch.setattr(mutation_select, "UNFOLLOWED_THREADS", frozenset({"pkg/mod.py"}))
    assert narrow("pkg.mod.x_f__mutmut_3", mutants) is None
    assert narrow("pkg.mod.x_f__mutmut_2", mutants) == {"t::b"}
    monkeypatch.undo()
    assert narrow("pkg.mod.x_f__mutmut_4", mutants) is None  # the signature
    assert narrow("pkg.mod.x_f__mutmut_5", mutants) == {"t::a"}
    assert narrow("pkg.mod.x_f__mutmut_99", mutants) is None  # unknown mutant
    assert narrow("other.mod.x_f__mutmut_1", mutants) is None  # unknown file


def test_a_function_changed_since_the_map_keeps_mutmuts_selection(tmp_path: Path) -> None:
    """The map's lines are of the source it was made from: a mutated function that reads
    otherwise now keeps mutmut's selection; the working tree changing elsewhere (or
    this function changing there, after mutmut copied it) does not matter."""
    root, mutants = _fake(tmp_path, F_CHANGES, M_CHANGES)
    _write_map(root, mutants, {6: ["t::a"], 16: ["t::m"]})
    (root / "pkg" / "mod.py").write_text("# the working tree moved on\n")
    assert narrow("pkg.mod.x_f__mutmut_1", mutants) == {"t::a"}
    snapshot = mutants / MAP_DIR / "pkg" / ("mod.py" + SNAPSHOT)
    snapshot.write_text(SOURCE.replace("x = a + b", "x = a * b"))  # f as it was mapped
    _snapshot.cache_clear()  # read once per process (each mutant's run is a new one)
    assert narrow("pkg.mod.x_f__mutmut_1", mutants) is None
    sep = "\u01c1"
    assert narrow(f"pkg.mod.x{sep}C{sep}m__mutmut_1", mutants) == {"t::m"}


def test_collect_maps_each_statement_to_the_tests_that_run_it(tmp_path: Path) -> None:
    """A real coverage run over a small project: per statement, exactly the tests
    that ran it; what a wider fixture's setup and teardown run, shared by every test
    using it, and nothing else shared (an autouse fixture on a session fixture, as
    every test's home is here, once made every line count for every test)."""
    import subprocess
    import sys

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text(
        "def one():\n    return 1\n\n\ndef two():\n    return 2\n\n\n"
        "def built():\n    return [3]\n\n\ndef cleanup():\n    return None\n\n\n"
        "def session_setup():\n    return 5\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(
        "import pytest\nfrom pkg.mod import session_setup\n\n\n"
        "@pytest.fixture(autouse=True)\ndef home(tmp_path_factory):\n"
        "    return tmp_path_factory.mktemp('home')\n\n\n"
        "@pytest.fixture(scope='session')\ndef everywhere():\n"
        "    return session_setup()\n")
    (tmp_path / "tests" / "test_a.py").write_text(
        "import pytest\nfrom pkg.mod import built, cleanup, one, two\n\n\n"
        "@pytest.fixture(scope='module')\ndef shared():\n    yield built()\n    cleanup()\n\n\n"
        "def test_one():\n    assert one() == 1\n\n\n"
        "def test_two(everywhere):\n    assert two() == 2\n\n\n"
        "def test_shared_first(shared):\n    assert shared == [3]\n\n\n"
        "def test_shared_second(shared):\n    assert shared\n\n\n"
        "def test_skipped():\n    pass\n")
    (tmp_path / "tests" / "test_b.py").write_text(
        "def test_three(everywhere):\n    assert everywhere == 5\n")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.mutmut]\nsource_paths = ["pkg"]\n'
        'pytest_add_cli_args = ["-p", "no:cacheprovider",'
        ' "--deselect=tests/test_a.py::test_skipped"]\n'
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    script = Path(__file__).with_name("mutation_select.py")
    env = {k: v for k, v in __import__("os").environ.items() if k != "MUTANT_UNDER_TEST"}
    env["PYTHONPATH"] = str(tmp_path)
    done = subprocess.run([sys.executable, str(script), "collect"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((tmp_path / "mutants" / MAP_DIR / "pkg" / "mod.py.json").read_text())
    assert data["version"] == MAP_VERSION
    assert data["digest"] == _digest(tmp_path / "pkg" / "mod.py")
    snapshot = tmp_path / "mutants" / MAP_DIR / "pkg" / ("mod.py" + SNAPSHOT)
    assert snapshot.read_bytes() == (tmp_path / "pkg" / "mod.py").read_bytes()
    ran = {int(line): {data["tests"][i].split("::")[1] for i in ids}
           for line, ids in data["lines"].items()}
    # the def lines run at import (collection: no test), the bodies under their tests
    assert ran == {2: {"test_one"}, 6: {"test_two"},
                   10: {"test_shared_first", "test_shared_second"},
                   14: {"test_shared_first", "test_shared_second"},
                   18: {"test_two", "test_three"}}
    assert not (tmp_path / "mutants" / (MAP_DIR + ".tmp")).exists()
    # each test's time (what a mutant's run may spend is made of them), no deselected one
    seconds = load_seconds(tmp_path / "mutants")
    assert {k.split("::")[1] for k in seconds} == {
        "test_one", "test_two", "test_shared_first", "test_shared_second", "test_three"}
    assert all(isinstance(v, float) and v >= 0 for v in seconds.values())


def test_cpu_limits_add_up_the_tests_times_in_run_order() -> None:
    """Each test's limit is the start, the slack and factor x the times so far (rounded
    up); from the first test with no time on, no limit of ours."""
    seconds = {"a": 0.5, "b": 0.25, "d": 1.0}
    assert cpu_limits(["a", "b", "c", "d"], seconds, start=10.2, factor=3, slack=2) == {
        "a": 14, "b": 15}
    assert cpu_limits(["b", "a"], seconds, start=0.0, factor=3, slack=2) == {"b": 3, "a": 5}
    assert cpu_limits([], seconds, start=1.0) == {}


def test_load_seconds_without_a_file_or_with_a_broken_one(tmp_path: Path) -> None:
    assert load_seconds(tmp_path) == {}
    (tmp_path / MAP_DIR).mkdir()
    (tmp_path / MAP_DIR / SECONDS).write_text("[1, 2")
    assert load_seconds(tmp_path) == {}
    (tmp_path / MAP_DIR / SECONDS).write_text('{"t": 1.5}')
    assert load_seconds(tmp_path) == {"t": 1.5}


def test_a_loop_past_its_limit_is_stopped_by_sigxcpu() -> None:
    """limit_cpu lowers the soft limit below the one mutmut set (never above it), and
    the kernel stops the looping process with SIGXCPU: mutmut's "timeout"."""
    import signal
    import subprocess
    import sys

    here = Path(__file__).parent
    code = (
        "import resource, sys\n"
        f"sys.path.insert(0, {str(here)!r})\n"
        "from mutation_select import cpu_used, limit_cpu\n"
        "resource.setrlimit(resource.RLIMIT_CPU, (60, 61))  # mutmut's\n"
        "limit_cpu(10**6, 60)\n"
        "assert resource.getrlimit(resource.RLIMIT_CPU) == (60, 61)\n"
        "limit_cpu(5, 60)\n"
        "assert resource.getrlimit(resource.RLIMIT_CPU) == (5, 61)\n"
        "limit_cpu(None, 60)\n"
        "assert resource.getrlimit(resource.RLIMIT_CPU) == (60, 61)\n"
        "limit_cpu(int(cpu_used()) + 1, 60)\n"
        "while True:\n"
        "    pass\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGXCPU, done.stderr


# -- listed equivalent mutants: skipped while the name names the listed change ---------


def test_a_change_digest_follows_the_change_not_the_name(tmp_path: Path) -> None:
    _root, mutants = _fake(tmp_path / "a", F_CHANGES, M_CHANGES)
    first = {n: change_digest(mutants, f"pkg.mod.x_f__mutmut_{n}") for n in range(1, 6)}
    assert len(set(first.values())) == 5  # five changes, five digests
    # the same changes numbered otherwise: each keeps its digest, under another name
    _root, renumbered = _fake(tmp_path / "b", F_CHANGES[::-1], M_CHANGES)
    assert {n: change_digest(renumbered, f"pkg.mod.x_f__mutmut_{6 - n}")
            for n in range(1, 6)} == first
    # an edit next to the change makes it another change; one farther off does not
    near = [("a + b", "a - b"), ('"""Doc."""', '"""Other."""')]
    far = [("a + b", "a - b"), ("os.fspath(str(x))", "os.fspath(str(x)) ")]
    for edits, same in ((near, False), (far, True)):
        _root, edited = _fake(tmp_path / str(same), F_CHANGES, M_CHANGES)
        text = (edited / "pkg" / "mod.py").read_text()
        orig, one = text.split("def x_f__mutmut_1(")
        for old, new in edits[1:]:  # in the original and in the mutant alike
            orig, one = orig.replace(old, new), one.replace(old, new)
        (edited / "pkg" / "mod.py").write_text(orig + "def x_f__mutmut_1(" + one)
        assert (change_digest(edited, "pkg.mod.x_f__mutmut_1") == first[1]) is same


def test_the_listing_reads_name_and_digest_and_refuses_a_bare_name(tmp_path: Path) -> None:
    listing = tmp_path / "equivalent"
    listing.write_text("# why\n\npkg.mod.x_f__mutmut_1 0123456789ab  # a reason # more\n"
                       "pkg.mod.x_f__mutmut_2   ba9876543210\n")
    assert load_equivalent(listing) == {"pkg.mod.x_f__mutmut_1": "0123456789ab",
                                        "pkg.mod.x_f__mutmut_2": "ba9876543210"}
    listing.write_text("pkg.mod.x_f__mutmut_1  # a reason\n")
    with pytest.raises(ValueError, match="NAME DIGEST"):
        load_equivalent(listing)


def test_only_a_listed_mutant_with_its_digest_counts_as_equivalent(tmp_path: Path) -> None:
    _root, mutants = _fake(tmp_path, F_CHANGES, M_CHANGES)
    assert not listed_equivalent("pkg.mod.x_f__mutmut_1", mutants)  # no listing
    right = change_digest(mutants, "pkg.mod.x_f__mutmut_1")
    (mutants / EQUIVALENT).parent.mkdir()
    (mutants / EQUIVALENT).write_text(f"pkg.mod.x_f__mutmut_1 {right}  # why\n"
                                      "pkg.mod.x_f__mutmut_2 000000000000  # stale\n"
                                      "pkg.mod.x_f__mutmut_99 000000000000  # gone\n")
    assert listed_equivalent("pkg.mod.x_f__mutmut_1", mutants)
    assert not listed_equivalent("pkg.mod.x_f__mutmut_2", mutants)
    assert not listed_equivalent("pkg.mod.x_f__mutmut_99", mutants)
    assert not listed_equivalent("pkg.mod.x_f__mutmut_3", mutants)
    (mutants / EQUIVALENT).write_text("pkg.mod.x_f__mutmut_1\n")  # broken: none skipped
    assert not listed_equivalent("pkg.mod.x_f__mutmut_1", mutants)


def test_the_conftest_skips_a_listed_mutant_and_runs_a_stale_one(tmp_path: Path) -> None:
    """A pytest run as mutmut makes it (in mutants/, MUTANT_UNDER_TEST set) exits with
    mutmut's "skipped" code for a listed mutant without running a test, and runs the
    tests of one whose listed digest is not its change's."""
    import os
    import shutil
    import subprocess
    import sys

    _root, mutants = _fake(tmp_path, F_CHANGES, M_CHANGES)
    here = Path(__file__).parent
    (mutants / "tests").mkdir()
    for name in ("conftest.py", "mutation_select.py"):
        shutil.copyfile(here / name, mutants / "tests" / name)
    (mutants / "tests" / "test_one.py").write_text(
        "def test_runs():\n    open('ran', 'w').close()\n")
    (mutants / EQUIVALENT).parent.mkdir()
    right = change_digest(mutants, "pkg.mod.x_f__mutmut_1")
    (mutants / EQUIVALENT).write_text(f"pkg.mod.x_f__mutmut_1 {right}  # why\n"
                                      "pkg.mod.x_f__mutmut_2 000000000000  # stale\n")

    def run(mutant: str) -> int:
        env = {**os.environ, "MUTANT_UNDER_TEST": mutant}
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "-p", "no:randomly", "tests"], cwd=mutants, env=env,
                              capture_output=True, text=True, timeout=120)
        return done.returncode

    assert run("pkg.mod.x_f__mutmut_1") == SKIPPED
    assert not (mutants / "ran").exists()
    assert run("pkg.mod.x_f__mutmut_2") == 0
    assert (mutants / "ran").exists()
