"""Results documents as history rows: every file in docs/measurements as it is, and what is refused."""

from __future__ import annotations

import copy
import datetime
import json
import re
from pathlib import Path

import pytest

from meddpm.errors import UserError
from meddpm.history.documents import BENCH_SCHEMA, SCHEMAS, SUITE_SCHEMA, fingerprint, run_from_document
from meddpm.history.results import (
    BENCH_RESULTS,
    RESULTS_KINDS,
    SUITE_RESULTS,
    bench_1_to_2,
    bench_2_to_3,
    run_description,
    suite_1_to_2,
)
from meddpm.history.simulation import results_document
from meddpm.versioned.loader import ForeignDocument, upgrade


def upgraded(document: dict) -> dict:
    """``document`` as the current version of its results kind."""
    return upgrade(document, None, *RESULTS_KINDS)[1]


MEASUREMENTS = Path(__file__).resolve().parent.parent / "docs" / "measurements"


def results_files() -> list[Path]:
    """Every results document kept in docs/measurements, of any version (other JSON there is no results file)."""
    families = tuple(schema.split("/")[0] + "/" for schema in SCHEMAS)
    found = []
    for path in sorted(MEASUREMENTS.rglob("*.json")):
        document = json.loads(path.read_text())
        if isinstance(document, dict) and str(document.get("schema", "")).startswith(families):
            found.append(path)
    return found


def test_every_measured_results_file_imports_as_it_is():
    files = results_files()
    runs = [run_from_document(json.loads(p.read_text()), str(p)) for p in files]
    schemas = {r.schema for r in runs}
    # Every version but the bench's third, which no committed measurement has.
    assert schemas == set(SCHEMAS) - {"meddpm-bench/3"}, f"the measurements hold {schemas}"
    assert {r.arch for r in runs} == {"h100", "h200"}
    assert len({r.fingerprint for r in runs}) == len(files)
    for run in runs:
        assert run.cases and all(c.median_ms > 0 and c.samples_ms for c in run.cases), run.source


def test_what_each_schema_carries_is_kept():
    suite = run_from_document(json.loads((MEASUREMENTS / "2026-11-23-h200-save" / "results.json").read_text()), "s")
    assert (suite.kind, suite.arch, suite.commit[:9], suite.cudnn) == ("suite", "h200", "bff69d065", "91900")
    baseline = suite.cases[0]
    assert baseline.case == "paper/baseline/b1" and len(baseline.process_medians_ms) == 3
    assert baseline.median_ms == sorted(baseline.process_medians_ms)[1]  # the median of the process medians
    assert baseline.throttle_reasons == ["SwPowerCap"] and baseline.verdicts and baseline.energy_samples_j
    assert baseline.details["stats"]["rounds"] == 15  # fields without a column are kept as they came

    bench_v1 = run_from_document(
        json.loads((MEASUREMENTS / "2026-11-22-h200-meddpm-bench-paper.json").read_text()), "b"
    )
    assert (bench_v1.kind, bench_v1.arch, bench_v1.driver, bench_v1.commit) == (
        "bench",
        "h200",
        "580.159.04",
        "unknown",
    )

    h100 = run_from_document(
        json.loads((MEASUREMENTS / "2026-11-22-h200-fast-v7" / "h100-bench-fast.json").read_text()), "b"
    )
    assert h100.arch == "h100" and h100.options["preset"] == "paper"

    ddp = run_from_document(json.loads((MEASUREMENTS / "2026-11-22-h200x2-ddp-results.json").read_text()), "d")
    two = next(c for c in ddp.cases if c.case == "paper/opt1/b1/ddp2")
    ranks = two.details["rank_samples_ms"]
    assert two.world_size == 2 and two.samples_ms == [max(r) for r in zip(*ranks)]


def test_an_ab_run_is_told_apart_from_the_history():
    planted = MEASUREMENTS / "2026-11-23-ab" / "h200-opt1-plant35-5x5" / "results.json"
    assert run_from_document(json.loads(planted.read_text()), "ab").kind == "ab"


def _described(path: Path) -> tuple[str, str, int]:
    run = run_from_document(json.loads(path.read_text()), str(path))
    return run.kind, run.options["run_kind"], run.options["processes"]


