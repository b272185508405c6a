"""A compact profile kept with each saved case (schema ``meddpm-baseline/5``), and a failure against a stored baseline
explained by its rows, as an A/B is: saved through the suite's saving, a planted change judged against it, the
version-4 upgrade, a corrupt profile refused in one line, the file's size per case.

Each planted change is a count (an extra operator after every ``Conv3d``): nothing depends on the clock.
"""

import json
import re
from dataclasses import replace

import pytest
import torch

from meddpm.judge.baseline import SCHEMA, BaselineError, dumps_reviewable, load_baseline, save_baseline
from meddpm.judge.stored_profile import FLOOR, MAX_ROWS, compact_profile, explain_stored, stored_name
from meddpm.measure.profiling.iteration import ProfileRow, iteration_counts, profile_iteration
from meddpm.report.explanation import NO_PROFILE, case_first_line, explanation_lines
from meddpm.suite.cases import CaseRecord, PerfCase
from meddpm.suite.records import results_payload
from meddpm.suite.session import SuiteRun
from meddpm.suite.summary import markdown_summary
from tests.test_explain_counts import result
from tests.test_explain_rows import tiny_step  # noqa: F401  (the fixture: the tiny preset's step, warmed up)

CPU = torch.device("cpu")
CASE = PerfCase("cpu", "tiny", "opt1", 1)
KEY = "tiny/opt1/b1"


@pytest.fixture(scope="module")
def profiles(tiny_step):  # noqa: F811  (the fixture imported above)
    """Two processes' profiles of the tiny preset's iteration, and one with a Swish after every ``Conv3d``."""
    plain = [profile_iteration(tiny_step, CPU) for _ in range(2)]
    handles = [
        m.register_forward_hook(lambda m, args, out: out * torch.sigmoid(out))
        for m in tiny_step.model.modules()
        if type(m).__name__ == "Conv3d"
    ]
    try:
        planted = profile_iteration(tiny_step, CPU)
    finally:
        for h in handles:
            h.remove()
    return plain, planted


def record_of(profiled) -> CaseRecord:
    """A case measured in one process per profile, its time the same in every run."""
    runs = [result("opt1", list(p.rows), [10.0, 10.01, 10.02]) for p in profiled]
    return CaseRecord(
        CASE,
        runs[0],
        run_counts=[r.counts for r in runs],
        run_profiles=[list(p.rows) for p in profiled],
        run_module_bytes=[p.module_bytes for p in profiled],
    )


def saved_and_judged(suite_options, saved, now) -> tuple[SuiteRun, CaseRecord]:
    """Save ``saved`` as the baseline through the suite, then judge ``now`` against it."""
    saving = SuiteRun(suite_options(save_baseline=True), None, lambda line: None)
    saving.measuring.records[CASE.id] = record_of(saved)
    assert saving.save(failed_tests=0).startswith("baseline saved")
    run = SuiteRun(suite_options(), None, lambda line: None)
    record = record_of(now)
    run.measuring.records[CASE.id] = record
    run.judge(CASE)
    return run, record


def test_a_failure_against_a_saved_baseline_is_explained_by_its_rows(tmp_path, suite_options, profiles):
    plain, planted = profiles
    run, record = saved_and_judged(suite_options, plain, [planted])
    assert record.outcome == "regression"  # its launches grew; its time did not move
    rows = [r.as_dict() for r in record.explain]
    assert not any(r["level"] == "count" for r in rows)
    assert (rows[0]["level"], rows[0]["label"]) == ("module", "Conv3d")
    sigmoid = next(r for r in rows if r["level"] == "name" and r["label"] == "sigmoid float32")
    assert sigmoid["change"] == "appeared" and "(Conv3d)" in sigmoid["module"] and sigmoid["op"] == "aten::sigmoid"
    assert sigmoid["shown"] and sigmoid["count_b"] == 0
    payload = results_payload(run.measuring, [], "", on_gpu=False)
    (case,) = payload["cases"]
    assert case_first_line(case).startswith(f"{KEY}: counts moved: Conv3d runs ")
    summary = markdown_summary(payload)
    assert "sigmoid float32" in summary and NO_PROFILE not in summary
    moved = [r for r in rows if r["level"] == "name" and r["count_a"] != r["count_b"]]
    assert all("(Conv3d)" in r["module"] for r in moved), moved  # no folded or kept row of other modules moved


