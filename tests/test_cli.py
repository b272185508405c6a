"""The bench command on the CPU: a valid JSON, a readable table, one-line errors."""

import itertools
import json
import subprocess
import sys

import pytest

from meddpm.bench.cli import CPU_NOTE, main
from meddpm.report.tables import significant


def test_bench_on_cpu_writes_valid_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["--combos", "baseline,opt2", "--iters", "2", "--warmup", "0", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["schema"] == "meddpm-bench/4"
    assert data["preset"] == "tiny"  # the CPU default
    assert data["environment"]["device"] == "cpu"
    assert [r["combo"] for r in data["results"]] == ["baseline", "opt2"]
    for r in data["results"]:
        assert len(r["samples_ms"]) == 2 and r["stats"]["median"] > 0
        assert r["flops_per_iter"] > 0 and r["tflops"] > 0
        assert r["energy_j_per_iter"] is None and r["energy_note"] == "not a CUDA device"
        assert r["stop_reason"] == "round limit of 2 reached"
    table = capsys.readouterr().out
    assert "ms/iter" in table and "speedup" in table and "1.00x" in table
    assert f"results written to {out}" in table


def test_an_interrupted_extra_keeps_the_training_results(tmp_path, capsys, monkeypatch):
    def interrupted(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr("meddpm.bench.extras.sampling", interrupted)
    out = tmp_path / "bench.json"
    assert main(["--combos", "baseline", "--iters", "2", "--warmup", "0", "--sample", "--json", str(out)]) == 130
    assert [r["combo"] for r in json.loads(out.read_text())["results"]] == ["baseline"]
    assert "ms/iter" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--preset", "huge"], "unknown preset 'huge'; choose one of paper, brats, tiny"),
        (
            ["--combos", "opt1,fastest"],
            "unknown combo 'fastest'; choose from baseline, opt1, opt2, opt12, amp_bf16, fast",
        ),
        (["--device", "tpu"], "unknown device 'tpu'; choose auto, cpu, cuda or cuda:N"),
        (["--device", "cpu", "--iters", "0"], "--iters must be at least 1"),
        (["--combos", ","], "no combos given"),
        (["--combos", "baseline,opt2,baseline"], "--combos names baseline more than once; give each combo once"),
        (["--device", "cpu:1"], "device 'cpu:1': the CPU takes no index; use --device cpu"),
        (["--warmup", "1001"], "--warmup must be at most 1000, got 1001"),
        (["--iters", "10001"], "--iters must be at most 10000, got 10001"),
        (["--max-rounds", "20000"], "--max-rounds must be at most 10000, got 20000"),
        (["--processes", "33"], "--processes must be at most 32, got 33"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, capsys, monkeypatch):
    def refuse(*_, **__):
        raise AssertionError("the command started measuring instead of refusing")

    # An unbounded count would otherwise measure for hours before the test could fail.
    monkeypatch.setattr("meddpm.bench.cli.Campaign", refuse)
    monkeypatch.setattr("meddpm.bench.processes.campaign", refuse)
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"meddpm-bench: error: {message}")


def test_console_error_has_no_traceback():
    # The real entry point, as a user runs it: one line on stderr, exit status 2.
    proc = subprocess.run(
        [sys.executable, "-m", "meddpm", "--preset", "nope"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    expected = "meddpm-bench: error: unknown preset 'nope'; choose one of paper, brats, tiny"
    assert proc.stderr.strip().splitlines() == [expected]


def test_cuda_requested_without_gpu(monkeypatch, capsys):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert main(["--device", "cuda"]) == 2
    assert "no CUDA GPU is visible to PyTorch; use --device cpu" in capsys.readouterr().err


def test_a_cpu_run_says_what_its_figures_mean(tmp_path, capsys, monkeypatch):
    # Injected times spreading 40 %: what a shared CPU gives; the table words it as expected, not broken.
    times = itertools.cycle([4000.0, 5600.0, 4000.0, 2400.0])

    def clock(fn, device, during=None):
        fn()
        return next(times)

    monkeypatch.setattr("meddpm.measure.campaign.interleaved.time_synchronized", clock)
    out = tmp_path / "bench.json"
    assert main(["--combos", "baseline", "--iters", "4", "--warmup", "0", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count(CPU_NOTE) == 1 and "verdicts and speedups need a GPU" in CPU_NOTE
    row = next(line for line in printed.splitlines() if line.startswith("baseline "))
    assert "unreliable" not in row and "(usual on a shared CPU)" in row
    tflops = json.loads(out.read_text())["results"][0]["tflops"]
    assert 0 < tflops < 0.005  # the tiny preset at 4 s an iteration: 2 fixed decimals showed 0.00
    assert f" {significant(tflops)} " in row and len(significant(tflops).strip("0.")) == 3


@pytest.mark.parametrize(
    "value, text", [(0.00412345, "0.00412"), (0.0412, "0.0412"), (41.25, "41.2"), (412.4, "412"), (4123.4, "4123")]
)
def test_throughput_shows_three_significant_figures(value, text):
    assert significant(value) == text
