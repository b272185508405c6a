"""A/B against a git revision on the CPU: a copy of the package in its own git repository, its iteration
times planted in the workload (planted_repo.py), so that the outcome depends on the code and not on a busy machine.
"""

import contextlib
import fnmatch
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from planted_repo import PACKAGE, git, make_repo, plant_harness_clock, set_clock

from meddpm.errors import UserError
from meddpm.judge.verdict import UNDER_THRESHOLD
from meddpm.measure.processes import revision as revision_module
from meddpm.measure.processes.sides import SAME, OtherSide
from meddpm.suite.measuring import Measuring

# A revision whose workload lacks what the harness imports: refused before measuring, naming where drivable ones begin.
UNDRIVABLE = (
    "--compare-to: HEAD~1 (*) has a workload this harness cannot drive (ImportError: cannot import name 'TrainStep'"
    " from 'meddpm.run.train' *); the first commit after it that this harness drives is * (reference: 100 ms); "
    "compare against it"
)
SUITE_TESTS = PACKAGE.parent / "perf_tests" / "test_training.py"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The planted repository (planted_repo.py), after a first commit whose workload lacks TrainStep."""
    root = make_repo(tmp_path)
    train = root / "meddpm" / "run" / "train.py"
    train.write_text(train.read_text().replace("class TrainStep", "class TrainingStep"))
    git(root, "commit", "-q", "-am", "a workload the harness cannot drive")
    git(root, "revert", "--no-edit", "HEAD")
    git(root, "commit", "-q", "--amend", "-m", "reference: 100 ms")
    return root


def run_ab(repo: Path, *args: str) -> subprocess.CompletedProcess:
    (repo / "test_training.py").write_text(SUITE_TESTS.read_text())
    (repo / "conftest.py").write_text('pytest_plugins = ["meddpm.suite.plugin"]\n')
    cmd = [
        *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfEs", "-m", "cpu", "--combos=baseline,opt1"),
        *("--perf-warmup=0", "--perf-min-rounds=3", "--perf-max-rounds=3", "--perf-rel-iqr=1.0"),
        *("--perf-processes=2", f"--perf-results-dir={repo / 'results'}", "test_training.py", *args),
    ]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(repo), "PYTHONPATH": str(repo)}
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=600)


def test_a_planted_slowdown_fails_and_a_clean_ab_passes(repo):
    # One A/B run judges both: baseline is 10 % slower in the working tree, opt1 is the same code.
    set_clock(repo, baseline=110.0)
    result = run_ab(repo, "--compare-to=HEAD")
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "in 2 processes each, alternating with HEAD" in out
    # The sides' labels once, then their short names: B's figure, then A's; no baseline advice in an A/B.
    assert "\nA/B: A: this tree (" in out and "+dirty, 1 file(s) of meddpm/ changed or new) | B: HEAD (" in out, out
    line = r"tiny/baseline/b1 time regression: HEAD 10\d\.\d ms, this tree 1[01]\d\.\d ms \(ratio 1\.(09|10)"
    assert re.search(line, out), out
    assert "if the change is intended" not in out
    assert "2 vs 2 processes" in out
    # The same code, but each process's PID moves its clock by up to 0.2 %: under the threshold, if significant.
    assert re.search(r"tiny/opt1/b1 time (unchanged|slower under threshold|faster under threshold)", out), out
    assert "1 failed, 1 passed" in out
    assert "Traceback" not in out + result.stderr
    assert not git(repo, "worktree", "list").count("\n"), "the revision's temporary worktree was left behind"


@pytest.mark.parametrize(
    "args, message",
    [
        (("--compare-to=nope",), "--compare-to: unknown revision 'nope'; give a commit, branch or tag that git knows"),
        (("--compare-to=HEAD~1",), UNDRIVABLE),
        (("--compare-to=HEAD", "--save-baseline"), "--compare-to measures two revisions and saves neither; drop"),
        (("--compare-to= ",), "--compare-to is empty; give a commit, branch or tag"),
        (("--compare-to=HEAD", "--perf-processes=1"), "--perf-processes must be at least 2 (an A/B needs a spread*"),
    ],
)
def test_bad_revisions_are_one_line_before_measuring(repo, args, message):
    result = run_ab(repo, *args)
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    error = [line for line in result.stderr.splitlines() if line.startswith("ERROR: ")]
    assert len(error) == 1 and fnmatch.fnmatch(error[0], f"ERROR: {message}*"), result.stderr
    assert "Traceback" not in result.stderr


def run_bench(repo: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "meddpm.bench.cli", "--combos=baseline,opt1", "--warmup=0", "--iters=2", *args]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(repo), "PYTHONPATH": str(repo)}
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=600)


def test_bench_ab_flags_a_planted_slowdown_and_passes_a_clean_combo(repo):
    set_clock(repo, baseline=110.0)  # opt1: the same code on both sides
    result = run_bench(repo, "--compare-to=HEAD", "--processes=2", "--json=ab.json")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "A/B, 2 processes a side: A: this tree (" in result.stdout and " | B: HEAD (" in result.stdout
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith(("baseline ", "opt1 "))}
    assert "regression" in rows["baseline"] and re.search(r" 1\.(09\d\d|10\d\d) ", rows["baseline"]), rows
    assert re.search(r"unchanged|(slower|faster) under threshold", rows["opt1"]), rows  # PID noise, see above
    assert "worse than HEAD (" in result.stdout
    document = json.loads((repo / "ab.json").read_text())
    assert document["comparisons"]["baseline"]["outcome"] == "regression"
    assert document["comparisons"]["opt1"]["outcome"] in ("unchanged", *UNDER_THRESHOLD)
    assert len(document["process_medians_ms"]) == 2  # both sides, two processes each
    assert not git(repo, "worktree", "list").count("\n"), "the revision's temporary worktree was left behind"


def test_bench_refuses_a_revision_whose_workload_the_harness_cannot_drive(repo):
    result = run_bench(repo, "--compare-to=HEAD~1")
    assert result.returncode == 2, result.stdout + result.stderr
    assert fnmatch.fnmatch(result.stderr.strip(), f"meddpm-bench: error: {UNDRIVABLE}"), result.stderr
    assert git(repo, "rev-parse", "HEAD")[:9] in result.stderr  # the first commit it can drive
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("--compare-to=no-such-rev",), "--compare-to: unknown revision 'no-such-rev'; give a commit, branch or tag*"),
        (("--compare-to= ",), "--compare-to is empty; give a commit, branch or tag*"),
        (
            ("--compare-to=HEAD", "--processes=1"),
            "--processes must be at least 2 (an A/B needs a spread on each side)*",
        ),
        (("--processes=0",), "--processes must be at least 1, got 0"),
        (("--until-detectable=0.01",), "--until-detectable stops an A/B's combos early; give --compare-to*"),
        (("--compare-to=HEAD", "--sample"), "--sample would measure the working tree only; run it without*"),
        (("--compare-to=HEAD", "--gpus=1"), "--gpus would measure the working tree only; run it without*"),
    ],
)
def test_bench_bad_process_options_are_one_line_before_measuring(args, message, capsys, tmp_path):
    from meddpm.bench.cli import main

    assert main(["--device=cpu", "--combos=baseline", f"--json={tmp_path / 'r.json'}", *args]) == 2
    err = capsys.readouterr().err
    assert fnmatch.fnmatch(err.strip(), f"meddpm-bench: error: {message}"), err
    assert not (tmp_path / "r.json").exists()


def test_bench_kernel_mix_is_refused_with_processes_before_any_gpu_work():
    from meddpm.bench.processes import plan
    from meddpm.errors import UserError

    with pytest.raises(UserError, match="--kernel-mix profiles the models of this process"):
        plan(2, None, kernel_mix=True, sample=False, gpus=0)
    assert plan(None, None, kernel_mix=True, sample=False, gpus=0).active is False


def test_a_change_to_the_revisions_harness_is_not_measured_as_a_change_in_performance(repo):
    # The revision's harness reads every iteration twice as long; its workload is the working tree's. Both
    # sides run the working tree's harness, so the A/B sees the same code on both sides.
    plant_harness_clock(repo, scale=2.0)
    git(repo, "commit", "-q", "-am", "a harness that reads 200 ms")
    plant_harness_clock(repo, scale=1.0)
    result = run_bench(repo, "--compare-to=HEAD", "--processes=2", "--json=ab.json")
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads((repo / "ab.json").read_text())
    # The planted per-process jitter (up to 0.2 %) may read as significant under the threshold, never more.
    outcomes = {c["outcome"] for c in document["comparisons"].values()}
    assert outcomes <= {"unchanged", *UNDER_THRESHOLD}, document["comparisons"]
    medians = [m for side in document["process_medians_ms"].values() for m in side["baseline"]]
    assert medians and all(m == pytest.approx(100.0, rel=0.01) for m in medians)


def test_a_revision_that_cannot_be_checked_out_is_one_line_for_every_case(suite_options, monkeypatch):
    def refused(rev, root, *rest, **options):
        raise UserError(f"--compare-to: git could not check {rev} out into /tmp/checkout")

    monkeypatch.setattr("meddpm.measure.processes.revision.revision", refused)
    measuring = Measuring(suite_options(compare_to="HEAD", processes=2), None, lambda line: None)
    for _ in range(2):  # every case of the campaign reports the same line
        with pytest.raises(UserError, match="could not check HEAD out"):
            measuring.campaign(False, "tiny", 1)
    measuring.close()


# Appended to the working tree's copy of the harness (interleaved.py): the first process that times an iteration
# (the revision's drive check, which runs one round before any worker) stops there, says where it is, and waits
# for the test's signal: the bench must kill and reap it.
PLANTED_STOP = """

