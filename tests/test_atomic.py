"""Atomic writes: the files they leave follow the user's umask, and only ever replace regular files."""

import json
import os
import stat
from pathlib import Path

import pytest

from meddpm.atomic import run_stamp, write_json_atomic, write_target, write_text_atomic
from meddpm.errors import UserError

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


def test_a_symlink_is_written_through_and_kept(tmp_path):
    target = tmp_path / "real" / "r.json"
    target.parent.mkdir()
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_json_atomic(link, {"a": 1})
    assert link.is_symlink() and link.resolve() == target
    assert json.loads(target.read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["link.json", "r.json", "real"]


def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "new" / "r.json")
    write_text_atomic(link, "x\n")
    assert link.is_symlink() and (tmp_path / "new" / "r.json").read_text() == "x\n"


@pytest.mark.parametrize("kind", ["fifo", "directory", "link to a fifo"])
def test_what_is_not_a_regular_file_is_refused_and_left_alone(tmp_path, kind):
    special = tmp_path / "special"
    if kind == "directory":
        special.mkdir()
    else:
        os.mkfifo(special)
    path = tmp_path / "link" if kind.startswith("link") else special
    if path != special:
        path.symlink_to(special)
    with pytest.raises(UserError, match=f"^cannot write {path}: it (is|links to {special},) a") as error:
        write_text_atomic(path, "x")
    assert "give the path of a regular file or of a new one" in str(error.value)
    assert (stat.S_ISDIR if kind == "directory" else stat.S_ISFIFO)(special.stat().st_mode)
    assert path.is_symlink() == (path != special)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"special", path.name})


def test_dev_null_is_refused_before_anything_is_written():
    # write_target only looks: a test that wrote here would replace the machine's /dev/null if it regressed.
    with pytest.raises(UserError, match="^cannot write /dev/null: it is a character device;"):
        write_target(Path("/dev/null"))
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_run_stamps_differ_between_processes_and_calls(monkeypatch):
    first = run_stamp()
    monkeypatch.setattr(os, "getpid", lambda: 424242)
    assert first != run_stamp() and run_stamp().endswith("-424242")


def test_json_written_whole_or_not_at_all(tmp_path):
    path = tmp_path / "out" / "r.json"
    write_json_atomic(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}

    class Unserialisable:
        def __str__(self):
            raise RuntimeError("crash while writing")

    with pytest.raises(RuntimeError, match="crash while writing"):
        write_json_atomic(path, {"a": 2, "b": Unserialisable()})
    assert json.loads(path.read_text()) == {"a": 1}  # the old file is intact
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temporary left behind
