"""What every result records about where it was measured (the history tells runs apart by it)."""

import subprocess

import torch

from meddpm.measure.machine.environment import ci_job, commit_subject, environment, git_branch, git_commit


def test_a_result_names_its_branch_and_host(monkeypatch):
    monkeypatch.setenv("RUNNER_NAME", "runner-7")
    monkeypatch.setenv("MEDDPM_BRANCH", "feature/faster-norm")
    env = environment(torch.device("cpu"))
    assert env["host"] == "runner-7" and env["branch"] == "feature/faster-norm"


def test_a_workflow_branch_wins_over_a_detached_checkout(monkeypatch):
    monkeypatch.delenv("MEDDPM_BRANCH", raising=False)
    monkeypatch.setenv("GITHUB_HEAD_REF", "pr-branch")
    assert git_branch() == "pr-branch"


def test_the_recorded_commit_says_when_the_code_differs_from_it(tmp_path, monkeypatch):
    monkeypatch.delenv("MEDDPM_COMMIT", raising=False)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "f.py").write_text("a = 1\n")
    subprocess.run([*git, "add", "f.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert git_commit(tmp_path) == head
    (tmp_path / "f.py").write_text("a = 2\n")
    assert git_commit(tmp_path) == f"{head}+dirty"
    assert git_commit(tmp_path / "missing") == "unknown"


def test_a_result_names_its_commit_subject_where_git_knows_the_commit(tmp_path):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "norm: fuse the <script> path\n\nbody"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert commit_subject(head, tmp_path) == commit_subject(f"{head}+dirty", tmp_path) == "norm: fuse the <script> path"
    assert commit_subject("0" * 40, tmp_path) is None and commit_subject("unknown", tmp_path) is None


def test_a_result_measured_in_a_github_actions_job_links_to_the_job_attempt(monkeypatch):
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "org/meddpm-perf")
    monkeypatch.setenv("GITHUB_RUN_ID", "123")
    monkeypatch.setenv("GITHUB_RUN_ATTEMPT", "2")
    assert (
        environment(torch.device("cpu"))["ci_job"] == "https://github.com/org/meddpm-perf/actions/runs/123/attempts/2"
    )
    monkeypatch.delenv("GITHUB_RUN_ID")
    assert ci_job() is None
