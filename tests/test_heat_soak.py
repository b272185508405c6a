"""The soak before an energy block, on a fake card whose temperature follows a fake clock."""

from __future__ import annotations

import pytest

from meddpm.measure.heat_soak import Soak, SoakPlan, soak


class Card:
    """A clock that each iteration advances by ``iteration_s``, and a temperature that is a function of it."""

    def __init__(self, temperature, iteration_s: float = 0.05):
        self.t, self.iteration_s, self.curve = 0.0, iteration_s, temperature
        self.steps = self.syncs = 0

    def step(self) -> None:
        self.t += self.iteration_s
        self.steps += 1

    def sync(self) -> None:
        self.syncs += 1

    def temperature_c(self) -> int:
        return round(self.curve(self.t))

    def soak(self, plan: SoakPlan | None = None) -> Soak:
        plan = plan or SoakPlan()
        return soak(self.step, self.iteration_s, self.temperature_c, self.sync, plan, clock=lambda: self.t)


def test_a_warming_card_settles_once_its_temperature_holds_for_the_window():
    # 1 °C a second from 40 °C to 52 °C at 12 s, then flat: settled when 5 s of readings stay within 1 °C.
    card = Card(lambda t: 40 + min(t, 12.0))
    result = card.soak()
    assert result.settled and result.start_c == 40 and result.end_c == 52
    assert 15.0 <= result.seconds <= 17.0  # 5 s after the reads came within 1 °C of 52
    assert card.syncs == pytest.approx(card.steps / 10, abs=1)  # 0.5 s of 50 ms iterations between reads


def test_a_card_cooling_from_a_hotter_combo_settles_too():
    card = Card(lambda t: 60 - min(t, 8.0))
    result = card.soak()
    assert result.settled and (result.start_c, result.end_c) == (60, 52) and result.seconds < 14.0


def test_a_card_at_its_temperature_already_settles_after_one_window():
    result = Card(lambda t: 55.0).soak()
    assert result.settled and result.seconds == pytest.approx(5.0, abs=0.5)


def test_a_card_still_warming_at_the_limit_stops_there_and_says_so():
    card = Card(lambda t: 40 + t / 2)  # 2.5 °C per 5 s window: never within 1 °C
    result = card.soak(SoakPlan(max_s=20.0))
    assert not result.settled and result.seconds == pytest.approx(20.0, abs=0.5)
    assert result.describe() == "40 -> 50 °C in 20 s (not settled in 20 s)"


def test_iterations_longer_than_the_poll_are_read_between_each():
    card = Card(lambda t: 50.0, iteration_s=1.2)  # a baseline iteration: one per read
    card.soak()
    assert card.steps == card.syncs


def test_the_soak_times_the_iterations_the_block_is_planned_with():
    # The rounds' median said 0.5 s (a first process, still autotuning); back to back they take 50 ms.
    card = Card(lambda t: 50.0, iteration_s=0.05)
    result = soak(card.step, 0.5, card.temperature_c, card.sync, SoakPlan(), clock=lambda: card.t)
    assert result.iteration_s == pytest.approx(0.05)
