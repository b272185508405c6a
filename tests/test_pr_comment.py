"""The pull-request comment of an A/B run (meddpm/suite/pr_comment.py), from planted results documents.

The template is a real A/B run's results.json (an H100, opt1 and fast, 3 processes a side); each test plants
its cases' process medians (5 a side, as the pull-request check runs at most), judged by the suite's own A/B rule,
so the comment reads what the suite would write.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from meddpm.judge.baseline import Tolerances
from meddpm.judge.explain import ExplainRow
from meddpm.judge.verdict import judge_ab
from meddpm.suite.pr_comment import MARKER, main

TEMPLATE = Path(__file__).resolve().parent.parent / "docs/measurements/2026-11-25-issue41-house/h100-final/ab-results"
REFERENCE = [100.0, 100.01, 99.99, 100.005, 99.995]


def _case(
    template: dict[str, Any], combo: str, factor: float, explain: list[ExplainRow] = (), processes: int = 5
) -> dict[str, Any]:
    """A case whose working tree reads ``factor`` times the revision's process medians, judged as the suite does,
    over its first ``processes`` a side."""
    reference = REFERENCE[:processes]
    candidate = [factor * m for m in reference]
    verdict = judge_ab(f"paper/{combo}/b1 working tree vs base", candidate, reference, Tolerances())
    case = copy.deepcopy(template)
    case.update(
        combo=combo,
        outcome="regression" if verdict.failed else verdict.outcome if verdict.outcome != "unchanged" else "ok",
        verdicts=[verdict.message()],
        process_medians_ms=candidate,
        comparisons=[
            {
                "metric": "time",
                "outcome": verdict.outcome,
                "threshold": verdict.tolerance,
                "detectable": verdict.detectable,
                **verdict.comparison.as_dict(),
            }
        ],
        explain=[r.as_dict() for r in explain],
    )
    return case


def _results(tmp_path: Path, *cases: tuple[Any, ...], **changes: Any) -> Path:
    """A results folder of ``cases``, each (combo, factor[, explain[, processes a side]])."""
    document = json.loads((TEMPLATE / "results.json").read_text())
    template = document["cases"][0]
    document["cases"] = [_case(template, *case) for case in cases]
    document.update({"processes": len(REFERENCE), **changes})
    (tmp_path / "results.json").write_text(json.dumps(document))
    return tmp_path


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.split("|")[1:-1]]


def _comment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main([str(tmp_path)]) == 0
    return capsys.readouterr().out


def test_no_regression_says_so_with_the_table_environment_and_commits(tmp_path, capsys):
    text = _comment(_results(tmp_path, ("opt1", 1.0), ("fast", 1.0)), capsys)
    lines = text.splitlines()
    assert lines[0] == MARKER
    assert lines[1] == "## meddpm-perf A/B on h100: no slowdown"
    assert (
        "A: this pull request (fa2f81a9c61e66ec495207df595b4b820d24198e+dirty), B: fa2f81a, 5 processes a side" in text
    )
    rows = [line for line in lines if line.startswith("| paper/")]
    assert [_cells(row)[0] for row in rows] == ["paper/opt1/b1", "paper/fast/b1"]
    assert all(_cells(row)[-1] == "unchanged" for row in rows)
    assert _cells(rows[0])[1:6] == ["100", "100", "1.0000 [0.9999, 1.0001]", "0.5", "0.60"]
    assert "NVIDIA H100 80GB HBM3 (h100, driver 580.159.04), torch 2.11.0+cu130, CUDA 13.0" in text


def test_each_sides_interpreter_and_variables_are_named(tmp_path, capsys):
    env = {"python": "3.12.3", "torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": 91900}
    sides = [
        {"label": "this tree (abc)", "commit": "abc", "python": "/usr/bin/python3", "env": {}, "environment": env},
        {"label": "main (def)", "commit": "def", "python": "/opt/v2/bin/python", "env": {"X": "1"}, "environment": {}},
    ]
    text = _comment(_results(tmp_path, ("opt1", 1.0), sides=sides, schema="meddpm-perf-results/3"), capsys)
    # The sides' labels once, for the short names the verdict lines call them by.
    assert "A: this pull request, this tree (abc) | B: main (def), 5 processes a side" in text
    assert "Each side ran under: A: python /usr/bin/python3 3.12.3, torch 2.11.0+cu130" in text
    assert "| B: python /opt/v2/bin/python" in text and "with X=1" in text


def test_a_case_stopped_before_the_processes_given_makes_them_the_most(tmp_path, capsys):
    text = _comment(_results(tmp_path, ("opt1", 1.0, (), 2), ("fast", 1.0)), capsys)
    assert "B: fa2f81a, at most 5 processes a side (each case's own in the table), alternating" in text
    rows = [line for line in text.splitlines() if line.startswith("| paper/")]
    assert [_cells(row)[-2] for row in rows] == ["2 vs 2", "5 vs 5"]


def test_a_side_short_of_the_processes_or_a_header_without_them_is_not_called_full(tmp_path, capsys):
    results = _results(tmp_path, ("fast", 1.0))
    document = json.loads((results / "results.json").read_text())
    document["cases"][0]["comparisons"][0]["reference_ms"] = REFERENCE[:4]  # a process of side B failed
    (results / "results.json").write_text(json.dumps(document))
    assert "at most 5 processes a side (each case's own in the table)" in _comment(results, capsys)
    del document["processes"]
    (results / "results.json").write_text(json.dumps(document))
    assert "B: fa2f81a, processes a side as in the table, alternating" in _comment(results, capsys)


def test_one_regression_is_the_title_and_its_row(tmp_path, capsys):
    text = _comment(_results(tmp_path, ("opt1", 1.0), ("fast", 1.03)), capsys)
    assert text.splitlines()[1] == "## meddpm-perf A/B on h100: 1 case slower"
    fast = next(line for line in text.splitlines() if line.startswith("| paper/fast/b1"))
    assert _cells(fast)[1:4] == ["103", "100", "1.0300 [1.0299, 1.0301]"]
    assert _cells(fast)[-2:] == ["5 vs 5", "regression"]
    assert "Other verdicts that failed" not in text  # the time regression is the table's


def test_a_change_under_the_threshold_is_named_and_does_not_count_as_a_slowdown(tmp_path, capsys):
    text = _comment(_results(tmp_path, ("opt1", 1.003)), capsys)
    assert text.splitlines()[1] == "## meddpm-perf A/B on h100: no slowdown, 1 case slower under threshold"
    row = next(line for line in text.splitlines() if line.startswith("| paper/opt1/b1"))
    assert _cells(row)[-1] == "slower under threshold"


COUNTS_LINE = (
    "paper/opt1/b1 launches regression: main 800 launches, this tree 812 launches (+12 launches, +1.5%, "
    "outside main's range over its processes)"
)


def test_a_flagged_case_shows_what_moved_and_a_counts_failure(tmp_path, capsys):
    results = _results(tmp_path, ("fast", 1.03), ("opt1", 1.0))
    document = json.loads((results / "results.json").read_text())
    moved = [ExplainRow("name", "triton_poi_fused_add_0", "elementwise", 3, 0, 0.4, None)]
    document["cases"][0]["explain"] = [r.as_dict() for r in moved]
    opt1 = document["cases"][1]
    opt1["outcome"] = "regression"
    opt1["verdicts"].append(COUNTS_LINE)
    (results / "results.json").write_text(json.dumps(document))
    text = _comment(results, capsys)
    assert text.splitlines()[1] == "## meddpm-perf A/B on h100: 1 case slower, 1 case failed on counts"
    assert "- **paper/fast/b1: time +3.00 % [" in text  # the flagged case's one line, under the sides
    assert text.count("**paper/fast/b1: time") == 2  # and again where its rows are
    assert "| triton_poi_fused_add | " in text and "| appeared " in text  # its short name, not its numbering
    assert f"- {COUNTS_LINE}" in text


@pytest.mark.parametrize(
    ("plant", "message"),
    [
        ("missing", "no results of an A/B run here"),
        ("empty", "compare no case"),
        ("not-ab", "not an A/B"),
        ("corrupt", "not JSON"),
    ],
)
def test_missing_or_unusable_results_are_one_line(tmp_path, capsys, plant, message):
    if plant == "empty":
        _results(tmp_path)
    elif plant == "not-ab":
        _results(tmp_path, ("opt1", 1.0), run_kind="processes", compare_to=None)
    elif plant == "corrupt":
        (tmp_path / "results.json").write_text("{not json")
    assert main([str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("python -m meddpm.suite.pr_comment: error: ")
    assert message in err


def test_a_process_apart_from_its_side_is_in_the_comment(tmp_path, capsys):
    folder = _results(tmp_path, ("fast", 1.0))
    document = json.loads((folder / "results.json").read_text())
    medians = {"A": [46.59, 46.73, 46.61], "B": [46.66, 44.80, 46.62]}
    document["cases"][0]["process_cards"] = [
        {"side": side, "process": i + 1, "median_ms": m, "sm_clock_mean_mhz": 1785.0, "temperature_max_c": 59.0}
        for side, side_medians in medians.items()
        for i, m in enumerate(side_medians)
    ]
    (folder / "results.json").write_text(json.dumps(document))
    text = _comment(folder, capsys)
    section = text[text.index("Processes apart from their side") :]
    assert "side B's process 2 read 44.8 ms, 3.9% below its side's median of 46.62 ms" in section
    assert "its clock stayed or moved the other way: not the card" in section
    assert "Processes apart" not in _comment(_results(tmp_path, ("fast", 1.0)), capsys)  # no cards, no section
