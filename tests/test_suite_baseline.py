"""Baseline files: round trip, reviewable layout, atomic saving, one-line errors for bad files."""

import json
import multiprocessing
import os
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
from filelock import FileLock

from meddpm.judge.baseline import (
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
    update_baseline,
)
from meddpm.judge.verdict import judge_figures
from meddpm.measure.campaign.interleaved import ComboResult
from meddpm.measure.energy.counter import BlockEnergy, EnergyEstimate, WindowEnergy
from meddpm.suite.cases import CaseRecord, PerfCase
from meddpm.suite.session import SuiteRun

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


def _save_case(path: Path, combo: str, entered, release) -> None:
    """One run's save of ``combo``; with ``release`` it pauses between reading and writing."""

    def change(current: BaselineFile) -> BaselineFile:
        if release is not None:
            entered.set()  # read, not yet written: the window in which another run used to read too
            release.wait(60)
        return current.with_measurements([case(combo)], {})

    if release is None:
        entered.set()  # about to save
    update_baseline(path, "h200", change)


def test_two_runs_saving_at_once_both_keep_their_cases(tmp_path):
    path = tmp_path / "h200.json"
    save_baseline(path, sample_file())
    ctx = multiprocessing.get_context("spawn")
    first_read, first_release, second_started = ctx.Event(), ctx.Event(), ctx.Event()
    first = ctx.Process(target=_save_case, args=(path, "opt2", first_read, first_release))
    second = ctx.Process(target=_save_case, args=(path, "opt12", second_started, None))
    first.start()
    assert first_read.wait(120)
    second.start()
    assert second_started.wait(120)
    # Without the lock the second run now reads the file the first has not written yet. A slow
    # machine can only make the second run later, which the unlocked code survived too: the test
    # never fails spuriously, and on any usual machine it catches the lost update.
    time.sleep(0.5)
    first_release.set()
    for p in (first, second):
        p.join(120)
        assert p.exitcode == 0
    assert set(load_baseline(path, "h200").cases) == {"paper/opt1/b1", "paper/opt2/b1", "paper/opt12/b1"}


def test_a_baseline_locked_too_long_is_one_line(tmp_path):
    path = tmp_path / "h200.json"
    with FileLock(str(path) + ".lock"):  # another run holds it
        with pytest.raises(BaselineError, match=r"stayed locked by another run for 0 s; wait for it") as err:
            update_baseline(path, "h200", lambda current: current, lock_timeout_s=0.01)
    assert "\n" not in str(err.value)


def test_the_suite_merges_into_the_file_as_it_is_when_saving(tmp_path, suite_options):
    # Read early (to judge), written late (after minutes of measuring): a save must not drop
    # what another run stored in between.
    path = tmp_path / "cpu.json"
    save_baseline(path, BaselineFile(arch="cpu", cases={"tiny/opt2/b1": replace(case("opt2"), preset="tiny")}))
    run = SuiteRun(suite_options(save_baseline=True), None, lambda line: None)
    assert list(run.judging.baselines.load("cpu").cases) == ["tiny/opt2/b1"]
    other = replace(case("amp_bf16"), preset="tiny")
    save_baseline(path, load_baseline(path, "cpu").with_measurements([other], {}))
    result = ComboResult("tiny", "baseline", 1, (16, 16, 16), "fp32", [10.0, 11.0, 10.5], [], 0.0, 1, 1.0)
    run.measuring.records["cpu-tiny-baseline-b1"] = CaseRecord(PerfCase("cpu", "tiny", "baseline", 1), result)
    assert run.save(failed_tests=0).startswith("baseline saved: 1 case(s)")
    assert set(load_baseline(path, "cpu").cases) == {"tiny/opt2/b1", "tiny/amp_bf16/b1", "tiny/baseline/b1"}


