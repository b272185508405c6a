"""The nightly's bisect step: its alarm's flagged cases bisected within a budget, on planted process medians.

The night's results.json is written here as the suite writes it (its flagged case, the last good run's
commit); the walks read medians planted per commit (planted_campaign.py) and a planted clock, so the
culprits are known and the budget is spent by the planted seconds of each A/B run, not by this machine.
One test runs the step as the nightly does, on a git repository whose slowdown is planted in its workload.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from planted_campaign import COMMITS, GOOD, PlantedCampaign, plant
from planted_repo import git, make_repo, set_clock

from meddpm.bench import alarm

# The settings of a walk whose processes are planted: nothing is measured, so any will do.
FAST = ["--warmup", "0", "--min-rounds", "2", "--max-rounds", "2"]


def _night(tmp_path, outcome="regression", last_good=True, good=GOOD.sha, bad=COMMITS[-1].sha, combo="opt1"):
    """A night's results folder: the tiny preset's opt1 flagged (or not) in an A/B against the last good run."""
    case = {
        "preset": "tiny",
        "combo": combo,
        "batch_size": 1,
        "outcome": outcome,
        "comparisons": [{"metric": "time", "outcome": outcome, "ratio": 1.02, "ci_low": 1.01, "ci_high": 1.03}],
    }
    results = {
        "schema": "meddpm-perf-results/3",
        "arch": "cpu",
        "environment": {"commit": bad},
        "last_good": {"commit": good, "run_id": 7} if last_good else None,
        "cases": [case],
    }
    out = tmp_path / "perf-results"
    out.mkdir()
    (out / "results.json").write_text(json.dumps(results))
    (out / "summary.md").write_text("# the night's summary\n")
    return out


def _medians(*steps: tuple[int, float]) -> dict[str, float]:
    """100 ms at the good end; from each (index into COMMITS, ms) on, that many ms."""
    medians = {GOOD.sha: 100.0}
    for i, commit in enumerate(COMMITS):
        medians[commit.sha] = next((ms for at, ms in reversed(steps) if i >= at), 100.0)
    return medians


def _run(out, *args):
    lines: list[str] = []
    status = alarm.run([str(out), *FAST, *args], say=lines.append)
    return status, lines


def test_one_culprit_is_found_and_written_to_the_summary_and_beside_the_results(monkeypatch, tmp_path):
    plant(monkeypatch, tmp_path, _medians((10, 102.0)))
    out = _night(tmp_path)
    status, lines = _run(out, "--bisect-budget", "3600")
    assert status == 0, lines
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# the night's summary\n"), summary
    assert f"- culprit: {COMMITS[10].sha[:12]} (c11), ratio 1.02" in summary, summary
    assert f"against its parent {COMMITS[9].sha[:12]}" in summary
    assert "- it explains the range" in summary and "remainder" not in summary
    document = json.loads((out / "alarm.json").read_text())
    assert document["schema"] == "meddpm-alarm/1" and "partial" not in document
    (case,) = document["cases"]
    assert [c["commit"] for c in case["culprits"]] == [COMMITS[10].sha] and case["left"] is None
    assert case["bisections"] == ["bisect-opt1-1.json"] and (out / "bisect-opt1-1.json").exists()
    assert lines[-1] == f"culprit: {COMMITS[10].sha[:12]} (c11) in opt1"


def test_a_culprit_that_leaves_the_range_partly_unexplained_gets_the_remainder_bisected(monkeypatch, tmp_path):
    # Two culprits in the night's range: c5 makes it 1.5 % slower, c11 another 1 %. Halfway cuts find c5 first;
    # its own 1.015 leaves 1.01 of the range's 1.025, so c5..c16 is bisected next and finds c11.
    plant(monkeypatch, tmp_path, _medians((4, 101.5), (10, 101.5 * 1.01)))
    out = _night(tmp_path)
    status, lines = _run(out, "--bisect-budget", "3600")
    assert status == 0, lines
    (case,) = json.loads((out / "alarm.json").read_text())["cases"]
    assert [c["commit"] for c in case["culprits"]] == [COMMITS[4].sha, COMMITS[10].sha]
    first, second = case["culprits"]
    assert first["unexplained"]["significant"] and first["unexplained"]["ratio"] == pytest.approx(1.01, abs=0.001)
    assert not second["unexplained"]["significant"]
    assert second["range"] == {"good": COMMITS[4].sha, "bad": COMMITS[-1].sha}
    # Once c11 explains the rest, nothing before c5 is measured: 6 A/B runs found c5, 5 more c11.
    assert case["notes"] == [] and len(PlantedCampaign.runs) == 11, PlantedCampaign.runs
    summary = (out / "summary.md").read_text()
    assert "its slowdown leaves part of the range's unexplained" in summary
    assert "the remainder is bisected next" in summary
    assert f"- culprit: {COMMITS[4].sha[:12]} (c5)" in summary and f"- culprit: {COMMITS[10].sha[:12]} (c11)" in summary


def test_a_remainder_not_after_the_culprit_is_looked_for_before_it(monkeypatch, tmp_path):
    # c5 makes it 0.5 % slower, c11 another 2 %: halfway cuts find c11, whose 1.02 leaves 1.005 unexplained. Nothing
    # after c11 is slower, so the good end up to c11's parent is bisected next and finds c5.
    plant(monkeypatch, tmp_path, _medians((4, 100.5), (10, 100.5 * 1.02)))
    out = _night(tmp_path)
    status, lines = _run(out, "--bisect-budget", "3600")
    assert status == 0, lines
    (case,) = json.loads((out / "alarm.json").read_text())["cases"]
    assert [c["commit"] for c in case["culprits"]] == [COMMITS[10].sha, COMMITS[4].sha]
    assert case["culprits"][1]["range"] == {"good": GOOD.sha, "bad": COMMITS[9].sha}
    (note,) = case["notes"]
    assert note.startswith(f"{COMMITS[10].sha[:12]}..{COMMITS[-1].sha[:12]}: --bisect: ") and "is not slower" in note
    assert case["bisections"] == ["bisect-opt1-1.json", "bisect-opt1-2.json"]


def test_a_culprit_limit_stops_before_the_remainder_and_says_so(monkeypatch, tmp_path):
    plant(monkeypatch, tmp_path, _medians((4, 101.5), (10, 101.5 * 1.01)))
    out = _night(tmp_path)
    _run(out, "--bisect-budget", "3600", "--max-culprits", "1")
    (case,) = json.loads((out / "alarm.json").read_text())["cases"]
    assert len(case["culprits"]) == 1 and case["left"]["why"] == "the culprits' limit (--max-culprits 1)"
    summary = (out / "summary.md").read_text()
    assert f"not bisected for want of the culprits' limit (--max-culprits 1): {COMMITS[4].sha[:12]}.." in summary


def test_a_spent_budget_stops_the_walk_and_says_what_is_left(monkeypatch, tmp_path):
    # Each A/B run takes 100 planted seconds: the ends and one halving fit 250 s, the next halving would not.
    plant(monkeypatch, tmp_path, _medians((10, 102.0)))
    PlantedCampaign.run_seconds = 100.0
    out = _night(tmp_path)
    status, lines = _run(out, "--bisect-budget", "250")
    assert status == 0 and PlantedCampaign.runs == [3, 3], lines
    (case,) = json.loads((out / "alarm.json").read_text())["cases"]
    left = case["left"]
    assert case["culprits"] == [] and left["why"] == "the budget"
    # c8 was good: the culprit lies in c9..c16, a bisection of at most 5 A/B runs (its ends, 3 halvings, the culprit).
    assert (left["good"], left["bad"], left["commits"], left["runs"]) == (COMMITS[7].sha, COMMITS[-1].sha, 8, 5)
    summary = (out / "summary.md").read_text()
    expected = (
        f"- stopped by the budget with the culprit in {COMMITS[7].sha[:12]}..{COMMITS[-1].sha[:12]} (8 commit(s); "
        f"at most 5 A/B runs of about 100 s): meddpm-bench --bisect {COMMITS[7].sha[:12]}..{COMMITS[-1].sha[:12]} "
        "--combos opt1 --preset tiny --batch-size 1"
    )
    assert expected in summary, summary
    assert "Budget: 200 s of 250 s spent" in summary
    assert any(line.startswith("budget: 200 s of 250 s spent, and an A/B run takes about 100 s") for line in lines)


def test_a_budget_that_leaves_one_commit_names_it_the_culprit_by_bisection(monkeypatch, tmp_path):
    # 16 commits: the ends and four halvings fit 550 planted seconds; c11 against its parent c10 would not.
    plant(monkeypatch, tmp_path, _medians((10, 102.0)))
    PlantedCampaign.run_seconds = 100.0
    out = _night(tmp_path)
    status, lines = _run(out, "--bisect-budget", "550")
    assert status == 0 and PlantedCampaign.runs == [3] * 5, lines
    (case,) = json.loads((out / "alarm.json").read_text())["cases"]
    left = case["left"]
    assert case["culprits"] == [] and left["commits"] == 1 and left["culprit"]["commit"] == COMMITS[10].sha
    assert left["parent_step"]["commit"] == COMMITS[9].sha and left["parent_step"]["side"] == "good"
    summary = (out / "summary.md").read_text()
    expected = f"- culprit by bisection: {COMMITS[10].sha[:12]} (c11), ratio 1.02"
    assert expected in summary and f"against the range's good end {GOOD.sha[:12]}" in summary, summary
    assert f"its parent {COMMITS[9].sha[:12]} good (1.00" in summary
    assert (
        f"not measured for want of budget (1 A/B run of about 100 s): meddpm-bench --bisect {COMMITS[9].sha[:12]}"
        in summary
    )
    assert lines[-1] == (
        f"culprit: {COMMITS[10].sha[:12]} (c11) in opt1, by bisection (its own ratio against its parent not "
        "measured: the budget)"
    )


@pytest.mark.parametrize("outcome, last_good", [("ok", True), ("regression", False)])
def test_no_flagged_case_against_the_last_good_run_does_nothing(monkeypatch, tmp_path, outcome, last_good):
    plant(monkeypatch, tmp_path, _medians((10, 102.0)))
    out = _night(tmp_path, outcome, last_good)
    status, lines = _run(out, "--bisect-budget", "3600")
    assert status == 0 and PlantedCampaign.runs == []
    results = out / "results.json"
    nothing = f"meddpm-alarm: no case's time or counts flagged against the last good run in {results}; nothing to "
    nothing += "bisect"
    assert lines == [nothing]
    assert (out / "summary.md").read_text() == "# the night's summary\n" and not (out / "alarm.json").exists()


def test_a_missing_results_file_is_one_line(tmp_path, capsys):
    assert alarm.main([str(tmp_path), "--bisect-budget", "60"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"meddpm-alarm: error: cannot read {tmp_path / 'results.json'} (") and "\n" not in err
    assert err.endswith("give the nightly's --perf-results-dir")


def test_the_unexplained_part_divides_the_ratios_and_their_far_interval_ends():
    ends = {"ratio": 1.025, "ci_low": 1.02, "ci_high": 1.03}
    rest = alarm.unexplained(ends, {"ratio": 1.015, "ci_low": 1.01, "ci_high": 1.018})
    assert rest["ratio"] == pytest.approx(1.025 / 1.015) and rest["ci_low"] == pytest.approx(1.02 / 1.018)
    assert rest["significant"]
    assert not alarm.unexplained(ends, {"ratio": 1.024, "ci_low": 1.019, "ci_high": 1.029})["significant"]


def test_the_step_as_the_nightly_runs_it_names_the_planted_culprit_in_the_summary(tmp_path):
    # One commit after the last good one makes baseline's iterations read 150 ms instead of 100: the ends are the
    # culprit against its parent, so one A/B run of real worker processes (2+2, two rounds each) is all it takes.
    repo = make_repo(tmp_path)
    good = git(repo, "rev-parse", "HEAD")
    set_clock(repo, baseline=150.0)
    git(repo, "commit", "-q", "-am", "slower")
    bad = git(repo, "rev-parse", "HEAD")
    out = _night(repo, good=good, bad=bad, combo="baseline")
    cmd = [sys.executable, "-m", "meddpm.bench.alarm", "perf-results", "--bisect-budget=3600", "--processes=2", *FAST]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(repo), "PYTHONPATH": str(repo)}
    result = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith(f"culprit: {bad[:12]} (slower) in baseline"), result.stdout
    summary = (out / "summary.md").read_text()
    culprit = rf"- culprit: {bad[:12]} \(slower\), ratio 1\.(49|50)\d* .* against its parent {good[:12]}"
    assert re.search(culprit, summary), summary
    assert "- it explains the range" in summary, summary


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bisect-budget", "0"], "--bisect-budget must be a number of seconds above 0, not 0.0"),
        (["--bisect-budget", "60", "--max-culprits", "0"], "--max-culprits must be at least 1, got 0"),
        (["--bisect-budget", "60", "--processes", "1"], "--processes must be at least 2 (an A/B needs a spread"),
    ],
)
def test_bad_options_are_one_line_before_reading_anything(args, message, tmp_path, capsys):
    assert alarm.main([str(tmp_path), *args]) == 2
    assert capsys.readouterr().err.strip().startswith(f"meddpm-alarm: error: {message}")


def test_an_interrupted_alarm_writes_what_it_found_marked_partial(monkeypatch, tmp_path):
    plant(monkeypatch, tmp_path, _medians((10, 102.0)))
    PlantedCampaign.interrupt_at = 1  # the ends measured, the first halving under way
    out = _night(tmp_path)
    status, lines = _run(out, "--bisect-budget", "3600")
    assert status == 130, lines
    document = json.loads((out / "alarm.json").read_text())
    assert document["partial"] is True and document["cases"][0]["bisections"] == ["bisect-opt1-1.json"]
    assert json.loads((out / "bisect-opt1-1.json").read_text())["partial"] is True
    summary = (out / "summary.md").read_text()
    assert "## The alarm, bisected in this job\n\nInterrupted: what follows is what was found before." in summary
    assert "no culprit" not in summary


def test_a_gpu_night_is_bisected_on_the_current_gpu_by_its_index(monkeypatch, tmp_path):
    """The walk's measuring workers need a CUDA device with its index: "cuda" alone failed every one of them."""
    import torch

    out = _night(tmp_path)
    results = json.loads((out / "results.json").read_text())
    (out / "results.json").write_text(json.dumps({**results, "arch": "h100"}))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    devices = []

    def bisect_case(self, case, device, say):
        devices.append(device)
        found = alarm.CaseAlarm(case, [], [], [])
        self.cases.append(found)
        return found

    monkeypatch.setattr(alarm.Alarm, "bisect_case", bisect_case)
    status, lines = _run(out, "--bisect-budget", "3600")
    assert status == 0, lines
    assert devices == [torch.device("cuda", 0)]


