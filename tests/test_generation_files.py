"""The files a new generation writes and leaves: what ``remove_older`` takes away (and
what it keeps), the temp names a crash can leave (the ones a writer knows to remove),
and the two ways ``write_generation`` fails, in their words. Mutation testing found
each reached but unpinned (docs/reliability.md)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from eventstore import LedgerIOError, private
from eventstore import generation as gen
from eventstore.frame import encode_row
from eventstore.generation import anchors_name, remove_older, write_generation
from eventstore.segments import TMP_RE, segment_name

D0 = b"\x44" * 32
BATCHES = [(1.0, None, [encode_row(["gen.test", None, {"i": 1}])])]


def test_remove_older_takes_exactly_what_the_new_generation_left_behind(tmp_path: Path) -> None:
    for base in (1, 5, 9):  # segments: 1 is older than the generation at 5
        (tmp_path / segment_name(base)).write_bytes(b"")
    keep = [segment_name(5), segment_name(9), anchors_name(5), anchors_name(9), "notes.txt"]
    gone = [
        segment_name(1),
        anchors_name(1),  # older, though its segment is still there
        anchors_name(3),  # older
        anchors_name(12),  # of a generation never committed (no segment at 12)
        segment_name(12) + ".tmp",  # a temp segment
        anchors_name(12) + ".tmp",  # a temp anchors file
    ]
    for name in keep[2:] + gone[1:]:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "quarantine").mkdir()
    (tmp_path / "quarantine" / (segment_name(1) + ".0.torn")).write_bytes(b"y")
    assert remove_older(tmp_path, 5) == sorted(gone)
    assert sorted(os.listdir(tmp_path)) == sorted([*keep, "quarantine"])
    assert os.listdir(tmp_path / "quarantine") == [segment_name(1) + ".0.torn"]


def test_the_temp_files_are_named_as_a_writer_knows_to_remove(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash leaves ``<base>.seg.tmp`` or ``<base>.anchors.tmp``: the names
    ``remove_older`` and the writer's start-up take away, nothing else."""
    made: list[str] = []
    real = private.create_temp

    def spy(path: str | os.PathLike[str], flags: int) -> int:
        made.append(Path(path).name)
        return real(path, flags)

    monkeypatch.setattr(private, "create_temp", spy)
    written = write_generation(tmp_path, 7, D0, 4096, BATCHES, b"")
    assert made == [anchors_name(7) + ".tmp", segment_name(7) + ".tmp"]
    assert TMP_RE.fullmatch(made[1])
    assert written.path == tmp_path / segment_name(7)
    assert sorted(os.listdir(tmp_path)) == [anchors_name(7), segment_name(7)]


def test_a_generation_never_replaces_a_segment(tmp_path: Path) -> None:
    (tmp_path / segment_name(7)).write_bytes(b"there")
    with pytest.raises(LedgerIOError) as err:
        write_generation(tmp_path, 7, D0, 4096, BATCHES, None)
    name = segment_name(7)
    assert str(err.value) == f"cannot write new generation {name}: {name} already exists"
    assert sorted(os.listdir(tmp_path)) == [name]  # no temp file left
    assert (tmp_path / name).read_bytes() == b"there"


def test_a_failed_directory_sync_after_the_rename_says_what_happened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(path: object) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(gen._osio, "fsync_dir", failing)
    with pytest.raises(LedgerIOError) as err:
        write_generation(tmp_path, 7, D0, 4096, BATCHES, None)
    name = segment_name(7)
    assert str(err.value) == (f"new generation {name} written but not synced "
                              f"({os.strerror(errno.EIO)}); run `ctxledger verify`")
    assert os.listdir(tmp_path) == [name]


def test_a_failed_write_says_why_and_leaves_no_temp_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(gen._osio, "fsync", failing)
    with pytest.raises(LedgerIOError) as err:
        write_generation(tmp_path, 7, D0, 4096, BATCHES, None)
    assert str(err.value) == (f"cannot write new generation {segment_name(7)}: "
                              f"{os.strerror(errno.ENOSPC)}")
    assert os.listdir(tmp_path) == []