def test_an_incomplete_session_is_never_saved_even_when_forced(tmp_path, suite_options):
    run = SuiteRun(suite_options(save_baseline=True, force_save=True), None, lambda line: None)
    result = ComboResult("tiny", "baseline", 1, (16, 16, 16), "fp32", [10.0, 11.0, 10.5], [], 0.0, 1, 1.0)
    run.measuring.records["cpu-tiny-baseline-b1"] = CaseRecord(PerfCase("cpu", "tiny", "baseline", 1), result)
    message = run.save(failed_tests=0, incomplete=["the session was interrupted"])
    assert message.startswith("baseline not saved: the session was interrupted")
    assert not (tmp_path / "cpu.json").exists()


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
        ('{"schema": "meddpm-baseline/1", "arch": ', ": not JSON (Expecting value at line 1 column"),
        ('{"schema": "meddpm-baseline/0", "arch": "h200"}', "a meddpm-baseline/0 file, which this meddpm-perf cannot"),
        ("[1, 2]", "not a baseline file (the JSON is not an object)"),
        ('{"schema": "meddpm-baseline/1"}', "has no 'arch' in the file; add it"),
        ('{"schema": "meddpm-baseline/1", "arch": "a100"}', "is for arch 'a100', not 'h200'"),
        (
            '{"schema": "meddpm-baseline/1", "arch": "h200", "expectations": [{"preset": "paper", "metric": "time", '
            '"combo": "opt1", "reference": "baseline", "provenance": "guess", "source": "", "max": 1}]}',
            'has expectations[0].provenance = "guess", which must be one of measured, paper, target',
        ),
        (
            '{"schema": "meddpm-baseline/1", "arch": "h200", "tolerances": {"time": 1}}',
            "has an unknown key 'time' in tolerances (did you mean 'time_rel'?)",
        ),
        ('{"schema": "meddpm-baseline/1", "arch": "h200", "ncu": [1]}', "has ncu = [1], which must be an object"),
        (
            '{"schema": "meddpm-baseline/1", "arch": "h200", "ncu": {"paper/opt1/b1": {"preset": "paper"}}}',
            "has no 'combo' in ncu['paper/opt1/b1']",
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
        combo = stored.ncu[f"{e.preset}/{e.combo}/b1"].totals
        reference = None if e.reference is None else stored.ncu[f"{e.preset}/{e.reference}/b1"].totals
        verdict = judge_figures(e, combo[e.metric.removeprefix("ncu:")], reference and reference[e.metric[4:]])
        assert verdict.outcome == "holds", f"{arch}: {verdict.message()}"


def energy_block(j_per_window: float = 300.0, quantisation: float = 0.008) -> BlockEnergy:
    window = WindowEnergy(iterations=10, gpu_s=0.5, counter_j=j_per_window, interpolated_j=None, integrated_j=None)
    windows = (window, replace(window, counter_j=j_per_window * 1.01))
    return BlockEnergy(windows=windows, period_s=0.1, quantisation=quantisation, trace=())


def test_energy_is_saved_with_its_method_bound_and_replicates(tmp_path, suite_options):
    run = SuiteRun(suite_options(save_baseline=True), None, lambda line: None)
    result = ComboResult("tiny", "baseline", 1, (16, 16, 16), "fp32", [10.0, 11.0, 10.5], [], 0.0, 1, 1.0)
    result.energy_blocks.append(energy_block())
    run.measuring.records["cpu-tiny-baseline-b1"] = CaseRecord(PerfCase("cpu", "tiny", "baseline", 1), result)
    assert run.save(failed_tests=0).startswith("baseline saved: 1 case(s)")
    stored = load_baseline(tmp_path / "cpu.json", "cpu").case(CaseKey("tiny", "baseline", 1))
    assert stored.energy_method == "counter-window/1" and stored.energy_samples_j == []
    assert stored.energy == EnergyEstimate(30.15, 0.008, (30.0, 30.3))
    assert stored.environment["energy_counter_period_ms"] == 100.0


def test_a_case_saved_before_energy_windows_has_no_usable_energy(tmp_path):
    # The committed files' cases: per-iteration samples (0 for short iterations) and no method.
    legacy = replace(case("fast"), energy_j_per_iter=30.21, energy_samples_j=[0.0, 63.359, 0.0, 58.035])
    path = tmp_path / "h200.json"
    save_baseline(path, BaselineFile(arch="h200", cases={"paper/fast/b1": legacy}))
    loaded = load_baseline(path, "h200").case(CaseKey("paper", "fast", 1))
    assert loaded.energy_method == "" and loaded.energy is None and loaded.energy_j_per_iter == 30.21


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(energy_method="guess/0"), "energy_method = 'guess/0', which must be counter-window/1"),
        (dict(energy_quantisation=1.5), "energy_quantisation = 1.5, which must be a fraction from 0 to 1"),
        (dict(energy_j_per_iter=0.0), "energy_j_per_iter = 0.0, which must be above 0 J"),
        (dict(energy_replicates_j=[30.0, float("nan")]), "energy_replicates_j[1] = nan, which must be a finite number"),
    ],
)
def test_stored_energy_no_verdict_can_use_is_refused(tmp_path, fields, message):
    good = dict(energy_method="counter-window/1", energy_quantisation=0.008, energy_replicates_j=[30.0, 30.3])
    path = tmp_path / "h200.json"
    save_baseline(path, BaselineFile(arch="h200", cases={"paper/opt1/b1": replace(case(), **{**good, **fields})}))
    with pytest.raises(BaselineError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_baseline(path, "h200")


# --- every field checked before measuring ----------------------------------------------------
def document(tmp_path: Path) -> tuple[Path, dict]:
    """A valid file (a case, an ncu entry, the saving run's ratios) as JSON, to be spoilt by a test."""
    stored = sample_file().with_measurements([], {"paper/b1": {"opt1/baseline": {"median": 0.19, "q1": 0.18}}})
    path = tmp_path / "h200.json"
    save_baseline(path, stored.with_ncu([ncu_entry("baseline", 2.5e9), ncu_entry("opt1")]))
    return path, json.loads(path.read_text())


def refused(path: Path, data: dict) -> str:
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError) as err:
        load_baseline(path, "h200")
    text = str(err.value)
    assert text.startswith(f"baseline file {path} has ") and "\n" not in text
    return text


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda d: d.update(ratios="oops"), 'ratios = "oops", which must be an object'),
        (lambda d: d["ratios"].update({"paper/b1": [0.19]}), "ratios['paper/b1'] = [0.19], which must be an object"),
        (
            lambda d: d["ratios"]["paper/b1"]["opt1/baseline"].update(median="0.19"),
            "ratios['paper/b1']['opt1/baseline'].median = \"0.19\", which must be a finite number",
        ),
        (
            lambda d: d["ratios"]["paper/b1"]["opt1/baseline"].update(median=-1.0),
            "ratios['paper/b1']['opt1/baseline'].median = -1.0, which must be a finite ratio above 0",
        ),
    ],
)
def test_malformed_ratios_are_refused_when_loading_not_when_saving(tmp_path, spoil, message):
    # Before, a bad "ratios" passed the start-up check and the save crashed after measuring.
    path, data = document(tmp_path)
    spoil(data)
    assert message in refused(path, data)


