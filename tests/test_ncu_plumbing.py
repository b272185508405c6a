"""Nsight Compute plumbing on the CPU: a real CSV recorded on an H100, aggregation, errors, a stand-in ncu.

The fixture is ncu 2025.3.1's ``--csv --page raw --print-units base`` export of one tiny-preset
opt1 iteration profiled with kernel replay and every metric group on an NVIDIA H100 (286 kernel
launches). ``list-chips-2025.3.1.txt`` is that ncu's ``--list-chips`` output.
"""

import gzip
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from meddpm.errors import UserError
from meddpm.measure.profiling.ncu import (
    NcuProfile,
    NcuSettings,
    NcuUnavailable,
    aggregate,
    find_ncu,
    kernel_mix,
    kernels_table,
    ncu_command,
    parse_raw_csv,
    profile_combo,
    unsupported_reason,
)
from meddpm.measure.profiling.ncu_metrics import GROUPS, METRICS, family_of, ncu_names, select
from meddpm.report.plots import kernel_mix_chart
from meddpm.report.tables import kernel_mix_table, ncu_table

FIXTURES = Path(__file__).parent / "fixtures" / "ncu"
CSV = FIXTURES / "h100-tiny-opt1-kernel-replay.csv.gz"
LIST_CHIPS = FIXTURES / "list-chips-2025.3.1.txt"


@pytest.fixture(scope="module")
def raw() -> pd.DataFrame:
    return parse_raw_csv(gzip.decompress(CSV.read_bytes()).decode())


@pytest.fixture(scope="module")
def kernels(raw) -> pd.DataFrame:
    return kernels_table(raw, select(GROUPS), "hopper")


def test_the_recorded_csv_parses_to_one_numeric_row_per_kernel(raw):
    assert len(raw) == 286
    assert raw["gpu__time_duration.sum"].dtype.kind == "f" and (raw["gpu__time_duration.sum"] > 0).all()
    # Every metric the suite asks for on Hopper is in the recording, as numbers.
    for name in ncu_names(select(GROUPS), "hopper"):
        assert raw[name].notna().any(), name


def test_every_metric_key_gets_a_column(kernels):
    assert {m.key for m in METRICS} <= set(kernels.columns)
    assert kernels["tensor_pipe_pct"].max() > 10  # opt1's TF32 convolutions use the tensor pipe


def test_real_kernel_names_get_real_categories(kernels):
    by_category = kernels.groupby("category")["kernel"].apply(set)
    assert any("fprop_implicit_gemm" in k for k in by_category["conv_fwd"])
    assert any("RowwiseMoments" in k for k in by_category["normalization"])
    assert any("nchwToNhwc" in k for k in by_category["layout"])
    assert any("multi_tensor_apply" in k for k in by_category["optimizer"])
    unmatched = kernels.loc[kernels["category"] == "other", "duration_ns"].sum()
    assert unmatched / kernels["duration_ns"].sum() < 0.05


def test_counts_are_summed_and_rates_weighted_by_duration():
    table = pd.DataFrame(
        {
            "duration_ns": [100.0, 300.0, 600.0],
            "instructions": [10.0, 20.0, 30.0],
            "ipc": [1.0, 2.0, float("nan")],  # ncu says n/a for some counters on some kernels
            "l2_hit_pct": [50.0, 90.0, 10.0],
        }
    )
    totals = aggregate(table, select(GROUPS))
    assert totals["duration_ns"] == 1000.0
    assert totals["instructions"] == 60.0
    assert totals["ipc"] == pytest.approx((1.0 * 100 + 2.0 * 300) / 400)
    assert totals["l2_hit_pct"] == pytest.approx((50 * 100 + 90 * 300 + 10 * 600) / 1000)


def test_aggregating_the_recording(kernels):
    totals = aggregate(kernels, select(GROUPS))
    d = kernels["duration_ns"]
    assert totals["sm_cycles"] == pytest.approx(kernels["sm_cycles"].sum())
    assert totals["dram_throughput_pct"] == pytest.approx((kernels["dram_throughput_pct"] * d).sum() / d.sum())
    assert 0 < totals["tensor_pipe_pct"] < 100 and totals["inst_fp64"] == 0
    mix = kernel_mix(kernels)
    assert mix["share"].sum() == pytest.approx(1.0) and mix["launches"].sum() == 286


