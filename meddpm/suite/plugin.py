"""The suite's pytest plugin: markers, options, architecture selection, fixtures, summary, saving.

Loaded by the repository's root ``conftest.py`` (``pytest_plugins``), so it is active for
this project's test runs only. Tests use the ``perf_suite`` fixture and the ``perf_case`` /
``ratio_case`` parameters it generates.
"""

from __future__ import annotations

import contextlib
import logging
import os
import traceback
from collections.abc import Iterator

import pytest
import torch

from meddpm.errors import UserError, first_line
from meddpm.judge.arch import KNOWN_ARCHS, detect_arch
from meddpm.measure.machine import read_ahead
from meddpm.measure.processes.revision import check_sides
from meddpm.measure.processes.sides import legend
from meddpm.report.explanation import case_first_line, explanation_lines
from meddpm.report.outlying import outlying_processes
from meddpm.report.tables import TERMINAL_TABLE, ddp_text, results_table
from meddpm.suite.cases import CPU, PerfCase, RatioCase
from meddpm.suite.options import add_options, inapplicable_options, parse_options
from meddpm.suite.records import append_history, ncu_tables
from meddpm.suite.selection import selected_combos
from meddpm.suite.session import SuiteRun

SUITE = pytest.StashKey[SuiteRun]()

MARKERS = {
    "gpu": "needs a CUDA GPU",
    "cpu": "runs on the CPU (tiny preset by default)",
    "slow": "takes more than a few seconds",
    "parity": "numerical parity between layouts and precisions (Hypothesis)",
    "nightly": "part of the nightly GPU run only",
    "ncu": "Nsight Compute counters (needs ncu on PATH)",
    "multigpu": "data-parallel (DDP) cases; need 2 or more GPUs",
    "training": "reads its case's training iterations from the session's interleaved campaign",
    **{arch: f"cases for the {arch.upper()} baselines" for arch in KNOWN_ARCHS},
}


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("TORCH_TRACE"):
        # torch's structured-trace logger is always at DEBUG and meant for TORCH_TRACE's file.
        # pytest attaches its capture handlers to every non-propagating logger, so without this
        # filter each compile put hundreds of "DEBUG torch.__trace" lines into `pytest -rA`.
        logging.getLogger("torch.__trace").addFilter(_drop)
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    try:
        options = parse_options(config)
        if options.ab:  # an unknown or too old revision, or an interpreter that cannot run, is found now
            check_sides(options.compare_to, options.other)
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None
    running = options.arch or (detect_arch(torch.device("cuda")) if torch.cuda.is_available() else None)
    if running and running not in MARKERS:
        config.addinivalue_line("markers", f"{running}: cases for the {running} baselines")

    def write_line(line: str) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        # Measuring runs inside a test, where pytest captures the output and would drop the progress lines
        # of a run that passes: they go past the capture, as pytest's own live logging does.
        capture = config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            reporter.write_line(line)

    config.stash[SUITE] = SuiteRun(options, running, write_line)


# What pytest-benchmark's tables are, in their titles.
BENCHMARK_LABEL = "pytest-benchmark's own rounds, not read by the verdicts"


def _drop(record: logging.LogRecord) -> bool:
    return False


def _marks(arch: str, preset: str, batch_size: int) -> list[pytest.MarkDecorator]:
    # pytest-benchmark prints its own table, of its own few rounds, under the suite's: its title says whose it is.
    group = pytest.mark.benchmark(group=f"{arch} {preset} b{batch_size}, {BENCHMARK_LABEL}")
    if arch == CPU:
        return [pytest.mark.cpu, group]
    return [pytest.mark.gpu, getattr(pytest.mark, arch), pytest.mark.slow, group]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    suite = metafunc.config.stash[SUITE]
    parametrized = {
        "perf_case": (suite.plan.cases, ()),
        "ratio_case": (suite.plan.ratio_cases, ()),
        "ncu_case": (suite.plan.ncu_cases, (pytest.mark.ncu,)),
        "ncu_ratio_case": (suite.plan.ratio_cases, (pytest.mark.ncu,)),
    }
    for name, (cases, extra_marks) in parametrized.items():
        if name in metafunc.fixturenames:
            params = [
                pytest.param(c, id=c.id, marks=[*_marks(c.arch, c.preset, c.batch_size), *extra_marks]) for c in cases()
            ]
            metafunc.parametrize(name, params)