@pytest.mark.parametrize(
    "spoil, key, where, nearest",
    [
        (lambda d: d.update(expectation=[]), "expectation", "the file", "expectations"),
        (lambda d: d["cases"]["paper/opt1/b1"].update(tolerance={"time_rel": 0.5}), "tolerance", "cases", "tolerances"),
        (lambda d: d["tolerances"].update(time_rell=0.1), "time_rell", "tolerances", "time_rel"),
        (lambda d: d["expectations"][0].update(maximum=0.3), "maximum", "expectations[0]", "max"),
        (
            lambda d: d["cases"]["paper/opt1/b1"]["noise"].update(between_runs=0.01),
            "between_runs",
            "noise",
            "between_run_rel",
        ),
        (lambda d: d["ncu"]["paper/opt1/b1"].update(total={}), "total", "ncu['paper/opt1/b1']", "totals"),
        (lambda d: d["ratios"]["paper/b1"]["opt1/baseline"].update(medain=0.2), "medain", "ratios", "median"),
    ],
)
def test_an_unknown_key_at_any_level_is_refused_naming_the_nearest_known_one(tmp_path, spoil, key, where, nearest):
    path, data = document(tmp_path)
    spoil(data)
    text = refused(path, data)
    assert f"an unknown key {key!r} in " in text and where in text and f"(did you mean {nearest!r}?)" in text
    assert text.endswith("correct or remove it: it would be ignored")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("median_ms", True, "median_ms = true, which must be a finite number (not true/false"),
        ("batch_size", 1.5, "batch_size = 1.5, which must be a whole number"),
        ("batch_size", True, "batch_size = true, which must be a whole number"),
        ("tflops", float("nan"), "tflops = nan, which must be a finite number"),
        ("tflops", float("inf"), "tflops = inf, which must be a finite number"),
        ("samples_ms", [230.0, "231"], 'samples_ms[1] = "231", which must be a finite number'),
        ("peak_allocated_bytes", 2.0e10, "peak_allocated_bytes = 20000000000.0, which must be a whole number"),
        ("environment", "H200", 'environment = "H200", which must be an object'),
        ("median_ms", 250.0, "median_ms = 250.0, which must be the median of its samples_ms (230)"),
    ],
)
def test_stored_figures_of_the_wrong_type_or_contradicting_their_samples_are_refused(tmp_path, field, value, message):
    path, data = document(tmp_path)
    data["cases"]["paper/opt1/b1"][field] = value
    text = refused(path, data)
    assert f"cases['paper/opt1/b1'].{message}" in text


