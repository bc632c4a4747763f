"""Regressions from reviews of the hardening and the CLI: each failed before its fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import ctxledger
from eventstore import Anchor
from eventstore.private import mode_warnings
from projections import ContextStore
from projections.recall.snippet import _scanned_text


def cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(ctxledger, list(args))
    return r.exit_code, r.stdout + r.stderr


def test_as_of_inputs(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path) as store:
        store.put({"target": "t", "summary": "s"})
    root = ["--root", str(tmp_path), "--json"]
    assert cli("store", "list", "--as-of", "0s", *root)[0] == 0  # now, not "the future"
    code, out = cli("store", "list", "--as-of", "1.5", *root)  # neither a seq nor a time
    assert code == 2 and "@1.5" in out
    assert cli("store", "prune", "--ttl", "\u0663", *root)[0] == 2  # an Arabic 3 is no number
    assert cli("store", "list", "--since", "\u0661\u0662", *root)[0] == 2


def test_seq_0_is_no_anchor() -> None:
    with pytest.raises(ValueError, match="anchors nothing"):
        Anchor.parse("0:" + "0" * 64)
    assert Anchor.parse("1:" + "a" * 64).seq == 1


def test_mode_warnings_follow_a_symlinked_store(tmp_path: Path) -> None:
    real = tmp_path / "disk" / "store"
    with ContextStore.open(tmp_path / "disk"):
        pass
    os.rename(tmp_path / "disk" / ".ctxledger", real)
    (tmp_path / "proj").mkdir()
    os.symlink(real, tmp_path / "proj" / ".ctxledger")
    os.chmod(real, 0o777)
    warned = mode_warnings(tmp_path / "proj" / ".ctxledger")
    assert any(".ctxledger" in w for w in warned), warned


def test_a_cut_that_would_leave_nothing_keeps_the_hard_cut() -> None:
    text, cut = _scanned_text(["x" * 100], 10)  # one long word over the limit
    assert cut and text == "x" * 9
    text, cut = _scanned_text(["see", "QUJD" * 50], 20)
    assert cut and text.startswith("see") and "QUJD" in text


def test_a_symlink_planted_at_a_segment_temp_name_is_not_written_through(
    tmp_path: Path
) -> None:
    from eventstore.segments import create_segment, segment_name

    log = tmp_path / "log"
    log.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    os.symlink(victim, log / (segment_name(1) + ".tmp"))  # a stale or planted temp name
    seg = create_segment(log, 1, bytes(32), 1 << 20, sync=False)
    assert victim.read_bytes() == b"keep me" and seg.is_file() and not seg.is_symlink()
