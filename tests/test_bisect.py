"""Bisection: the decisions on injected comparisons, the walk on planted process medians, and one real walk.

The walk's tests replace the process campaign and the revisions with fakes whose process medians
are planted per commit: the culprit is known, and no timing of this machine enters. One test
walks a real git repository on the CPU, its slowdown planted in the workload's clock.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest
from planted_campaign import COMMITS, GOOD, PlantedCampaign, plant
from planted_repo import git, make_repo, set_clock

from meddpm.bench import bisect, walk
from meddpm.errors import UserError
from meddpm.judge.bisection import (
    Commit,
    MeasuredEnds,
    Search,
    counts_moved,
    decided_side,
    side_by_counts,
    side_of,
    slowdown_between_ends,
)
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.measure.processes.revision import Undrivable, resolve_revision, revisions_root
from meddpm.measure.statistics.compare import compare_processes
from meddpm.model.config import ModelConfig


def test_the_cut_is_halfway_and_a_range_without_a_slowdown_is_refused():
    slower = compare_processes([102.0, 102.1, 101.9], [100.0, 100.1, 99.9])
    assert slowdown_between_ends(slower, 0.01, "opt1", GOOD, COMMITS[-1]) == pytest.approx(1 + (slower.ratio - 1) / 2)
    same = compare_processes([100.0, 100.2, 99.9], [100.1, 99.9, 100.0])
    message = f"--bisect: {COMMITS[-1]} is not slower than {GOOD} for opt1 (ratio"
    with pytest.raises(UserError, match=re.escape(message)):
        slowdown_between_ends(same, 0.01, "opt1", GOOD, COMMITS[-1])


def test_a_step_is_bad_good_or_ambiguous_by_its_interval_against_the_cut():
    cut = 1.01
    assert side_of(compare_processes([102.0, 102.1, 101.9], [100.0, 100.1, 99.9]), cut) == "bad"
    assert side_of(compare_processes([100.0, 100.1, 99.9], [100.0, 100.1, 99.9]), cut) == "good"
    straddling = compare_processes([101.0, 102.5, 99.8], [100.0, 100.1, 99.9])
    assert side_of(straddling, cut) == "ambiguous"
    assert decided_side(straddling, cut) == ("bad" if straddling.ratio > cut else "good")


def test_the_search_halves_toward_the_culprit():
    search = Search(COMMITS)
    assert search.steps_left == 4 and search.next() == COMMITS[7]
    search.record(COMMITS[7], "good")
    assert search.next() == COMMITS[11]
    search.record(COMMITS[11], "bad")
    search.record(search.next(), "bad")  # c10
    search.record(search.next(), "good")  # c9
    assert search.done and search.culprit == COMMITS[9] and search.parent_of_culprit(GOOD) == COMMITS[8]


@pytest.fixture
def planted(monkeypatch, tmp_path):
    """The walk over COMMITS with planted medians: 100 ms up to c10, 102 ms from c11 (the culprit) on."""
    medians = {c.sha: 100.0 if i < 10 else 102.0 for i, c in enumerate(COMMITS)}
    plant(monkeypatch, tmp_path, {GOOD.sha: 100.0, **medians})
    return tmp_path


def _job(processes: int = 3) -> walk.Bisection:
    return walk.Bisection(ModelConfig.preset("tiny"), "opt1", "cpu", 1, CampaignSettings(), processes)


def test_the_walk_names_the_planted_culprit_with_its_ratio_against_its_parent(planted):
    lines: list[str] = []
    assert bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lines.append) == 0
    plan = f"bisect {GOOD.sha[:9]}..{COMMITS[-1].sha[:9]}: 16 commit(s); at most 6 A/B runs of 3+3 processes"
    assert lines[0].startswith(plan), lines[0]
    assert any(line.startswith("step 1: ") and ": bad (3+3 processes" in line for line in lines), lines
    culprit = next(line for line in lines if line.startswith("culprit: "))
    assert culprit.startswith(f"culprit: {COMMITS[10]} ratio 1.02"), culprit
    assert f"against its parent {COMMITS[9].sha[:9]}" in culprit
    document = json.loads((planted / "b.json").read_text())
    assert document["schema"] == "meddpm-bisect/1" and "partial" not in document
    section = document["bisect"]
    assert section["culprit"]["commit"] == COMMITS[10].sha and section["culprit"]["parent"] == COMMITS[9].sha
    assert section["cut_ratio"] == pytest.approx(1.01, abs=0.001)
    # The ends, four halvings, and the culprit against its parent (c10 is not the good end).
    assert len(section["steps"]) == 6 and PlantedCampaign.runs == [3] * 6
    assert [s["side"] for s in section["steps"][1:5]] == ["good", "bad", "good", "bad"]
    # Where the time went: every step's measuring, the last line and the JSON's split.
    assert document["time_split"]["seconds"]["measuring"] == 60.0
    assert lines[-1].startswith("where the time went: ") and "measuring 60 s" in lines[-1], lines[-1]


def test_an_ambiguous_step_gets_more_processes_before_it_decides(planted):
    # c8 (the first halving) reads 101 ms, right on the cut: its interval straddles it at first.
    PlantedCampaign.medians[COMMITS[7].sha] = 101.0
    lines: list[str] = []
    bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lines.append)
    assert any("straddles the cut" in line and "3+3 more processes" in line for line in lines), lines
    step = json.loads((planted / "b.json").read_text())["bisect"]["steps"][1]
    assert step["extended"] == walk.EXTENSIONS and step["processes"] == [9, 9]


def test_a_budget_decides_an_ambiguous_step_on_its_ratio_and_stops_before_a_run_it_cannot_fit(planted):
    # Each A/B run takes 100 planted seconds: after the ends and c8's first round (on the cut, so ambiguous), 250 s
    # leave no room for a round more, nor for the next halving.
    PlantedCampaign.medians[COMMITS[7].sha] = 101.0
    PlantedCampaign.run_seconds = 100.0
    lines: list[str] = []
    status = bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lines.append, walk.Budget(250.0))
    assert status == bisect.BUDGET_SPENT and PlantedCampaign.runs == [3, 3]
    assert any("straddles the cut" in line and "no budget left for more processes" in line for line in lines), lines
    assert lines[-1].startswith("budget: 200 s of 250 s spent, and an A/B run takes about 100 s: stopped"), lines
    document = json.loads((planted / "b.json").read_text())
    assert document["partial"] is True and document["left"]["spent_seconds"] == 200.0


def test_a_range_whose_bad_end_is_not_slower_is_refused_after_measuring_the_ends(planted):
    PlantedCampaign.medians = dict.fromkeys(PlantedCampaign.medians, 100.0)
    with pytest.raises(UserError, match=r"is not slower than .* for opt1 .*nothing to bisect"):
        bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lambda line: None)
    assert PlantedCampaign.runs == [3]  # the ends only


def test_an_interrupted_walk_writes_its_steps_marked_partial(planted):
    PlantedCampaign.interrupt_at = 1  # the ends measured, the first halving under way
    assert bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lambda line: None) == 130
    document = json.loads((planted / "b.json").read_text())
    assert document["partial"] is True and len(document["bisect"]["steps"]) == 1
    # One shape, partial or complete: the ends are {sha, subject} objects in both.
    assert document["bisect"]["good"] == {"sha": GOOD.sha, "subject": "c0"}
    assert document["bisect"]["bad"] == {"sha": COMMITS[-1].sha, "subject": "c16"}


def test_a_commit_that_cannot_be_driven_is_skipped_and_the_culprit_named_with_it(planted):
    # c10 (just before the culprit c11) does not import: the walk goes around it, and names both as the suspects.
    reason = "has a workload this harness cannot drive (SyntaxError: invalid syntax (unet.py, line 3))"
    PlantedCampaign.undrivable = {COMMITS[9].sha: reason}
    lines: list[str] = []
    assert bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lines.append) == 0
    skipped = f"{COMMITS[9]} skipped: it {reason}; culprit in {COMMITS[8].sha[:9]}..{COMMITS[11].sha[:9]}"
    assert any(line.endswith(skipped) for line in lines), lines
    culprit = next(line for line in lines if line.startswith("culprit: "))
    assert culprit.startswith(
        f"culprit: one of 2 commits, {COMMITS[9].sha[:9]}..{COMMITS[10].sha[:9]}: {COMMITS[9]} could not be driven "
        f"(skipped), and {COMMITS[10]} ratio 1.02"
    ), culprit
    assert f"against {COMMITS[8].sha[:9]}, the newest good commit" in culprit
    section = json.loads((planted / "b.json").read_text())["bisect"]
    assert section["skipped"] == [{"sha": COMMITS[9].sha, "subject": "c10", "reason": reason}]
    assert section["suspects"] == [COMMITS[9].sha, COMMITS[10].sha]
    assert section["culprit"]["commit"] == COMMITS[10].sha and section["culprit"]["parent"] == COMMITS[8].sha


def test_the_search_goes_around_skipped_commits_as_git_bisect_skip_does():
    search = Search(COMMITS)
    search.skip(COMMITS[7])
    assert search.next() == COMMITS[6]  # the nearest to the middle that is not skipped
    search.record(COMMITS[6], "good")
    search.record(COMMITS[8], "bad")
    assert search.done and search.suspects == [COMMITS[7], COMMITS[8]] and search.parent_of_culprit(GOOD) == COMMITS[6]


def test_ends_too_noisy_to_tell_get_more_processes_before_the_range_is_refused(planted):
    # The bad end's processes read half or twice its time in turn: an interval that wide cannot tell yet.
    PlantedCampaign.medians = dict.fromkeys(PlantedCampaign.medians, 100.0)
    PlantedCampaign.noisy = {COMMITS[-1].sha}
    lines: list[str] = []
    with pytest.raises(UserError, match=r"is not slower than .* p [\d.e-]+, 9\+9 processes\); nothing to bisect"):
        bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lines.append)
    assert PlantedCampaign.runs == [3] * (1 + walk.EXTENSIONS)
    assert any(
        "the ends: ratio" in line and "too wide to tell whether it is slower yet; 3+3 more" in line for line in lines
    ), lines


BEFORE = {"launches": 1099, "launches.elementwise": 374, "bytes_allocated": 1_000_000}
AFTER = {"launches": 1105, "launches.elementwise": 379, "bytes_allocated": 268_435_968}


def _counts_from(first: int) -> dict[str, dict[str, int]]:
    """Counts planted per commit: BEFORE up to COMMITS[first - 1] (and the good end), AFTER from COMMITS[first] on."""
    return {GOOD.sha: BEFORE, **{c.sha: AFTER if i >= first else BEFORE for i, c in enumerate(COMMITS)}}


def test_counts_place_a_commit_where_they_are_like_one_end_and_not_the_other():
    assert counts_moved([AFTER], [BEFORE]) and not counts_moved([BEFORE], [BEFORE]) and not counts_moved([], [BEFORE])
    assert side_by_counts([AFTER], [BEFORE], [AFTER]) == "bad" and side_by_counts([BEFORE], [BEFORE], [AFTER]) == "good"
    # A tensor more again, or no counts at all: neither end's alone.
    assert side_by_counts([{**AFTER, "bytes_allocated": 10**9}], [BEFORE], [AFTER]) is None
    assert side_by_counts([], [BEFORE], [AFTER]) is None
    # Bytes allocated within the gate's slack (0.1 %) of an end are that end's (cuDNN's workspaces move them a
    # little); beyond it, neither end's.
    assert side_by_counts([{**BEFORE, "bytes_allocated": 1_000_900}], [BEFORE], [AFTER]) == "good"
    assert side_by_counts([{**BEFORE, "bytes_allocated": 1_002_000}], [BEFORE], [AFTER]) is None


def test_where_the_ends_counts_differ_each_halving_is_one_profiled_process(planted):
    # The slowdown at c11 also moved the counts: four halvings of one process each, then c11 against its parent.
    PlantedCampaign.counts = _counts_from(10)
    lines: list[str] = []
    assert bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lines.append) == 0
    assert PlantedCampaign.runs == [3, 1, 1, 1, 1, 3]
    assert any(line.startswith("the ends' counts differ") for line in lines), lines
    assert any(line.startswith(f"step 2: {COMMITS[7]}: counts like the good end's") for line in lines), lines
    culprit = next(line for line in lines if line.startswith("culprit: "))
    assert culprit.startswith(f"culprit: {COMMITS[10]} ratio 1.02") and "4 counts processes" in culprit, culprit
    section = json.loads((planted / "b.json").read_text())["bisect"]
    assert [c["side"] for c in section["counted"]] == ["good", "bad", "good", "bad"]
    assert section["counted"][0]["counts"] == [BEFORE] and section["culprit"]["parent"] == COMMITS[9].sha


@pytest.mark.parametrize("c5_ms", [100.0, 100.4])
def test_counts_that_moved_elsewhere_than_the_slowdown_send_the_walk_back_to_timing(planted, c5_ms):
    # The counts moved at c5, which is no slower, or 0.4 % slower where the range is 2 %: its own A/B against c4 does
    # not carry half the range's slowdown, and the range is bisected by time.
    PlantedCampaign.counts = _counts_from(4)
    PlantedCampaign.medians.update({c.sha: c5_ms for c in COMMITS[4:10]})
    lines: list[str] = []
    assert bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lines.append) == 0
    moved = f"the counts moved at {COMMITS[4]}, whose own ratio {c5_ms / 100:.4f}"
    assert any(line.startswith(moved) and "bisected again by time" in line for line in lines), lines
    culprit = next(line for line in lines if line.startswith("culprit: "))
    assert culprit.startswith(f"culprit: {COMMITS[10]} ratio {102 / c5_ms:.4f}"), culprit
    section = json.loads((planted / "b.json").read_text())["bisect"]
    assert section["culprit"]["commit"] == COMMITS[10].sha and len(section["counted"]) == 4


def test_a_commit_whose_counts_are_like_neither_end_is_timed_under_one_step_number(planted):
    PlantedCampaign.counts = {**_counts_from(10), COMMITS[7].sha: {**BEFORE, "launches": 2000}}
    lines: list[str] = []
    assert bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lines.append) == 0
    assert any(line.startswith(f"step 2: {COMMITS[7]}: counts like neither end's alone; timed") for line in lines)
    assert any(line.startswith(f"step 2: {COMMITS[7]} vs ") and ": good (3+3" in line for line in lines), lines
    assert any(line.startswith(f"step 3: {COMMITS[11]}: counts like the bad end's") for line in lines), lines
    assert PlantedCampaign.runs[:3] == [3, 1, 3]  # the ends, c8's counts, then c8 against the good end
    assert next(line for line in lines if line.startswith("culprit: ")).startswith(f"culprit: {COMMITS[10]} ")


def test_going_back_to_timing_keeps_the_halvings_already_timed(planted):
    # c8's counts are like neither end's, so it is timed (good); the counts then lead to c9, which is no slower than
    # c8: the timed search takes c8's run as it was.
    PlantedCampaign.counts = {**_counts_from(8), COMMITS[7].sha: {**BEFORE, "launches": 2000}}
    lines: list[str] = []
    assert bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lines.append) == 0
    assert any("bisected again by time" in line for line in lines), lines
    assert any(
        line.endswith(
            f"{COMMITS[7]}: good, as its A/B run above; culprit in {COMMITS[8].sha[:9]}..{COMMITS[15].sha[:9]}"
        )
        for line in lines
    ), lines
    timed_c8 = [s for s in json.loads((planted / "b.json").read_text())["bisect"]["steps"] if s["subject"] == "c8"]
    assert len(timed_c8) == 1
    assert next(line for line in lines if line.startswith("culprit: ")).startswith(f"culprit: {COMMITS[10]} ")


def _night_ends() -> MeasuredEnds:
    return MeasuredEnds((102.0, 102.1, 101.9), (100.0, 100.1, 99.9), candidate_counts=(AFTER,))


def test_ends_given_by_the_night_bring_the_bad_ends_counts_and_the_good_end_gets_one_process(planted):
    PlantedCampaign.counts = _counts_from(10)
    PlantedCampaign.run_seconds = 20.0
    lines: list[str] = []
    assert bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lines.append, ends=_night_ends()) == 0
    assert PlantedCampaign.runs == [1, 1, 1, 1, 1, 3]  # the good end's counts, four halvings, the culprit's own
    assert PlantedCampaign.reach[GOOD.sha] is True  # an end: were it undrivable, its line names a later commit
    section = json.loads((planted / "b.json").read_text())["bisect"]
    assert section["counted"][0] == {"commit": GOOD.sha, "subject": "c0", "side": "good", "counts": [BEFORE],
                                     "seconds": 20.0}  # fmt: skip
    assert section["seconds"] == 20.0 * 6


def test_a_budget_prices_the_next_run_from_the_counts_processes_before_any_was_timed(planted):
    # Each run of processes takes 10 planted seconds: the good end's counts and two halvings fit 35 s, a third not;
    # an A/B run is then taken to cost 3+3 counts processes.
    PlantedCampaign.counts = _counts_from(10)
    PlantedCampaign.run_seconds = 10.0
    lines: list[str] = []
    budget = walk.Budget(35.0)
    status = bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lines.append, budget, ends=_night_ends())
    assert status == bisect.BUDGET_SPENT and PlantedCampaign.runs == [1, 1, 1]
    assert lines[-1].startswith("budget: 30 s of 35 s spent, and an A/B run takes about 60 s: stopped"), lines
    assert json.loads((planted / "b.json").read_text())["left"]["run_seconds"] == 60.0


def test_a_time_walk_checks_its_budget_before_it_profiles_an_end(planted):
    # The budget is shared with an earlier bisection (as the nightly's alarm shares it) that spent all of it: the
    # good end's counts process, the walk's first, does not start.
    PlantedCampaign.counts = _counts_from(10)
    lines: list[str] = []
    budget = walk.Budget(30.0)
    PlantedCampaign.now = 31.0
    status = bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lines.append, budget, ends=_night_ends())
    assert status == bisect.BUDGET_SPENT and PlantedCampaign.runs == []
    assert lines[-1].startswith("budget: 31 s of 30 s spent"), lines
    assert json.loads((planted / "b.json").read_text())["left"]["commits"] == 16


def _flat_night(counts=(AFTER,)) -> MeasuredEnds:
    """The night's ends with no slowdown between them, and the bad end's counts as the night profiled them."""
    return MeasuredEnds((100.0, 100.1, 99.9), (100.0, 100.1, 99.9), candidate_counts=counts)


def _follow(planted, lines, **kwargs) -> int:
    PlantedCampaign.medians = dict.fromkeys(PlantedCampaign.medians, 100.0)  # no commit is slower
    ends = kwargs.pop("ends", _flat_night())
    path = planted / "b.json"
    return bisect.run_bisect(_job(), "c0..c16", path, lines.append, ends=ends, counts_flagged=True, **kwargs)


def test_following_the_counts_finds_where_they_first_rose_and_needs_no_slowdown(planted):
    # Fewer launches from c6 (an improvement, which c8's halving meets), the regression at c11, and more again at c12
    # (neither end's): the walk ends where the counts first rose beyond the good end's, and names what moved against
    # c10, the parent, whose own counts it measured.
    fewer = {**BEFORE, "launches": 1050}
    PlantedCampaign.counts = {
        **_counts_from(10),
        **{c.sha: fewer for c in COMMITS[5:10]},
        COMMITS[11].sha: {**AFTER, "launches": 2000},
    }
    lines: list[str] = []
    assert _follow(planted, lines) == 0
    assert PlantedCampaign.runs == [1, 1, 1, 1, 1, 3]  # the good end's counts, four halvings, the culprit's own
    assert lines[1].endswith("(measured by the night's A/B); the counts moved, so the walk follows them"), lines
    culprit = next(line for line in lines if line.startswith("culprit: "))
    assert culprit == (
        f"culprit: {COMMITS[10]}, by its counts against its parent {COMMITS[9].sha[:9]}: launches 1,050 -> 1,105, "
        "elementwise launches 374 -> 379, bytes allocated 1,000,000 -> 268,435,968; found in 0 s of measuring, 5 "
        "counts processes"
    ), culprit
    assert any(line.startswith("its own ratio 1.0000 [") and line.endswith("against its parent") for line in lines)
    section = json.loads((planted / "b.json").read_text())["bisect"]
    found = section["culprit"]
    assert found["by"] == "counts" and found["commit"] == COMMITS[10].sha and found["parent"] == COMMITS[9].sha
    assert found["counts"] == {"commit": [AFTER], "against": [fewer]} and found["processes"] == [3, 3]
    # Its own A/B reads no slowdown: its side says it cannot tell, not "bad".
    assert found["side"] == section["steps"][-1]["side"] == "ambiguous"
    assert section["cut_ratio"] is None and section["suspects"] == [COMMITS[10].sha] and "partial" not in section


def test_following_the_counts_around_a_skipped_commit_names_both_suspects(planted):
    PlantedCampaign.counts = _counts_from(10)
    PlantedCampaign.undrivable = {COMMITS[9].sha: "has no meddpm/ folder"}
    lines: list[str] = []
    assert _follow(planted, lines) == 0
    culprit = next(line for line in lines if line.startswith("culprit: "))
    assert culprit.startswith(
        f"culprit: one of 2 commits up to {COMMITS[10]} (the rest skipped), by its counts against the newest good "
        f"commit {COMMITS[8].sha[:9]}: launches 1,099 -> 1,105"
    ), culprit
    assert json.loads((planted / "b.json").read_text())["bisect"]["suspects"] == [c.sha for c in COMMITS[9:11]]


def test_following_the_counts_without_the_nights_counts_profiles_both_ends(planted):
    PlantedCampaign.counts = _counts_from(10)
    lines: list[str] = []
    assert _follow(planted, lines, ends=_flat_night(counts=())) == 0
    assert PlantedCampaign.runs == [1, 1, 1, 1, 1, 1, 3]  # both ends' counts first
    counted = json.loads((planted / "b.json").read_text())["bisect"]["counted"]
    assert [(c["subject"], c["side"]) for c in counted[:2]] == [("c16", "bad"), ("c0", "good")]


def test_a_budget_stops_a_walk_that_follows_the_counts_with_the_command_that_finishes_it(planted):
    # 10 planted seconds a run: the good end's counts and two halvings fit 35 s, a third not.
    PlantedCampaign.counts = _counts_from(10)
    PlantedCampaign.run_seconds = 10.0
    lines: list[str] = []
    assert _follow(planted, lines, budget=walk.Budget(35.0)) == bisect.BUDGET_SPENT
    assert lines[-1].endswith(
        "--combos opt1 --preset tiny --batch-size 1 --follow-counts (2 counts processes and 2 A/B runs, at least 140 s)"
    ), lines
    left = json.loads((planted / "b.json").read_text())["left"]
    assert left["by_counts"] is True and left["counts_processes"] == 2 and left["runs"] == 2


def test_a_budget_is_checked_before_each_end_is_profiled(planted):
    # Neither end brought its counts; each profile takes 10 planted seconds: the bad end's fits 15 s, the good's not.
    PlantedCampaign.counts = _counts_from(10)
    PlantedCampaign.run_seconds = 10.0
    lines: list[str] = []
    assert _follow(planted, lines, ends=_flat_night(counts=()), budget=walk.Budget(15.0)) == bisect.BUDGET_SPENT
    assert PlantedCampaign.runs == [1] and lines[-1].startswith("budget: 10 s of 15 s spent"), lines


def test_a_culprit_found_by_its_counts_is_written_when_its_timing_is_interrupted(planted):
    PlantedCampaign.counts = _counts_from(10)
    PlantedCampaign.interrupt_at = 5  # the good end's counts and four halvings ran; the culprit's own A/B is stopped
    lines: list[str] = []
    assert _follow(planted, lines) == 130
    assert lines[-2] == f"interrupted while timing the culprit; it is in {planted / 'b.json'}, without its own time"
    assert lines[-1].startswith("where the time went: ")
    document = json.loads((planted / "b.json").read_text())
    found = document["bisect"]["culprit"]
    assert found["by"] == "counts" and found["commit"] == COMMITS[10].sha and "ratio" not in found
    assert document["partial"] is True


@pytest.mark.parametrize("good_counts", [AFTER, {**AFTER, "launches": 2000}], ids=["the same", "fewer at BAD"])
def test_following_counts_that_did_not_rise_is_one_line(planted, good_counts):
    PlantedCampaign.counts = {GOOD.sha: good_counts}
    with pytest.raises(UserError, match=r"counts for opt1 did not rise beyond .*'s when profiled \(the same, fewer"):
        _follow(planted, [])


def test_subjects_reach_the_terminal_with_control_characters_escaped(planted):
    # A subject that would retitle the window and erase the line: printed escaped, kept as it is in the JSON.
    hostile = "fix\x1b]0;pwned\x07\r\x1b[2Kculprit: someone else"
    commits = [Commit(c.sha, hostile) if i == 10 else c for i, c in enumerate(COMMITS)]
    bisect.first_parent_line = lambda good, bad, root: (GOOD, commits)  # restored by monkeypatch's fixture
    lines: list[str] = []
    bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lines.append)
    assert not any("\x1b" in line or "\r" in line or "\x07" in line for line in lines), lines
    culprit = next(line for line in lines if line.startswith("culprit: "))
    assert "(fix\\x1b]0;pwned\\x07\\r\\x1b[2Kculprit: someone else)" in culprit, culprit
    assert json.loads((planted / "b.json").read_text())["bisect"]["culprit"]["subject"] == hostile


def test_bisect_checks_the_ram_before_it_starts_a_worker(monkeypatch, capsys, tmp_path):
    from meddpm.bench import host_ram
    from meddpm.bench.cli import main

    monkeypatch.setattr(host_ram, "available_memory", lambda: 2**30)
    monkeypatch.setattr(bisect, "run_bisect", lambda *a: pytest.fail("the bisection started"))
    args = ["--device=cpu", "--preset=brats", "--combos=baseline", "--bisect=HEAD~1..HEAD", f"--json={tmp_path}/b.json"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("meddpm-bench: error: preset 'brats' at batch size 1 with combos baseline needs at"), err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bisect", "HEAD"], "--bisect takes GOOD..BAD (two revisions, e.g. v1.2..HEAD), not 'HEAD'"),
        (["--bisect", "..HEAD"], "--bisect takes GOOD..BAD (two revisions, e.g. v1.2..HEAD), not '..HEAD'"),
        (["--bisect", "a..b..c"], "--bisect takes GOOD..BAD (two revisions, e.g. v1.2..HEAD), not 'a..b..c'"),
        (["--bisect", "HEAD..HEAD"], "--bisect: HEAD and HEAD are the same commit; give a GOOD older than BAD"),
        (["--bisect", "HEAD~1..HEAD", "--combos", "baseline,opt1"], "--bisect follows one combo, not 2; give --combos"),
        (["--bisect", "HEAD~1..HEAD", "--compare-to", "HEAD"], "--bisect runs A/B steps of its own; drop --compare-to"),
        (["--bisect", "HEAD~1..HEAD", "--processes", "1"], "--processes must be at least 2 (an A/B needs a spread"),
        (["--bisect", "nope..HEAD"], "--bisect: unknown revision 'nope'; give a commit, branch or tag that git knows"),
        (["--bisect", "HEAD~1..HEAD", "--until-detectable", "0.01"], "--bisect runs A/B steps of its own; drop --unt"),
        (["--follow-counts"], "--follow-counts steers a bisection; give it with --bisect GOOD..BAD"),
    ],
)
def test_bad_bisect_inputs_are_one_line_before_measuring(args, message, capsys, tmp_path):
    from meddpm.bench.cli import main

    assert main(["--device=cpu", "--combos=baseline", f"--json={tmp_path / 'b.json'}", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"meddpm-bench: error: {message}"), err
    assert not (tmp_path / "b.json").exists()


def test_a_good_end_after_the_bad_end_is_refused(tmp_path):
    repo = make_repo(tmp_path)
    git(repo, "commit", "-q", "--allow-empty", "-m", "one more")
    with pytest.raises(UserError, match=r"--bisect: HEAD is not an ancestor of HEAD~1; give GOOD\.\.BAD with GOOD"):
        bisect.first_parent_line("HEAD", "HEAD~1", repo)


def test_a_real_walk_on_the_cpu_finds_the_commit_that_slowed_the_workload(tmp_path):
    # Two commits after the good end; the first makes baseline's iterations read 150 ms instead of 100. Kept this
    # short because each step starts real worker processes: the ends, then the first commit, the culprit.
    repo = make_repo(tmp_path)
    good = git(repo, "rev-parse", "HEAD")
    for i, ms in enumerate((150.0, 150.0), 1):
        set_clock(repo, baseline=ms, note=float(i))
        git(repo, "commit", "-q", "-am", f"step {i}")
    culprit = git(repo, "rev-parse", "HEAD~1")
    cmd = [
        *(sys.executable, "-m", "meddpm.bench.cli", "--device=cpu", "--combos=baseline", "--warmup=0", "--iters=2"),
        *("--processes=2", f"--bisect={good}..HEAD", "--json=b.json"),
    ]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(repo), "PYTHONPATH": str(repo)}
    result = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(rf"culprit: {culprit[:9]} \(step 1\) ratio 1\.(49|50)\d* ", result.stdout), result.stdout
    section = json.loads((repo / "b.json").read_text())["bisect"]
    assert section["culprit"]["commit"] == culprit and math.isclose(section["culprit"]["ratio"], 1.5, rel_tol=0.01)
    assert [s["commit"] for s in section["steps"]] == [git(repo, "rev-parse", "HEAD"), culprit]


def test_a_shallow_clone_says_so_and_how_to_deepen_it(tmp_path):
    repo = make_repo(tmp_path)
    for i in range(3):
        git(repo, "commit", "-q", "--allow-empty", "-m", f"more {i}")
    git(tmp_path, "clone", "-q", "--depth=2", f"file://{repo}", "shallow")
    with pytest.raises(
        UserError,
        match=r"--bisect: unknown revision 'HEAD~3' in .*shallow, a shallow clone .*"
        r"deepen it with git fetch --unshallow",
    ):
        resolve_revision("HEAD~3", tmp_path / "shallow", "--bisect")


def test_revisions_are_looked_up_in_the_checkout_the_user_stands_in(tmp_path, monkeypatch):
    repo = make_repo(tmp_path)
    git(tmp_path, "clone", "-q", str(repo), "clone")
    clone = tmp_path / "clone"
    git(clone, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "only here")
    (clone / "meddpm" / "model").mkdir(exist_ok=True)
    monkeypatch.chdir(clone / "meddpm" / "model")
    assert revisions_root("--bisect") == clone.resolve()
    monkeypatch.chdir(tmp_path)  # not a checkout: the one the package came from, named when a revision is unknown
    with pytest.raises(UserError, match=r"unknown revision 'nope'; give a commit, branch or tag that git knows \(in /"):
        resolve_revision("nope", revisions_root("--bisect"), "--bisect")


def test_a_harness_in_a_subfolder_of_a_repository_is_told_meddpm_must_be_at_its_root(tmp_path, monkeypatch):
    from meddpm.measure.processes import revision

    outer = tmp_path / "outer"
    (outer / "tools" / "meddpm").mkdir(parents=True)
    git(outer, "init", "-q")
    monkeypatch.setattr(revision, "harness_root", lambda: (outer / "tools").resolve())
    with pytest.raises(
        UserError,
        match=r"--bisect: meddpm/ must sit at the root of its git repository, but .*tools "
        r"is a folder inside the repository .*outer",
    ):
        revision.checkout_root("--bisect")


def _tiny_repo(tmp_path):
    root = tmp_path / "tiny"
    (root / "meddpm").mkdir(parents=True)
    (root / "meddpm" / "__init__.py").write_text("")
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@t")
    git(root, "config", "user.name", "t")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "start")
    return root


def test_a_tree_without_meddpm_or_with_a_link_out_of_it_is_undrivable_in_one_line(tmp_path):
    from meddpm.measure.processes.revision import extracted

    root = _tiny_repo(tmp_path)
    (root / "meddpm" / "secret").symlink_to("/etc/passwd")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "a link out")
    with pytest.raises(Undrivable, match=r"holds a link that points outside meddpm/ \(meddpm/secret -> /etc/passwd\)"):
        with extracted(git(root, "rev-parse", "HEAD"), root):
            pass
    git(root, "rm", "-q", "-r", "meddpm")
    git(root, "commit", "-q", "-m", "no meddpm")
    with pytest.raises(Undrivable, match=r"[0-9a-f]{9} has no meddpm/ folder"):
        with extracted(git(root, "rev-parse", "HEAD"), root):
            pass


def test_latin1_subjects_are_read_whatever_the_log_encoding(tmp_path):
    root = _tiny_repo(tmp_path)
    message = tmp_path / "message"
    message.write_bytes("café au lait".encode("latin-1"))
    git(root, "-c", "i18n.commitEncoding=ISO-8859-1", "commit", "-q", "--allow-empty", "-F", str(message))
    declared = git(root, "rev-parse", "HEAD")
    git(root, "commit", "-q", "--allow-empty", "-F", str(message))  # latin-1 bytes, declared as nothing (UTF-8)
    raw = git(root, "rev-parse", "HEAD")
    git(root, "config", "i18n.logOutputEncoding", "ISO-8859-1")
    assert bisect._commit(declared, root).subject == "café au lait"
    assert bisect._commit(raw, root).subject in ("café au lait", "caf\ufffd au lait")  # git may guess, or we replace