def test_a_median_that_differs_from_its_samples_by_rounding_only_is_kept(tmp_path):
    path, data = document(tmp_path)
    data["cases"]["paper/opt1/b1"].update(samples_ms=[46.949, 46.95, 46.948, 46.951], median_ms=46.949)
    path.write_text(json.dumps(data))
    assert load_baseline(path, "h200").cases["paper/opt1/b1"].median_ms == 46.949  # samples' median 46.9495


@pytest.mark.parametrize("old", ["meddpm-baseline/1", "meddpm-baseline/2"])
def test_older_schemas_are_read_and_written_back_as_the_current_one(tmp_path, old):
    path, data = document(tmp_path)
    if old == "meddpm-baseline/1":  # version 1 had no process medians, noise or world size
        for c in data["cases"].values():
            for name in ("process_medians_ms", "noise", "world_size"):
                del c[name]
    data["schema"] = old
    path.write_text(json.dumps(data))
    loaded = load_baseline(path, "h200")
    assert loaded.expectations == sample_file().expectations
    save_baseline(path, loaded)
    assert json.loads(path.read_text())["schema"] == SCHEMA == "meddpm-baseline/5"
    # An absolute bound means nothing to an older reader: in an older file it is refused, with the fix.
    data["expectations"][0]["reference"] = None
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError) as err:
        load_baseline(path, "h200")
    assert str(err.value) == (
        f"baseline file {path}: a malformed {old} file (expectations[0].reference = null (an absolute bound), "
        f'which meddpm-baseline/3 and later read); set "schema" to "{SCHEMA}"'
    )


def test_an_absolute_expectation_round_trips_and_describes_itself(tmp_path):
    e = Expectation("paper", "ncu:tensor_pipe_pct", "opt1", None, "paper", "ICPE '26: 7.81 %", min=7.81)
    path = tmp_path / "h200.json"
    save_baseline(path, replace(sample_file(), expectations=(e,)))
    assert json.loads(path.read_text())["expectations"][0]["reference"] is None
    loaded = load_baseline(path, "h200")
    assert loaded.expectations == (e,)
    assert loaded.expectations_for("paper", "ncu:tensor_pipe_pct", "opt1", None) == [e]
    assert loaded.expectations_for("paper", "ncu:tensor_pipe_pct", "opt1", "baseline") == []
    assert e.describe() == "ncu:tensor_pipe_pct 7.81 <= opt1 (paper)"


def expectation(**fields) -> dict:
    base = dict(preset="paper", metric="ncu:tensor_pipe_pct", combo="opt1", reference="baseline", provenance="paper")
    return {**base, "source": "ICPE '26", "min": 3.0, "max": None, "world_size": 1, **fields}


