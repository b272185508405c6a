"""Energy windows that run until the temperature holds, on a fake card whose temperature follows a fake clock."""

from __future__ import annotations

import pytest
import torch

from meddpm.measure.energy import BlockPlan
from meddpm.measure.energy_block import run_soaked_block
from meddpm.measure.heat_soak import SoakPlan, settled

CPU = torch.device("cpu")
# Leads of 0.1 s, windows of 1 s at 50 ms an iteration, three windows kept.
PLAN = BlockPlan(lead=2, window_iterations=20, windows=3)


class Card:
    """A clock that each iteration advances by ``iteration_s`` (a number, or a function of the time), and a
    temperature that is a function of it."""

    def __init__(self, temperature, iteration_s=0.05):
        self.t, self.iteration_s, self.curve = 0.0, iteration_s, temperature
        self.steps = 0

    def step(self) -> None:
        self.t += self.iteration_s(self.t) if callable(self.iteration_s) else self.iteration_s
        self.steps += 1
        assert self.steps < 100_000, "the soak never stopped"

    def temperature_c(self) -> int:
        return round(self.curve(self.t))

    def start(self) -> None:  # the sampler: readings are not what these tests look at
        pass

    def stop(self) -> list:
        return []

    def soak(self, plan: BlockPlan = PLAN, soak_plan: SoakPlan | None = None):
        soak_plan = soak_plan or SoakPlan()
        return run_soaked_block(self.step, CPU, self, plan, self.temperature_c, soak_plan, clock=lambda: self.t)


def test_settled_needs_every_reading_of_the_span_within_the_tolerance_of_the_latest():
    plan = SoakPlan(window_s=5.0)
    warming = [(float(t), 40 + t) for t in range(13)]
    assert not settled(warming, since_s=9.0, plan=plan)
    flat = warming + [(13.0, 52), (14.0, 52), (15.0, 52), (16.0, 52), (17.0, 52)]
    assert settled(flat, since_s=14.0, plan=plan)  # 12-17 s: 51 or 52, the reading at 12 s the span's first
    assert not settled(flat, since_s=10.0, plan=plan)  # a longer span reaches back to 50 °C


def test_a_span_before_the_first_reading_has_not_held():
    assert not settled([(0.0, 50), (3.0, 50)], since_s=1.0, plan=SoakPlan(window_s=5.0))


def test_a_warming_card_keeps_the_windows_after_its_temperature_holds():
    # 1 °C a second from 40 °C to 52 °C at 12 s, then flat.
    card = Card(lambda t: 40 + min(t, 12.0))
    run, soak = card.soak()
    assert soak.settled and (soak.start_c, soak.end_c) == (40, 52)
    assert 12.0 <= run.edges_s[0] <= 16.0 and soak.seconds == pytest.approx(run.edges_s[0])
    assert len(run.edges_s) == 4 and run.gpu_s == pytest.approx([1.0, 1.0, 1.0])


def test_a_card_cooling_from_a_hotter_combo_settles_too():
    run, soak = Card(lambda t: 60 - min(t, 8.0)).soak()
    assert soak.settled and (soak.start_c, soak.end_c) == (60, 52) and 8.0 <= soak.seconds <= 12.0


def test_a_card_at_its_temperature_already_keeps_the_first_windows_that_span_the_settling_time():
    card = Card(lambda t: 55.0)
    run, soak = card.soak()
    # Five seconds must have held. On the CPU the window queued ahead has run by the time the host
    # decides, so the decision at 5.1 s keeps the three windows up to it, from 2.1 s on.
    assert soak.settled and soak.seconds == pytest.approx(2.1)
    assert card.steps == 2 + 5 * 20 + 2  # lead, five windows back to back, lead: no pause in between


def test_windows_longer_than_the_settling_time_are_all_kept_after_the_temperature_holds():
    # 3 s windows, 9 s kept: every reading over them must be within 1 °C of 52, so they start after 10.5 s,
    # not merely 5 s before the decision.
    card = Card(lambda t: 40 + min(t, 12.0))
    run, soak = card.soak(BlockPlan(lead=2, window_iterations=60, windows=3))
    assert soak.settled and run.edges_s[0] >= 10.5 and run.edges_s[-1] - run.edges_s[0] == pytest.approx(9.0)


def test_a_temperature_that_moves_after_the_decision_leaves_the_block_unsettled():
    # On a GPU the last kept window still runs when the host decides. On the CPU it has run, so a jump
    # in the trailing lead (6.1-6.2 s) stands in: the decision at 6.1 s saw 55 °C hold, the end did not.
    card = Card(lambda t: 55.0 if t < 6.15 else 58.0)
    run, soak = card.soak(BlockPlan(lead=2, window_iterations=40, windows=3))
    assert soak.seconds == pytest.approx(0.1) and not soak.settled and soak.end_c == 58


def test_windows_as_long_as_the_settling_time_cost_nothing_more():
    card = Card(lambda t: 55.0)
    run, soak = card.soak(BlockPlan(lead=2, window_iterations=40, windows=3))  # 6 s of windows
    assert soak.settled and soak.seconds == pytest.approx(0.1)  # the first three windows, after the lead
    assert card.steps == 2 + 3 * 40 + 2


def test_a_card_still_warming_at_the_limit_stops_there_and_says_so():
    card = Card(lambda t: 40 + t / 2)  # 2.5 °C per 5 s: never within 1 °C
    run, soak = card.soak(soak_plan=SoakPlan(max_s=20.0))
    assert not soak.settled and 17.0 <= soak.seconds <= 18.0  # the last three windows before 20 s


def test_the_kept_windows_time_the_iterations_the_block_reads():
    run, soak = Card(lambda t: 50.0, iteration_s=0.07).soak()
    assert soak.iteration_s == pytest.approx(0.07)
    # Iterations that slow down as the card runs: the time is the kept windows', all three of them.
    run, soak = Card(lambda t: 50.0, iteration_s=lambda t: 0.05 + 0.002 * t).soak()
    assert len(set(round(s, 6) for s in run.gpu_s)) == 3
    assert soak.iteration_s == pytest.approx(sum(run.gpu_s) / PLAN.iterations)
