"""The one results-table builder and its three column sets: the bench's table, summary.md's and the terminal's.

The expected texts are what the three separate tables printed before they shared a builder; they must not move.
"""

from __future__ import annotations

from meddpm.judge.verdict import Verdict
from meddpm.measure.campaign.interleaved import ComboResult
from meddpm.measure.energy.counter import BlockEnergy, WindowEnergy
from meddpm.measure.machine.nvml import GpuState
from meddpm.report.tables import BENCH_TABLE, SUMMARY_TABLE, TERMINAL_TABLE, format_table, results_table
from meddpm.suite.cases import CaseRecord, PerfCase

THROTTLED = GpuState("H200", "580", 1500, 1980, 2600, 80, 600.0, 700.0, 99, ("SwPowerCap",))
STEADY = GpuState("H200", "580", 1975, 1980, 2600, 60, 500.0, 700.0, 98, ())
# Three windows of 20 iterations at 600 W and 50 ms each: 30 J per iteration.
BLOCK = BlockEnergy(tuple(WindowEnergy(20, 1.0, 600.0, 600.0, None) for _ in range(3)), 0.1, 0.0083, ())


def _results() -> list[ComboResult]:
    volume = (128, 128, 128)
    return [
        ComboResult(
            "paper", "baseline", 1, volume, "tf32", [1225.3, 1226.1, 1224.9, 1230.0, 1225.8], [3000.0, 1300.0], 5.0,
            2 * 10**13, 0.03, peak_allocated_bytes=21 * 2**30 + 12345, gpu_states=[STEADY], energy_blocks=[BLOCK],
        ),
        ComboResult(
            "paper", "opt1", 1, volume, "bf16", [229.1, 260.0, 231.5, 229.9, 300.0], [900.0], 2.0, 2 * 10**13, 0.03,
            gpu_states=[THROTTLED, STEADY],
        ),
        ComboResult(
            "paper", "fast", 1, volume, "bf16", [49.3, 49.4, 49.2], [], 2.0, 2 * 10**13, 0.03,
            peak_allocated_bytes=5 * 2**30,
        ),
    ]  # fmt: skip


def _suite_cases() -> list[dict]:
    """The cases as the suite's results document holds them (one measured in three processes, one judged)."""
    baseline, opt1, fast = _results()
    time = Verdict("paper/opt1/b1", "time", "regression", 229.0, 231.5, "ms", tolerance=0.0123)
    memory = Verdict("paper/opt1/b1", "memory", "unchanged", 1.0, 1.0, "GiB", tolerance=0.05)
    records = [
        CaseRecord(PerfCase("h200", "paper", "baseline", 1), baseline, "ok", [memory], [1225.0, 1226.0, 1224.0]),
        CaseRecord(PerfCase("h200", "paper", "opt1", 1), opt1, "regression", [memory, time]),
        CaseRecord(PerfCase("cpu", "paper", "fast", 1), fast, "no baseline"),
    ]
    return [r.payload() for r in records]


def test_the_bench_table_is_one_row_per_combo_with_its_notes():
    expected = """\
         ms/iter IQR ms rounds speedup peak GiB TFLOP/s J/iter    W SM MHz min warm-up s                                            note
combo                                                                                                                                   
baseline  1225.8    0.8      5   1.00x    21.00    16.3   30.0  600       1975       4.3                                                
opt1       231.5   30.1      5   5.30x      n/a    86.4    n/a  n/a       1500       0.9  unreliable (13.0% > 3%); throttled: SwPowerCap
fast        49.3    0.1      3  24.86x     5.00     406    n/a  n/a        n/a       0.0                                                """  # noqa: E501, W291
    assert format_table(results_table(_results())) == expected
    # From the results file's cases, the same table; without a baseline row, no speedup.
    assert format_table(results_table([r.as_dict() for r in _results()], BENCH_TABLE)) == expected
    assert "speedup" in (without := format_table(results_table(_results()[1:])))
    assert without.splitlines()[2].split()[4] == "n/a"


def test_the_summary_table_rounds_for_markdown():
    expected = """\
| case          | combo    |   ms/iter |   IQR % |   rounds |   TFLOP/s |   % of peak |   peak GiB |   J/iter |   SM MHz min |   processes |   detectable % | outcome     |
|:--------------|:---------|----------:|--------:|---------:|----------:|------------:|-----------:|---------:|-------------:|------------:|---------------:|:------------|
| h200 paper b1 | baseline |    1225.8 |    0.07 |        5 |      16.3 |         3.3 |         21 |       30 |         1975 |           3 |          nan   | ok          |
| h200 paper b1 | opt1     |     231.5 |   13    |        5 |      86.4 |         8.7 |        nan |      nan |         1500 |           1 |            1.2 | regression  |
| cpu paper b1  | fast     |      49.3 |    0.2  |        3 |     405.7 |       nan   |          5 |      nan |          nan |           1 |          nan   | no baseline |"""  # noqa: E501
    assert results_table(_suite_cases(), SUMMARY_TABLE).to_markdown(index=False) == expected


def test_the_terminal_table_names_cases_by_their_pytest_id():
    expected = """\
                  case  ms/iter rel IQR  rounds  TFLOP/s  J/iter  processes detectable     outcome
h200-paper-baseline-b1  1225.80   0.07%       5    16.32   30.00          3                     ok
    h200-paper-opt1-b1   231.50  13.00%       5    86.39     NaN          1       1.2%  regression
     cpu-paper-fast-b1    49.30   0.20%       3   405.68     NaN          1            no baseline"""
    table = results_table(_suite_cases(), TERMINAL_TABLE)
    assert table.to_string(index=False, float_format=lambda v: f"{v:.2f}") == expected


def test_a_column_measured_nowhere_stays_empty():
    cases = [{**c, "energy_j_per_iter": None} for c in _suite_cases()]
    assert list(results_table(cases, TERMINAL_TABLE)["J/iter"]) == [None, None, None]
    assert "| J/iter   |" in results_table(cases, SUMMARY_TABLE).to_markdown(index=False)
    assert results_table([], SUMMARY_TABLE).columns[0] == "case"
