"""A/B across environments on the CPU: side B under a second real interpreter (``--compare-python``) and with
variables of its own (``--compare-env``). The planted repository (planted_repo.py) reads the baseline combo's
iteration time from a variable, so a variable that reaches side B, and only B, shows in the verdict.
"""

import fnmatch
import json
import site
import subprocess
import sys
from pathlib import Path

import pytest
from planted_repo import PACKAGE, make_repo
from test_settings import _Config

from meddpm.errors import UserError
from meddpm.history.results import BENCH_RESULTS, SUITE_RESULTS, results_document
from meddpm.suite.options import parse_options

SUITE_TESTS = PACKAGE.parent / "perf_tests" / "test_training.py"
# The planted workload: the baseline combo's iteration takes this variable's milliseconds (100 without it).
PLANTED_VARIABLE = "MEDDPM_TEST_BASELINE_MS"
PLANTED = f"\nimport os\n\nPLANTED_MS = {{'baseline': float(os.environ.get({PLANTED_VARIABLE!r}, '100'))}}\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = make_repo(tmp_path)
    combos = root / "meddpm" / "run" / "combos.py"
    combos.write_text((PACKAGE / "run" / "combos.py").read_text() + PLANTED)
    return root


def _venv(folder: Path, with_packages: bool) -> Path:
    """A second interpreter: a venv of its own (another executable), with this one's packages where asked."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    if with_packages:
        (target,) = folder.glob("lib/python*/site-packages")
        (target / "meddpm-test.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return folder / "bin" / "python"


def _env(repo: Path) -> dict[str, str]:
    # One thread a process: two cores are shared with other test runs.
    return {"PATH": "/usr/bin:/bin", "HOME": str(repo), "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}


def test_bench_ab_under_another_interpreter_and_a_variable_records_each_side(repo, tmp_path):
    python = _venv(tmp_path / "venv2", with_packages=True)
    cmd = [sys.executable, "-m", "meddpm.bench.cli", "--combos=baseline", "--warmup=0", "--iters=2", "--processes=2"]
    cmd += [f"--compare-python={python}", f"--compare-env={PLANTED_VARIABLE}=90", "--json=ab.json"]
    result = subprocess.run(cmd, cwd=repo, env=_env(repo), capture_output=True, text=True, timeout=900)
    # Side A (100 ms) is slower than B, whose variable makes it 90 ms: the variable reached B only.
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    b = f"under {python} with {PLANTED_VARIABLE}=90"
    assert f"A: python {sys.executable} " in out and f"| B: python {python} " in out, out
    assert f", with {PLANTED_VARIABLE}=90" in out
    assert fnmatch.fnmatch(out, f"*worse than this tree (*) {b}: baseline*"), out
    document = json.loads((repo / "ab.json").read_text())
    assert document["schema"] == "meddpm-bench/4" and document["run_kind"] == "ab"
    assert document["comparisons"]["baseline"]["outcome"] == "regression"
    a_side, b_side = document["sides"]
    assert (a_side["python"], b_side["python"]) == (sys.executable, str(python))
    assert (a_side["env"], b_side["env"]) == ({}, {PLANTED_VARIABLE: "90"})
    assert b_side["label"].endswith(b) and not a_side["label"].endswith(b)
    for side in (a_side, b_side):  # what each side's worker found, not what this process assumes
        found = side["environment"]
        assert found["torch"] and found["python"] == ".".join(map(str, sys.version_info[:3]))


def test_suite_ab_with_a_variable_on_side_b_names_the_sides_and_records_them(repo):
    (repo / "test_training.py").write_text(SUITE_TESTS.read_text())
    (repo / "conftest.py").write_text('pytest_plugins = ["meddpm.suite.plugin"]\n')
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfEs", "-m", "cpu", "--combos=baseline"]
    cmd += ["--perf-warmup=0", "--perf-min-rounds=3", "--perf-max-rounds=3", "--perf-rel-iqr=1.0"]
    cmd += ["--perf-processes=2", f"--perf-results-dir={repo / 'results'}", f"--compare-env={PLANTED_VARIABLE}=90"]
    result = subprocess.run([*cmd, "test_training.py"], cwd=repo, env=_env(repo), capture_output=True, text=True)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert f"in 2 processes each, alternating with this tree with {PLANTED_VARIABLE}=90" in out
    assert f"meddpm: A/B sides: A: python {sys.executable} " in out and f", with {PLANTED_VARIABLE}=90" in out
    # Both sides are this tree: the lines call them A and B, which the legend defines.
    assert fnmatch.fnmatch(out, f"*A/B: A: this tree (*) | B: this tree (*) with {PLANTED_VARIABLE}=90*"), out
    assert "tiny/baseline/b1 time regression: B 90." in out and "1 failed" in out
    results = json.loads((repo / "results" / "results.json").read_text())
    assert results["schema"] == "meddpm-perf-results/3" and results["run_kind"] == "ab"
    assert [side["env"] for side in results["sides"]] == [{}, {PLANTED_VARIABLE: "90"}]


def _fake_python(path: Path, script: str) -> Path:
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda tmp: str(tmp / "missing"), "--compare-python */missing is not an executable; give the path of a*"),
        (lambda tmp: str(tmp), "--compare-python * is not an executable; give the path of a Python interpreter"),
        (
            lambda tmp: _venv(tmp / "bare", with_packages=False),
            "--compare-python */bare/bin/python cannot import "
            "torch: ModuleNotFoundError: No module named 'torch'; install torch in its environment",
        ),
        (
            lambda tmp: _fake_python(tmp / "py38", "echo 3.8.10"),
            "--compare-python */py38's Python 3.8.10 is older than 3.10; give a newer one",
        ),
        (lambda tmp: _fake_python(tmp / "sh", "echo hello"), "--compare-python */sh is not a Python interpreter*"),
    ],
)
def test_bench_refuses_an_interpreter_that_cannot_run_side_b_in_one_line(make, message, tmp_path, capsys):
    from meddpm.bench.cli import main

    json_path = tmp_path / "r.json"
    assert main(["--device=cpu", "--combos=baseline", f"--json={json_path}", f"--compare-python={make(tmp_path)}"]) == 2
    err = capsys.readouterr().err.strip()
    assert fnmatch.fnmatch(err, f"meddpm-bench: error: {message}") and "\n" not in err, err
    assert not json_path.exists()


def test_bench_refuses_a_file_that_is_not_executable(tmp_path, capsys):
    from meddpm.bench.cli import main

    plain = tmp_path / "python"
    plain.write_text("")
    assert main(["--device=cpu", f"--json={tmp_path / 'r.json'}", f"--compare-python={plain}"]) == 2
    assert f"--compare-python {plain} is not an executable" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (("--compare-env=FOO",), "--compare-env 'FOO' has no '='; give NAME=VALUE*"),
        (("--compare-env==1",), "--compare-env '=1' names no variable; give NAME=VALUE*"),
        (("--compare-env=A=1", "--compare-env=A=2"), "--compare-env sets A twice; give each variable once"),
        (("--compare-env=A=1", "--processes=1"), "--processes must be at least 2 (an A/B needs a spread*"),
        (
            ("--compare-env=A=1", "--sample"),
            "--sample would measure the working tree only; run it without --compare-python/--compare-env",
        ),
        (("--compare-env=A=1", "--bisect=HEAD~1..HEAD"), "--bisect runs A/B steps of its own; drop --compare-env"),
    ],
)
def test_bench_refuses_bad_compare_env_in_one_line(args, message, tmp_path, capsys, monkeypatch):
    from meddpm.bench.cli import main

    monkeypatch.setattr("meddpm.bench.processes.check_sides", lambda compare_to, other: None)  # no drive check
    assert main(["--device=cpu", "--combos=baseline", f"--json={tmp_path / 'r.json'}", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert fnmatch.fnmatch(err, f"meddpm-bench: error: {message}"), err


@pytest.mark.parametrize(
    "given, message",
    [
        ({"--compare-env": ["FOO"]}, "--compare-env 'FOO' has no '='"),
        ({"--compare-env": ["=1"]}, "--compare-env '=1' names no variable"),
        ({"--compare-python": "/no/such/python"}, "--compare-python /no/such/python is not an executable"),
        (
            {"--compare-env": ["A=1"], "--save-baseline": True},
            "--compare-env measures two environments and saves neither; drop --save-baseline or --compare-env",
        ),
        ({"--compare-env": ["A=1"], "--perf-processes": 1}, "--perf-processes must be at least 2"),
        ({"--perf-until-detectable": 0.01}, "--perf-until-detectable stops an A/B's combos early; give --compare-to"),
    ],
)
def test_the_suite_refuses_bad_compare_options_in_one_line(given, message, tmp_path):
    with pytest.raises(UserError, match=f"^{message}"):
        parse_options(_Config(tmp_path, **given))


def test_the_suite_takes_side_b_options_as_an_ab_in_processes(tmp_path):
    options = parse_options(
        _Config(tmp_path, **{"--compare-env": ["A=1", "B=x=y"], "--compare-python": sys.executable})
    )
    assert options.ab and options.in_processes and options.processes == 5 and options.until_detectable is None
    stopping = parse_options(_Config(tmp_path, **{"--compare-env": ["A=1"], "--perf-until-detectable": 0.01}))
    assert stopping.until_detectable == 0.01
    assert options.other.env == (("A", "1"), ("B", "x=y")) and options.other.python == sys.executable


@pytest.mark.parametrize("kind, old", [(SUITE_RESULTS, "meddpm-perf-results/2"), (BENCH_RESULTS, "meddpm-bench/3")])
def test_results_before_sides_upgrade_with_none_recorded(kind, old):
    header = {"arch": "cpu", "run_kind": "ab", "processes": 2, "compare_to": "HEAD", "environment": {}}
    document = {"schema": old, **header, "cases": [], "results": []}
    upgraded = kind.upgraded(document)
    assert upgraded["schema"] == kind.current and upgraded["sides"] == []
    assert results_document(upgraded, old, kind).header.sides == []
    with pytest.raises(ValueError, match="sides 'A' is not a list of objects"):
        results_document({**upgraded, "sides": "A"}, kind.current, kind)


# An interpreter for side B that crashes its second measuring process (one started to be handed a job); checks and
# probes run.
CRASHING = """#!/bin/sh
case "$*" in *--job-on-stdin*)
    count=$(cat "$0.count" 2>/dev/null || echo 0); count=$((count + 1)); echo $count > "$0.count"
    if [ $count -eq 2 ]; then echo "RuntimeError: planted crash" >&2; exit 1; fi;;
