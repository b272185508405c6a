"""Baseline files: round trip, reviewable layout, atomic saving, one-line errors for bad files."""

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest

from meddpm.suite.baseline import (
    SCHEMA,
    BaselineError,
    BaselineFile,
    CaseBaseline,
    CaseKey,
    Expectation,
    NcuBaseline,
    Tolerances,
    load_baseline,
    save_baseline,
)

REPO_BASELINES = Path(__file__).resolve().parent.parent / "baselines"


def case(combo: str = "opt1", median: float = 230.0) -> CaseBaseline:
    return CaseBaseline(
        preset="paper",
        combo=combo,
        batch_size=1,
        provenance="measured",
        samples_ms=[median, median + 1, median - 1],
        median_ms=median,
        iqr_ms=1.0,
        min_ms=median - 1,
        peak_allocated_bytes=20_000_000_000,
        peak_reserved_bytes=21_000_000_000,
        energy_j_per_iter=120.0,
        energy_samples_j=[119.0, 120.0, 121.0],
        tflops=72.0,
        environment={"gpu_name": "NVIDIA H200", "commit": "abc"},
    )


def sample_file() -> BaselineFile:
    e = Expectation("paper", "time", "opt1", "baseline", "measured", "measured 0.19", max=0.25)
    return BaselineFile(arch="h200", expectations=(e,), cases={"paper/opt1/b1": case()}, description="test")


def test_round_trip(tmp_path):
    path = tmp_path / "h200.json"
    save_baseline(path, sample_file())
    loaded = load_baseline(path, "h200")
    assert loaded == sample_file()
    assert loaded.case(CaseKey("paper", "opt1", 1)).samples_ms == [230.0, 231.0, 229.0]
    assert loaded.case(CaseKey("paper", "opt2", 1)) is None
    assert (
        loaded.expectations_for("paper", "time", "opt1", "baseline")[0].describe()
        == "time opt1/baseline <= 0.25 (measured)"
    )
    assert loaded.expectations_for("paper", "time", "opt2", "baseline") == []


def test_samples_stay_on_one_line_for_review(tmp_path):
    path = tmp_path / "h200.json"
    save_baseline(path, sample_file())
    text = path.read_text()
    assert '"samples_ms": [230.0, 231.0, 229.0],' in text
    assert json.loads(text)["schema"] == SCHEMA


def test_saving_merges_and_keeps_hand_set_tolerances():
    own = Tolerances(time_rel=0.10)
    stored = replace(sample_file(), cases={"paper/opt1/b1": replace(case(), tolerances=own)})
    merged = stored.with_measurements([case(median=240.0), case("opt2", 1370.0)], {"paper/b1": {}})
    assert merged.cases["paper/opt1/b1"].median_ms == 240.0 and merged.cases["paper/opt1/b1"].tolerances == own
    assert list(merged.cases) == ["paper/opt1/b1", "paper/opt2/b1"]
    assert merged.tolerances_for(CaseKey("paper", "opt2", 1)) == Tolerances()
    assert merged.expectations == stored.expectations


