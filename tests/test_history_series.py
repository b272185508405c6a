"""Runs as series: runs measured in one process and in several are different series of the same case."""

from __future__ import annotations

import datetime

from meddpm.history.documents import run_from_document
from meddpm.history.judged import with_judged
from meddpm.history.results import run_description
from meddpm.history.series import case_frame
from meddpm.history.simulation import results_document


def _run(day: int, processes: int, compare_to: str | None = None, ddp: bool = False):
    document = results_document("h200", datetime.datetime(2026, 12, day), f"c{day}", {"opt1": 230.0})
    document.update(run_description(processes, compare_to))
    if processes > 1:
        document["cases"][0]["process_medians_ms"] = [230.0 + i for i in range(processes)]
    if ddp:
        ranks = [[240.0, 241.0], [239.0, 242.0]]
        document["ddp"] = [
            dict(preset="paper", combo="opt1", batch_per_rank=1, world_size=2, median_ms=240.0, rank_samples_ms=ranks)
        ]
    return run_from_document(document, f"day {day}")


def test_runs_in_one_process_and_in_three_are_separate_series():
    frame = case_frame([_run(1, 1), _run(2, 3, ddp=True), _run(3, 1), _run(4, 5, "origin/main")])
    assert list(frame["case"]) == ["paper/opt1/b1", "paper/opt1/b1/p3", "paper/opt1/b1/ddp2", "paper/opt1/b1"]


def test_a_run_stored_before_files_said_so_is_placed_by_its_process_medians():
    old = _run(2, 3)
    old.options = {"preset": "paper"}  # an import of an older file's run, stored before
    plain = _run(3, 1)
    plain.options = {}
    assert list(case_frame([old, plain])["case"]) == ["paper/opt1/b1/p3", "paper/opt1/b1"]


def test_a_live_append_keeps_the_process_count_its_file_states():
    # A live append adds the run's options; what the results file says the run was (three processes) wins.
    document = results_document("h200", datetime.datetime(2026, 12, 5), "c5", {"opt1": 230.0})
    document.update(run_description(3, None))
    run = run_from_document(document, "suite", {"options": {"processes": 1, "perf_processes": 3}})
    assert run.options["processes"] == 3 and run.options["run_kind"] == "processes"
    assert list(case_frame([run, _run(6, 1)])["case"]) == ["paper/opt1/b1/p3", "paper/opt1/b1"]


def test_the_judged_series_is_each_value_less_the_movement_every_case_shared_that_night():
    times = {"baseline": 1220.0, "opt1": 230.0, "opt2": 1370.0, "fast": 49.0}
    runs = []
    for day in range(1, 11):
        shared = 1.03 if day == 5 else 1.0  # a slow machine start: every case 3 % slower that night
        mine = 1.05 if day >= 8 else 1.0  # opt1 alone 5 % slower from day 8
        night = {combo: ms * shared * (mine if combo == "opt1" else 1.0) for combo, ms in times.items()}
        document = results_document("h200", datetime.datetime(2026, 12, day), f"c{day}", night)
        runs.append(run_from_document(document, "f"))
        runs[-1].id = day  # as the store numbers them
    frame = with_judged(case_frame(runs))
    day5 = frame[frame["started_at"] == datetime.datetime(2026, 12, 5)]
    assert day5["time_shared"].round(6).tolist() == [0.03] * 4
    assert (day5["time_judged"] / day5["case"].map(lambda c: times[c.split("/")[1]])).round(6).tolist() == [1.0] * 4
    # A step of one case stays in its judged series: the detector judges it, the shared movement does not hide it.
    opt1 = frame[frame["case"] == "paper/opt1/b1"]
    assert opt1["time_judged"].round(3).tolist() == [230.0] * 7 + [241.5] * 3
