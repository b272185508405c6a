"""Atomic writes: the files they leave follow the user's umask like any other new file."""

import json
import os
import stat

import pytest

from meddpm.atomic import write_json_atomic, write_text_atomic

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes and umask are POSIX")


@pytest.fixture
def umask():
    """A setter for the process umask; the original is restored after the test."""
    original = os.umask(0o022)
    os.umask(original)
    yield os.umask
    os.umask(original)


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_new_file_gets_the_umask_mode(tmp_path, umask, mask, expected):
    umask(mask)
    path = tmp_path / "out" / "r.txt"
    write_text_atomic(path, "hello\n")
    assert path.read_text() == "hello\n"
    assert _mode(path) == expected
    assert [p.name for p in path.parent.iterdir()] == ["r.txt"]


def test_a_replaced_file_gets_the_umask_mode_not_its_old_one(tmp_path, umask):
    umask(0o022)
    path = tmp_path / "r.json"
    path.write_text("{}")
    path.chmod(0o600)
    write_json_atomic(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    assert _mode(path) == 0o644


def test_the_umask_is_left_as_it_was(tmp_path, umask):
    umask(0o027)
    write_text_atomic(tmp_path / "r.txt", "x")
    assert umask(0o027) == 0o027