def test_a_flagged_case_that_could_not_be_bisected_fails_the_step(monkeypatch, tmp_path):
    def failing(*args, **kwargs):
        raise alarm.UserError("measuring process 1/6, of c11, failed: ValueError: planted")

    monkeypatch.setattr(alarm.bisect, "run_bisect", failing)
    out = _night(tmp_path)
    status, lines = _run(out, "--bisect-budget", "3600")
    assert status == 1, lines
    assert lines[-1] == "meddpm-alarm: 1 flagged case(s) could not be bisected (their notes are in alarm.json)"
    (case,) = json.loads((out / "alarm.json").read_text())["cases"]
    assert case["notes"] and case["culprits"] == []


def _with_night_processes(out, candidate_ms, reference_ms):
    """The night's time comparison with its processes' medians kept, and what moved, as the suite writes them."""
    path = out / "results.json"
    results = json.loads(path.read_text())
    (case,) = results["cases"]
    case["comparisons"][0].update(candidate_ms=candidate_ms, reference_ms=reference_ms)
    case["explain"] = [{"level": "module", "name": "Conv3d", "count_a": 3, "count_b": 2}]
    path.write_text(json.dumps(results))


def test_the_nights_own_ab_is_the_bisections_ends_and_is_not_measured_again(monkeypatch, tmp_path):
    # The budget of the test above: without the ends' run, the four halvings and c11 against its parent fit it.
    plant(monkeypatch, tmp_path, _medians((10, 102.0)))
    PlantedCampaign.run_seconds = 100.0
    out = _night(tmp_path)
    _with_night_processes(out, [102.0, 102.02, 101.98], [100.0, 100.02, 99.98])
    status, lines = _run(out, "--bisect-budget", "550")
    assert status == 0 and PlantedCampaign.runs == [3] * 5, lines
    (case,) = json.loads((out / "alarm.json").read_text())["cases"]
    assert [c["commit"] for c in case["culprits"]] == [COMMITS[10].sha] and case["left"] is None
    section = json.loads((out / "bisect-opt1-1.json").read_text())["bisect"]
    ends = section["steps"][0]
    assert ends["measured_by"] == "the night's A/B" and ends["seconds"] == 0 and ends["processes"] == [3, 3]
    assert section["run_seconds"] == 100.0  # a round of the first halving, the walk's first run of its own
    assert ends["explain"] == [{"level": "module", "name": "Conv3d", "count_a": 3, "count_b": 2}]
    step = next(line for line in lines if line.startswith("step 1: "))
    assert step.endswith("(3+3 processes, measured by the night's A/B); 5 A/B runs at most"), step
    assert lines[-1] == f"culprit: {COMMITS[10].sha[:12]} (c11) in opt1"


