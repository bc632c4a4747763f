"""Project and agent scopes: two project roots and a broad root under one agent home.

Isolation both ways (entries, recall, tasks), agent scope filtering on the
file log and on MemoryLog, the broad-root fallback creating nothing at the
root, config precedence, and the CLI's view of it (init, storage, log).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import ctxledger
from eventstore import Event, Ledger, MemoryLog
from projections import ContextStore
from projections.scope import PROJECT_TAG, project_id, resolve
from projections.storage import storage_report
from projections.store import open_layout


def packet(summary: str, **kw: object) -> dict[str, object]:
    return {"target": "t", "summary": summary, **kw}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "agent-home"
    monkeypatch.setenv("CTXLEDGER_HOME", str(h))
    return h


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "proj-a", tmp_path / "proj-b"
    a.mkdir()
    b.mkdir()
    return a, b


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): (p.read_bytes() if p.is_file() else b"<dir>")
            for p in sorted(d.rglob("*"))}


def cli(*args: str, input: str | None = None) -> tuple[int, str, str]:
    r = CliRunner().invoke(ctxledger, list(args), input=input)
    return r.exit_code, r.stdout, r.stderr


# --- layout -----------------------------------------------------------------------------


def test_project_id_is_sha256_of_the_canonical_root(tmp_path: Path, home: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    want = hashlib.sha256(str(real.resolve()).encode()).hexdigest()[:32]
    assert project_id(real.resolve()) == want
    a, b = resolve(real, home=home), resolve(link, home=home)
    assert a.project_id == b.project_id == want
    assert b.store_dir == real.resolve() / ".ctxledger"  # symlinks resolved
    assert (a.scope, a.reason) == ("project", "default")


def test_broad_roots_fall_back_to_agent_scope(home: Path, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    fake_home = tmp_path / "me"
    fake_home.mkdir()
    monkeypatch.setenv("HOME", str(fake_home))
    for root, why in ((fake_home, "home directory"), (Path("/"), "filesystem root")):
        lay = resolve(root, home=home, flag="project")  # even when project scope is asked for
        assert (lay.scope, lay.reason, lay.fallback) == ("agent", "broad root", True)
        assert why in lay.detail
        assert lay.store_dir == home


def test_unresolvable_root_falls_back(tmp_path: Path, home: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    lay = resolve(loop / "x", home=home)
    assert (lay.scope, lay.reason) == ("agent", "unresolvable root")


def test_config_precedence_flag_project_agent(roots: tuple[Path, Path], home: Path) -> None:
    a, _b = roots
    home.mkdir()
    (home / "config.toml").write_text('[storage]\nscope = "agent"\n')
    lay, _ = open_layout(a, home=home)
    assert (lay.scope, lay.reason) == ("agent", "agent config")
    (a / ".ctxledger").mkdir()
    (a / ".ctxledger" / "config.toml").write_text('[storage]\nscope = "project"\n')
    lay, _ = open_layout(a, home=home)
    assert (lay.scope, lay.reason) == ("project", "project config")  # project overrides agent
    lay, _ = open_layout(a, home=home, storage_scope="agent")
    assert (lay.scope, lay.reason) == ("agent", "flag")
    (a / ".ctxledger" / "config.toml").write_text('[storage]\nscope = "everywhere"\n')
    with pytest.raises(Exception, match="scope must be project or agent"):
        open_layout(a, home=home)


def test_agent_config_settings_apply_unless_the_project_overrides(
    roots: tuple[Path, Path], home: Path
) -> None:
    a, b = roots
    home.mkdir()
    (home / "config.toml").write_text("[cache]\nttl_seconds = 60\n")
    (b / ".ctxledger").mkdir()
    (b / ".ctxledger" / "config.toml").write_text("[cache]\nttl_seconds = 120\n")
    with ContextStore.open(a) as sa, ContextStore.open(b) as sb:
        assert sa.config.ttl_seconds == 60
        assert sb.config.ttl_seconds == 120


# --- isolation ----------------------------------------------------------------------------


@pytest.mark.parametrize("scope", ["project", "agent"])
def test_two_projects_never_see_each_other(roots: tuple[Path, Path], home: Path,
                                           scope: str) -> None:
    a, b = roots
    with ContextStore.open(a, storage_scope=scope) as sa, \
            ContextStore.open(b, storage_scope=scope) as sb:
        ka = sa.put(packet("alpha shared word", paths=["src/a.py"])).cache_key
        kb = sb.put(packet("beta shared word", paths=["src/b.py"])).cache_key
        ta = sa.tasks.create("task of a").id
        tb = sb.tasks.create("task of b").id
        for mine, k_mine, k_other, t_mine, t_other, path in (
            (sa, ka, kb, ta, tb, "src/a.py"), (sb, kb, ka, tb, ta, "src/b.py")
        ):
            assert mine.get(k_mine) is not None
            assert mine.get(k_other) is None
            assert [e.cache_key for e in mine.list()] == [k_mine]
            assert [h.cache_key for h in mine.recall("shared word")] == [k_mine]
            assert [h.cache_key for h in mine.recall("shared", path_filters=[path])] == [k_mine]
            assert [t.id for t in mine.tasks.list()] == [t_mine]
            assert mine.stats()["entries"] == 1
            assert mine.tasks.show(t_other) is None
            assert mine.tasks.show(t_mine) is not None
    if scope == "agent":
        assert not (a / ".ctxledger").exists() and not (b / ".ctxledger").exists()
        with Ledger.open(home / "log", readonly=True) as led:
            tags = [e.data.get(PROJECT_TAG) for e in led.read(1)]
        assert set(tags) == {project_id(a.resolve()), project_id(b.resolve())}


def test_agent_scope_survives_reopen_rebuild_and_time_travel(roots: tuple[Path, Path],
                                                             home: Path) -> None:
    a, b = roots
    with ContextStore.open(a, storage_scope="agent") as sa:
        k1 = sa.put(packet("first of a")).cache_key
    with ContextStore.open(b, storage_scope="agent") as sb:
        for i in range(5):
            sb.put(packet(f"noise {i} of b"))
    with ContextStore.open(a, storage_scope="agent") as sa:
        seq_before = sa.ledger.head
        k2 = sa.put(packet("second of a")).cache_key
        assert {e.cache_key for e in sa.list()} == {k1, k2}
        assert [e.cache_key for e in sa.list(as_of=seq_before)] == [k1]
        assert [h.cache_key for h in sa.recall("of", as_of=seq_before)] == [k1]
        report = sa.rebuild()
        assert report["events"] == 2  # only a's events are folded
        assert {e.cache_key for e in sa.list()} == {k1, k2}
        # b's events moved a's watermarks: a caught-up view never reads them again
        assert all(v.state.seq == sa.ledger.head for v in sa.runner.views.values())
    with ContextStore.open(a, storage_scope="agent", readonly=True) as ra:
        assert {e.cache_key for e in ra.list()} == {k1, k2}
        assert ra.get(k2) is not None and ra.get(k2).body["summary"] == "second of a"


def test_agent_scope_over_memorylog_isolates_too(roots: tuple[Path, Path], home: Path) -> None:
    a, b = roots
    log = MemoryLog()
    sa = ContextStore.open(a, storage_scope="agent", log=log)
    sb = ContextStore.open(b, storage_scope="agent", log=log)
    try:
        ka = sa.put(packet("memory a")).cache_key
        kb = sb.put(packet("memory b")).cache_key
        assert sa.get(kb) is None and sb.get(ka) is None
        assert [h.cache_key for h in sb.recall("memory")] == [kb]
    finally:
        sa.close()
        sb.close()


def test_reserved_project_field_is_refused_in_agent_scope(roots: tuple[Path, Path],
                                                          home: Path) -> None:
    a, _b = roots
    with ContextStore.open(a, storage_scope="agent") as sa:
        head = sa.ledger.head
        with pytest.raises(ValueError, match="reserved"):
            sa._append([Event("x.y", None, {PROJECT_TAG: "someone-else"})])
        assert sa.ledger.head == head
    code, _out, err = cli("log", "append", "--root", str(a), "--storage-scope", "agent",
                          "--kind", "x.y", "--data", '{"project": "other"}')
    assert code == 2 and "reserved" in err


def test_broad_root_creates_nothing_at_the_root(tmp_path: Path, home: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    fake_home = tmp_path / "me"
    fake_home.mkdir()
    (fake_home / "notes.txt").write_text("mine")
    monkeypatch.setenv("HOME", str(fake_home))
    before = snapshot(fake_home)
    code, out, _err = cli("init", "--root", str(fake_home), "--json")
    assert code == 0
    doc = json.loads(out)
    assert (doc["storage_scope"], doc["scope_reason"]) == ("agent", "broad root")
    assert doc["store"] == str(home)
    with ContextStore.open(fake_home) as st:
        k = st.put(packet("from the home directory")).cache_key
        assert st.layout.fallback
    assert snapshot(fake_home) == before  # nothing created at the broad root
    code, out, _err = cli("store", "list", "--root", str(fake_home), "--json")
    assert code == 0 and [e["cache_key"] for e in json.loads(out)["entries"]] == [k]
    code, out, _err = cli("storage", "--root", str(fake_home), "--json")
    report = json.loads(out)
    assert report["scope"]["reason"] == "broad root"
    assert "home directory" in report["scope"]["detail"]
    assert report["scope"]["project_store"] is None
    assert snapshot(fake_home) == before


def test_init_writes_a_gitignore_and_keeps_a_users_own(tmp_path: Path, home: Path) -> None:
    r = tmp_path / "p"
    assert cli("init", "--root", str(r))[0] == 0
    ignore = r / ".ctxledger" / ".gitignore"
    assert ignore.read_text().splitlines()[-1] == "*"
    assert oct(ignore.stat().st_mode & 0o777) == oct(0o600)
    ignore.write_text("# mine\n")
    assert cli("init", "--root", str(r))[0] == 0
    assert ignore.read_text() == "# mine\n"


# --- CLI ------------------------------------------------------------------------------------


def test_cli_agent_scope_isolation_and_storage(roots: tuple[Path, Path], home: Path) -> None:
    a, b = roots
    home.mkdir()
    (home / "config.toml").write_text('[storage]\nscope = "agent"\n')
    code, out, _ = cli("store", "list", "--root", str(a))
    assert code == 1  # no store yet: only init creates one
    assert cli("init", "--root", str(a))[0] == 0
    # the shared log exists now, but b was never initialised: a mistyped root fails
    code, _out, err = cli("store", "list", "--root", str(b))
    assert code == 1 and "projects" in err and "ctxledger init" in err
    assert cli("init", "--root", str(b))[0] == 0
    code, out, _ = cli("store", "put", "--root", str(a), "--json",
                       input=json.dumps(packet("cli alpha")))
    assert code == 0
    ka = json.loads(out)["cache_key"]
    code, out, _ = cli("store", "put", "--root", str(b), "--json",
                       input=json.dumps(packet("cli alpha too")))
    kb = json.loads(out)["cache_key"]
    code, out, _ = cli("recall", "--root", str(a), "-q", "alpha", "--json")
    assert [h["cache_key"] for h in json.loads(out)["hits"]] == [ka]
    code, out, _ = cli("log", "show", "--root", str(b), "--json")
    assert [e["key"] for e in json.loads(out)["events"]] == [kb]
    code, out, _ = cli("log", "tail", "--root", str(b), "-n", "5", "--json")
    assert [e["key"] for e in json.loads(out)["events"]] == [kb]
    code, out, _ = cli("store", "get", "--root", str(b), "--key", ka[:16])
    assert code == 1  # a's key is unknown in b
    code, out, _ = cli("storage", "--root", str(a), "--json")
    rep = json.loads(out)
    assert rep["scope"]["storage_scope"] == "agent" and rep["scope"]["reason"] == "agent config"
    assert rep["logs"]["agent"]["events"] == 2 and "project" not in rep["logs"]
    assert rep["views"]["cache"]["watermark_seq"] == 2
    assert rep["scope"]["checkpoints"].startswith(str(home / "projects"))
    # the flag beats the config: project scope at a, which has no store yet
    code, out, _ = cli("store", "list", "--root", str(a), "--storage-scope", "project")
    assert code == 1


def test_storage_reports_paths_logs_views_and_modes(roots: tuple[Path, Path], home: Path) -> None:
    a, _b = roots
    with ContextStore.open(a) as st:
        st.put(packet("storage"))
    os.chmod(a / ".ctxledger" / "log", 0o755)
    rep = storage_report(a)
    assert rep["scope"]["storage_scope"] == "project"
    assert rep["scope"]["project_store"] == str(a.resolve() / ".ctxledger")
    log = rep["logs"]["project"]
    assert (log["segments"], log["events"], log["head_seq"]) == (1, 1, 1)
    assert len(log["head_digest"]) == 64 and log["bytes"] > 0
    assert rep["logs"]["agent"]["exists"] is False
    assert set(rep["views"]) >= {"cache", "recall", "tasks", "handoffs"}
    assert all(v["watermark_seq"] == 1 for v in rep["views"].values())
    assert any("0755" in w for w in rep["warnings"])
    # a project store the agent scope in force does not read is pointed out
    rep = storage_report(a, storage_scope="agent")
    assert any("not read" in w for w in rep["warnings"])


# --- concurrency ------------------------------------------------------------------------

WRITER = """
import sys
from projections import ContextStore
root, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with ContextStore.open(root, storage_scope="agent") as st:
    for i in range(n):
        r = st.put({"target": name, "summary": f"{name} packet {i}"})
        print(r.cache_key, flush=True)  # acknowledged: durable once put returns
