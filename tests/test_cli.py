"""The bench command on the CPU: a valid JSON, a readable table, one-line errors."""

import json
import subprocess
import sys

import pytest

from meddpm.bench.cli import main


def test_bench_on_cpu_writes_valid_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["--combos", "baseline,opt2", "--iters", "2", "--warmup", "0", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["schema"] == "meddpm-bench/2"
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

    monkeypatch.setattr("meddpm.bench.cli._sampling", interrupted)
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
        (["--combos", ","], "--combos is empty; choose from baseline, opt1, opt2, opt12, amp_bf16, fast or 'all'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
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