def test_an_unchanged_run_against_its_saved_profile_moves_no_row_by_calls(profiles):
    plain, _ = profiles
    stored = compact_profile([list(p.rows) for p in plain], [p.module_bytes for p in plain])
    rows = explain_stored([list(plain[0].rows)], [plain[0].module_bytes], stored)
    assert all(r.count_a == r.count_b for r in rows if r.level in ("module", "category", "name"))
    assert not any(r.change in ("appeared", "vanished") for r in rows if r.level == "name")
    assert all(r.count_a == r.count_b for r in rows if r.level == "memory")


def test_the_saved_profile_is_compact_and_says_what_it_folded(tmp_path, suite_options, profiles):
    plain, _ = profiles
    saved_and_judged(suite_options, plain, plain)
    text = (tmp_path / "cpu.json").read_text()
    profile = json.loads(text)["cases"][KEY]["profile"]
    size = len(dumps_reviewable(profile))
    assert size < 10 * 1024, f"{size} bytes for {len(profile['rows'])} rows"  # the tiny preset's CPU rows: 177 KB
    assert profile["processes"] == 2 and len(profile["rows"]) <= MAX_ROWS and profile["floor"] >= FLOOR
    assert sum(f[2] for f in profile["folded"]) + len(profile["rows"]) > 200  # the tiny preset's rows per module type
    stored = load_baseline(tmp_path / "cpu.json", "cpu").cases[KEY].profile
    calls, ms = stored.folded_shares
    launches = iteration_counts(list(plain[0].rows), None, None)["launches"]
    assert sum(r.calls[0] for r in stored.rows) + sum(f.calls[0] for f in stored.folded) == launches  # nothing lost
    assert 0 < calls < 1 and 0 < ms < 0.2  # the folded rows hold little of the time
    assert re.search(r'\n +\["aten::\w+", "[^"]+", "\w+", "\w+", "aten::\w+", \[\d+, \d+\], \[', text)  # a row a line


def test_long_kernel_names_are_stored_cut_with_a_digest_and_still_match():
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, " * 3
    cut = stored_name(name)
    assert len(cut) <= 64 and cut.startswith(name[:48]) and cut != stored_name(name + "x")
    assert stored_name(cut) == cut and stored_name("triton_poi_fused_add_7") == "triton_poi_fused_add"
    row = ProfileRow(name, "elementwise", 35, 2.0, "in_layers.0 (GroupNorm32)", "aten::mul", "mul float32")
    stored = compact_profile([[row]], [{}])
    assert stored.rows[0].name == cut
    rows = explain_stored([[replace(row, count=70)]], [{}], stored)
    moved = next(r for r in rows if r.level == "name")
    assert (moved.name, moved.change, moved.count_a, moved.count_b) == (name, "calls", 70, 35)  # A's full name kept


# --- the schema: version 5, the upgrade of version 4, corrupt profiles ------------------------------
@pytest.fixture
def saved_file(tmp_path, suite_options, profiles):
    plain, _ = profiles
    saved_and_judged(suite_options, plain[:1], plain[:1])
    return tmp_path / "cpu.json"