def test_a_night_ab_the_bisection_cannot_confirm_is_measured_again(monkeypatch, tmp_path):
    # The night's processes read no slowdown at this bisection's alpha: its ends are measured anew, and found slower.
    plant(monkeypatch, tmp_path, _medians((10, 102.0)))
    out = _night(tmp_path)
    _with_night_processes(out, [100.0, 100.02, 99.98], [100.0, 100.02, 99.98])
    status, lines = _run(out, "--bisect-budget", "3600")
    assert status == 0 and len(PlantedCampaign.runs) == 6, lines
    ends = json.loads((out / "bisect-opt1-1.json").read_text())["bisect"]["steps"][0]
    assert "measured_by" not in ends and ends["processes"] == [3, 3]


def test_the_nights_counts_go_with_its_ends_and_a_culprit_placed_by_counts_is_named_by_bisection(monkeypatch, tmp_path):
    # The slowdown at c11 also moved the counts. The night's results keep side A's: the good end gets one counts
    # process, the four halvings one each (100 planted seconds apiece), and c11 against its parent no longer fits.
    before, after = {"launches": 1099, "bytes_allocated": 512}, {"launches": 1105, "bytes_allocated": 268_435_968}
    plant(monkeypatch, tmp_path, _medians((10, 102.0)))
    PlantedCampaign.counts = {GOOD.sha: before, **{c.sha: after if i >= 10 else before for i, c in enumerate(COMMITS)}}
    PlantedCampaign.run_seconds = 100.0
    out = _night(tmp_path)
    _with_night_processes(out, [102.0, 102.02, 101.98], [100.0, 100.02, 99.98])
    results = json.loads((out / "results.json").read_text())
    results["cases"][0]["counts"] = after
    (out / "results.json").write_text(json.dumps(results))
    assert alarm.flagged_cases(results)[0].ends.candidate_counts == (after,)
    status, lines = _run(out, "--bisect-budget", "550")
    assert status == 0 and PlantedCampaign.runs == [1] * 5, lines
    summary = (out / "summary.md").read_text()
    assert (
        f"- culprit by bisection: {COMMITS[10].sha[:12]} (c11), placed by its counts, as the range's bad end's, its "
        f"parent {COMMITS[9].sha[:12]} good (placed by its counts, as the range's good end's)"
    ) in summary, summary
    assert "(1 A/B run of about 600 s)" in summary  # 3+3 processes as long as a counts process