"""


def test_two_projects_writing_the_agent_log_at_once_lose_nothing(
    roots: tuple[Path, Path], home: Path
) -> None:
    import subprocess
    import sys

    a, b = roots
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo), "CTXLEDGER_HOME": str(home)}
    n = 40
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(r), r.name, str(n)],
                         stdout=subprocess.PIPE, text=True, env=env)
        for r in (a, b)
    ]
    acked = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        acked.append(out.split())
    with Ledger.open(home / "log", readonly=True) as led:
        assert led.head == 2 * n and led.verify().ok
    for r, keys in zip((a, b), acked, strict=True):
        assert len(keys) == n
        with ContextStore.open(r, storage_scope="agent", readonly=True) as st:
            assert {e.cache_key for e in st.list(limit=1000)} == set(keys)
            assert {e.target for e in st.list(limit=1000)} == {r.name}


def test_storage_reports_calibration_from_the_agent_home(roots: tuple[Path, Path],
                                                         home: Path) -> None:
    a, b = roots
    with ContextStore.open(a) as st:
        st.calibration.record("p", "m", 100, 110)
        st.calibration.record("p", "m2", 100, 90)
    rep = storage_report(b)  # another project: the same agent home, the same calibration
    assert rep["calibration"]["profiles"] == 2 and rep["calibration"]["samples"] == 2
    assert rep["logs"]["agent"]["events"] == 2
    assert rep["calibration"]["watermark_seq"] == 2


def test_a_checkpoint_of_one_project_never_serves_another(roots: tuple[Path, Path],
                                                          home: Path) -> None:
    import shutil

    a, b = roots
    with ContextStore.open(a, storage_scope="agent") as sa:
        sa.put(packet("only in a"))
        sa.checkpoint()
        a_ck = sa.layout.checkpoints_dir
    with ContextStore.open(b, storage_scope="agent") as sb:
        sb.checkpoint()
        b_ck = sb.layout.checkpoints_dir
    for f in a_ck.iterdir():  # someone copies a's checkpoints over b's
        shutil.copy(f, b_ck / f.name)
    with ContextStore.open(b, storage_scope="agent") as sb:
        assert sb.list() == []
        assert sb.recall("only") == []
        refused = sb.stats()["views"]["cache"]["fallback_reasons"]
        assert any("another project" in r for r in refused)
