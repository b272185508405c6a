"""The bench command's decisions, with a stand-in campaign: what it refuses before measuring, the
CPU defaults, the rounds asked for, progress in a log, DDP wording, and failures at the end."""

import json
import os
import signal
import stat
import tempfile

import pytest
import torch

from meddpm.bench.cli import main
from meddpm.errors import UserError
from meddpm.measure.campaign.inputs import CPU_DEFAULT_COMBOS
from meddpm.measure.campaign.interleaved import ComboResult, Progress
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.measure.campaign.time_split import TimeSplit
from meddpm.measure.processes.campaign import ProcessCampaign
from meddpm.measure.processes.ddp import DdpResult
from meddpm.report.tables import ddp_table
from meddpm.run.combos import COMBOS, get_combo


def combo_result(combo: str, samples_ms: list[float], warmup_ms=(), settings=None) -> ComboResult:
    """A tiny preset's result of ``combo`` with these samples, as a campaign makes it."""
    return ComboResult(
        preset="tiny",
        combo=combo,
        batch_size=1,
        volume=(16, 16, 16),
        math_precision=get_combo(combo).math_precision,
        samples_ms=samples_ms,
        warmup_ms=list(warmup_ms),
        setup_s=0.1,
        flops_per_iter=10**9,
        rel_iqr_target=(settings or CampaignSettings()).rel_iqr_target,
    )


class FakeCampaign:
    """Campaign's interface, measuring nothing: results at once, progress as the real one reports it."""

    @staticmethod
    def observe() -> None:
        """Called after each progress report (a test replaces it to see what was printed by then)."""

    interrupt_after_round: int | None = None  # a test plants a Ctrl-C after this round

    @staticmethod
    def interrupt() -> None:
        """The planted interrupt: Ctrl-C (a test may send a signal instead)."""
        raise KeyboardInterrupt

    def __init__(self, config, combos, device, *, batch_size, settings):
        self.config, self.combos, self.device = config, combos, device
        self.batch_size, self.settings = batch_size, settings
        self.steps: dict = {}
        self.results: dict[str, ComboResult] = {}
        self.time_split = TimeSplit()

    def run(self, on_progress=None):
        notify = on_progress or (lambda _: None)
        s = self.settings
        for combo in self.combos:
            self.results[combo.name] = combo_result(combo.name, [], warmup_ms=[100.0] * s.warmup, settings=s)
            for i in range(s.warmup):
                notify(Progress("warmup", combo.name, i + 1, s.warmup, "0.1 s"))
                self.observe()
        for done in range(1, s.min_rounds + 1):
            for result in self.results.values():
                result.samples_ms.append(10.0 + done - 1)
            notify(Progress("round", "", done, s.max_rounds, "worst rel. IQR 1.0% (baseline)" if done > 1 else ""))
            self.observe()
            if done == self.interrupt_after_round:
                self.interrupt()
        for result in self.results.values():
            result.stop_reason = f"round limit of {s.min_rounds} reached"
        return self.results

    def close(self) -> None:
        self.steps.clear()


