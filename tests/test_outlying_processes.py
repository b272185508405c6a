"""A process that lies apart from its side is said, with the card's clock and temperature over its own rounds, in the
terminal and the summary. The medians and clocks are planted (a nightly's fast once read 44.80 ms in one of side B's
processes against 46.6-46.7 ms in the other five); nothing here reads a GPU.
"""

from __future__ import annotations

import pytest
from planted_workers import planted_ab
from test_campaign_runs import run_of

from meddpm.bench.processes import report
from meddpm.measure.campaign.result import ComboResult
from meddpm.measure.machine.nvml import GpuState
from meddpm.measure.processes.campaign import ProcessCampaign
from meddpm.report.outlying import outlying_processes, process_card, process_cards
from meddpm.suite.cases import CaseRecord, PerfCase
from meddpm.suite.summary import markdown_summary

NIGHT = {"A": [46.59, 46.73, 46.61], "B": [46.66, 44.80, 46.62]}


def cards(medians: dict[str, list[float]], clocks: dict[str, list[float]] | None = None) -> list[dict]:
    return [
        process_card(
            m, {"sm_clock_mean_mhz": clocks[side][i] if clocks else None, "temperature_max_c": 59.0}, side, i + 1
        )
        for side, side_medians in medians.items()
        for i, m in enumerate(side_medians)
    ]


def test_a_process_far_from_its_side_whose_clock_ran_faster_is_put_on_the_card():
    clocks = {"A": [1785, 1780, 1790], "B": [1783, 1862, 1788]}
    (line,) = outlying_processes("paper/fast/b1", cards(NIGHT, clocks))
    assert line.startswith(
        "paper/fast/b1: side B's process 2 read 44.8 ms, 3.9% below its side's median of 46.62 ms (said from 1.0% on)"
    )
    assert "SM clock 1862 MHz on average against 1786 MHz, up to 59 °C against 59 °C" in line
    assert line.endswith("its clock can account for 100% of it at most: the card may be why")


@pytest.mark.parametrize(
    ("clock", "cause"),
    [
        (1820, "its clock can account for 49% of it at most: look at what the process ran"),
        (1785, "its clock stayed or moved the other way: not the card"),
        (1700, "its clock stayed or moved the other way: not the card"),
    ],
)
def test_a_clock_too_close_to_its_siblings_or_moved_against_the_time_points_at_the_process(clock, cause):
    (line,) = outlying_processes("paper/fast/b1", cards(NIGHT, {"A": [1785] * 3, "B": [1785, clock, 1785]}))
    assert cause in line


def test_a_change_of_the_code_moves_no_process_from_its_own_side():
    # A planted 3 % slowdown of every A process: each side alone is tight, so nothing stands apart.
    tight = [46.60, 46.62, 46.61]
    assert outlying_processes("x", cards({"A": [m * 1.03 for m in tight], "B": tight})) == []


def test_sides_of_two_processes_and_small_steps_are_not_said():
    assert outlying_processes("x", cards({"A": [46.6, 44.8], "B": [46.6, 46.7]})) == []  # no side median to read by
    # 0.8 % from its side, however quiet the others: below the least share worth a line.
    assert outlying_processes("x", cards({"A": [46.60, 46.60, 46.23], "B": [46.60] * 3})) == []


def test_noisy_siblings_raise_the_bar():
    noisy = {"A": [100.0, 103.0, 97.0, 104.5], "B": [100.0, 96.0, 104.0, 101.0]}
    assert outlying_processes("x", cards(noisy)) == []  # 4.5 % off, among siblings that move by 3-4 %
    (line,) = outlying_processes("x", cards({"A": [100.0, 100.2, 99.9, 104.5], "B": [100.0, 100.1, 99.8, 100.2]}))
    assert "process 4 read 104.5 ms, 4.4% above its side's median of 100.1 ms" in line and "no clock was read" in line


def state(sm_clock_mhz: int, temperature_c: int) -> GpuState:
    return GpuState("H200", "580", sm_clock_mhz, 1980, 3200, temperature_c, 690.0, 700.0, 99, ("SwPowerCap",))


def night_campaign(tmp_path) -> ProcessCampaign:
    """An A/B of fast, three processes a side, whose planted workers read the night's medians; side B's second
    process with a faster, cooler card."""

    def result(side: str, i: int, combo: str) -> ComboResult:
        clock, heat = (1862, 54) if (side, i) == ("B", 1) else (1785, 59)
        return run_of(combo, [NIGHT[side][i]] * 3, gpu_states=[state(clock, heat)] * 3)

    return planted_ab(tmp_path, ["fast"], 3, result)


def test_the_suite_keeps_each_processs_card_in_its_results_and_says_the_one_apart(tmp_path):
    campaign = night_campaign(tmp_path)
    record = CaseRecord(PerfCase("h200", "tiny", "fast", 1), campaign.measurements()["fast"].pooled)
    record.process_cards = process_cards(campaign, "fast")
    payload = record.payload()
    assert [(c["side"], c["process"], c["median_ms"]) for c in payload["process_cards"]] == [
        ("A", 1, 46.59), ("A", 2, 46.73), ("A", 3, 46.61), ("B", 1, 46.66), ("B", 2, 44.8), ("B", 3, 46.62)
    ]  # fmt: skip
    assert payload["process_cards"][4]["sm_clock_mean_mhz"] == pytest.approx(1862.0)
    summary = markdown_summary(
        {"arch": "h200", "environment": {"gpu_name": "H200", "torch": "2", "cuda": "12", "cudnn": "9", "commit": "c",
         "date": "d"}, "cases": [payload], "ratios": {}, "expectations": [], "sides": campaign.sides()}
    )  # fmt: skip
    section = summary[summary.index("Processes apart from their side") :]
    assert "- tiny/fast/b1: side B's process 2 read 44.8 ms, 3.9% below its side's median of 46.62 ms" in section
    assert "up to 54 °C against 59 °C: its clock can account for 100% of it at most: the card may be why" in section


def test_a_run_in_the_pytest_process_has_no_process_cards(tmp_path):
    class InProcess:
        def measurements(self, source=None):
            return {"fast": type("Runs", (), {"in_workers": False, "runs": []})()}

    assert process_cards(InProcess(), "fast") == []  # type: ignore[arg-type]


def test_the_bench_says_the_process_apart_after_its_ab_table_and_keeps_the_cards(tmp_path, capsys):
    extras: dict = {}
    report(night_campaign(tmp_path), 3, extras)
    out = capsys.readouterr()
    text = out.out + out.err
    assert "fast: side B's process 2 read 44.8 ms, 3.9% below its side's median" in text
    assert text.index("A/B, 3 processes a side") < text.index("side B's process 2 read")  # the legend comes first
    assert [c["median_ms"] for c in extras["process_cards"]["fast"]] == [46.59, 46.73, 46.61, 46.66, 44.8, 46.62]


def test_a_clock_nvml_read_as_zero_is_no_clock():
    zero = cards(NIGHT, {"A": [1785] * 3, "B": [1785, 0, 1785]})
    (line,) = outlying_processes("x", zero)
    assert line.endswith("no clock was read")