def time_synchronized(fn, device, during=None):
    import os
    import pathlib
    import time

    pathlib.Path(os.environ["MEDDPM_TEST_PLANTED"]).write_text(str(os.getpid()))
    time.sleep(600)
"""


def test_sigterm_during_a_bench_ab_leaves_no_worktree_folder_or_worker_behind(repo, tmp_path):
    campaign = repo / "meddpm" / "measure" / "campaign" / "interleaved.py"
    campaign.write_text((PACKAGE / "measure" / "campaign" / "interleaved.py").read_text() + PLANTED_STOP)
    planted, temp = tmp_path / "worker.pid", tmp_path / "temp"
    temp.mkdir()
    cmd = [sys.executable, "-m", "meddpm.bench.cli", "--combos=baseline", "--warmup=0", "--iters=2"]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(repo), "PYTHONPATH": str(repo), "TMPDIR": str(temp)}
    env["MEDDPM_TEST_PLANTED"] = str(planted)
    bench = subprocess.Popen(
        [*cmd, "--compare-to=HEAD", "--processes=2", "--json=ab.json"],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    worker = None
    try:
        for _ in range(2400):  # the worker's first iteration: the revision is checked out, the worker runs
            if planted.exists() and planted.read_text():
                worker = int(planted.read_text())
                break
            assert bench.poll() is None, bench.communicate()
            time.sleep(0.1)
        assert worker is not None, "the worker never reached its first timed iteration"
        bench.send_signal(signal.SIGTERM)
        out, err = bench.communicate(timeout=120)
        assert bench.returncode == 130, (bench.returncode, out, err)
        assert err.strip().splitlines()[-1] == "meddpm-bench: interrupted", err
        assert "Traceback" not in err
        assert not git(repo, "worktree", "list").count("\n"), "the revision's temporary worktree was left behind"
        left = [p.name for p in temp.iterdir() if p.name.startswith("meddpm-")]  # torch keeps caches there too
        assert not left, "the A/B's or the worker's temporary folder was left behind"
        with pytest.raises(ProcessLookupError):
            os.kill(worker, 0)  # the bench killed and reaped its worker
    finally:
        for pid in (bench.pid, worker):
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        bench.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_are_an_interrupt_only_inside_the_block(signum):
    from meddpm.measure.processes.campaign import signals_as_interrupt

    def before(signum, frame):
        raise AssertionError("the handler from before the block ran inside it")

    previous = signal.signal(signum, before)
    try:
        with pytest.raises(KeyboardInterrupt, match=signal.Signals(signum).name), signals_as_interrupt():
            os.kill(os.getpid(), signum)
            time.sleep(5)  # the handler runs between bytecodes; this is never reached in full
        assert signal.getsignal(signum) is before
    finally:
        signal.signal(signum, previous)


# A parent that starts a worker as the campaign does, the worker writing its PID and then waiting.
ORPHAN = """
import os, pathlib, sys
from meddpm.measure.processes.launch import run_to_the_end
child = "import os, pathlib, time; pathlib.Path(os.environ['PID_FILE']).write_text(str(os.getpid())); time.sleep(600)"
run_to_the_end([sys.executable, "-c", child], pathlib.Path.cwd(), dict(os.environ), 600)
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # dead, waiting for whoever adopted it to reap it


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_a_worker_dies_with_its_parent_even_when_the_parent_is_killed(tmp_path):
    pid_file = tmp_path / "worker.pid"
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent), "PID_FILE": str(pid_file)}
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN], env=env, cwd=tmp_path)
    worker = None
    try:
        for _ in range(600):
            if pid_file.exists() and pid_file.read_text():
                worker = int(pid_file.read_text())
                break
            time.sleep(0.1)
        assert worker is not None, "the worker never started"
        parent.kill()  # SIGKILL: no handler, no finally of the parent runs
        parent.wait()
        for _ in range(100):
            if _gone(worker):
                break
            time.sleep(0.1)
        assert _gone(worker), "the worker outlived its parent"
    finally:
        parent.kill()
        if worker is not None and not _gone(worker):
            os.kill(worker, signal.SIGKILL)