def _counts_flagged_night(tmp_path, after):
    """A night whose time did not move but whose counts did (the bad end's as its results keep them): red for them."""
    out = _night(tmp_path, outcome="unchanged")
    _with_night_processes(out, [100.0, 100.02, 99.98], [100.0, 100.02, 99.98])
    results = json.loads((out / "results.json").read_text())
    (case,) = results["cases"]
    case["outcome"], case["counts"] = "regression", after
    case["counts_verdicts"] = [{"metric": "launches", "outcome": "regression", "baseline": 1099, "now": 1105}]
    (out / "results.json").write_text(json.dumps(results))
    return out


def _counts_at_c11(monkeypatch, tmp_path, before, after, run_seconds=0.0):
    """No commit slower; the counts move from ``before`` to ``after`` at c11; a night red for them alone."""
    plant(monkeypatch, tmp_path, _medians())
    PlantedCampaign.counts = {GOOD.sha: before, **{c.sha: after if i >= 10 else before for i, c in enumerate(COMMITS)}}
    PlantedCampaign.run_seconds = run_seconds
    return _counts_flagged_night(tmp_path, after)


def test_a_night_red_for_its_counts_alone_is_bisected_by_them_and_the_culprit_timed_against_its_parent(
    monkeypatch, tmp_path
):
    # No slowdown anywhere: the counts move at c11. The good end gets one counts process, each of the four halvings
    # one, and c11 is then timed against c10 (3+3), which reads no slowdown; no remainder is looked for.
    before, after = {"launches": 1099, "bytes_allocated": 512}, {"launches": 1105, "bytes_allocated": 268_435_968}
    out = _counts_at_c11(monkeypatch, tmp_path, before, after)
    (flagged,) = alarm.flagged_cases(json.loads((out / "results.json").read_text()))
    assert flagged.by_counts
    status, lines = _run(out, "--bisect-budget", "3600")
    assert status == 0 and PlantedCampaign.runs == [1] * 5 + [3], lines
    assert lines[-1] == f"culprit: {COMMITS[10].sha[:12]} (c11) in opt1, where its counts moved"
    summary = (out / "summary.md").read_text()
    assert (
        f"- culprit: {COMMITS[10].sha[:12]} (c11), where the counts moved against its parent {COMMITS[9].sha[:12]}: "
        "launches 1,099 -> 1,105, bytes allocated 512 -> 268,435,968; ratio 1.00"
    ) in summary, summary
    assert "flagged for its counts" in summary and "remainder" not in summary
    (case,) = json.loads((out / "alarm.json").read_text())["cases"]
    (culprit,) = case["culprits"]
    assert culprit["by"] == "counts" and culprit["commit"] == COMMITS[10].sha and culprit["parent"] == COMMITS[9].sha
    assert culprit["counts"] == {"commit": [after], "against": [before]} and culprit["processes"] == [3, 3]
    assert "unexplained" not in culprit and case["left"] is None


