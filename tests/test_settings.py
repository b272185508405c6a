"""The measurement settings' one declaration: the suite, the bench and the worker take their options,
defaults and checks from it, and the shared input checks are one rule for both tools."""

from __future__ import annotations

import argparse
import errno
import os
import tempfile
from pathlib import Path

import pytest

from meddpm.bench.cli import _parser as bench_parser
from meddpm.bench.cli import _settings as bench_settings
from meddpm.bench.cli import main as bench_main
from meddpm.errors import UserError
from meddpm.measure.campaign import inputs
from meddpm.measure.campaign.settings import (
    BENCH,
    SETTINGS,
    SUITE,
    CampaignSettings,
    campaign_settings,
    offered,
    worker_arguments,
)
from meddpm.measure.energy.heat_soak import SoakPlan
from meddpm.measure.processes.measuring_process import _parser as worker_parser
from meddpm.suite.options import add_options, parse_options


class _Group:
    """A pytest option group that records what is declared on it."""

    def __init__(self) -> None:
        self.options: dict[str, dict] = {}

    def addoption(self, name: str, **kwargs) -> None:
        self.options[name] = kwargs


class _SuiteParser:
    def __init__(self) -> None:
        self.group = _Group()

    def getgroup(self, *_: str) -> _Group:
        return self.group


def suite_declared() -> dict[str, dict]:
    parser = _SuiteParser()
    add_options(parser)
    return parser.group.options


class _Config:
    """The suite's options as pytest hands them over: the declared defaults and the values given."""

    def __init__(self, rootpath: Path, **given: object) -> None:
        self.rootpath = rootpath
        self.values = {
            name: kwargs.get("default", False if kwargs.get("action") == "store_true" else None)
            for name, kwargs in suite_declared().items()
        }
        self.values.update({"--perf-results-dir": rootpath / "results", **given})

    def getoption(self, name: str, default: object = None) -> object:
        # pytest's own options (``markexpr``) are not the suite's: their default, as pytest gives it.
        return self.values[name] if name in self.values else default


def bench_declared() -> dict[str, argparse.Action]:
    return {a.option_strings[0]: a for a in bench_parser()._actions if a.option_strings}


def test_every_setting_is_an_option_of_the_tools_that_offer_it_with_no_default_of_its_own():
    suite, bench = suite_declared(), bench_declared()
    for s in SETTINGS:
        for tool, declared, option in ((SUITE, suite, f"--perf-{s.name}"), (BENCH, bench, f"--{s.name}")):
            if tool not in s.defaults:
                assert option not in declared
                continue
            # None: the default is the table's, for the device the run is on.
            kwargs = declared[option] if tool == SUITE else vars(declared[option])
            assert (kwargs["type"], kwargs["default"]) == (s.type, None), option
            assert kwargs["help"] == s.help_for(tool)
    both = {s.name for s in SETTINGS if {SUITE, BENCH} <= set(s.defaults)}
    assert both == {"warmup", "min-rounds", "max-rounds", "rel-iqr", "budget", "median-precision"}


@pytest.mark.parametrize("on_gpu", [True, False])
def test_both_tools_default_from_the_table(on_gpu, tmp_path):
    suite = parse_options(_Config(tmp_path)).campaign_settings(on_gpu)
    assert suite == campaign_settings({}, SUITE, on_gpu, energy=True)
    bench_args = bench_parser().parse_args(["--min-rounds", "5"])  # adaptive on the CPU too, as on a GPU
    assert bench_settings(bench_args, on_gpu) == campaign_settings({}, BENCH, on_gpu)
    for tool, settings in ((SUITE, suite), (BENCH, campaign_settings({}, BENCH, on_gpu))):
        for s in offered(tool):
            assert getattr(settings, s.field) == s.default(tool, on_gpu), (tool, s.name)


