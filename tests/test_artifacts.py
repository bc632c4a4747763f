"""Artifacts: content-addressed entry documents beside the log (projections/artifacts.py).

A handle is the sha256 of the file's bytes and its name: reads re-verify it,
only 64 hex digits ever become a file name, writes are atomic and private, and
gc removes only unreferenced or damaged artifacts of its own directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cli.main import ctxledger
from eventstore import Event, Ledger, LedgerError, LedgerIOError, NotOwnerError, _osio
from projections import ContextStore, StoreConfig, store_dir
from projections.artifacts import (
    ArtifactCorruptError,
    ArtifactDir,
    ArtifactError,
    ArtifactNotFoundError,
    check_handle,
    entry_document,
)

REPO = Path(__file__).resolve().parents[1]
TTL = 3600.0


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cli(*args: str) -> Result:
    return CliRunner().invoke(ctxledger, list(args))


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ContextStore]:
    with ContextStore.open(tmp_path) as st:
        yield st


def files(top: Path) -> dict[str, bytes | str]:
    """Everything under ``top`` (symlinks as their target, not followed)."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = str(p.relative_to(top))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = p.read_bytes()
    return out


# --- handles ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [
    "", "..", "../x", "/etc/passwd", "a/b", "%2e%2e", "a" * 63, "a" * 65, "\x00" * 64,
    "a" * 63 + "\x00", "\u0663" * 64, "\uff10" * 64, " " + "a" * 63, "a" * 64 + "\n",
    "g" * 64, "a" * 62 + "/.", "0x" + "a" * 62,
])
def test_a_malformed_handle_is_refused_before_any_file_is_touched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    d = ArtifactDir(tmp_path / "artifacts")

    def touched(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("a file was touched")

    for name in ("open", "stat", "lstat", "scandir"):
        monkeypatch.setattr(os, name, touched)
    with pytest.raises(ValueError):
        d.read(bad)
    with pytest.raises(ValueError):
        d.path_of(bad)


def test_a_handle_is_64_hex_digits_in_either_case() -> None:
    h = "AbCdEf0123456789" * 4
    assert check_handle(h) == h.lower()
    with pytest.raises(ValueError):
        check_handle(b"a" * 64)  # type: ignore[arg-type]


# --- writing and reading ----------------------------------------------------------------


def test_round_trip(tmp_path: Path) -> None:
    d = ArtifactDir(tmp_path / "a" / "artifacts")
    doc = b'{"cache_key": "x"}\n'
    ref = d.write(doc)
    assert ref.handle == ref.sha256 == sha(doc) and ref.bytes == len(doc)
    assert ref.path == d.path / ref.handle and ref.path.read_bytes() == doc
    assert set(ref.to_json()) == {"handle", "path", "sha256", "bytes"}
    assert d.read(ref.handle) == doc and d.read(ref.handle.upper()) == doc
    ino = os.stat(ref.path).st_ino
    assert d.write(doc) == ref and os.stat(ref.path).st_ino == ino  # intact: kept as it is
    assert sorted(os.listdir(d.path)) == [ref.handle]  # no temp file left behind


def test_a_missing_artifact_says_so(tmp_path: Path) -> None:
    with pytest.raises(ArtifactNotFoundError, match="no artifact"):
        ArtifactDir(tmp_path).read("ab" * 32)


def test_a_flipped_byte_is_refused_and_a_rewrite_repairs_it(tmp_path: Path) -> None:
    d = ArtifactDir(tmp_path)
    doc = b'{"cache_key": "y", "body": "some text"}\n'
    ref = d.write(doc)
    raw = bytearray(ref.path.read_bytes())
    raw[5] ^= 0x01
    ref.path.write_bytes(bytes(raw))
    with pytest.raises(ArtifactCorruptError) as e:
        d.read(ref.handle)
    assert str(ref.path) in str(e.value)
    assert d.write(doc) == ref  # a damaged file at the name is replaced
    assert d.read(ref.handle) == doc


def test_a_symlink_at_a_handle_is_never_followed(tmp_path: Path) -> None:
    d = ArtifactDir(tmp_path / "artifacts")
    doc = b'{"cache_key": "z"}\n'
    outside = tmp_path / "outside"
    outside.write_bytes(doc)  # even bytes that hash to the name are not served through it
    d.path.mkdir()
    link = d.path / sha(doc)
    link.symlink_to(outside)
    with pytest.raises(ArtifactError, match="symlink"):
        d.read(sha(doc))
    assert outside.read_bytes() == doc
    ref = d.write(doc)  # replaced by a regular file; the target is not written through
    assert not ref.path.is_symlink() and stat.S_ISREG(os.lstat(ref.path).st_mode)
    assert d.read(ref.handle) == doc and outside.read_bytes() == doc


def test_a_symlink_to_a_directory_or_a_fifo_is_refused(tmp_path: Path) -> None:
    d = ArtifactDir(tmp_path / "artifacts")
    d.path.mkdir()
    (d.path / ("1" * 64)).mkdir()
    os.mkfifo(d.path / ("2" * 64))
    with pytest.raises(ArtifactError, match="directory"):
        d.read("1" * 64)
    with pytest.raises(ArtifactError, match="special file"):
        d.read("2" * 64)  # and it does not hang waiting for a writer


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o277])
def test_modes_are_private_whatever_the_umask(tmp_path: Path, mask: int) -> None:
    old = os.umask(mask)
    try:
        ref = ArtifactDir(tmp_path / "new" / "artifacts").write(b"doc")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(ref.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(ref.path.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(ref.path.parent.parent).st_mode) == 0o700


def test_a_directory_another_user_owns_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = ArtifactDir(tmp_path / "artifacts")
    d.path.mkdir()
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(tmp_path).st_uid + 1)
    with pytest.raises(NotOwnerError):
        d.write(b"doc")
    assert os.listdir(d.path) == []