def test_a_counts_culprit_is_named_without_its_own_time_where_the_budget_has_no_room(monkeypatch, tmp_path):
    # 100 planted seconds a process run: the five counts processes fit 550 s; an A/B run of 3+3 (600 s) would not.
    before, after = {"launches": 1099}, {"launches": 1105}
    out = _counts_at_c11(monkeypatch, tmp_path, before, after, run_seconds=100.0)
    status, lines = _run(out, "--bisect-budget", "550")
    assert status == 0 and PlantedCampaign.runs == [1] * 5, lines
    culprit = f"culprit: {COMMITS[10].sha[:9]} (c11), by its counts against its parent"
    assert any(line.startswith(culprit) for line in lines), lines
    assert "its own time against its parent not measured: no budget left for an A/B run of about 600 s" in lines
    summary = (out / "summary.md").read_text()
    assert "launches 1,099 -> 1,105; its own time against it not measured" in summary, summary


def test_a_case_red_for_its_peak_memory_alone_is_not_a_bisection_of_time_or_counts(tmp_path):
    out = _night(tmp_path, outcome="unchanged")
    results = json.loads((out / "results.json").read_text())
    results["cases"][0]["outcome"] = "regression"
    results["cases"][0]["memory_verdicts"] = [{"metric": "peak memory", "outcome": "regression"}]
    results["cases"][0]["counts_verdicts"] = [{"metric": "counts", "outcome": "unchanged"}]
    assert alarm.flagged_cases(results) == []


