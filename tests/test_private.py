"""Private by default (failure rule 7): modes at creation, warnings, the owner check.

Every directory ctxledger creates is 0700 and every file 0600 whatever the
umask; ``verify`` and ``store stats`` warn about wider ones (exit code
unchanged); a store another user owns is refused for writing. CI runs as
root, where chown proves little, so "another user" is ``os.geteuid``
answering another uid.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cache_strategies import tree_bytes
from click.testing import CliRunner, Result
from faults import failing_for

from cli.main import ctxledger
from eventstore import Event, Ledger, LedgerIOError, NotOwnerError, private
from projections import ContextStore, store_dir


def cli(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(ctxledger, list(args), input=input)


@pytest.fixture
def umask() -> Iterator[Any]:
    """Set the process umask for one test (and restore it, whatever happens)."""
    old = os.umask(0o022)

    def set_(mask: int) -> None:
        os.umask(mask)

    try:
        yield set_
    finally:
        os.umask(old)


def modes(top: Path) -> dict[str, int]:
    """Mode bits of ``top`` and everything under it (symlinks not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in [".", *dirnames, *filenames]:
            p = Path(dirpath, name)
            out[str(p.relative_to(top.parent))] = stat.S_IMODE(os.lstat(p).st_mode)
    return out


def exercise(root: Path) -> None:
    """Create every kind of path a store has: init, segments (a roll), LOCK, a torn tail
    quarantined, checkpoints and their backups, a rebuild."""
    assert cli("init", "--root", str(root)).exit_code == 0
    log_dir = store_dir(root) / "log"
    with Ledger.open(log_dir, segment_bytes=4096) as led:
        for i in range(6):
            led.append([Event("t.big", None, {"pad": "x" * 1500, "i": i})])
    last = sorted(log_dir.glob("*.seg"))[-1]
    with open(last, "ab") as f:
        f.write(b"CTXF torn bytes")  # a crash mid-frame: the next writer moves them aside
    with ContextStore.open(root) as st:
        st.put({"target": "t", "summary": "one"})
        st.checkpoint()
        st.put({"target": "t", "summary": "two"})
        st.checkpoint()
        st.rebuild()
        st.checkpoint()


@pytest.mark.parametrize("mask", [0o022, 0o000, 0o277], ids=["022", "000", "277"])
def test_every_created_path_is_private_whatever_the_umask(
    tmp_path: Path, umask: Any, mask: int
) -> None:
    umask(mask)
    root = tmp_path / "new" / "proj"  # init creates the missing parents too
    exercise(root)
    umask(0o022)
    got = modes(tmp_path / "new")
    kinds = {p: ("dir" if (tmp_path / p).is_dir() else "file") for p in got}
    want = {p: (0o700 if kinds[p] == "dir" else 0o600) for p in got}
    assert got == want
    names = set(got)
    # the exercise reached every kind of path
    assert any(p.endswith(".torn") for p in names) and any("quarantine" in p for p in names)
    assert sum(p.endswith(".seg") for p in names) >= 2
    for f in ("log/LOCK", "checkpoints/cache.ckpt", "checkpoints/cache.ckpt.bak", "artifacts"):
        assert f"new/proj/.ctxledger/{f}" in names, f
    assert private.mode_warnings(store_dir(root)) == []


def test_a_widened_path_gives_a_warning_and_keeps_the_exit_code(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    assert cli("init", "--root", str(root)).exit_code == 0
    assert cli("log", "append", "--root", str(root), "--kind", "k", "--data", "{}").exit_code == 0
    for cmd in (["verify"], ["store", "stats"]):
        res = cli(*cmd, "--root", str(root), "--json")
        assert (res.exit_code, json.loads(res.stdout)["warnings"], res.stderr) == (0, [], "")
    seg = sorted((store_dir(root) / "log").glob("*.seg"))[0]
    seg.chmod(0o644)
    (store_dir(root) / "checkpoints").chmod(0o750)
    warned = private.mode_warnings(store_dir(root))
    assert len(warned) == 2
    assert str(store_dir(root) / "checkpoints") in warned[0] and "0750" in warned[0]
    assert str(seg) in warned[1] and "mode 0644" in warned[1] and "chmod 600" in warned[1]
    for cmd in (["verify"], ["store", "stats"]):
        res = cli(*cmd, "--root", str(root), "--json")
        assert res.exit_code == 0 and res.stderr == ""
        assert json.loads(res.stdout)["warnings"] == warned
        human = cli(*cmd, "--root", str(root))
        assert human.exit_code == 0
        assert human.stderr.splitlines() == [f"warning: {w}" for w in warned]
        assert "warning" not in human.stdout
    # a failed verify still warns, and still exits 1
    with open(seg, "ab") as f:
        f.write(b"CTXF torn")
    res = cli("verify", "--root", str(root), "--json")
    assert res.exit_code == 1 and json.loads(res.stdout)["warnings"] == warned


def test_wide_paths_past_the_cap_are_counted(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path):
        pass
    art = store_dir(tmp_path) / "artifacts"
    for i in range(private.MAX_MODE_WARNINGS + 5):
        (art / f"f{i:02d}").write_bytes(b"")
        (art / f"f{i:02d}").chmod(0o604)
    warned = private.mode_warnings(store_dir(tmp_path))
    assert len(warned) == private.MAX_MODE_WARNINGS + 1
    assert warned[-1].startswith("... and 5 more paths under ")


def test_writers_refuse_a_foreign_store_and_readers_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "proj"
    with ContextStore.open(root) as st:
        key = st.put({"target": "t", "summary": "mine"}).cache_key
    before = tree_bytes(store_dir(root))
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 1000)

    for open_for_write in (
        lambda: ContextStore.open(root),
        lambda: Ledger.open(store_dir(root) / "log"),
    ):
        with pytest.raises(NotOwnerError, match=rf"belongs to uid {me}, not to this user"):
            open_for_write()
    for args in (
        ["init"],
        ["log", "append", "--kind", "k", "--data", "{}"],
        ["store", "put"],
        ["rebuild"],
        ["checkpoint"],
    ):
        res = cli(*args, "--root", str(root), input='{"target": "t"}')
        assert res.exit_code == 1, (args, res.output)
        (line,) = res.stderr.splitlines()
        assert line.startswith("error: ") and "belongs to uid" in line, line
    # reading someone else's store is allowed (an audit): it changes nothing either way
    with ContextStore.open(root, readonly=True) as st:
        assert st.get(key) is not None
    for args in (["verify"], ["log", "show"], ["store", "get", "--key", key], ["store", "list"]):
        assert cli(*args, "--root", str(root)).exit_code == 0, args
    assert tree_bytes(store_dir(root)) == before


def test_the_owner_check_is_on_the_store_and_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the log directory foreign (the store directory ours): still refused."""
    root = tmp_path / "proj"
    with ContextStore.open(root):
        pass
    log_dir = store_dir(root) / "log"
    real_stat = os.stat
    foreign = real_stat(log_dir).st_uid + 1000

    def stat_(path: Any, *a: Any, **kw: Any) -> Any:
        st = real_stat(path, *a, **kw)
        if Path(path) == log_dir:
            fields = list(st)
            fields[stat.ST_UID] = foreign
            return os.stat_result(fields)
        return st

    monkeypatch.setattr(os, "stat", stat_)
    with pytest.raises(NotOwnerError, match=f"{log_dir} belongs to uid {foreign}"):
        ContextStore.open(root)


def test_mode_warnings_walks_past_links_and_unlistable_dirs_and_quotes_paths(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A symlink is passed over and the walk goes on; a directory it cannot list is
    named; a path with a space is quoted in the chmod it suggests."""
    root = tmp_path / "store"
    root.mkdir(mode=0o700)
    os.chmod(root, 0o700)
    (root / "a-link").symlink_to(tmp_path)  # sorts first: the walk must go on after it
    wide = root / "b wide.txt"
    wide.write_text("x")
    os.chmod(wide, 0o644)
    shut = root / "c-shut"
    shut.mkdir(mode=0o700)
    os.chmod(shut, 0o700)
    monkeypatch.setattr(os, "scandir", failing_for(os.scandir, shut,
                                                   PermissionError(13, "Permission denied")))
    assert private.mode_warnings(root) == [
        f"{wide} is mode 0644: group or others can use it "
        f"(ctxledger makes it 0600; chmod 600 '{wide}')",
        f"{shut}: cannot list it to check its modes (Permission denied)",
    ]
    # a file removed between the listing and its stat (a checkpoint's temp file) is
    # passed over, and the walk goes on after it
    gone = root / "a-tmp"
    gone.write_text("x")
    monkeypatch.setattr(os, "lstat", failing_for(os.lstat, gone,
                                                 FileNotFoundError(2, "No such file or directory")))
    assert len(private.mode_warnings(root)) == 2


# --- make_dirs and check_owner, case by case ---------------------------------------------

def test_make_dirs_says_whether_it_made_the_path_and_syncs_only_when_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[Path] = []
    monkeypatch.setattr(private._osio, "fsync_dir", lambda d: synced.append(Path(d)))
    assert private.make_dirs(tmp_path / "a" / "b") is True
    assert private.make_dirs(tmp_path / "a" / "b") is False and synced == []
    assert private.make_dirs(tmp_path / "c" / "d", sync=True) is True
    assert synced == [tmp_path, tmp_path / "c"]


def test_make_dirs_takes_a_directory_another_process_made_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent appears between the look and the mkdir: its mode is its maker's, and
    the directories below it are still made."""
    real = os.mkdir
    raced = tmp_path / "a"

    def racing(d: Path, mode: int = 0o777) -> None:
        if Path(d) == raced:
            real(d, 0o755)  # the other process
            raise FileExistsError(17, "File exists", str(d))
        real(d, mode)

    monkeypatch.setattr(os, "mkdir", racing)
    assert private.make_dirs(raced / "b" / "c") is True
    assert (raced / "b" / "c").is_dir()
    assert stat.S_IMODE(raced.stat().st_mode) == 0o755
    assert stat.S_IMODE((raced / "b").stat().st_mode) == 0o700


def test_make_dirs_refuses_a_file_in_the_way(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.mkdir
    raced = tmp_path / "a"

    def racing(d: Path, mode: int = 0o777) -> None:
        if Path(d) == raced:
            raced.write_bytes(b"")  # another process made a file there
        real(d, mode)

    monkeypatch.setattr(os, "mkdir", racing)
    with pytest.raises(FileExistsError):
        private.make_dirs(raced / "b")


def test_the_owner_check_names_the_path_and_both_users(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = os.stat(tmp_path).st_uid
    monkeypatch.setattr(os, "geteuid", lambda: own + 1)
    with pytest.raises(NotOwnerError) as err:
        private.check_owner(tmp_path)
    assert (err.value.path, err.value.owner_uid, err.value.euid) == (tmp_path, own, own + 1)
    assert f"(uid {own + 1})" in str(err.value)


def test_an_owner_check_that_cannot_stat_names_the_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(p: object, *a: object, **k: object) -> os.stat_result:
        raise PermissionError(13, os.strerror(13))

    monkeypatch.setattr(os, "stat", denied)
    with pytest.raises(LedgerIOError) as err:
        private.check_owner(tmp_path / "x")
    assert str(err.value) == f"cannot stat {tmp_path / 'x'}: {os.strerror(13)}"