def test_a_readonly_directory_refuses_writes_and_gc(tmp_path: Path) -> None:
    d = ArtifactDir(tmp_path, readonly=True)
    with pytest.raises(LedgerError, match="read-only"):
        d.write(b"doc")
    with pytest.raises(LedgerError, match="read-only"):
        d.gc(lambda _k: False)
    assert d.gc(lambda _k: False, dry_run=True).removed == 0


# --- crashes ----------------------------------------------------------------------------


@pytest.mark.parametrize("call", ["fsync", "replace"])
def test_a_failed_write_leaves_nothing_under_the_handle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    d = ArtifactDir(tmp_path / "artifacts")

    def boom(*_a: Any) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(_osio, call, boom)
    with pytest.raises(LedgerIOError, match="cannot write artifact"):
        d.write(b"doc")
    assert os.listdir(d.path) == []  # neither the name nor a temp file


def test_a_write_over_a_damaged_file_that_fails_leaves_no_wrong_bytes_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = ArtifactDir(tmp_path)
    (tmp_path / sha(b"doc")).write_bytes(b"dox")
    monkeypatch.setattr(_osio, "replace", lambda *_a: (_ for _ in ()).throw(OSError(28, "full")))
    with pytest.raises(LedgerIOError):
        d.write(b"doc")
    with pytest.raises(ArtifactCorruptError):  # what is there is still refused, never served
        d.read(sha(b"doc"))