esac
exec {python} "$@"
"""


def test_a_failed_worker_keeps_the_processes_that_finished_and_names_itself(repo, tmp_path):
    wrapper = tmp_path / "crashing-python"
    wrapper.write_text(CRASHING.format(python=sys.executable))
    wrapper.chmod(0o755)
    cmd = [sys.executable, "-m", "meddpm.bench.cli", "--combos=baseline", "--warmup=0", "--iters=2", "--processes=2"]
    cmd += [f"--compare-python={wrapper}", "--json=ab.json"]
    result = subprocess.run(cmd, cwd=repo, env=_env(repo), capture_output=True, text=True, timeout=900)
    assert result.returncode == 2, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    # A B B A: side B's second process is the third of four.
    assert fnmatch.fnmatch(
        last,
        f"meddpm-bench: error: measuring process 3/4, of this tree (*) under {wrapper}, failed: "
        "RuntimeError: planted crash; ab.json has the processes that finished before it, marked partial",
    ), last
    assert "Traceback" not in result.stderr
    document = json.loads((repo / "ab.json").read_text())
    assert document["partial"] is True and "measuring process 3/4" in document["failed"]
    assert [len(medians["baseline"]) for medians in document["process_medians_ms"].values()] == [1, 1]


@pytest.mark.parametrize(
    "variable, problem",
    [
        ("PYTHONHOME=/nonexistent", "stops Python from starting: Fatal Python error: init_fs_encoding: *"),
        ("PYTHONHASHSEED=abc", "stops Python from starting: Fatal Python error: config_init_hash_seed: *"),
        ("PYTHONINSPECT=1", "keeps Python interactive after its script (as python -i), which no worker can run under"),
    ],
)
def test_an_environment_that_stops_python_is_named_with_its_variable(variable, problem, tmp_path, capsys):
    from meddpm.bench.cli import main

    args = ["--device=cpu", "--combos=baseline", f"--json={tmp_path / 'r.json'}", "--compare-env=OMP_NUM_THREADS=1"]
    assert main([*args, f"--compare-env={variable}"]) == 2
    err = capsys.readouterr().err.strip()
    expected = f"meddpm-bench: error: --compare-env: side B's environment {problem} ({variable}); fix or drop that*"
    assert fnmatch.fnmatch(err, expected) and "\n" not in err, err
