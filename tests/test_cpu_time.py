"""The CPU run's time, estimated before building: a run far too long for a CPU is refused in one line, or run on
insistence; the CPU's rate is injected, so nothing here depends on this machine's speed."""

import pytest

from meddpm.bench import cpu_time
from meddpm.errors import UserError
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.model.config import ModelConfig

SETTINGS = CampaignSettings(warmup=1, min_rounds=3, max_rounds=3)


def _never() -> float:
    raise AssertionError("a run this small needs no probe of the CPU")


def test_the_paper_preset_on_a_slow_cpu_is_refused_with_its_estimate():
    with pytest.raises(UserError) as refused:
        cpu_time.check_time(
            ModelConfig.preset("paper"), ["baseline"], 1, SETTINGS, insist=False, say=print, rate=lambda: 50e9
        )
    message = str(refused.value)
    assert message.startswith(
        "preset 'paper' on the CPU: at least 332 s an iteration (16.59 TFLOP at this CPU's 50 "
        "GFLOP/s), so at least 22 min for 4 iterations (1 combo(s), 1 warm-up and 3 rounds each)"
    )
    assert message.endswith("; use the tiny preset or a GPU, or give --allow-slow-cpu to run it anyway")


def test_insisting_runs_it_and_says_the_estimate():
    lines: list[str] = []
    cpu_time.check_time(
        ModelConfig.preset("paper"), ["baseline"], 1, SETTINGS, insist=True, say=lines.append, rate=lambda: 50e9
    )
    assert len(lines) == 1 and lines[0].endswith("; running it as --allow-slow-cpu asks"), lines


def test_the_tiny_preset_runs_without_probing_the_cpu():
    cpu_time.check_time(
        ModelConfig.preset("tiny"), ["baseline", "opt1"], 1, SETTINGS, insist=False, say=print, rate=_never
    )


def test_the_bench_refuses_it_before_building_anything(monkeypatch, capsys, no_campaign, tmp_path):
    from meddpm.bench.cli import main

    monkeypatch.setattr(cpu_time, "cpu_flops_per_s", lambda: 50e9)
    monkeypatch.setattr("meddpm.bench.host_ram.available_memory", lambda: None)
    assert main(["--device=cpu", "--preset=paper", "--combos=baseline", f"--json={tmp_path / 'r.json'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("meddpm-bench: error: preset 'paper' on the CPU: at least ") and "\n" not in err, err
    assert not (tmp_path / "r.json").exists()
