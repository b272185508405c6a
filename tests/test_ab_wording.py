"""The words of an A/B verdict: its sides by short names (B's figure, then A's), counts in their own unit, no
baseline advice; and the stored-baseline wording left as it was (docs/explain.md, "How the lines read")."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from meddpm.judge.ab import named, side_names
from meddpm.judge.baseline import CountRange, Tolerances
from meddpm.judge.counts import judge_counts
from meddpm.judge.verdict import SAVE_HINT, Verdict, judge_ab, judge_samples
from meddpm.measure.campaign.protocol import Source
from meddpm.measure.processes.sides import legend

SIDES = ("this tree", "main")
MAIN = [178.3, 178.4, 178.5]  # side B's process medians
TREE = [180.9, 181.0, 181.1]  # side A's: 1.5 % slower


def test_an_ab_time_line_names_both_sides_by_their_short_names_and_gives_no_baseline_advice():
    v = named(judge_ab("paper/amp_bf16/b1", TREE, MAIN, Tolerances()), SIDES)
    assert v.outcome == "regression"
    line = v.message()
    assert line.startswith("paper/amp_bf16/b1 time regression: main 178.4 ms, this tree 181.0 ms (ratio 1.0146 ["), line
    assert "baseline" not in line and "now" not in line and "save-baseline" not in line


def test_against_a_stored_baseline_the_line_is_worded_as_before():
    v = judge_samples("paper/opt1/b1", "time", [181.0] * 20, [178.4] * 20, 0.01, 0.01, "ms")
    assert v.message() == (
        f"paper/opt1/b1 time regression: baseline 178.4 ms, now 181 ms (+1.5%, tolerance 1%, p=2.3e-10); {SAVE_HINT}"
    )
    improvement = judge_samples("paper/opt1/b1", "time", [170.0] * 20, [178.4] * 20, 0.01, 0.01, "ms")
    assert improvement.message().endswith("; re-run with --save-baseline to keep it")
    assert "--save-baseline" not in named(improvement, SIDES).message()


def test_an_ab_count_line_gives_the_change_in_its_unit_and_what_it_was_judged_against():
    (moved,) = judge_counts("paper/fast/b1", [{"launches": 1235}], {"launches": CountRange(1190, 1200)})
    assert named(moved, SIDES).message() == (
        "paper/fast/b1 launches regression: main 1,200 launches, this tree 1,235 launches "
        "(+35 launches, +2.9%, outside main's range over its processes)"
    )
    stored = {"bytes_allocated": CountRange(67_200_000_000, 67_200_000_000)}
    (grown,) = judge_counts("c", [{"bytes_allocated": 67_300_000_000}], stored)
    assert "by more than 0.1%" in named(grown, SIDES).message()  # bytes may move within their slack


def test_an_ab_line_of_a_side_that_measured_nothing_names_the_sides():
    v = named(Verdict("c", "peak memory", "not measured", None, 1.5, "GiB"), SIDES)
    assert v.message() == "c peak memory not measured (main n/a, this tree 1.500)"


def test_the_sides_are_called_a_and_b_where_their_names_would_not_tell_them_apart(tmp_path: Path):
    tree = Source("this tree (abc)", tmp_path, "abc", name="this tree")
    assert side_names(tree, Source("main (def)", tmp_path, "def", name="main")) == ("this tree", "main")
    under = replace(tree, label="this tree (abc) under /opt/venv/bin/python", python="/opt/venv/bin/python")
    assert side_names(tree, under) == ("A", "B")  # one tree under two interpreters
    assert side_names(Source("x", tmp_path, "x"), Source("y", tmp_path, "y")) == ("A", "B")  # no names given


def test_the_legend_defines_the_sides_once():
    labels = ["this tree (c2d8786d2+dirty, 32 file(s) of meddpm/ changed or new)", "main (fcd2d0fd0)"]
    assert legend(labels) == f"A: {labels[0]} | B: {labels[1]}"