def test_metric_names_differ_by_family():
    tensor = next(m for m in METRICS if m.key == "tensor_pipe_pct")
    assert "hgmma" in tensor.ncu_names("hopper")[0] and "hgmma" not in tensor.ncu_names("ampere")[0]
    assert family_of((9, 0)) == "hopper" and family_of((8, 6)) == "ampere" and family_of((7, 0)) == "volta"
    with pytest.raises(UserError, match="older than Nsight Compute supports"):
        family_of((6, 1))


def test_an_ncu_without_volta_says_so():
    chips = LIST_CHIPS.read_text()
    assert unsupported_reason(chips, "hopper", "2025.3.1.0") is None
    assert unsupported_reason(chips, "ampere", "2025.3.1.0") is None
    reason = unsupported_reason(chips, "volta", "2025.3.1.0")
    assert reason and "does not support volta" in reason and "older Nsight Compute" in reason


def test_no_ncu_on_path_is_a_skip_reason(monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(NcuUnavailable, match="ncu .Nsight Compute. is not on PATH; install"):
        find_ncu()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"groups": ("core", "cache")}, "unknown ncu metric group 'cache'"),
        ({"replay": "app"}, "unknown ncu replay mode 'app'"),
        ({"clock_control": "max"}, "unknown ncu clock control 'max'"),
    ],
)
def test_bad_settings_are_one_line_errors(kwargs, message):
    with pytest.raises(UserError, match=message):
        NcuSettings(**kwargs)


def test_the_command_profiles_the_nvtx_range_with_the_clocks_as_found(tmp_path):
    cmd = ncu_command("ncu", ["a.sum", "b.pct"], "range", "none", tmp_path / "r", ["python", "x"])
    assert cmd[cmd.index("--nvtx-include") + 1] == "meddpm_step"  # start/end: spans autograd's thread
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--replay-mode") + 1] == "range"
    assert cmd[cmd.index("--metrics") + 1] == "a.sum,b.pct"
    assert cmd[-2:] == ["python", "x"]


FAKE_NCU = f"""#!{sys.executable}
# A stand-in for ncu: answers --version, --list-chips and --import from the recorded files.
import gzip, os, sys
args = sys.argv[1:]
if "--version" in args:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (build 36398880) (public-release)")
elif "--list-chips" in args:
    print(open({str(LIST_CHIPS)!r}).read())
elif "--import" in args:
    sys.stdout.write(gzip.decompress(open({str(CSV)!r}, "rb").read()).decode())
else:
    if os.environ.get("FAKE_NCU_FAIL"):
        print("==ERROR== " + os.environ["FAKE_NCU_FAIL"])
        sys.exit(1)
    assert args[args.index("--nvtx-include") + 1] == "meddpm_step"
    with open(args[args.index("--export") + 1] + ".ncu-rep", "w") as f:
        f.write(" ".join(args))
    print("==PROF== Disconnected")
"""


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch) -> str:
    path = tmp_path / "bin" / "ncu"
    path.parent.mkdir()
    path.write_text(FAKE_NCU)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{path.parent}{os.pathsep}{os.environ['PATH']}")
    return str(path)


def test_a_profile_runs_both_passes_and_keeps_everything(fake_ncu, tmp_path):
    settings = NcuSettings(groups=GROUPS)
    profile = profile_combo("tiny", "opt1", family="hopper", out_dir=tmp_path / "ncu", settings=settings)
    assert profile.ncu_version == "2025.3.1.0"
    assert set(profile.wall_s) == {"range", "kernels"}
    assert len(profile.kernels) == 286 and profile.totals["instructions"] > 0
    assert math.isfinite(profile.totals["inst_integer"])
    written = sorted(p.name for p in (tmp_path / "ncu").iterdir())
    assert "tiny-opt1-b1-range.csv" in written and "tiny-opt1-b1-kernels.log" in written
    d = profile.as_dict()
    assert d["clock_control"] == "none" and d["replay"] == "range" and d["top_kernels"][0]["ms"] > 0


