"""Workers started ahead of their turn: each imports while the process before it measures, and waits for its job.

The campaign's turns run one after another on the GPU; what overlaps is only the next worker's start (imports),
never two measurements. A worker that gets no job (the run stopped early, failed or was interrupted) is killed
before it touches the GPU. The planted workers here record what the campaign asked of them; the last two tests
start real workers on the CPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from test_campaign_runs import run_of

from meddpm.measure.campaign.protocol import Source
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.measure.processes import campaign as processes
from meddpm.measure.processes.campaign import ProcessCampaign, ProcessFailed, outside_phases
from meddpm.measure.processes.launch import JOB_ON_STDIN, StartedWorker, harness_root, worker_command
from meddpm.measure.processes.worker import WORKER_SCHEMA
from meddpm.model.config import ModelConfig


def planted_workers(monkeypatch, tmp_path: Path, fail_turn: int | None = None) -> list[str]:
    """Replace the campaign's workers by ones that log ``start``, ``run`` and ``cancel`` by turn, and write each
    combo's planted run (``fail_turn``'s worker exits 1 instead)."""
    events: list[str] = []
    started = iter(range(1, 100))

    class Worker:
        def __init__(self, workload, python, env):
            self.turn = next(started)
            events.append(f"start {self.turn}")

        def run(self, job, timeout_s):
            events.append(f"run {self.turn}")
            if self.turn == fail_turn:
                return subprocess.CompletedProcess(job, 1, "", "RuntimeError: planted\n")
            combos = job[job.index("--combos") + 1].split(",")
            results = [asdict(run_of(c, [100.0 + self.turn % 2 * 0.5] * 3)) for c in combos]
            document = {"schema": WORKER_SCHEMA, "harness": str(harness_root() / "meddpm"),
                        "workload": str(tmp_path / "meddpm"), "environment": {}, "results": results}  # fmt: skip
            Path(job[job.index("--out") + 1]).write_text(json.dumps(document))
            return subprocess.CompletedProcess(job, 0, "", "")

        def cancel(self):
            events.append(f"cancel {self.turn}")

    monkeypatch.setattr(processes, "StartedWorker", Worker)
    return events


def campaign(tmp_path: Path, processes_a_side: int, until: float | None = None) -> ProcessCampaign:
    return ProcessCampaign(
        ModelConfig.preset("tiny"),
        ["baseline"],
        torch.device("cpu"),
        batch_size=1,
        settings=CampaignSettings(energy=False),
        processes=processes_a_side,
        sources=[Source("A", tmp_path, "a"), Source("B", tmp_path, "b")],
        until_detectable=until,
    )


def test_each_turns_worker_starts_during_the_turn_before_and_none_is_left_over(monkeypatch, tmp_path):
    events = planted_workers(monkeypatch, tmp_path)
    run = campaign(tmp_path, processes_a_side=2)
    run.run()
    assert events == ["start 1", "start 2", "run 1", "start 3", "run 2", "start 4", "run 3", "run 4"]
    assert [len(run.measurements(s)["baseline"].runs) for s in run.sources] == [2, 2]


def test_a_run_that_stops_early_kills_the_worker_started_for_the_turn_it_skips(monkeypatch, tmp_path):
    events = planted_workers(monkeypatch, tmp_path)
    # A 50 % change is detectable after two processes a side: the third pair never runs.
    run = campaign(tmp_path, processes_a_side=3, until=0.5)
    run.run()
    assert events[-3:] == ["start 5", "run 4", "cancel 5"] and "run 5" not in events


def test_a_failed_turn_kills_the_worker_started_after_it(monkeypatch, tmp_path):
    events = planted_workers(monkeypatch, tmp_path, fail_turn=2)
    with pytest.raises(ProcessFailed, match="measuring process 2/4, of B, failed: RuntimeError: planted"):
        campaign(tmp_path, processes_a_side=2).run()
    assert events == ["start 1", "start 2", "run 1", "start 3", "run 2", "cancel 3"]


def test_an_interrupted_turn_kills_the_worker_started_after_it(monkeypatch, tmp_path):
    events = planted_workers(monkeypatch, tmp_path)
    original = processes.StartedWorker.run

    def interrupted(self, job, timeout_s):
        if self.turn == 2:
            raise KeyboardInterrupt
        return original(self, job, timeout_s)

    monkeypatch.setattr(processes.StartedWorker, "run", interrupted)
    run = campaign(tmp_path, processes_a_side=2)
    with pytest.raises(KeyboardInterrupt):
        run.run()
    assert events == ["start 1", "start 2", "run 1", "start 3", "cancel 3"]
    assert [len(run.measurements(s)["baseline"].runs) for s in run.sources] == [1, 0]


def test_a_real_worker_given_no_job_ends_without_measuring():
    worker = subprocess.run(
        [*worker_command(harness_root()), JOB_ON_STDIN],
        cwd=harness_root(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert worker.returncode == 0 and worker.stdout == "", worker.stderr


def test_a_real_worker_started_ahead_runs_the_job_it_is_handed(tmp_path):
    out = tmp_path / "result.json"
    settings = CampaignSettings(warmup=0, min_rounds=1, max_rounds=1, energy=False)
    job = ["--preset", "tiny", "--combos", "baseline", "--device", "cpu", "--settings", json.dumps(asdict(settings)),
           "--out", str(out)]  # fmt: skip
    worker = StartedWorker(harness_root(), sys.executable, ())
    sent = time.time()
    done = worker.run(job, timeout_s=300)
    ended = time.time()
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    assert document["schema"] == WORKER_SCHEMA and [r["combo"] for r in document["results"]] == ["baseline"]
    clock = document["results"][0]["process_clock"]  # the worker's own clock, read against this one's
    assert sent <= clock["job"] <= clock["measured"] <= ended


def test_a_process_line_says_what_the_worker_spent_outside_its_phases():
    results = [run_of("baseline", [10.0]), run_of("fast", [10.0])]
    for result, phases in zip(results, ({"start-up": 1.0, "measuring": 4.0}, {"compiling": 5.0})):
        result.phase_s = phases
        result.process_clock = {"job": 100.0, "measured": 112.0}
    line = outside_phases(results, sent=99.5, ended=118.0)
    parts = ("0.5 s importing before its job", "2.0 s setting up", "6.0 s writing, exiting and read back")
    assert line == "; outside its phases: " + ", ".join(parts)
    results[0].process_clock = {}  # a worker that kept no clock
    assert outside_phases(results, 99.5, 118.0) == "" == outside_phases([], 99.5, 118.0)


def test_a_worker_waiting_for_its_job_has_imported_the_compiler_and_touched_no_device():
    probe = (
        "import sys, torch; from meddpm.measure.processes import measuring_process as m; m.import_ahead(); "
        "print('torch._inductor.compile_fx' in sys.modules, torch.cuda.is_initialized())"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600)
    assert result.stdout.split() == ["True", "False"], result.stdout + result.stderr
