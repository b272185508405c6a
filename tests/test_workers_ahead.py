"""Workers started ahead of their turn: each imports while the process before it measures, and waits for its job.

The campaign's turns run one after another on the GPU; what overlaps is only the next worker's start (imports,
then its models built while the worker before it exits), never two workers' iterations. A worker that gets no
job (the run stopped early, failed or was interrupted) is killed before it touches the GPU. The planted workers
here record what the campaign asked of them; the tests named "a real worker" start real workers on the CPU.
"""

from __future__ import annotations

import json
import signal
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
from meddpm.measure.processes.launch import (
    JOB_ON_STDIN,
    RESULTS_WRITTEN,
    StartedWorker,
    harness_root,
    worker_command,
)
from meddpm.measure.processes.worker import WORKER_SCHEMA
from meddpm.model.config import ModelConfig


def planted_workers(
    monkeypatch, tmp_path: Path, fail_turn: int | None = None, fail_exit: int | None = None, hang_exit: int = 0
) -> list[str]:
    """Replace the campaign's workers by ones that log ``start``, ``run`` (its job handed), ``go`` (the GPU its
    own), ``end`` (its exit waited for) and ``cancel`` by turn, and write each combo's planted run
    (``fail_turn``'s worker ends without its results instead; ``fail_exit``'s exits 1 after writing them;
    ``hang_exit``'s never exits)."""
    events: list[str] = []
    started = iter(range(1, 100))

    class Worker:
        def __init__(self, workload, python, env):
            self.turn = next(started)
            events.append(f"start {self.turn}")

        def run(self, job, timeout_s, gpu_free):
            events.append(f"run {self.turn}")
            gpu_free()
            events.append(f"go {self.turn}")
            if self.turn == fail_turn:
                return False
            combos = job[job.index("--combos") + 1].split(",")
            results = [asdict(run_of(c, [100.0 + self.turn % 2 * 0.5] * 3)) for c in combos]
            document = {"schema": WORKER_SCHEMA, "harness": str(harness_root() / "meddpm"),
                        "workload": str(tmp_path / "meddpm"), "environment": {}, "results": results}  # fmt: skip
            Path(job[job.index("--out") + 1]).write_text(json.dumps(document))
            return True

        def end(self, timeout_s):
            events.append(f"end {self.turn}")
            if self.turn == hang_exit:
                raise subprocess.TimeoutExpired([], timeout_s)
            failed = self.turn == fail_exit
            return subprocess.CompletedProcess([], int(failed), "", "Fatal Python error: planted\n" if failed else "")

        def cancel(self):
            events.append(f"cancel {self.turn}")
            return subprocess.CompletedProcess([], -9, "", "RuntimeError: planted\n" if self.turn == fail_turn else "")

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
    # Each worker gets its job once the one before wrote its results, and the GPU once that one has exited.
    turns = [f"start {t + 1}, run {t}, end {t - 1}, go {t}" for t in (2, 3)]
    assert ", ".join(events) == ", ".join(["start 1, start 2, run 1, go 1", *turns, "run 4, end 3, go 4, end 4"])
    assert [len(run.measurements(s)["baseline"].runs) for s in run.sources] == [2, 2]


def test_a_run_that_stops_early_kills_the_worker_started_for_the_turn_it_skips(monkeypatch, tmp_path):
    events = planted_workers(monkeypatch, tmp_path)
    # A 50 % change is detectable after two processes a side: the third pair never runs.
    run = campaign(tmp_path, processes_a_side=3, until=0.5)
    run.run()
    assert events[-3:] == ["go 4", "end 4", "cancel 5"] and "run 5" not in events


def test_a_failed_turn_kills_the_worker_started_after_it(monkeypatch, tmp_path):
    events = planted_workers(monkeypatch, tmp_path, fail_turn=2)
    with pytest.raises(ProcessFailed, match="measuring process 2/4, of B, failed: RuntimeError: planted"):
        campaign(tmp_path, processes_a_side=2).run()
    assert ", ".join(events) == "start 1, start 2, run 1, go 1, start 3, run 2, end 1, go 2, cancel 2, cancel 3"


def test_a_worker_failing_at_its_exit_fails_the_run_before_the_next_touches_the_gpu(monkeypatch, tmp_path):
    events = planted_workers(monkeypatch, tmp_path, fail_exit=2)
    run = campaign(tmp_path, processes_a_side=2)
    match = "measuring process 2/4, of B, failed after writing its results: Fatal Python error: planted"
    with pytest.raises(ProcessFailed, match=match):
        run.run()
    # The third worker got its job, never the GPU (a real one is killed as its run raises); the fourth, started
    # ahead, is killed.
    assert events[-4:] == ["start 4", "run 3", "end 2", "cancel 4"] and "go 3" not in events
    assert [len(run.measurements(s)["baseline"].runs) for s in run.sources] == [1, 1]  # its results are kept