def test_a_compiled_combo_is_compiled_before_ncu_runs(fake_ncu, tmp_path, monkeypatch):
    commands = []
    real_run = subprocess.run

    def run(cmd, *args, **kwargs):
        commands.append(list(cmd))
        if cmd[0] == sys.executable:  # the compile run; here only its place in the order matters
            return subprocess.CompletedProcess(cmd, 0)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr("meddpm.measure.profiling.ncu.subprocess.run", run)
    profile = profile_combo("tiny", "fast", family="hopper", out_dir=tmp_path, settings=NcuSettings(groups=GROUPS))
    assert list(profile.wall_s) == ["compile", "range", "kernels"]
    profiling = [cmd for cmd in commands if "--version" not in cmd and "--list-chips" not in cmd]
    assert profiling[0][:3] == [sys.executable, "-m", "meddpm.measure.profiling.profiled_step"]
    assert "--combo=fast" in profiling[0] and profiling[1][0] == fake_ncu


@pytest.mark.parametrize(
    "error, message",
    [
        ("ERR_NVGPUCTRPERM - The user does not have permission", "may not read the GPU's performance counters"),
        ("Failed to initialize the profiler: LibraryNotLoaded", "cannot reach the GPU's counters"),
        ("Something else broke", "ncu failed on opt1 with exit status 1: ==ERROR== Something else broke"),
        (
            "Something else broke\n==WARNING== See the replay documentation",
            "ncu failed on opt1 with exit status 1: ==ERROR== Something else broke",
        ),
        ("Unsupported API during capture (cuKernelSetAttribute)", "use --ncu-replay=app-range"),
    ],
)
def test_ncu_failures_are_one_line_errors(fake_ncu, tmp_path, monkeypatch, error, message):
    monkeypatch.setenv("FAKE_NCU_FAIL", error)
    with pytest.raises(UserError, match=message) as info:
        profile_combo("tiny", "opt1", family="hopper", out_dir=tmp_path)
    assert "\n" not in str(info.value)


def test_tables_and_the_kernel_mix_chart(kernels, tmp_path):
    totals = aggregate(kernels, select(GROUPS))
    half = {k: v / 2 for k, v in totals.items()}
    table = ncu_table({"baseline": totals, "opt1": half})
    assert table.loc["opt1", "cycles vs ref"] == pytest.approx(0.5)
    assert table.loc["baseline", "fp32 %"] > 0
    shares = kernel_mix_table({"baseline": kernel_mix(kernels), "opt1": kernel_mix(kernels)})
    assert shares.sum().tolist() == pytest.approx([1.0, 1.0])
    png = kernel_mix_chart(shares, tmp_path / "mix.png", "test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_session_saves_ncu_totals_and_writes_tables_and_chart(kernels, tmp_path, suite_options):
    from meddpm.judge.baseline import load_baseline
    from meddpm.suite.session import SuiteRun

    options = suite_options(save_baseline=True, arch="h100", ncu=NcuSettings())
    run = SuiteRun(options, "h100", lambda line: None)
    totals = aggregate(kernels, select(GROUPS))
    for combo, scale in (("baseline", 1.0), ("opt1", 0.4)):
        scaled = {k: v * scale for k, v in totals.items()}
        run.measuring.ncu_profiles[f"h100-tiny-{combo}-b1"] = NcuProfile(
            "tiny", combo, 1, "hopper", NcuSettings(), "2025.3.1.0", scaled, kernels
        )
    assert run.save(failed_tests=0) == f"baseline saved: 2 ncu profile(s) to {tmp_path / 'h100.json'}"
    stored = load_baseline(tmp_path / "h100.json", "h100")
    assert stored.ncu["tiny/opt1/b1"].totals["sm_cycles"] == pytest.approx(0.4 * totals["sm_cycles"], rel=1e-5)
    assert stored.ncu["tiny/opt1/b1"].clock_control == "none" and not stored.cases

    summary = run.write_results()
    out = tmp_path / "results" / "ncu"
    assert {p.name for p in out.iterdir()} >= {"ncu-per-combo.csv", "kernel-mix.csv", "kernel-mix.png"}
    assert pd.read_csv(out / "ncu-per-combo.csv", index_col=0).loc["opt1", "cycles vs ref"] == pytest.approx(0.4)
    assert "Nsight Compute, per iteration" in summary.read_text()