def test_a_budget_that_stops_a_counts_walk_gives_the_command_that_follows_them(monkeypatch, tmp_path):
    # 100 planted seconds a process: the good end's counts and two halvings fit 350 s, a third not.
    before, after = {"launches": 1099}, {"launches": 1105}
    out = _counts_at_c11(monkeypatch, tmp_path, before, after, run_seconds=100.0)
    status, lines = _run(out, "--bisect-budget", "350")
    assert status == 0 and PlantedCampaign.runs == [1] * 3, lines
    summary = (out / "summary.md").read_text()
    assert (
        "(4 commit(s); 2 counts processes and 2 A/B runs of about 600 s): meddpm-bench --bisect "
        f"{COMMITS[7].sha[:12]}..{COMMITS[11].sha[:12]} --combos opt1 --preset tiny --batch-size 1 --follow-counts"
    ) in summary, summary


def test_a_case_red_for_both_its_time_and_its_counts_is_bisected_by_its_time():
    results = {
        "last_good": {"commit": GOOD.sha},
        "environment": {"commit": COMMITS[-1].sha},
        "cases": [
            {
                "combo": "fast",
                "preset": "paper",
                "batch_size": 1,
                "comparisons": [{"metric": "time", "outcome": "regression"}],
                "counts_verdicts": [{"metric": "launches", "outcome": "regression"}],
            }
        ],
    }
    (flagged,) = alarm.flagged_cases(results)
    assert not flagged.by_counts and flagged.ends is None


def test_a_counts_culprit_whose_timing_is_interrupted_still_reaches_the_summary(monkeypatch, tmp_path):
    out = _counts_at_c11(monkeypatch, tmp_path, {"launches": 1099}, {"launches": 1105})
    PlantedCampaign.interrupt_at = 5  # the good end's counts and four halvings ran; the culprit's own A/B is stopped
    status, lines = _run(out, "--bisect-budget", "3600")
    assert status == 130, lines
    document = json.loads((out / "alarm.json").read_text())
    assert document["partial"] is True
    (culprit,) = document["cases"][0]["culprits"]
    assert culprit["by"] == "counts" and culprit["commit"] == COMMITS[10].sha and "ratio" not in culprit
    summary = (out / "summary.md").read_text()
    assert "Interrupted: what follows is what was found before." in summary
    assert f"- culprit: {COMMITS[10].sha[:12]} (c11), where the counts moved" in summary, summary