@pytest.mark.parametrize(
    "fields, message",
    [
        # The committed files' old flaw: a ratio over a strict-FP32 baseline's tensor pipe, stored as 0.
        ({}, "a ratio over baseline's tensor_pipe_pct, stored as 0, which no run can judge; state it as an absolute"),
        (dict(min=0.0), ".min = 0.0, which must be above 0 when there is no max (else the check cannot fail)"),
        (dict(metric="ncu:tensor_pct"), ".metric = 'ncu:tensor_pct', which must be ncu:<key>"),
        (dict(metric="time", reference="opt2"), ".reference = 'opt2', which must be \"baseline\" (the only reference"),
        (dict(combo="opt3"), ".combo = 'opt3', which must be one of baseline, opt1"),
        (dict(preset="papr"), ".preset = 'papr', which must be one of paper"),
        (dict(metric="scaling_efficiency", reference="opt1"), ".world_size = 1, which must be 2 or more"),
        (dict(min="3"), 'expectations[0].min = "3", which must be a finite number'),
        (
            dict(metric="time", combo="baseline", min=None, max=1.1),
            "expectation 'baseline/baseline' (time): a ratio of baseline to itself, which is 1 whatever a run "
            "measures; name the combo it is compared against as the reference, or remove the expectation",
        ),
        (dict(combo="baseline"), "expectation 'baseline/baseline' (ncu:tensor_pipe_pct): a ratio of baseline to"),
    ],
)
def test_an_expectation_no_run_can_check_or_fail_is_refused(tmp_path, fields, message):
    path, data = document(tmp_path)
    data["ncu"]["paper/baseline/b1"]["totals"]["tensor_pipe_pct"] = 0.0
    data["expectations"] = [expectation(**fields)]
    assert message in refused(path, data)


@pytest.mark.parametrize("arch", ["v100", "a100", "h100", "h200"])
def test_no_committed_expectation_bounds_a_ratio_of_a_figure_that_can_be_0(arch):
    # Strict FP32 uses no tensor pipe: a share over the baseline's is 0/0 or x/0, never a judgeable ratio.
    stored = load_baseline(REPO_BASELINES / f"{arch}.json", arch)
    pipe = [e for e in stored.expectations if e.metric == "ncu:tensor_pipe_pct"]
    assert all(e.reference is None for e in pipe)
    assert arch == "v100" or {e.provenance for e in pipe if e.combo == "opt1"} & {"paper", "measured"}


def _with_sampling(tmp_path, **entry):
    """h200.json as committed, with one sampling entry replaced by ``entry``'s fields."""
    document = json.loads((REPO_BASELINES / "h200.json").read_text())
    budget = {
        "preset": "paper",
        "combo": "fast",
        "batch_size": 1,
        "budget_s": 5.0,
        "provenance": "measured",
        "source": "two processes",
        "measured_s": [4.7, 4.75],
    }
    key = entry.pop("key", "paper/fast/b1")
    budget.update(entry)
    document["sampling"] = {key: budget}
    path = tmp_path / "h200.json"
    path.write_text(json.dumps(document))
    return path


def test_sampling_budgets_are_read_per_combo(tmp_path):
    stored = load_baseline(_with_sampling(tmp_path), "h200")
    budget = stored.sampling_budget("paper", "fast", 1)
    assert budget is not None and budget.budget_s == 5.0 and budget.measured_s == [4.7, 4.75]
    assert stored.sampling_budget("paper", "opt1", 1) is None
    assert (
        load_baseline(REPO_BASELINES / "h100.json", "h100").sampling_budget("paper", "fast", 1).provenance == "measured"
    )


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"budget_s": 4.72}, "sampling['paper/fast/b1'].measured_s[1] = 4.75"),
        ({"measured_s": []}, "the full samples a measured budget rests on"),
        ({"batch_size": 2, "key": "paper/fast/b2"}, "which must be 1 (a sampling case times one volume)"),
        ({"budget_s": 0}, "sampling['paper/fast/b1'].budget_s = 0"),
        ({"budget": 5.0}, "unknown key 'budget'"),
        ({"combo": "opt1"}, "describing paper/opt1/b1"),
    ],
)
def test_a_sampling_budget_no_run_can_meet_or_that_is_malformed_is_refused(tmp_path, entry, problem):
    with pytest.raises(BaselineError, match=re.escape(problem)):
        load_baseline(_with_sampling(tmp_path, **entry), "h200")