def test_a_version_4_file_is_read_with_no_profiles_and_its_failures_are_explained_by_counts(
    saved_file, suite_options, profiles
):
    data = json.loads(saved_file.read_text())
    assert data["schema"] == SCHEMA == "meddpm-baseline/5"
    del data["cases"][KEY]["profile"]
    data["schema"] = "meddpm-baseline/4"
    saved_file.write_text(json.dumps(data))
    loaded = load_baseline(saved_file, "cpu")
    assert loaded.cases[KEY].profile is None and loaded.cases[KEY].counts
    run = SuiteRun(suite_options(), None, lambda line: None)
    record = record_of([profiles[1]])
    run.measuring.records[CASE.id] = record
    run.judge(CASE)
    assert record.outcome == "regression" and {r.level for r in record.explain} == {"count"}
    lines = explanation_lines([r.as_dict() for r in record.explain], markdown=False)
    assert sum(NO_PROFILE in line for line in lines) == 1
    save_baseline(saved_file, loaded)
    assert json.loads(saved_file.read_text())["schema"] == SCHEMA
    data["cases"][KEY]["profile"] = {"processes": 1}
    saved_file.write_text(json.dumps(data))
    message = f"a malformed meddpm-baseline/4 file (cases['{KEY}'].profile, which {SCHEMA} and later read)"
    with pytest.raises(BaselineError, match=re.escape(message)):
        load_baseline(saved_file, "cpu")


@pytest.mark.parametrize(
    "corrupt, field",
    [
        (lambda p: p["rows"][0][6].pop(), ".profile.rows[0].ms with 0 value(s), which must hold one per process (1)"),
        (lambda p: p["rows"][1].__setitem__(5, [-1]), ".profile.rows[1].calls[0] = -1, which must be 0 or more"),
        (lambda p: p["rows"][0].__setitem__(2, "elementwse"), '.profile.rows[0].category = "elementwse"'),
        (lambda p: p["folded"][0].__setitem__(4, [float("nan")]), ".folded[0].ms[0] = nan, which must be a finite"),
        (lambda p: p.__setitem__("flor", 0.1), "an unknown key 'flor' in cases['tiny/opt1/b1'].profile"),
        (lambda p: p["module_bytes"].__setitem__("Conv3d", [1.5]), ".profile.module_bytes['Conv3d'][0] = 1.5"),
    ],
)
def test_a_corrupt_profile_is_refused_in_one_line_naming_file_case_and_field(saved_file, corrupt, field):
    data = json.loads(saved_file.read_text())
    corrupt(data["cases"][KEY]["profile"])
    saved_file.write_text(json.dumps(data))
    with pytest.raises(BaselineError) as refused:
        load_baseline(saved_file, "cpu")
    message = str(refused.value)
    assert "\n" not in message and str(saved_file) in message and KEY in message, message
    assert field in message, message


def test_gpu_rows_without_scopes_and_renumbered_inductor_kernels_match_the_stored_profile():
    """A compiled step's kernels run under no module scope and no aten operator; another compile renumbers them."""
    saved = [
        ProfileRow("triton_red_fused_group_norm_17", "normalization", 35, 3.0, "", "", "triton_red_fused_group_norm"),
        ProfileRow("triton_tem_fused_convolution_0", "convolution", 40, 60.0, "", "", "triton_tem_fused_convolution"),
        ProfileRow("Memset (Device)", "copy/layout", 3, 0.001, "", "", "Memset (Device)"),
    ]  # fmt: skip
    stored = compact_profile([saved, saved], [{}, {}])
    assert [r.module for r in stored.rows] == ["outside modules"] * 2 and stored.folded[0].module == "outside modules"
    renumbered = [replace(saved[0], name="triton_red_fused_group_norm_19"), *saved[1:]]
    rows = explain_stored([renumbered], [{}], stored)
    assert not [r for r in rows if r.level == "name" and r.change in ("appeared", "vanished")]
    assert not [r for r in rows if r.level == "memory"]  # no module scopes: no bytes per module on either side
    planted = explain_stored(
        [[*renumbered, ProfileRow("triton_poi_fused_mul_3", "elementwise", 35, 0.01)]], [{}], stored
    )
    new = [r for r in planted if r.level == "name" and r.change == "appeared"]
    assert [(r.name, r.count_a) for r in new] == [("triton_poi_fused_mul_3", 35)]