def test_files_written_before_they_said_what_the_run_was_are_upgraded():
    ab = MEASUREMENTS / "2026-11-23-ab"
    assert _described(ab / "h200-opt1-clean-5x5" / "results.json") == ("ab", "ab", 5)
    assert _described(ab / "h200-fast-plant8-3x3" / "results.json") == ("ab", "ab", 3)
    assert _described(MEASUREMENTS / "2026-11-23-h200-save" / "results.json") == ("suite", "processes", 3)
    assert _described(MEASUREMENTS / "2026-11-23-h100-suite" / "results.json") == ("suite", "measure", 1)
    assert _described(MEASUREMENTS / "2026-11-22-h200-meddpm-bench-paper.json") == ("bench", "measure", 1)
    h100 = json.loads((MEASUREMENTS / "2026-11-22-h200-fast-v7" / "h100-bench-fast.json").read_text())
    assert upgraded(h100)["arch"] == "h100" and upgraded(h100)["compare_to"] is None  # the revision was not kept


@pytest.mark.parametrize("path", results_files(), ids=lambda p: str(p.relative_to(MEASUREMENTS)))
def test_an_upgraded_file_is_the_run_its_current_version_describes(path):
    """Each measured file, and the same run written at the current version with what the upgrade recovered."""
    document = json.loads(path.read_text())
    current = upgraded(document)
    assert current["schema"] == (SUITE_SCHEMA if "cases" in document else BENCH_SCHEMA)
    old, new = run_from_document(document, "old"), run_from_document(current, "new")
    # The fingerprint is of the file as written; the same run written at the current version differs only in
    # what the upgrade moved (meddpm-bench/1's driver goes into the environment, where version 2 keeps it).
    assert (old.kind, old.arch, old.options, old.driver) == (new.kind, new.arch, new.options, new.driver)
    assert [(c.case, c.median_ms, c.samples_ms) for c in old.cases] == [
        (c.case, c.median_ms, c.samples_ms) for c in new.cases
    ]


def _bench_document(**fields) -> dict:
    environment = {"date": "2026-12-01T00:00:00", "gpu_name": "NVIDIA L40S", "compute_capability": "8.9"}
    case = {"preset": "paper", "combo": "opt1", "batch_size": 1, "samples_ms": [230.0], "stats": {"median": 230.0}}
    return {"schema": "meddpm-bench/2", "environment": environment, "results": [case], **fields}


def test_an_old_bench_file_in_processes_or_ab_is_told_by_its_fields():
    medians = {"working tree (abc)": {"opt1": [230.0, 231.0, 229.0]}, "HEAD (abc)": {"opt1": [230.0, 230.5, 229.5]}}
    in_processes = run_from_document(_bench_document(process_medians_ms={"wt": {"opt1": [230.0, 232.0]}}), "p")
    assert (in_processes.kind, in_processes.arch, in_processes.options["run_kind"]) == ("bench", "l40s", "processes")
    assert in_processes.options["processes"] == 2 and in_processes.cases[0].median_ms == 231.0
    ab = run_from_document(_bench_document(process_medians_ms=medians, comparisons={"opt1": {}}), "ab")
    assert (ab.kind, ab.options["run_kind"], ab.options["processes"], ab.options["compare_to"]) == ("ab", "ab", 3, None)


@pytest.mark.parametrize(
    "processes, compare_to, kind", [(1, None, "measure"), (3, None, "processes"), (5, "origin/main", "ab")]
)
def test_a_current_file_says_what_its_run_was(processes, compare_to, kind):
    described = run_description(processes, compare_to)
    assert described == {"run_kind": kind, "processes": processes, "compare_to": compare_to}
    bench_document = {**_bench_document(), "schema": BENCH_SCHEMA, "arch": "l40s_x", "sides": [], **described}
    bench = run_from_document(bench_document, "b")
    suite = run_from_document({**_suite_document(), **described}, "s")
    for run, source in ((bench, "bench"), (suite, "suite")):
        assert run.kind == ("ab" if kind == "ab" else source)
        assert {name: run.options[name] for name in described} == described
    assert bench.arch == "l40s_x"  # as the file says, not worked out from the GPU's name again
    # A live append's options (the command line) keep their fields, beside what the file says.
    appended = run_from_document({**_suite_document(), **described}, "s", {"options": {"processes": None, "x": 1}})
    assert appended.options == {"x": 1, **described}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"run_kind": "nightly"}, "run_kind 'nightly' with processes 1 describes no run"),
        ({"processes": 0}, "run_kind 'measure' with processes 0 describes no run"),
        ({"processes": "3"}, "run_kind 'measure' with processes '3' describes no run"),
        ({"compare_to": 3}, "compare_to 3 is not a revision"),
        ({"arch": None}, "arch None is not an architecture key"),
    ],
)
def test_a_current_file_that_describes_no_run_is_refused(change, message):
    with pytest.raises(UserError, match=re.escape(f"a malformed {SUITE_SCHEMA} file ({message}")):
        run_from_document({**_suite_document(), **change}, "x.json")
    without = _suite_document()
    del without["run_kind"]
    with pytest.raises(UserError, match=re.escape("field 'run_kind' is missing")):
        run_from_document(without, "x.json")