def test_a_worker_that_never_exits_after_writing_its_results_fails_the_run_in_one_line(monkeypatch, tmp_path):
    events = planted_workers(monkeypatch, tmp_path, hang_exit=1)
    match = r"measuring process 1/4, of A, did not exit within 120 s of writing its results"
    with pytest.raises(ProcessFailed, match=match):
        campaign(tmp_path, processes_a_side=2).run()
    assert events[-3:] == ["run 2", "end 1", "cancel 3"] and "go 2" not in events


def test_an_interrupted_turn_kills_the_worker_started_after_it(monkeypatch, tmp_path):
    events = planted_workers(monkeypatch, tmp_path)
    original = processes.StartedWorker.run

    def interrupted(self, job, timeout_s, gpu_free):
        if self.turn == 2:
            raise KeyboardInterrupt
        return original(self, job, timeout_s, gpu_free)

    monkeypatch.setattr(processes.StartedWorker, "run", interrupted)
    run = campaign(tmp_path, processes_a_side=2)
    with pytest.raises(KeyboardInterrupt):
        run.run()
    # The first, which wrote its results, is not waited for: a run cut short ends its workers.
    assert events == ["start 1", "start 2", "run 1", "go 1", "start 3", "cancel 3", "cancel 1"]
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
    held = []
    try:
        sent = time.time()
        written = worker.run(job, timeout_s=300, gpu_free=lambda: held.append(time.time()))
        ended = time.time()
        exited = worker.end(timeout_s=300)
    finally:
        worker.cancel()
    assert written and exited.returncode == 0 and RESULTS_WRITTEN in exited.stdout, exited.stderr
    document = json.loads(out.read_text())
    assert document["schema"] == WORKER_SCHEMA and [r["combo"] for r in document["results"]] == ["baseline"]
    clock = document["results"][0]["process_clock"]  # the worker's own clock, read against this one's
    # The GPU was handed over once; that the worker waits for it is the tests around this one's.
    assert sent <= clock["job"] <= clock["measured"] <= ended and len(held) == 1


def test_a_real_worker_whose_gpu_never_frees_is_killed_before_its_first_iteration(tmp_path):
    out = tmp_path / "result.json"
    job = ["--preset", "tiny", "--combos", "baseline", "--device", "cpu", "--out", str(out)]
    worker = StartedWorker(harness_root(), sys.executable, ())

    def gpu_free():
        raise KeyboardInterrupt  # Ctrl-C while the worker before it exits

    with pytest.raises(KeyboardInterrupt):
        worker.run(job, timeout_s=300, gpu_free=gpu_free)
    assert worker.end(timeout_s=5).returncode == -signal.SIGKILL and not out.exists()


def test_a_real_worker_runs_no_iteration_before_the_gpu_is_its_own(tmp_path):
    """Its job handed, it builds its model, then waits for GPU_FREE: here it never comes, and the worker ends
    without an iteration (each warm-up iteration prints a progress line) once its stdin closes."""
    out = tmp_path / "result.json"
    settings = CampaignSettings(warmup=1, min_rounds=1, max_rounds=1, energy=False)
    job = ["--preset", "tiny", "--combos", "baseline", "--device", "cpu", "--settings", json.dumps(asdict(settings)),
           "--out", str(out)]  # fmt: skip
    worker = subprocess.run(
        [*worker_command(harness_root()), JOB_ON_STDIN],
        cwd=harness_root(),
        input=json.dumps(job) + "\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert worker.returncode == 0 and worker.stdout == "" and not out.exists(), worker.stdout + worker.stderr


def test_a_process_line_says_what_the_worker_spent_outside_its_phases():
    results = [run_of("baseline", [10.0]), run_of("fast", [10.0])]
    for result, phases in zip(results, ({"start-up": 1.0, "measuring": 4.0}, {"compiling": 5.0})):
        result.phase_s = phases
        result.process_clock = {"job": 100.0, "measured": 112.0}
    line = outside_phases(results, sent=99.5, ended=118.0)
    parts = ("0.5 s importing before its job", "2.0 s setting up", "0.0 s waiting for the one before to exit",
             "6.0 s writing and read back")  # fmt: skip
    assert line == "; outside its phases: " + ", ".join(parts)
    for result in results:
        result.process_clock = {"job": 100.0, "waited": 1.5, "measured": 112.0}
    assert "0.5 s setting up, 1.5 s waiting for the one before to exit" in outside_phases(results, 99.5, 118.0)
    results[0].process_clock = {}  # a worker that kept no clock
    assert outside_phases(results, 99.5, 118.0) == "" == outside_phases([], 99.5, 118.0)


def test_a_worker_waiting_for_its_job_has_imported_the_compiler_and_touched_no_device():
    probe = (
        "import sys, torch; from meddpm.measure.processes import measuring_process as m; m.import_ahead(); "
        "print('torch._inductor.compile_fx' in sys.modules, torch.cuda.is_initialized())"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600)
    assert result.stdout.split() == ["True", "False"], result.stdout + result.stderr