def test_a_writer_killed_before_its_rename_leaves_only_a_temp_file_gc_removes(
    tmp_path: Path,
) -> None:
    d = ArtifactDir(tmp_path / "artifacts")
    code = (
        "import os, sys\n"
        "from eventstore import _osio\n"
        "from projections.artifacts import ArtifactDir\n"
        "_osio.replace = lambda *a: os._exit(9)  # killed between fsync and rename\n"
        f"ArtifactDir({str(d.path)!r}).write(b'doc')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, timeout=60)
    assert p.returncode == 9, p.stderr
    left = os.listdir(d.path)
    assert len(left) == 1 and left[0].startswith(f".tmp.{sha(b'doc')}.")
    with pytest.raises(ArtifactNotFoundError):
        d.read(sha(b"doc"))
    assert d.stats(lambda _k: True)["foreign"] == 0  # ours, not someone else's
    r = d.gc(lambda _k: True)
    assert r.stale_temp == 1 and r.foreign == 0 and os.listdir(d.path) == []


def test_a_live_writers_temp_file_is_left_alone(tmp_path: Path) -> None:
    d = ArtifactDir(tmp_path)
    tmp = tmp_path / f".tmp.{'a' * 64}.{os.getpid()}.0badf00d"  # this process: still writing
    tmp.write_bytes(b"half")
    r = d.gc(lambda _k: False)
    assert tmp.exists() and r.stale_temp == 0 and r.foreign == 0


# --- the store --------------------------------------------------------------------------


def test_an_artifact_is_exactly_what_store_get_json_prints(store: ContextStore) -> None:
    key = store.put({"target": "t", "summary": "é \x1b big"}).cache_key
    ref = store.write_artifact(key[:8])
    assert ref.path.parent == store.artifacts_dir
    printed = cli("store", "get", "--root", str(store.root), "--key", key, "--json")
    assert printed.exit_code == 0
    assert ref.path.read_bytes() == printed.stdout_bytes
    entry = store.get(key)
    assert entry is not None and entry_document(entry) == printed.stdout_bytes


def test_a_readonly_store_writes_artifacts_but_not_its_log(store: ContextStore) -> None:
    key = store.put({"target": "t"}).cache_key
    store.checkpoint()
    before = {k: v for k, v in files(store.path).items() if not k.startswith("artifacts")}
    with ContextStore.open(store.root, readonly=True) as ro:
        ref = ro.write_artifact(key)
    assert ref.path.is_file()
    after = {k: v for k, v in files(store.path).items() if not k.startswith("artifacts")}
    assert after == before


def test_gc_removes_only_unreferenced_and_damaged_artifacts_of_its_own_directory(
    tmp_path: Path,
) -> None:
    clock = Clock()
    clock.now = 1000.0
    with Ledger.open(store_dir(tmp_path) / "log", clock=clock) as log, \
            ContextStore.open(tmp_path, config=StoreConfig(ttl_seconds=TTL), clock=clock,
                              log=log) as store:
        expired = store.put({"target": "t", "summary": "old"}).cache_key  # at 1000
        clock.now += TTL / 2
        live, pruned = (store.put({"target": "t", "summary": s}).cache_key
                        for s in ("live", "pruned"))
        refs = {k: store.write_artifact(k) for k in (live, pruned, expired)}
        log.append([Event("cache.evicted", pruned, {"reason": "manual_prune"})])
        clock.now = 1000.0 + TTL  # "old" expires (exactly TTL after its put); "live" does not
        assert store.get(expired) is None and store.get(pruned) is None
        assert store.get(live) is not None

        art = store.artifacts_dir
        damaged = art / sha(b"original")
        damaged.write_bytes(b"tampered")
        undecodable = b"not an entry document"
        (art / sha(undecodable)).write_bytes(undecodable)
        # foreign names, and things beside and outside the directory: never touched
        (art / "notes.txt").write_text("mine")
        (art / ("c" * 64)).mkdir()
        (art / ("c" * 64) / "inner").write_text("x")
        sibling = store.path / "artifacts-old"
        sibling.mkdir()
        (sibling / refs[pruned].handle).write_bytes(refs[pruned].path.read_bytes())
        (store.path / refs[pruned].handle).write_bytes(b"beside")
        (art / ("d" * 64)).symlink_to(sibling / refs[pruned].handle)

        def snapshot() -> dict[str, bytes | str]:
            return {k: v for k, v in files(tmp_path).items()
                    if not k.startswith((".ctxledger/log", ".ctxledger/checkpoints"))}

        before = snapshot()
        dry = store.artifact_gc(dry_run=True)
        assert snapshot() == before  # a dry run removes nothing
        assert dry.dry_run and (dry.removed, dry.damaged, dry.kept) == (2, 2, 1)
        assert dry.foreign == 3 and dry.foreign_names == ("c" * 64, "d" * 64, "notes.txt")

        r = store.artifact_gc()
        assert (r.removed, r.damaged, r.kept, r.foreign) == (2, 2, 1, 3)
        assert r.removed_handles == dry.removed_handles == tuple(sorted(
            {refs[pruned].handle, refs[expired].handle, damaged.name, sha(undecodable)}))
        assert r.bytes_freed == (refs[pruned].bytes + refs[expired].bytes + len(b"tampered")
                                 + len(undecodable))
        gone = {f".ctxledger/artifacts/{h}" for h in r.removed_handles}
        assert snapshot() == {k: v for k, v in before.items() if k not in gone}
        assert store.artifacts.read(refs[live].handle) == refs[live].path.read_bytes()
        assert store.artifact_stats() == {
            "path": str(art), "count": 1, "bytes": refs[live].bytes, "orphans": 0,
            "damaged": 0, "foreign": 3}
        assert set(r.to_json()) == {"dry_run", "removed", "damaged", "bytes_freed", "kept",
                                    "foreign", "stale_temp", "removed_handles", "foreign_names"}


# --- the CLI ----------------------------------------------------------------------------


def check_ref(text: str, store: ContextStore) -> dict[str, Any]:
    """One JSON document, exactly the four fields, naming a file that hashes to it."""
    ref = json.loads(text)
    assert set(ref) == {"handle", "path", "sha256", "bytes"}
    path = Path(ref["path"])
    assert path.parent == store.artifacts_dir and path.name == ref["handle"] == ref["sha256"]
    data = path.read_bytes()
    assert sha(data) == ref["sha256"] and len(data) == ref["bytes"]
    return ref


def test_store_get_json_handle(store: ContextStore) -> None:
    key = store.put({"target": "t", "summary": "x" * 5000}).cache_key
    R = ["--root", str(store.root)]
    res = cli("store", "get", *R, "--key", key[:8], "--json=handle")
    assert res.exit_code == 0, res.output
    ref = check_ref(res.stdout, store)
    entry = cli("store", "get", *R, "--key", key, "--json").stdout_bytes
    assert Path(ref["path"]).read_bytes() == entry
    # --json alone (anywhere, or on a group) and --json=doc still print the entry itself
    for argv in (["--json", "store", "get", *R, "--key", key],
                 ["store", "--json", "get", *R, "--key", key],
                 ["store", "get", "--json", *R, "--key", key],
                 ["store", "get", *R, "--key", key, "--json=doc"],
                 ["store", "get", *R, "--key", key, "--json", "doc"]):
        assert cli(*argv).stdout_bytes == entry, argv
    both = cli("--json", "store", "get", *R, "--key", key, "--json=handle")
    assert json.loads(both.stdout) == ref  # the command's own value wins
    bad = cli("store", "get", *R, "--key", key, "--json=foo")
    assert bad.exit_code == 2 and "'foo' is not one of" in bad.stderr


def test_store_get_json_handle_in_a_real_process(store: ContextStore) -> None:
    key = store.put({"target": "t", "summary": "subprocess"}).cache_key
    store.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXLEDGER_ROOT")}
    p = subprocess.run(
        [sys.executable, "-m", "cli", "store", "get", "--root", str(store.root), "--key", key,
         "--json=handle"], cwd=REPO, capture_output=True, env=env, timeout=60,
    )
    assert p.returncode == 0 and p.stderr == b"", p.stderr
    assert p.stdout.count(b"\n") == 1  # one document
    check_ref(p.stdout.decode(), store)


def test_artifact_show_reverifies(store: ContextStore) -> None:
    key = store.put({"target": "t\x1b[2J", "summary": "shown"}).cache_key
    ref = store.write_artifact(key)
    R = ["--root", str(store.root)]
    exact = cli("artifact", "show", *R, ref.handle, "--json")
    assert exact.exit_code == 0 and exact.stdout_bytes == ref.path.read_bytes()
    person = cli("artifact", "show", *R, ref.handle.upper())
    assert person.exit_code == 0 and "t\\x1b[2J" in person.stdout and "\x1b" not in person.stdout
    raw = bytearray(ref.path.read_bytes())
    raw[-3] ^= 0x20
    ref.path.write_bytes(bytes(raw))
    for argv in (["artifact", "show", *R, ref.handle], ["artifact", "show", *R, ref.handle,
                                                         "--json"]):
        res = cli(*argv)
        assert res.exit_code == 1 and res.stdout == ""
        assert res.stderr.count("\n") == 1 and "is damaged" in res.stderr


@pytest.mark.parametrize("bad", ["\x00" * 64, "a" * 63 + "\x00", "../" + "a" * 61, ""])
def test_artifact_show_refuses_a_bad_handle_with_a_usage_error(
    store: ContextStore, bad: str
) -> None:
    res = cli("artifact", "show", "--root", str(store.root), bad)
    assert res.exit_code == 2 and res.stdout == "" and "not a handle" in res.stderr


def test_artifact_gc_cli(store: ContextStore) -> None:
    key = store.put({"target": "t"}).cache_key
    ref = store.write_artifact(key)
    R = ["--root", str(store.root)]
    store.prune(all=True)
    dry = cli("artifact", "gc", *R, "--dry-run", "--json")
    assert dry.exit_code == 0 and json.loads(dry.stdout)["removed_handles"] == [ref.handle]
    assert ref.path.exists()
    res = cli("artifact", "gc", *R)
    assert res.exit_code == 0 and res.stdout.startswith("removed 1 artifact(s)")
    assert not ref.path.exists()


def test_in_agent_scope_each_project_has_its_own_artifacts(
    tmp_path: Path, _agent_home: Path
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    with ContextStore.open(a, storage_scope="agent") as sa, \
            ContextStore.open(b, storage_scope="agent") as sb:
        ka = sa.put({"target": "t", "summary": "a"}).cache_key
        kb = sb.put({"target": "t", "summary": "b"}).cache_key
        ra, rb = sa.write_artifact(ka), sb.write_artifact(kb)
        assert ra.path.parent == _agent_home / "artifacts" / sa.layout.project_id
        assert rb.path.parent == _agent_home / "artifacts" / sb.layout.project_id
        assert ra.path.parent != rb.path.parent
        sa.prune(all=True)
        assert sb.artifact_gc().kept == 1  # b's own entry is live; a's file is not b's
        assert sa.artifact_gc().removed_handles == (ra.handle,)
        assert rb.path.is_file() and not ra.path.exists()
    res = cli("store", "get", "--root", str(b), "--storage-scope", "agent", "--key", kb,
              "--json=handle")
    assert res.exit_code == 0 and json.loads(res.stdout)["path"] == str(rb.path)


def test_storage_reports_the_artifacts(store: ContextStore) -> None:
    store.write_artifact(store.put({"target": "t"}).cache_key)
    store.close()
    doc = json.loads(cli("storage", "--root", str(store.root), "--json").stdout)
    assert doc["artifacts"]["count"] == 1 and doc["artifacts"]["orphans"] == 0
