"""What opening a log refuses, in the words its caller sees (the CLI prints them as
they are), and that a refusal creates nothing. Mutation testing found no test of the
library's own messages here: the CLI tests that saw them are not in its selection."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from eventstore import Ledger, LedgerIOError
from eventstore.segments import list_all_segments, read_header


@pytest.mark.parametrize("settings, words", [
    ({"sync": "sometimes"}, "sync must be one of always, batch, none, not 'sometimes'"),
    ({"segment_bytes": 4095}, "segment_bytes must be at least 4096"),
])
def test_bad_settings_are_refused_in_words(
        tmp_path: Path, settings: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError) as err:
        Ledger.open(tmp_path / "log", **settings)
    assert str(err.value) == words
    assert not (tmp_path / "log").exists()
    with Ledger.open(tmp_path / "log", segment_bytes=4096) as led:  # the edge is allowed
        assert led.head == 0


def test_a_log_directory_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    """The log directory, and the parent in its way when that is what failed."""
    file = tmp_path / "file"
    file.write_text("x")
    for path, words in ((file, f"cannot create {file}: {os.strerror(errno.EEXIST)}"),
                        (file / "log", f"cannot create {file / 'log'}: {file}: "
                                       f"{os.strerror(errno.EEXIST)}")):
        with pytest.raises(LedgerIOError) as err:
            Ledger.open(path)
        assert str(err.value) == words
    assert file.read_text() == "x"


def test_a_segment_header_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000001.seg"
    with pytest.raises(LedgerIOError) as err:
        read_header(path)
    assert str(err.value) == f"cannot read {path}: {os.strerror(errno.ENOENT)}"


def test_a_log_directory_that_cannot_be_listed_is_named(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(LedgerIOError) as err:
        list_all_segments(file)
    assert str(err.value) == f"cannot list {file}: {os.strerror(errno.ENOTDIR)}"
