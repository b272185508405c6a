"""Energy windows that run until the temperature holds, on a fake card whose temperature follows a fake clock."""

from __future__ import annotations

import math

import pytest
import torch

from meddpm.measure.energy.block import run_soaked_block
from meddpm.measure.energy.counter import BlockPlan
from meddpm.measure.energy.heat_soak import SoakPlan, settled, window_means

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


def test_a_window_mean_follows_the_readings_as_straight_lines_and_holds_the_last():
    ramp = [(0.0, 40), (10.0, 50)]
    assert window_means(ramp, [0.0, 2.0, 6.0]) == pytest.approx([41.0, 44.0])
    assert window_means(ramp, [10.0, 12.0]) == pytest.approx([50.0])  # after the last reading


def test_settled_compares_the_windows_means_not_single_readings():
    plan = SoakPlan(window_s=5.0, tolerance_c=1.0)
    # Readings that swing between 47 and 52 °C at one temperature, as a strict-FP32 combo's did on an H200.
    swinging = [(t / 10, round(49.5 + 2.5 * math.sin(2 * math.pi * t / 14))) for t in range(121)]
    assert settled(swinging, [0.0, 2.8, 5.6, 8.4], plan)  # windows of two iterations each
    warming = [(float(t), 40 + t) for t in range(13)]  # 1 °C a second
    assert not settled(warming, [0.0, 2.0, 4.0, 6.0], plan)
    flat = [*warming, *[(12.0 + t, 52) for t in range(1, 7)]]
    assert settled(flat, [12.0, 14.0, 16.0, 18.0], plan)
    assert not settled(flat, [8.0, 12.0, 15.0, 18.0], plan)  # the first window still warms: 50 °C against 52


def test_settled_needs_its_windows_to_span_the_settling_time():
    plan, flat = SoakPlan(window_s=5.0), [(float(t), 50) for t in range(20)]
    assert not settled(flat, [1.0, 3.0, 5.0], plan)  # 4 s
    assert settled(flat, [1.0, 3.0, 5.0], plan, running_s=2.0)  # a third window running: 6 s
    assert not settled([(1.0, 50), (9.0, 50)], [0.0, 3.0, 6.0], plan)  # before the first reading: not held


def test_a_running_window_counts_with_the_last_two_windows_trend():
    plan, edges = SoakPlan(window_s=5.0, tolerance_c=2.0), [0.0, 2.0, 4.0]
    drifting = [(0.0, 49), (4.0, 51)]  # window means 49.5 and 50.5
    assert settled(drifting, edges, plan, running_s=2.0)  # and 51.5 expected of the running one: 2 apart
    assert not settled(drifting, edges, SoakPlan(window_s=4.0, tolerance_c=1.5), running_s=2.0)
    assert settled(drifting, edges, SoakPlan(window_s=4.0, tolerance_c=1.5))  # the two alone: 1 apart


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
    # Five seconds must have held: once the window ending at 4.1 s has run, the host compares the windows
    # from 0.1 s on, the one running to 5.1 s counted in their span, and keeps the last three, from 2.1 s.
    assert soak.settled and soak.seconds == pytest.approx(2.1)
    assert card.steps == 2 + 5 * 20 + 2  # lead, five windows back to back, lead: no pause in between


def test_windows_longer_than_the_settling_time_are_all_kept_after_the_temperature_holds():
    # 3 s windows, 9 s kept: their means must lie within 2 °C of one another, so they start near the end
    # of the ramp (52 °C at 12 s), not merely 5 s before the decision.
    card = Card(lambda t: 40 + min(t, 12.0))
    run, soak = card.soak(BlockPlan(lead=2, window_iterations=60, windows=3))
    assert soak.settled and run.edges_s[0] >= 11.0 and run.edges_s[-1] - run.edges_s[0] == pytest.approx(9.0)


def test_a_card_that_swings_within_the_windows_settles_as_soon_as_a_steady_one():
    # Readings alternate between 52 and 47 °C (the host reads at the window edges here), so single
    # readings never agree within 2 °C and a rule on them ran to the 30 s limit; every window's mean
    # is 49.5 °C once the host reads in it. It first reads at 2.1 s (on the CPU the window queued ahead
    # has run), so the first two windows read 52 °C; the windows compared start after them (2.1-7.1 s).
    card = Card(lambda t: 49.5 + 2.5 * math.cos(math.pi * (t - 0.1)))
    run, soak = card.soak()
    assert soak.settled and soak.seconds == pytest.approx(4.1) and card.steps == 2 + 7 * 20 + 2


def test_a_temperature_that_moves_after_the_decision_leaves_the_block_unsettled():
    # On a GPU the last kept window still runs when the host decides, and the decision compares the
    # windows before it. A jump inside that window (4.1-6.1 s) moves its mean to 57.5 °C.
    card = Card(lambda t: 55.0 if t < 5.0 else 60.0)
    run, soak = card.soak(BlockPlan(lead=2, window_iterations=40, windows=3))
    assert soak.seconds == pytest.approx(0.1) and not soak.settled and soak.end_c == 60


def test_windows_as_long_as_the_settling_time_cost_nothing_more():
    card = Card(lambda t: 55.0)
    run, soak = card.soak(BlockPlan(lead=2, window_iterations=40, windows=3))  # 6 s of windows
    assert soak.settled and soak.seconds == pytest.approx(0.1)  # the first three windows, after the lead
    assert card.steps == 2 + 3 * 40 + 2


def test_a_card_still_warming_at_the_limit_stops_there_and_says_so():
    card = Card(lambda t: 40 + t)  # 5 °C per 5 s: never within 2 °C
    run, soak = card.soak(soak_plan=SoakPlan(max_s=20.0))
    assert not soak.settled and 17.0 <= soak.seconds <= 18.0  # the last three windows before 20 s


def test_the_kept_windows_time_the_iterations_the_block_reads():
    run, soak = Card(lambda t: 50.0, iteration_s=0.07).soak()
    assert soak.iteration_s == pytest.approx(0.07)
    # Iterations that slow down as the card runs: the time is the kept windows', all three of them.
    run, soak = Card(lambda t: 50.0, iteration_s=lambda t: 0.05 + 0.002 * t).soak()
    assert len(set(round(s, 6) for s in run.gpu_s)) == 3
    assert soak.iteration_s == pytest.approx(sum(run.gpu_s) / PLAN.iterations)
