"""The versioned-JSON loader: every kind's versions upgraded step by step, and every unusable file one line."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from meddpm.judge.baseline import BaselineError, load_baseline
from meddpm.measure.processes.campaign import WORKER_OUTPUT
from meddpm.parity.bounds import BOUNDS
from meddpm.versioned.loader import MAX_DEPTH, DocumentError, ForeignDocument, Kind, MissingDocument, load, load_one

FIX = "re-create it"


def _v1_to_v2(document: dict) -> dict:
    return {**document, "b": document["a"] * 2}


def _v2_to_v3(document: dict) -> dict:
    if document["b"] < 0:
        raise ValueError("b is below 0")
    return {**document, "c": document["b"] + 1}


TOY = Kind("toy", ("toy/1", "toy/2", "toy/3"), "toy file", FIX, {"toy/1": _v1_to_v2, "toy/2": _v2_to_v3})
OTHER = Kind("other", ("other/1",), "other file", FIX)


def _write(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(document))
    return path


def test_an_old_version_is_upgraded_step_by_step_to_the_newest(tmp_path):
    assert load_one(_write(tmp_path, {"schema": "toy/1", "a": 1}), TOY) == {"schema": "toy/3", "a": 1, "b": 2, "c": 3}
    assert load_one(_write(tmp_path, {"schema": "toy/2", "b": 5}), TOY) == {"schema": "toy/3", "b": 5, "c": 6}
    assert load_one(_write(tmp_path, {"schema": "toy/3", "x": 0}), TOY) == {"schema": "toy/3", "x": 0}


def test_the_kind_a_file_is_of_comes_back_with_it(tmp_path):
    kind, document = load(_write(tmp_path, {"schema": "other/1"}), TOY, OTHER)
    assert kind is OTHER and document == {"schema": "other/1"}


@pytest.mark.parametrize(
    "document, error, message",
    [
        ({"schema": "toy/4"}, DocumentError, "a toy/4 file, which this meddpm-perf cannot read (it reads toy/1, toy/2, "
         "toy/3); read it with the newer meddpm-perf that wrote it"),
        ({"schema": "toy/0"}, DocumentError, "a toy/0 file, which this meddpm-perf cannot read"),
        ({"schema": "else/1"}, ForeignDocument, "not a toy file (schema 'else/1'; known: toy/1, toy/2, toy/3); "
         "re-create it"),
        ({"a": 1}, ForeignDocument, "not a toy file (no schema field; known: toy/1, toy/2, toy/3); re-create it"),
        ([1], ForeignDocument, "not a toy file (the JSON is not an object); re-create it"),
        ({"schema": "toy/2", "b": -1}, DocumentError, "a malformed toy/2 file (b is below 0); re-create it"),
        ({"schema": "toy/1"}, DocumentError, "a malformed toy/1 file (field 'a' is missing); re-create it"),
    ],
    ids=["newer", "unknown-version", "foreign", "no-schema", "not-an-object", "step-refuses", "step-missing-field"],
)  # fmt: skip
def test_a_document_the_kind_cannot_read_is_one_line_naming_file_problem_and_fix(tmp_path, document, error, message):
    path = _write(tmp_path, document)
    with pytest.raises(error) as caught:
        load_one(path, TOY)
    assert str(caught.value).startswith(f"{path}: {message}") and "\n" not in str(caught.value)


def test_a_corrupt_binary_or_missing_file_is_one_line(tmp_path):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"schema": ')
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00")
    for path, message in [(corrupt, "not JSON (Expecting value at line 1 column 12)"), (binary, "not JSON (binary")]:
        with pytest.raises(DocumentError, match=f"^{path}: " + message.replace("(", r"\(").replace(")", r"\)")):
            load_one(path, TOY)
    with pytest.raises(MissingDocument, match="cannot read it \\(No such file or directory\\); re-create it"):
        load_one(tmp_path / "missing.json", TOY)


def test_a_folder_or_a_fifo_is_refused_before_it_is_opened(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    outcome: list[str] = []

    def read() -> None:
        try:
            load_one(fifo, TOY)
        except DocumentError as exc:
            outcome.append(str(exc))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # it waits for a writer: open the FIFO for writing to release it, and fail
        with open(fifo, "w"):
            pass
        pytest.fail("the loader opened the FIFO and waited for a writer")
    assert outcome == [f"{fifo}: a FIFO, not a JSON file; give the path of the file itself"]
    with pytest.raises(DocumentError, match=f"^{tmp_path}: a folder, not a JSON file"):
        load_one(tmp_path, TOY)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000], ids=["past-the-limit", "past-the-decoder"])
def test_deeply_nested_json_is_one_line_not_a_recursion_error(tmp_path, depth):
    path = tmp_path / "h200.json"
    path.write_text('{"schema": "meddpm-baseline/3", "arch": "h200", "ratios": ' + "[" * depth + "]" * depth + "}")
    with pytest.raises(BaselineError) as caught:
        load_baseline(path, "h200")
    assert str(caught.value) == (
        f"baseline file {path}: JSON nested more than {MAX_DEPTH} levels deep, which no meddpm file is; "
        "restore it from version control or re-create it with --save-baseline"
    )


def test_a_kind_declares_a_step_from_each_older_version_and_none_else():
    with pytest.raises(ValueError, match=r"no step from \['toy/1'\]"):
        Kind("toy", ("toy/1", "toy/2"), "toy file", FIX)
    with pytest.raises(ValueError, match=r"steps from \['toy/2'\]"):
        Kind("toy", ("toy/1", "toy/2"), "toy file", FIX, {"toy/1": _v1_to_v2, "toy/2": _v1_to_v2})
    with pytest.raises(ValueError, match=r"versions \['other/1'\] outside the family"):
        Kind("toy", ("other/1",), "toy file", FIX)


@pytest.mark.parametrize("kind", [WORKER_OUTPUT, BOUNDS], ids=lambda k: k.family)
def test_every_kind_refuses_a_newer_version_of_itself(tmp_path, kind):
    newer = f"{kind.family}/{int(kind.current.rsplit('/', 1)[1]) + 1}"
    path = _write(tmp_path, {"schema": newer})
    with pytest.raises(DocumentError, match=f"a {newer} file, which this meddpm-perf cannot read"):
        load_one(path, kind)
    assert load_one(_write(tmp_path, {"schema": kind.current}), kind) == {"schema": kind.current}