def test_a_bench_file_rewritten_with_extras_is_the_same_run():
    document = json.loads((MEASUREMENTS / "2026-11-22-h200-fast-v7" / "bench-fast.json").read_text())
    first_save = copy.deepcopy(document)
    del first_save["kernel_mix"], first_save["sampling"]
    assert fingerprint(first_save) == fingerprint(document)
    document["results"][0]["samples_ms"][0] += 1.0
    assert fingerprint(first_save) != fingerprint(document)


@pytest.mark.parametrize(
    "document, error, message",
    [
        ([1, 2], ForeignDocument, "not a meddpm results file (the JSON is not an object)"),
        ({"benchmarks": []}, ForeignDocument, "no schema field"),
        ({"schema": "meddpm-baseline/2"}, ForeignDocument, "schema 'meddpm-baseline/2'"),
        ({"schema": "meddpm-bench/9"}, UserError, "a meddpm-bench/9 file, which this meddpm-perf cannot read"),
        ({"schema": "meddpm-perf-results/1", "arch": "h200"}, UserError, "field 'environment' is missing"),
        ({"schema": "meddpm-perf-results/9"}, UserError, "a meddpm-perf-results/9 file, which this meddpm-perf"),
        (
            {"schema": "meddpm-bench/2", "environment": {"date": "yesterday"}, "results": [{}]},
            UserError,
            "a malformed meddpm-bench/2 file",
        ),
        (
            {"schema": "meddpm-perf-results/1", "arch": "h200", "environment": {"date": "2026-11-23"}, "cases": []},
            UserError,
            "no measured cases",
        ),
    ],
    ids=["list", "foreign", "baseline", "newer", "no-environment", "newer-suite", "bad-date", "no-cases"],
)
def test_what_is_not_a_usable_results_document_is_one_line(document, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
        run_from_document(document, "x.json")
    assert "\n" not in str(caught.value)


def _suite_document() -> dict:
    return results_document("h200", datetime.datetime(2026, 12, 1), "c0", {"baseline": 1200.0, "opt1": 230.0})


def _ddp_document() -> dict:
    document = _suite_document()
    document["ddp"] = [
        {
            "preset": "paper",
            "combo": "opt1",
            "batch_per_rank": 1,
            "world_size": 2,
            "median_ms": 240.0,
            "rank_samples_ms": [[240.0, 241.0], [239.0, 242.0]],
            "energy_j_per_iter": [100.0, 101.0],
        }
    ]
    return document


def _set(path: str, value: object, ddp: bool = False):
    """A document with the figure at ``path`` (keys and indices joined by '.') replaced by ``value``."""
    document = _ddp_document() if ddp else _suite_document()
    *parents, last = path.split(".")
    node = document
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[int(last) if isinstance(node, list) else last] = value
    return document


@pytest.mark.parametrize(
    "document, message",
    [
        (_set("cases.0.stats.median", float("nan")), "case paper/baseline/b1: stats.median holds nan"),
        (_set("cases.1.samples_ms.2", float("inf")), "case paper/opt1/b1: samples_ms holds inf"),
        (_set("cases.0.samples_ms.0", -3.0), "case paper/baseline/b1: samples_ms holds -3.0"),
        (_set("cases.0.stats.median", 0.0), "case paper/baseline/b1: stats.median holds 0.0"),
        (_set("cases.1.process_medians_ms", [230.0, float("nan")]), "case paper/opt1/b1: process_medians_ms holds nan"),
        (_set("cases.0.tflops", float("-inf")), "case paper/baseline/b1: tflops holds -inf"),
        (_set("cases.0.energy_j_per_iter", -1.0), "case paper/baseline/b1: energy_j_per_iter holds -1.0"),
        (_set("cases.0.peak_allocated_bytes", -1), "peak_allocated_bytes holds -1; it must be a whole number"),
        (_set("ddp.0.median_ms", float("nan"), ddp=True), "case paper/opt1/b1/ddp2: median_ms holds nan"),
        (_set("ddp.0.rank_samples_ms.1.0", float("inf"), ddp=True), "ddp2: rank_samples_ms holds inf"),
        (_set("cases.1.combo", "baseline"), "case paper/baseline/b1 twice"),
    ],
    ids=["nan-median", "inf-sample", "negative-sample", "zero-median", "nan-process-median", "inf-tflops",
         "negative-energy", "negative-peak", "nan-ddp-median", "inf-ddp-sample", "case-twice"],
)  # fmt: skip
def test_a_figure_no_measurement_gives_is_refused_naming_the_case_and_field(document, message):
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        run_from_document(json.loads(json.dumps(document)), "x.json")
    assert "\n" not in str(caught.value)


def test_figures_a_measurement_gives_are_kept():
    run = run_from_document(_set("cases.0.energy_j_per_iter", 0.0, ddp=True), "x.json")
    assert [c.case for c in run.cases] == ["paper/baseline/b1", "paper/opt1/b1", "paper/opt1/b1/ddp2"]
    assert run.cases[0].energy_j_per_iter == 0.0 and run.cases[0].peak_allocated_bytes == 20 * 2**30
    assert run.cases[2].samples_ms == [240.0, 242.0] and run.cases[2].energy_j_per_iter == 201.0


def test_ddp_ranks_without_a_reading_are_left_out_not_refused():
    """CPU (gloo) ranks have no NVML: their clocks and energy are None, which is no reading, not a bad one."""
    document = _set("ddp.0.sm_clock_min_mhz", [None, None], ddp=True)
    document["ddp"][0].update(energy_j_per_iter=[None, 101.0], peak_allocated_bytes=[None, None])
    (case,) = [c for c in run_from_document(json.loads(json.dumps(document)), "x.json").cases if "ddp" in c.case]
    assert case.sm_clock_min_mhz is None and case.energy_j_per_iter == 101.0 and case.peak_allocated_bytes is None


@pytest.mark.parametrize("interrupted", ["the timed rounds", None])
def test_a_partial_run_is_refused_not_taken_for_a_full_one(interrupted):
    document = _suite_document()
    document.update(partial=True, interrupted=interrupted)
    during = f" during {interrupted}" if interrupted else ""
    with pytest.raises(UserError, match=re.escape(f"a partial run (interrupted{during}), not imported")):
        run_from_document(json.loads(json.dumps(document)), "x.json")
    document["partial"] = False
    assert run_from_document(json.loads(json.dumps(document)), "x.json").cases


def test_each_results_upgrade_step_recovers_what_its_next_version_says():
    suite = {"schema": "meddpm-perf-results/1", "cases": [{"verdicts": ["... working tree (abc) ..."]}]}
    assert suite_1_to_2(suite)["run_kind"] == "ab" and suite_1_to_2(suite)["compare_to"] is None
    state = {"driver": "580.1"}
    bench = {"schema": "meddpm-bench/1", "environment": {"date": "d"}, "results": [{"gpu_state_before": state}]}
    assert bench_1_to_2(copy.deepcopy(bench))["environment"] == {"date": "d", "driver": "580.1"}
    gpu = {"gpu_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
    assert bench_2_to_3({"environment": gpu})["arch"] == "h100"
    assert bench_2_to_3({"environment": {}})["arch"] == "cpu"
    assert BENCH_RESULTS.upgraded(bench)["schema"] == BENCH_SCHEMA and bench["schema"] == "meddpm-bench/1"
    assert SUITE_RESULTS.upgraded(suite)["processes"] == 1


@pytest.mark.parametrize(
    "change, message",
    [
        ({"stats.median": "230"}, 'case paper/opt1/b1: stats.median holds "230", which must be a number'),
        ({"stats.median": None}, "case paper/opt1/b1: stats.median holds null, which must be a number"),
        ({"samples_ms": "230"}, 'case paper/opt1/b1: samples_ms = "230", which must be a list of numbers'),
    ],
    ids=["median-string", "median-null", "samples-string"],
)
def test_a_figure_that_is_no_number_is_refused_naming_the_case_and_field(change, message):
    ((path, value),) = change.items()
    with pytest.raises(UserError) as caught:
        run_from_document(_set(f"cases.1.{path}", value), "x.json")
    assert str(caught.value) == message


def test_a_malformed_date_is_refused_naming_the_field():
    document = _suite_document()
    document["environment"]["date"] = "yesterday"
    with pytest.raises(UserError) as caught:
        run_from_document(document, "x.json")
    assert str(caught.value) == (
        "environment.date = 'yesterday', which must be an ISO 8601 date and time (YYYY-MM-DDThh:mm:ss)"
    )


def test_a_file_that_records_its_commit_subject_and_ci_job_keeps_them_and_a_long_subject_is_cut():
    when = datetime.datetime(2026, 11, 27, 2, 0)
    job = "https://github.com/o/r/actions/runs/9/attempts/2"
    document = results_document("h200", when, "c1", {"opt1": 230.0}, commit_subject="<script>x</script>", ci_job=job)
    run = run_from_document(document, "f.json")
    assert (run.commit_subject, run.ci_job) == ("<script>x</script>", job)
    long = run_from_document(results_document("h200", when, "c1", {"opt1": 230.0}, commit_subject="s" * 5000), "f")
    assert long.commit_subject == "s" * 1000 and long.ci_job is None
