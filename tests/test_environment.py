"""What every result records about where it was measured (the history tells runs apart by it)."""

import torch

from meddpm.measure.machine.environment import environment, git_branch


def test_a_result_names_its_branch_and_host(monkeypatch):
    monkeypatch.setenv("RUNNER_NAME", "runner-7")
    monkeypatch.setenv("MEDDPM_BRANCH", "feature/faster-norm")
    env = environment(torch.device("cpu"))
    assert env["host"] == "runner-7" and env["branch"] == "feature/faster-norm"


def test_a_workflow_branch_wins_over_a_detached_checkout(monkeypatch):
    monkeypatch.delenv("MEDDPM_BRANCH", raising=False)
    monkeypatch.setenv("GITHUB_HEAD_REF", "pr-branch")
    assert git_branch() == "pr-branch"