def test_the_defaults_per_tool_and_device_are_those_of_before():
    fields = ("warmup", "min_rounds", "max_rounds", "rel_iqr_target", "budget_s", "median_precision", "energy_error")

    def of(tool, on_gpu):
        settings = campaign_settings({}, tool, on_gpu)
        return tuple(getattr(settings, f) for f in fields)

    assert of(SUITE, True) == (1, 5, 500, 0.03, 600.0, 0.002, 0.02)
    assert of(SUITE, False) == (1, 5, 8, 0.25, 60.0, 0.0, 0.02)
    assert of(BENCH, True) == (1, 5, 500, 0.02, 300.0, 0.002, 0.01)
    assert of(BENCH, False) == (1, 5, 30, 0.02, 300.0, 0.0, 0.01)


def test_a_default_round_limit_rises_to_the_least_given():
    assert campaign_settings({"min_rounds": 12}, SUITE, on_gpu=False).max_rounds == 12
    assert campaign_settings({"min_rounds": 40}, BENCH, on_gpu=False).max_rounds == 40


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("warmup", -1, "--{}warmup must be at least 0, got -1"),
        ("min-rounds", 0, "--{}min-rounds must be at least 1, got 0"),
        ("max-rounds", 2, "--{}max-rounds must be at least 5, got 2"),
        ("rel-iqr", 0.0, "--{}rel-iqr must be above 0, got 0.0"),
        ("budget", -1.0, "--{}budget must be above 0, got -1.0"),
        ("budget", float("inf"), "--{}budget must be finite, got inf; give a number of the size you mean"),
        ("rel-iqr", float("inf"), "--{}rel-iqr must be finite, got inf; give a number of the size you mean"),
        ("median-precision", 1.0, "--{}median-precision must be 0 (off) or between 0 and 1, got 1.0"),
        ("warmup", 1001, "--{}warmup must be at most 1000, got 1001; see --help for what it costs"),
        ("min-rounds", 10001, "--{}min-rounds must be at most 10000, got 10001; see --help for what it costs"),
        ("max-rounds", 20000, "--{}max-rounds must be at most 10000, got 20000; see --help for what it costs"),
    ],
)
def test_a_bad_setting_is_refused_by_both_tools_with_the_same_message(name, value, message, tmp_path, capsys):
    with pytest.raises(UserError) as suite_error:
        parse_options(_Config(tmp_path, **{f"--perf-{name}": value}))
    assert str(suite_error.value) == message.format("perf-")
    assert bench_main(["--device", "cpu", "--json", str(tmp_path / "r.json"), f"--{name}", str(value)]) == 2
    assert capsys.readouterr().err.strip() == f"meddpm-bench: error: {message.format('')}"


def test_the_worker_reads_back_every_field_the_parent_resolved():
    sent = CampaignSettings(
        warmup=0,
        min_rounds=7,
        max_rounds=70,
        rel_iqr_target=0.125,
        budget_s=12.5,
        median_precision=0.002,
        energy_error=0.02,
        energy=False,
        energy_soak=SoakPlan(window_s=2.0),
    )
    args = worker_parser().parse_args(
        ["--preset", "tiny", "--combos", "x", "--device", "cpu", "--out", "o", *worker_arguments(sent)]
    )
    assert args.settings == sent


def test_combos_are_one_rule_for_both_tools(tmp_path, capsys):
    assert inputs.parse_combos("all") == inputs.parse_combos(",".join(inputs.combos_for(None, on_gpu=True)))
    assert parse_options(_Config(tmp_path, **{"--combos": "all"})).combos == inputs.parse_combos("all")
    for bad in (" , ", "opt2,baseline,opt2"):
        with pytest.raises(UserError) as suite_error:
            parse_options(_Config(tmp_path, **{"--combos": bad}))
        assert bench_main(["--device", "cpu", "--json", str(tmp_path / "r.json"), "--combos", bad]) == 2
        assert capsys.readouterr().err.strip() == f"meddpm-bench: error: {suite_error.value}"


