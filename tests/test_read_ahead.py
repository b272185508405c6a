"""The GPU stack read ahead into the page cache: which files, in which order, read whole, started once."""

from __future__ import annotations

import sys

import pytest

from meddpm.measure.machine import read_ahead


@pytest.fixture()
def packages(tmp_path, monkeypatch):
    """Two installed packages on sys.path: ``stack_a`` (libraries and sources) and ``stack_b`` (a library)."""
    site = tmp_path / "site"
    files = {
        "stack_a/__init__.py": b"",
        "stack_a/lib/libone.so": b"1" * 3000,
        "stack_a/lib/libtwo.so.9": b"2" * 5000,
        "stack_a/lib/notes.txt": b"not read",
        "stack_a/lib/libthree.so.json": b"not a library",
        "stack_a/sub/module.py": b"x = 1\n",
        "stack_a/sub/module.pyc": b"not read",
        "stack_b/__init__.py": b"",
        "stack_b/_C/libb.so": b"b" * 7000,
    }
    for name, data in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(data)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(read_ahead, "_started", None)
    monkeypatch.delenv(read_ahead.SWITCH, raising=False)
    yield site
    for name in ("stack_a", "stack_b"):
        sys.modules.pop(name, None)


def test_the_libraries_come_first_in_the_packages_order_then_the_sources(packages):
    files = read_ahead.stack_files(("stack_b", "stack_a", "not_installed_anywhere"))
    names = [str(f.relative_to(packages)) for f in files]
    assert names == [
        "stack_b/_C/libb.so",
        "stack_a/lib/libone.so",
        "stack_a/lib/libtwo.so.9",
        "stack_b/__init__.py",
        "stack_a/__init__.py",
        "stack_a/sub/module.py",
    ]


def test_every_file_is_read_whole_and_one_gone_is_skipped(packages):
    files = read_ahead.stack_files(("stack_a", "stack_b"))
    gone = packages / "stack_a/lib/removed.so"
    reader = read_ahead.ReadAhead(lambda: [*files, gone], threads=3)
    assert reader.join(timeout=60)
    assert reader.bytes_read == sum(f.stat().st_size for f in files) == 15006
    assert reader.seconds is not None and reader.seconds >= 0
    assert reader.describe().startswith("7 files of the GPU stack (0.00 GB) read ahead in ")


def test_an_unfinished_reader_says_so(packages):
    reader = read_ahead.ReadAhead(list, threads=1)
    reader.join(timeout=60)
    reader.seconds = None  # as while its threads still read
    assert reader.describe() == "0 files of the GPU stack (0.00 GB) read ahead so far, not finished"


def test_nothing_is_read_without_an_nvidia_driver(packages, tmp_path, monkeypatch):
    monkeypatch.setattr(read_ahead, "DRIVER", tmp_path / "no-driver")
    assert read_ahead.read_stack_ahead() is None
    assert read_ahead.started() is None


def test_a_driver_starts_one_reader_a_process(packages, tmp_path, monkeypatch):
    driver = tmp_path / "driver"
    driver.mkdir()
    monkeypatch.setattr(read_ahead, "DRIVER", driver)
    monkeypatch.setattr(read_ahead, "PACKAGES", ("stack_a",))
    reader = read_ahead.read_stack_ahead()
    assert reader is not None and read_ahead.read_stack_ahead() is reader is read_ahead.started()
    assert reader.join(timeout=60) and reader.bytes_read == 8006


def test_the_switch_turns_it_off_on_a_gpu_machine(packages, tmp_path, monkeypatch):
    driver = tmp_path / "driver"
    driver.mkdir()
    monkeypatch.setattr(read_ahead, "DRIVER", driver)
    monkeypatch.setenv("MEDDPM_READ_AHEAD", "off")
    assert read_ahead.read_stack_ahead() is None and read_ahead.started() is None