def _case_of(item: pytest.Item) -> PerfCase | RatioCase | None:
    params = getattr(item, "callspec", None)
    if params is None:
        return None
    p = params.params
    return p.get("perf_case") or p.get("ratio_case") or p.get("ncu_case") or p.get("ncu_ratio_case")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    suite = config.stash[SUITE]
    if suite.options.ncu is None:
        off = pytest.mark.skip(reason="Nsight Compute cases are off by default; run with --ncu")
        for item in items:
            if item.get_closest_marker("ncu"):
                item.add_marker(off)
    if not torch.cuda.is_available():
        no_gpu = pytest.mark.skip(reason="needs a CUDA GPU; none is visible to PyTorch on this machine")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(no_gpu)
        return
    other = pytest.mark.skip(reason=f"running on {suite.running_arch}")
    for item in items:
        case = _case_of(item)
        if case is not None and case.arch not in (CPU, suite.running_arch):
            item.add_marker(other)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Check every baseline file the selected cases will read, before the first measurement.

    A corrupt or nonsensical file found only after minutes of measuring (or never, when the
    cases come out unreliable and skip) wastes the run; here it stops the session in one line.
    """
    suite = session.config.stash[SUITE]
    will_run = [item for item in session.items if not item.get_closest_marker("skip")]
    archs = sorted({case.arch for item in will_run if (case := _case_of(item)) is not None})
    try:
        for arch in archs:
            suite.judging.baselines.load(arch)
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None
    cases = [case for item in will_run if (case := _case_of(item)) is not None]
    training = [case for item in will_run if item.get_closest_marker("training") and (case := _case_of(item))]
    selection, notes = selected_combos(training, suite.options.combos_for, lambda r: bool(suite.expectations(r)))
    suite.measuring.select(selection)
    for line in notes:
        suite.write_line(f"meddpm: {line}")
    ncu_cases = [item for item in will_run if item.get_closest_marker("ncu")]
    for line in inapplicable_options(suite.options, sum(c.arch != CPU for c in cases), len(ncu_cases)):
        suite.write_line(f"meddpm: warning: {line}")
    progress = SessionProgress({item.nodeid for item in will_run if isinstance(_case_of(item), PerfCase)})
    session.config.stash[PROGRESS] = progress
    session.config.pluginmanager.register(progress, "meddpm-session-progress")


class SessionProgress:
    """A plugin object that notes which selected measurement cases finished, so a partial session is never saved."""

    def __init__(self, selected: set[str]):
        self.selected = selected
        self.finished: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.skipped:
            self.finished.add(report.nodeid)

    def incomplete(self, session: pytest.Session, exitstatus: int) -> list[str]:
        """Why this session did not run everything it selected (empty if it did)."""
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            return ["the session was interrupted"]
        missing = len(self.selected - self.finished)
        if session.shouldstop or session.shouldfail or missing:
            return [f"the session stopped early ({missing} of {len(self.selected)} selected case(s) did not run)"]
        return []


PROGRESS = pytest.StashKey[SessionProgress]()


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Iterator[None]:
    """A user error inside a test (out of memory, a bad baseline) fails it with one line."""
    outcome = yield
    if isinstance(outcome.excinfo and outcome.excinfo[1], UserError):
        outcome.force_exception(pytest.fail.Exception(str(outcome.excinfo[1]), pytrace=False))


@pytest.fixture(scope="session")
def perf_suite(request: pytest.FixtureRequest) -> SuiteRun:
    """The session's suite state: options, measurements, baselines and verdicts."""
    return request.config.stash[SUITE]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Save the baseline if asked (never from a partial session), then write the results (and, with
    --history, append them to the history database).

    A failure while saving is one line in the summary, and the results are written anyway:
    they are what the minutes of measuring produced. That holds for a bug in saving too; its
    traceback follows the results, so it is reported without losing them.
    """
    suite = session.config.stash.get(SUITE, None)
    if suite is None:
        return
    bug: Exception | None = None
    try:
        if suite.options.save_baseline and suite.measuring.anything:
            progress = session.config.stash.get(PROGRESS, None)
            incomplete = progress.incomplete(session, exitstatus) if progress else ["the session did not collect"]
            try:
                message = suite.save(session.testsfailed, incomplete)
            except (UserError, OSError) as exc:
                message = suite.save_message = f"baseline not saved: {exc}"
            except Exception as exc:
                bug = exc
                message = suite.save_message = (
                    f"baseline not saved: internal error {type(exc).__name__}: {first_line(exc)} "
                    "(the results are kept; please report it with the traceback)"
                )
            if message.startswith("baseline not saved") and exitstatus != pytest.ExitCode.INTERRUPTED:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        try:
            suite.summary_path = suite.write_results(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
        except OSError as exc:
            suite.write_line(f"meddpm: results not written: {exc}")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if suite.summary_path is not None and suite.options.history is not None:
            if exitstatus == pytest.ExitCode.INTERRUPTED:
                suite.write_line(
                    "meddpm: run not appended to the history: it was interrupted (results.json is partial)"
                )
            else:
                append_history(suite.options, suite.write_line)
    finally:
        suite.close()
    if bug is not None:
        suite.write_line("".join(traceback.format_exception(bug)).rstrip())


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    suite = config.stash.get(SUITE, None)
    if suite is None or not (suite.measuring.anything or suite.judging.expectation_verdicts):
        return
    measured, tr = suite.measuring, terminalreporter
    tr.section("meddpm performance")
    if measured.ddp_results:
        tr.write_line("data-parallel weak scaling (slowest rank per round):")
        tr.write_line(ddp_text(measured.ddp_results))
    if measured.records:
        cases = [r.payload() for r in measured.records.values()]
        tr.write_line(results_table(cases, TERMINAL_TABLE).to_string(index=False, float_format=lambda v: f"{v:.2f}"))
        if config.pluginmanager.hasplugin("benchmark") and suite.options.benchmark_rounds:
            tr.write_line(
                "ms/iter: each case's median over its interleaved rounds, the figure every verdict judges; "
                f"pytest-benchmark's tables below time {suite.options.benchmark_rounds} synchronised round(s) "
                "of their own (--perf-benchmark-rounds), for its storage and --benchmark-compare; no verdict reads them"
            )
    if measured.ncu_profiles:
        table, shares = ncu_tables(measured.ncu_profiles)
        tr.write_line("Nsight Compute, per iteration:")
        tr.write_line(table.to_string(float_format=lambda v: f"{v:.4g}"))
        tr.write_line("kernel mix (share of GPU kernel time):")
        tr.write_line(shares.to_string(float_format=lambda v: f"{v:.1%}"))
    for arch, verdict, _ in suite.judging.expectation_verdicts:
        tr.write_line(f"{arch}: {verdict.message()} -> {verdict.outcome}")
    sides = measured.sides()
    if len(sides) == 2:  # the A/B lines below call the sides by their short names
        tr.write_line(f"A/B: {legend([side['label'] for side in sides])}")
    for r in measured.records.values():
        for v in r.verdicts:
            if v.outcome not in ("unchanged", "not measured") or v.comparison is not None:
                tr.write_line(v.message())
        for sentence in outlying_processes(str(r.case.key), r.process_cards):
            tr.write_line(sentence, yellow=True)
        if r.explain:
            tr.write_line(case_first_line(r.payload()), bold=True)
            for line in explanation_lines([row.as_dict() for row in r.explain], markdown=False):
                tr.write_line(line)
    attributions = [r.attribution for r in measured.records.values() if r.attribution]
    if attributions and suite.options.last_good:
        tr.write_line(f"code or machine, against {suite.options.last_good.describe()} (docs/history.md):")
        for attribution in attributions:
            tr.write_line(f"  {attribution.line()}", yellow=attribution.cause != "unchanged")
    unguarded = [f"{r.case.id} (no baseline)" for r in measured.records.values() if r.outcome == "no baseline"]
    unguarded += [
        f"{arch} {v.subject} (no sampling budget)"
        for arch, v, _ in suite.judging.expectation_verdicts
        if v.outcome == "no budget"
    ]
    if unguarded:
        tr.write_line(f"not guarded (nothing stored to judge against): {', '.join(unguarded)}", yellow=True)
    if suite.save_message:
        tr.write_line(suite.save_message, bold=True, red=suite.save_message.startswith("baseline not saved"))
    if suite.summary_path:
        tr.write_line(f"results: {suite.summary_path.parent / 'results.json'}, summary: {suite.summary_path}")
    tr.write_line(f"meddpm: where the time went: {measured.time_split.line(measured.wall_s)}")
    reader = read_ahead.started()
    if reader is not None:
        tr.write_line(f"meddpm: {reader.describe()}")
