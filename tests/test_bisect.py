"""Bisection: the decisions on injected comparisons, the walk on planted process medians, and one real walk.

The walk's tests replace the process campaign and the revisions with fakes whose process medians
are planted per commit: the culprit is known, and no timing of this machine enters. One test
walks a real git repository on the CPU, its slowdown planted in the workload's clock.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass, field

import pytest
from planted_repo import git, make_repo, set_clock

from meddpm.bench import bisect
from meddpm.errors import UserError
from meddpm.judge.bisection import Commit, Search, decided_side, side_of, slowdown_between_ends
from meddpm.measure.campaign.protocol import Source
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.measure.statistics.compare import compare_processes
from meddpm.model.config import ModelConfig

COMMITS = [Commit(hashlib.sha1(f"c{i}".encode()).hexdigest(), f"c{i}") for i in range(1, 17)]
GOOD = Commit(hashlib.sha1(b"c0").hexdigest(), "c0")


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


@dataclass
class _Runs:
    process_medians_ms: list[float] = field(default_factory=list)
    profile_rows: list = field(default_factory=list)
    run_counts: list = field(default_factory=list)


class PlantedCampaign:
    """A process campaign whose processes read the time planted for each commit (slower from the culprit on)."""

    medians: dict[str, float] = {}
    runs: list[int] = []

    def __init__(self, config, combos, device, *, batch_size, settings, processes, sources):
        self.combo, self.processes, self.sources = combos[0], processes, sources
        self._measured = {s.label: _Runs() for s in sources}

    def run(self, on_progress=None):
        PlantedCampaign.runs.append(self.processes)
        for i in range(self.processes):
            for source in self.sources:
                jitter = 1 + 0.0002 * ((i * 7 + len(self._measured[source.label].process_medians_ms)) % 5 - 2)
                self._measured[source.label].process_medians_ms.append(self.medians[source.commit] * jitter)

    def measurements(self, source):
        return {self.combo: self._measured[source.label]}


@pytest.fixture
def planted(monkeypatch, tmp_path):
    """The walk over COMMITS with planted medians: 100 ms up to c10, 102 ms from c11 (the culprit) on."""
    line = (GOOD, COMMITS)
    monkeypatch.setattr(bisect, "checkout_root", lambda: tmp_path)
    monkeypatch.setattr(bisect, "first_parent_line", lambda good, bad, root: line)

    @contextlib.contextmanager
    def revision(sha, root, option):
        yield Source(sha[:9], tmp_path, sha)

    monkeypatch.setattr(bisect, "revision", revision)
    monkeypatch.setattr(bisect, "ProcessCampaign", PlantedCampaign)
    monkeypatch.setattr(bisect, "environment", lambda device: {"device": "planted"})
    PlantedCampaign.medians = {GOOD.sha: 100.0, **{c.sha: 100.0 if i < 10 else 102.0 for i, c in enumerate(COMMITS)}}
    PlantedCampaign.runs = []
    return tmp_path


def _job(processes: int = 3) -> bisect.Bisection:
    return bisect.Bisection(ModelConfig.preset("tiny"), "opt1", "cpu", 1, CampaignSettings(), processes)


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


def test_an_ambiguous_step_gets_more_processes_before_it_decides(planted):
    # c8 (the first halving) reads 101 ms, right on the cut: its interval straddles it at first.
    PlantedCampaign.medians[COMMITS[7].sha] = 101.0
    lines: list[str] = []
    bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lines.append)
    assert any("straddles the cut" in line and "3+3 more processes" in line for line in lines), lines
    step = json.loads((planted / "b.json").read_text())["bisect"]["steps"][1]
    assert step["extended"] == bisect.EXTENSIONS and step["processes"] == [9, 9]


def test_a_range_whose_bad_end_is_not_slower_is_refused_after_measuring_the_ends(planted):
    PlantedCampaign.medians = dict.fromkeys(PlantedCampaign.medians, 100.0)
    with pytest.raises(UserError, match=r"is not slower than .* for opt1 .*nothing to bisect"):
        bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lambda line: None)
    assert PlantedCampaign.runs == [3]  # the ends only


def test_an_interrupted_walk_writes_its_steps_marked_partial(planted, monkeypatch):
    real_run = PlantedCampaign.run

    def interrupted(self, on_progress=None):
        if len(PlantedCampaign.runs) == 1:  # the ends measured, the first halving under way
            raise KeyboardInterrupt
        real_run(self, on_progress)

    monkeypatch.setattr(PlantedCampaign, "run", interrupted)
    assert bisect.run_bisect(_job(), "c0..c16", planted / "b.json", lambda line: None) == 130
    document = json.loads((planted / "b.json").read_text())
    assert document["partial"] is True and len(document["bisect"]["steps"]) == 1


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