def test_a_crash_while_saving_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "h200.json"
    save_baseline(path, sample_file())
    before = path.read_bytes()

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("power cut before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        save_baseline(path, replace(sample_file(), description="new"))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["h200.json"]  # no temporary left behind


def ncu_entry(combo: str = "opt1", cycles: float = 9.2e8) -> NcuBaseline:
    return NcuBaseline(
        preset="paper",
        combo=combo,
        batch_size=1,
        provenance="measured",
        totals={"sm_cycles": cycles, "instructions": 6.1e10, "tensor_pipe_pct": 20.5},
        ncu_version="2025.3.1.0",
        replay="range",
        clock_control="none",
        groups=["core", "stalls"],
        environment={"gpu_name": "NVIDIA H100 80GB HBM3"},
    )


def test_ncu_totals_round_trip_and_merge(tmp_path):
    path = tmp_path / "h200.json"
    first = sample_file().with_ncu([ncu_entry("baseline", 2.5e9), ncu_entry("opt1")])
    save_baseline(path, first)
    assert load_baseline(path, "h200") == first
    again = first.with_ncu([ncu_entry("opt1", 8.0e8)])
    assert again.ncu["paper/baseline/b1"].totals["sm_cycles"] == 2.5e9  # kept
    assert again.ncu["paper/opt1/b1"].totals["sm_cycles"] == 8.0e8  # replaced
    assert again.cases == first.cases


def test_missing_file_is_no_baseline(tmp_path):
    assert load_baseline(tmp_path / "a100.json", "a100") is None


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"schema": "meddpm-baseline/1", "arch": ', "is corrupt (not JSON"),
        ('{"schema": "meddpm-baseline/0", "arch": "h200"}', "has schema 'meddpm-baseline/0' but this suite reads"),
        ("[1, 2]", "has schema 'list'"),
        ('{"schema": "meddpm-baseline/1"}', "is malformed (missing field 'arch')"),
        ('{"schema": "meddpm-baseline/1", "arch": "a100"}', "is for arch 'a100', not 'h200'"),
        (
            '{"schema": "meddpm-baseline/1", "arch": "h200", "expectations": [{"preset": "paper", "metric": "time", '
            '"combo": "opt1", "reference": "baseline", "provenance": "guess", "source": "", "max": 1}]}',
            "has provenance 'guess', expected one of measured, paper",
        ),
        ('{"schema": "meddpm-baseline/1", "arch": "h200", "tolerances": {"time": 1}}', "unknown tolerance 'time'"),
        ('{"schema": "meddpm-baseline/1", "arch": "h200", "ncu": [1]}', "is malformed"),
        (
            '{"schema": "meddpm-baseline/1", "arch": "h200", "ncu": {"paper/opt1/b1": {"preset": "paper"}}}',
            "is malformed",
        ),
    ],
)
def test_bad_files_give_one_line_naming_file_and_problem(tmp_path, content, message):
    path = tmp_path / "h200.json"
    path.write_text(content)
    with pytest.raises(BaselineError) as err:
        load_baseline(path, "h200")
    text = str(err.value)
    assert message in text and str(path) in text and "\n" not in text


@pytest.mark.parametrize("arch", ["v100", "a100", "h100", "h200"])
def test_committed_baselines_load_and_say_where_numbers_come_from(arch):
    stored = load_baseline(REPO_BASELINES / f"{arch}.json", arch)
    assert stored is not None and stored.expectations
    assert all(e.source for e in stored.expectations)
    gpu = {"h100": "NVIDIA H100 80GB HBM3", "h200": "NVIDIA H200"}.get(arch)
    if gpu is None:  # no such GPU was available: the paper's claims only, marked as such
        assert not stored.cases and not stored.ncu and {e.provenance for e in stored.expectations} == {"paper"}
        return
    measured = [*stored.cases.values(), *stored.ncu.values()]
    assert measured and {m.provenance for m in measured} == {"measured"}
    assert all(m.environment["gpu_name"] == gpu for m in measured)


@pytest.mark.parametrize("arch", ["h100", "h200"])
def test_measured_ncu_expectations_hold_on_the_stored_totals(arch):
    # An expectation that "follows the measurement" must at least agree with the measurement stored beside it.
    stored = load_baseline(REPO_BASELINES / f"{arch}.json", arch)
    expectations = [e for e in stored.expectations if e.metric.startswith("ncu:") and e.provenance == "measured"]
    assert expectations
    for e in expectations:
        key = e.metric.removeprefix("ncu:")
        combo, reference = (stored.ncu[f"{e.preset}/{name}/b1"].totals[key] for name in (e.combo, e.reference))
        ratio = combo / reference if reference else math.inf
        assert e.holds(ratio), f"{arch}: {e.describe()} but the stored totals give {ratio:.3f}"