def test_a_revision_missing_a_workload_room_is_refused_not_measured_with_the_harness_room(repo):
    # With no meddpm/data in the revision, its import must fail, never fall back to the working tree's data room.
    git(repo, "rm", "-q", "-r", "meddpm/data")
    git(repo, "commit", "-q", "-m", "no data room")
    git(repo, "revert", "--no-edit", "HEAD")
    result = run_bench(repo, "--compare-to=HEAD~1")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "has a workload this harness cannot drive (ModuleNotFoundError: the workload chosen has no meddpm.data" in (
        result.stderr
    ), result.stderr


def test_a_revision_found_drivable_is_checked_once_a_process_for_what_side_b_runs_under(repo, monkeypatch):
    """The suite checks an A/B's revision as it starts and again as its campaign begins: the second drive check
    (a process importing torch, seconds) is not run; another environment for side B is checked anew."""
    checks = []

    def undrivable(tree, other=SAME):
        checks.append(other)
        return None

    monkeypatch.setattr(revision_module, "undrivable", undrivable)
    monkeypatch.setattr(revision_module, "_drivable", set())
    for other in (SAME, SAME, OtherSide(env=(("MEDDPM_PLANTED", "1"),))):
        with revision_module.revision("HEAD", repo, other=other) as source:
            assert (source.workload / "meddpm").is_dir()
    assert checks == [SAME, OtherSide(env=(("MEDDPM_PLANTED", "1"),))]