@pytest.fixture
def campaigns(monkeypatch):
    """The campaigns the command makes, each a FakeCampaign."""
    made: list[FakeCampaign] = []

    def make(*args, **kwargs) -> FakeCampaign:
        made.append(FakeCampaign(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr("meddpm.bench.cli.Campaign", make)
    # The RAM estimate traces the model (a second or so); it has tests of its own below.
    monkeypatch.setattr("meddpm.bench.host_ram.available_memory", lambda: None)
    return made


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("meddpm-bench: error: "), err
    return err[0].removeprefix("meddpm-bench: error: ")


# --- 1. what the run will write, and the extras, checked before the first iteration -------------
def test_json_pointing_at_a_directory_is_refused_before_measuring(tmp_path, no_campaign, capsys):
    assert main(["--device", "cpu", "--json", str(tmp_path)]) == 2
    assert one_error_line(capsys) == (
        f"{tmp_path} is a directory; give --json a file path such as {tmp_path / 'results.json'}"
    )


def test_empty_json_is_refused_before_measuring(no_campaign, capsys):
    assert main(["--device", "cpu", "--json", ""]) == 2
    assert one_error_line(capsys) == "--json is empty; give a file path such as results.json"


def test_json_below_a_file_is_refused_before_measuring(tmp_path, no_campaign, capsys):
    (tmp_path / "notes.txt").write_text("")
    assert main(["--device", "cpu", "--json", str(tmp_path / "notes.txt" / "sub" / "r.json")]) == 2
    assert f"{tmp_path / 'notes.txt'} is a file" in one_error_line(capsys)


def test_json_in_a_read_only_directory_is_refused_before_measuring(tmp_path, no_campaign, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        try:
            (locked / "probe").touch()
        except PermissionError:
            pass
        else:
            pytest.skip("chmod 0o500 does not stop this user (root) from writing; see the next test")
        assert main(["--device", "cpu", "--json", str(locked / "r.json")]) == 2
        assert one_error_line(capsys).startswith(f"cannot write the results to {locked / 'r.json'}: Permission denied")
    finally:
        locked.chmod(stat.S_IRWXU)


def test_json_where_no_file_can_be_created_is_refused_before_measuring(tmp_path, no_campaign, capsys, monkeypatch):
    # A read-only directory as root sees it: the OS refuses the file (a read-only mount, say).
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        if os.path.samefile(kwargs.get("dir", "."), tmp_path):
            raise PermissionError(13, "Permission denied")
        return real_mkstemp(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    assert main(["--device", "cpu", "--json", str(tmp_path / "r.json")]) == 2
    assert one_error_line(capsys) == (
        f"cannot write the results to {tmp_path / 'r.json'}: Permission denied in {tmp_path}; "
        "give a writable --json path"
    )


def test_the_writability_probe_leaves_nothing_behind(tmp_path, campaigns):
    assert main(["--device", "cpu", "--json", str(tmp_path / "r.json")]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_default_results_folder_is_checked_before_measuring(tmp_path, no_campaign, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench-results").write_text("")  # a file where the folder should go
    assert main(["--device", "cpu"]) == 2
    assert "bench-results is a file; give another --json path" in one_error_line(capsys)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--gpus", "-1"], "--gpus must be 0 (no DDP) or more, got -1"),
        (["--kernel-mix"], "--kernel-mix profiles CUDA kernels; run it on a GPU or leave it out"),
        (["--gpus", "3"], "--gpus 3 on the CPU runs 3 processes on 2 cores; use 2 at most"),
    ],
)
def test_extras_that_cannot_work_are_refused_before_measuring(
    args, message, tmp_path, no_campaign, capsys, monkeypatch
):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert main(["--device", "cpu", "--json", str(tmp_path / "r.json"), *args]) == 2
    assert one_error_line(capsys) == message


def test_more_gpus_than_visible_is_refused_before_measuring(tmp_path, no_campaign, capsys, monkeypatch):
    monkeypatch.setattr("meddpm.bench.cli.resolve_device", lambda _: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert main(["--device", "cuda", "--gpus", "2", "--json", str(tmp_path / "r.json")]) == 2
    assert one_error_line(capsys) == "--gpus 2 asks for more GPUs than the 1 visible; lower it"


def test_a_failing_extra_keeps_what_was_measured_and_errs_in_one_line(tmp_path, campaigns, capsys, monkeypatch):
    rows = [{"combo": "baseline", "seconds": 1.0}]
    monkeypatch.setattr("meddpm.bench.extras.sampling", lambda *_: rows)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)

    def failing_ddp(*_, **__):
        # As distributed._torchrun reports a worker without an exception line: its stderr's tail.
        raise UserError("DDP run of baseline on 1 process(es) failed: Traceback (most recent call last):\n  boom\n")

    monkeypatch.setattr("meddpm.bench.extras.run_ddp", failing_ddp)
    out = tmp_path / "r.json"
    assert main(["--device", "cpu", "--combos", "baseline", "--sample", "--gpus", "2", "--json", str(out)]) == 2
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("meddpm-bench: error:")]
    assert errors == [
        "meddpm-bench: error: DDP run of baseline on 1 process(es) failed: Traceback (most recent call last): boom"
    ]
    assert captured.err.rstrip().endswith(errors[0])  # the last word, nothing after it
    data = json.loads(out.read_text())
    assert [r["combo"] for r in data["results"]] == ["baseline"] and data["sampling"] == rows and "ddp" not in data
    assert f"results written to {out}" in captured.out


# --- 2. round options: used where given, or refused --------------------------------------------
@pytest.mark.parametrize(
    "option, value, field",
    [
        ("--rel-iqr", "0.1", "rel_iqr_target"),
        ("--min-rounds", "4", "min_rounds"),
        ("--max-rounds", "6", "max_rounds"),
        ("--budget", "20", "budget_s"),
    ],
)
def test_an_adaptive_option_makes_the_cpu_rounds_adaptive(option, value, field, tmp_path, campaigns):
    assert main(["--device", "cpu", option, value, "--json", str(tmp_path / "r.json")]) == 0
    settings = campaigns[0].settings
    assert getattr(settings, field) == type(getattr(settings, field))(value)
    assert settings.min_rounds < settings.max_rounds  # adaptive, not the CPU's fixed 3


def test_the_cpu_default_is_three_fixed_rounds(tmp_path, campaigns):
    assert main(["--device", "cpu", "--json", str(tmp_path / "r.json")]) == 0
    assert (campaigns[0].settings.min_rounds, campaigns[0].settings.max_rounds) == (3, 3)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_iters_with_adaptive_options_is_refused(device, tmp_path, no_campaign, capsys, monkeypatch):
    monkeypatch.setattr("meddpm.bench.cli.resolve_device", lambda _: torch.device(device, 0))  # no GPU needed
    args = ["--device", device, "--iters", "4", "--rel-iqr", "0.1", "--budget", "9", "--json", str(tmp_path / "r")]
    assert main(args) == 2
    assert one_error_line(capsys) == (
        "--iters fixes the number of rounds, so --rel-iqr, --budget would be ignored; give one or the other"
    )


# --- 3. DDP on the CPU counts processes, not GPUs ------------------------------------------------
def ddp_result(world: int, backend: str) -> DdpResult:
    return DdpResult(
        "tiny", "baseline", world, 1, backend, [[10.0, 11.0]] * world, [[9.0, 9.0]] * world, [None] * world,
        [None] * world, [None] * world,
    )  # fmt: skip


def test_ddp_table_heads_gloo_ranks_processes_and_nccl_ranks_gpus():
    gloo = ddp_table([ddp_result(1, "gloo"), ddp_result(2, "gloo")])
    assert "processes" in gloo.columns and "J/iter/process" in gloo.columns
    assert not any("GPU" in column for column in gloo.columns)
    nccl = ddp_table([ddp_result(1, "nccl"), ddp_result(2, "nccl")])
    assert "GPUs" in nccl.columns and "J/iter/GPU" in nccl.columns and "processes" not in nccl.columns


def test_ddp_progress_on_the_cpu_counts_processes(tmp_path, campaigns, capsys, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr("meddpm.bench.extras.run_ddp", lambda preset, combo, world, **_: ddp_result(world, "gloo"))
    assert main(["--device", "cpu", "--combos", "baseline", "--gpus", "2", "--json", str(tmp_path / "r.json")]) == 0
    captured = capsys.readouterr()
    assert "DDP: baseline on 1 process...\n" in captured.err and "DDP: baseline on 2 processes...\n" in captured.err
    assert "GPU" not in captured.err and "processes" in captured.out.split("weak scaling")[1]


# --- 4. a CPU run that cannot fit in RAM -----------------------------------------------------------
def test_a_cpu_run_too_big_for_the_ram_is_refused_before_building(tmp_path, no_campaign, capsys, monkeypatch):
    monkeypatch.setattr("meddpm.bench.host_ram.available_memory", lambda: 4 * 2**30, raising=False)
    assert main(["--preset", "paper", "--device", "cpu", "--json", str(tmp_path / "r.json")]) == 2
    message = one_error_line(capsys)
    assert message.startswith("preset 'paper' at batch size 1 with combos baseline, opt2 needs at least 18.")
    assert message.endswith(
        " GiB of RAM, but 4.0 GiB is available; use a smaller preset (tiny) or batch, fewer combos, or a GPU"
    )


def test_out_of_cpu_memory_while_measuring_is_one_line(tmp_path, capsys, monkeypatch):
    def out_of_memory(*_):
        raise RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate 21474836480 bytes.")

    monkeypatch.setattr("meddpm.measure.campaign.interleaved.TrainStep", out_of_memory)
    monkeypatch.setattr("meddpm.bench.host_ram.available_memory", lambda: None)
    assert main(["--device", "cpu", "--json", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # the start lines, then the error alone
    assert err[-1].startswith("meddpm-bench: error: out of CPU (RAM) memory in combo 'baseline' on preset 'tiny'")
    assert not any("Traceback" in line or "DefaultCPUAllocator" in line for line in err)


# --- 5. the CPU default is quick, and says how to run the rest ------------------------------------
def test_the_cpu_default_runs_the_fp32_combos_and_names_the_rest(tmp_path, campaigns, capsys):
    assert main(["--device", "cpu", "--json", str(tmp_path / "r.json")]) == 0
    assert [c.name for c in campaigns[0].combos] == list(CPU_DEFAULT_COMBOS)
    rest = ", ".join(name for name in COMBOS if name not in CPU_DEFAULT_COMBOS)
    assert f"--combos all adds {rest}" in capsys.readouterr().err


def test_combos_all_on_the_cpu_runs_every_combo_without_the_hint(tmp_path, campaigns, capsys):
    assert main(["--device", "cpu", "--combos", "all", "--json", str(tmp_path / "r.json")]) == 0
    assert [c.name for c in campaigns[0].combos] == list(COMBOS)
    assert "--combos all" not in capsys.readouterr().err


# --- 6. progress in a log (not a terminal) ---------------------------------------------------------
def test_progress_without_a_terminal_is_a_line_per_step_as_it_happens(tmp_path, campaigns, capsys, monkeypatch):
    for variable in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(variable, raising=False)  # rich would take these for a terminal
    printed: list[str] = []
    monkeypatch.setattr(FakeCampaign, "observe", staticmethod(lambda: printed.append(capsys.readouterr().err)))
    args = ["--device", "cpu", "--combos", "baseline,opt2", "--warmup", "1", "--iters", "2"]
    assert main([*args, "--json", str(tmp_path / "r.json")]) == 0
    assert printed[0].endswith("meddpm-bench: warm-up baseline 1/1: 0.1 s\n")
    assert printed[1:] == [
        "meddpm-bench: warm-up opt2 1/1: 0.1 s\n",
        "meddpm-bench: round 1/2\n",
        "meddpm-bench: round 2/2: worst rel. IQR 1.0% (baseline)\n",
    ]


# --- 7. an interrupted run: what it measured is written, marked partial, and said in one line ---------
def interrupted_line(capsys, during: str, out) -> list[str]:
    """stderr's lines, after checking that the last is the one line about the interrupt and no other mentions it."""
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"meddpm-bench: interrupted during {during}; {out} has what was measured before, marked partial"
    assert not [line for line in err[:-1] if "interrupted" in line], err
    return err


def test_a_run_interrupted_in_its_rounds_writes_the_rounds_done_marked_partial(
    tmp_path, campaigns, capsys, monkeypatch
):
    monkeypatch.setattr(FakeCampaign, "interrupt_after_round", 2)
    appended = []
    monkeypatch.setattr("meddpm.history.append.append_results", lambda *args: appended.append(args) or "appended")
    out = tmp_path / "r.json"
    args = ["--device", "cpu", "--combos", "baseline,opt2", "--iters", "5", "--history", str(tmp_path / "h.db")]
    assert main([*args, "--json", str(out)]) == 130
    data = json.loads(out.read_text())
    assert data["partial"] is True and data["interrupted"] == "the timed rounds"
    assert [(r["combo"], r["samples_ms"]) for r in data["results"]] == [
        ("baseline", [10.0, 11.0]),
        ("opt2", [10.0, 11.0]),
    ]
    assert {r["stop_reason"] for r in data["results"]} == {"interrupted after 2 rounds"}
    interrupted_line(capsys, "the timed rounds", out)
    assert not appended  # a partial run is no point of the history


def test_sigterm_in_the_rounds_of_a_plain_run_stops_it_as_ctrl_c_does(tmp_path, campaigns, capsys, monkeypatch):
    """A runner's timeout sends SIGTERM: the rounds done are kept, marked partial, as after Ctrl-C."""

    def reached_the_test(signum, frame):
        raise AssertionError("SIGTERM reached the test: the bench left it to the default, which kills the process")

    previous = signal.signal(signal.SIGTERM, reached_the_test)
    monkeypatch.setattr(FakeCampaign, "interrupt_after_round", 2)
    monkeypatch.setattr(FakeCampaign, "interrupt", staticmethod(lambda: os.kill(os.getpid(), signal.SIGTERM)))
    out = tmp_path / "r.json"
    try:
        assert main(["--device", "cpu", "--combos", "baseline", "--iters", "5", "--json", str(out)]) == 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    data = json.loads(out.read_text())
    assert data["partial"] is True and data["results"][0]["samples_ms"] == [10.0, 11.0]


def test_a_run_interrupted_in_sample_keeps_the_training_results_marked_partial(
    tmp_path, campaigns, capsys, monkeypatch
):
    def interrupted(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr("meddpm.bench.extras.sampling", interrupted)
    out = tmp_path / "r.json"
    assert main(["--device", "cpu", "--combos", "baseline", "--iters", "2", "--sample", "--json", str(out)]) == 130
    data = json.loads(out.read_text())
    assert data["partial"] is True and data["interrupted"] == "--sample" and "sampling" not in data
    assert [(r["combo"], r["samples_ms"]) for r in data["results"]] == [("baseline", [10.0, 11.0])]
    interrupted_line(capsys, "--sample", out)


def test_a_process_campaign_interrupted_keeps_the_processes_that_finished(tmp_path, capsys, monkeypatch):
    started = []

    def worker(self, source, combos, settings):
        started.append(source)
        if len(started) == 2:  # Ctrl-C while the second of three processes measures
            raise KeyboardInterrupt
        return [combo_result("baseline", [10.0, 11.0, 12.0])]

    monkeypatch.setattr(ProcessCampaign, "_run_worker", worker)
    monkeypatch.setattr("meddpm.bench.host_ram.available_memory", lambda: None)
    out = tmp_path / "r.json"
    assert main(["--device", "cpu", "--combos", "baseline", "--processes", "3", "--json", str(out)]) == 130
    data = json.loads(out.read_text())
    assert data["partial"] is True and data["interrupted"] == "the timed rounds"
    assert [(r["combo"], r["samples_ms"]) for r in data["results"]] == [("baseline", [10.0, 11.0, 12.0])]
    assert list(data["process_medians_ms"].values()) == [{"baseline": [11.0]}]
    interrupted_line(capsys, "the timed rounds", out)


def test_the_results_file_says_what_the_run_was(tmp_path, campaigns, monkeypatch):
    monkeypatch.setattr(ProcessCampaign, "_run_worker", lambda *_, **__: [combo_result("baseline", [10.0, 11.0, 12.0])])
    plain, in_processes = tmp_path / "plain.json", tmp_path / "processes.json"
    assert main(["--device", "cpu", "--combos", "baseline", "--iters", "2", "--json", str(plain)]) == 0
    assert main(["--device", "cpu", "--combos", "baseline", "--processes", "3", "--json", str(in_processes)]) == 0
    described = [{k: json.loads(p.read_text())[k] for k in ("arch", "run_kind", "processes", "compare_to")}
                 for p in (plain, in_processes)]  # fmt: skip
    assert described == [
        {"arch": "cpu", "run_kind": "measure", "processes": 1, "compare_to": None},
        {"arch": "cpu", "run_kind": "processes", "processes": 3, "compare_to": None},
    ]


def test_the_stop_line_says_what_stopped_each_combo(campaigns, monkeypatch, tmp_path, capsys):
    # One combo converged early, the other ran on to its budget: the first combo's reason alone read as the run's.
    measured = FakeCampaign.run

    def run(self, on_progress=None):
        results = measured(self, on_progress)
        results["baseline"].stop_reason = "converged after 5 rounds"
        results["opt1"].stop_reason = "time budget of 300 s spent after 257 rounds"
        return results

    monkeypatch.setattr(FakeCampaign, "run", run)
    assert main(["--device", "cpu", "--combos", "baseline,opt1", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "stopped: converged after 5 rounds (baseline); time budget of 300 s spent after 257 rounds (opt1)" in out