def test_processes_with_a_revision_are_one_rule_for_both_tools():
    assert inputs.process_count("--processes", None, None) == 1
    assert inputs.process_count("--processes", None, "HEAD") == 5
    for option in ("--processes", "--perf-processes"):
        with pytest.raises(UserError, match=f"^{option} must be at least 2 \\(an A/B needs a spread on each side\\)"):
            inputs.process_count(option, 1, "HEAD")
        with pytest.raises(UserError, match=f"^{option} must be at most 32, got 33;"):
            inputs.process_count(option, 33, None)
    with pytest.raises(UserError, match="^--compare-to is empty"):
        inputs.revision("  ")


def test_a_folder_the_os_refuses_is_unwritable_whatever_its_permission_bits(tmp_path, monkeypatch):
    # A read-only mount or an ACL, as root sees it: the bits allow writing, the file cannot be made.
    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    with pytest.raises(UserError) as folder:
        inputs.writable_folder("--perf-results-dir", tmp_path / "results")
    assert str(folder.value) == (
        f"--perf-results-dir {tmp_path / 'results'} cannot be written (Permission denied in {tmp_path}); "
        "choose another folder"
    )
    with pytest.raises(UserError, match="^cannot write the results to .*: Permission denied in "):
        inputs.writable_file("--json", tmp_path / "r.json", "the results")


def test_the_writability_probe_leaves_nothing_behind(tmp_path):
    inputs.writable_folder("--baseline-dir", tmp_path / "new" / "baselines")
    inputs.writable_file("--json", tmp_path / "r.json", "the results")
    assert list(tmp_path.iterdir()) == []


def test_a_path_the_system_cannot_look_up_is_one_line(tmp_path):
    # The system refuses to stat a name over NAME_MAX (ENAMETOOLONG) or a symlink loop (ELOOP).
    too_long = tmp_path / ("x" * 300 + ".json")
    with pytest.raises(UserError, match=r"^--json .*x\.json: File name too long; give another path$"):
        inputs.writable_file("--json", too_long, "the results")
    with pytest.raises(UserError, match=r"^--perf-results-dir .*: File name too long; give another path$"):
        inputs.writable_folder("--perf-results-dir", too_long)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(UserError, match=r"^--json .*loop: Too many levels of symbolic links; give another path$"):
        inputs.writable_file("--json", loop, "the results")


def test_an_immutable_results_file_is_refused_before_measuring(tmp_path, monkeypatch):
    # chattr +i needs root: the open the probe makes gets the EPERM an immutable or append-only file gives.
    target = tmp_path / "r.json"
    target.write_text("old")
    real_open = os.open

    def immutable(path, flags, *args):
        if Path(path) == target and flags & (os.O_WRONLY | os.O_RDWR):
            raise PermissionError(errno.EPERM, "Operation not permitted", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", immutable)
    with pytest.raises(UserError, match=r"^cannot write the results to .*r\.json: Operation not permitted replacing"):
        inputs.writable_file("--json", target, "the results")
    assert target.read_text() == "old"
    monkeypatch.undo()
    target.chmod(0o444)  # permission bits alone do not stop the atomic writer's rename: accepted
    inputs.writable_file("--json", target, "the results")


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--ncu-replay", "zz", "unknown ncu replay mode 'zz'"),
        ("--ncu-timeout", -1.0, "--ncu-timeout must be above 0, got -1.0"),
    ],
)
def test_a_mistyped_ncu_setting_is_refused_without_ncu_too(option, value, message, tmp_path):
    with pytest.raises(UserError, match=f"^{message}"):
        parse_options(_Config(tmp_path, **{option: value}))


@pytest.mark.parametrize("spec", ["baseline,,opt2", "baseline,", ",baseline", "baseline, ,opt2"])
def test_an_empty_combo_name_is_refused_not_skipped(spec):
    with pytest.raises(UserError, match="has an empty name; give the names separated by single commas$"):
        inputs.parse_combos(spec)
