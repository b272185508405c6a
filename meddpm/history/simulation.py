"""Simulated nightly histories drawn from the measured noise, to calibrate and prove the change-point check.

The model (docs/statistics.md): every night a run factor, log-normal with a spread of 1.2 % (machine
starts differ by up to 2.5-2.8 %), multiplies every case at once; each case adds its own noise of
0.1-1 %. ``python -m meddpm.history.simulation`` prints the detection and false-alarm rates that
docs/history.md quotes; the tests run the same functions on fewer, seeded histories.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from meddpm.history.changepoints import RULES, MatrixSteps, Rule, matrix_steps
from meddpm.history.documents import SUITE_SCHEMA
from meddpm.history.results import run_description


@dataclass(frozen=True)
class NoiseModel:
    """Relative spreads of the run factor and of each case, and the cases' typical times."""

    run_sd: float = 0.012
    case_sds: tuple[float, ...] = (0.001, 0.0028, 0.0046, 0.0064, 0.0082, 0.010)  # 0.1-1 %, evenly
    # The six combos' medians in ms as baselines/h200.json stored them: only their ratios matter.
    levels_ms: tuple[float, ...] = (1225.8, 229.8, 1370.6, 335.6, 173.9, 49.3)
    combos: tuple[str, ...] = ("baseline", "opt1", "opt2", "opt12", "amp_bf16", "fast")


def simulate(
    rng: np.random.Generator,
    nights: int,
    model: NoiseModel = NoiseModel(),
    step_case: int | None = None,
    step_night: int | None = None,
    step: float = 0.03,
) -> np.ndarray:
    """Log times (nights x cases); from ``step_night`` on, case ``step_case`` (None: every case) is ``step`` slower."""
    run = rng.normal(0.0, model.run_sd, size=(nights, 1))
    own = rng.normal(0.0, 1.0, size=(nights, len(model.case_sds))) * np.asarray(model.case_sds)
    logs = np.log(np.asarray(model.levels_ms)) + run + own
    if step_night is not None:
        columns = slice(None) if step_case is None else slice(step_case, step_case + 1)
        logs[step_night:, columns] += math.log1p(step)
    return logs


def results_document(
    arch: str, started_at: datetime.datetime, commit: str, times_ms: Mapping[str, float], **environment: Any
) -> dict[str, Any]:
    """A results.json document as the suite writes it, for one simulated run of the paper preset.

    Each combo gets five rounds around its time and a fixed peak memory; energy is not simulated.
    """
    cases = []
    for combo, ms in times_ms.items():
        samples = [ms * (1 + d) for d in (-0.001, 0.0, 0.0005, -0.0005, 0.001)]
        cases.append(
            {
                "preset": "paper",
                "combo": combo,
                "batch_size": 1,
                "samples_ms": samples,
                "stats": {"median": ms},
                "peak_allocated_bytes": 20 * 2**30,
                "tflops": 16.6e3 / ms,
                "outcome": "ok",
                "verdicts": [],
            }
        )
    env = {"date": started_at.isoformat(), "commit": commit, "gpu_name": f"NVIDIA {arch.upper()}", **environment}
    described = run_description(1, None)
    return {"schema": SUITE_SCHEMA, "arch": arch, **described, "environment": env, "sides": [], "cases": cases}


def simulated_documents(
    logs: np.ndarray, arch: str = "h200", model: NoiseModel = NoiseModel(), **environment: Any
) -> list[dict[str, Any]]:
    """A results document per night of :func:`simulate`'s log times, one night apart, commits c0000, c0001, ..."""
    first = datetime.datetime(2026, 12, 1, 2, 17, tzinfo=datetime.timezone.utc)
    return [
        results_document(
            arch,
            first + datetime.timedelta(days=night),
            f"c{night:04d}",
            dict(zip(model.combos, np.exp(row).tolist())),
            **environment,
        )
        for night, row in enumerate(logs)
    ]


def _found(result: MatrixSteps, case: int | None, night: int) -> int | None:
    """Where ``result`` reports the planted slowdown (a regression of that series within 2 runs of it), or None."""
    splits = result.run_factor if case is None else result.cases[case]
    located = [s.index for s in splits if s.shift > 0 and abs(s.index - night) <= 2]
    return located[0] if located else None


@dataclass(frozen=True)
class Detections:
    """Per simulated history: runs after the step until it was reported, and whether its start was exact."""

    delays: np.ndarray  # the first slow run counts as 1; horizon + 1 where never reported
    exact: np.ndarray  # reported as starting at the first slow run itself (not one or two off)


def detection_delays(
    seed: int,
    histories: int,
    case: int | None,
    before: int = 20,
    horizon: int = 8,
    model: NoiseModel = NoiseModel(),
    rule: Rule = RULES["time"],
) -> Detections:
    """How soon a 3 % step after ``before`` flat nights is reported, checking after every night as the nightly does.

    ``case`` is the slowed case's column, or None for a step of every case.
    """
    rng = np.random.default_rng(seed)
    delays = np.full(histories, horizon + 1)
    exact = np.zeros(histories, dtype=bool)
    for i in range(histories):
        logs = simulate(rng, before + horizon, model, case, before)
        for runs_after in range(1, horizon + 1):
            where = _found(matrix_steps(logs[: before + runs_after], rule), case, before)
            if where is not None:
                delays[i], exact[i] = runs_after, where == before
                break
    return Detections(delays, exact)


def false_alarms(
    seed: int, histories: int, nights: int = 30, model: NoiseModel = NoiseModel(), rule: Rule = RULES["time"]
) -> np.ndarray:
    """Per flat history of ``nights``, how many steps the check reports on the last night (all should be 0)."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(histories, dtype=int)
    for i in range(histories):
        result = matrix_steps(simulate(rng, nights, model), rule)
        counts[i] = len(result.run_factor) + sum(len(s) for s in result.cases.values())
    return counts


def nightly_false_alarms(
    seed: int,
    histories: int,
    nights: int = 30,
    first: int = 10,
    model: NoiseModel = NoiseModel(),
    rule: Rule = RULES["time"],
) -> np.ndarray:
    """Flat histories checked every night from ``first`` to ``nights``: whether each night's check reports a step.

    One row per history, one column per night checked.
    """
    rng = np.random.default_rng(seed)
    flagged = np.zeros((histories, nights - first + 1), dtype=bool)
    for i in range(histories):
        logs = simulate(rng, nights, model)
        for column, night in enumerate(range(first, nights + 1)):
            result = matrix_steps(logs[:night], rule)
            flagged[i, column] = bool(result.run_factor) or any(result.cases.values())
    return flagged


def found_within(delays: np.ndarray, runs: Sequence[int]) -> list[float]:
    """The share of histories flagged within each number of runs."""
    return [float(np.mean(delays <= r)) for r in runs]


@dataclass(frozen=True)
class GoalRates:
    """The goals of docs/history.md, measured: each a share of simulated histories."""

    one_case: float  # a 3 % step of the noisiest case (1 %) reported within 3 nights
    every_case: float  # a 3 % step of every case reported within 5 nights
    flat_quiet: float  # flat 30-night histories checked every night from the 10th that never report a step
    per_night: float  # the share of those nightly checks that report a step


def goal_rates(seed: int, histories: int, rule: Rule = RULES["time"], model: NoiseModel = NoiseModel()) -> GoalRates:
    """The three goals on ``histories`` simulated histories each, seeded as :func:`main`'s table is."""
    noisiest = len(model.case_sds) - 1
    (one,) = found_within(detection_delays(seed + noisiest, histories, noisiest, model=model, rule=rule).delays, [3])
    (every,) = found_within(detection_delays(seed + 100, histories, None, model=model, rule=rule).delays, [5])
    flagged = nightly_false_alarms(seed + 300, histories, model=model, rule=rule)
    return GoalRates(one, every, float(np.mean(~flagged.any(axis=1))), float(np.mean(flagged)))


def main(argv: Sequence[str] | None = None) -> None:
    """Print the tables of docs/history.md (``--histories 1000`` there: about seven minutes of one core)."""
    parser = argparse.ArgumentParser(prog="python -m meddpm.history.simulation", description=main.__doc__)
    parser.add_argument("--histories", type=int, default=300, help="simulated histories per row (default: 300)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument(
        "--alarms",
        nargs="+",
        metavar="CASE,RUN",
        help="instead of the tables, the three goals' rates with these alarm thresholds (case, run factor)",
    )
    args = parser.parse_args(argv)
    if args.alarms:
        _trade_off(args.seed, args.histories, args.alarms)
        return
    model = NoiseModel()
    runs = range(1, 9)
    print(f"share of {args.histories} histories in which a 3 % step is found within N runs (20 flat nights before)")
    print("| slowed | noise | " + " | ".join(f"N={r}" for r in runs) + " | start exact |")
    print("| --- | --- | " + " | ".join("---" for _ in runs) + " | --- |")
    rows = [(f"one case | {sd:.2%}", column) for column, sd in enumerate(model.case_sds)]
    rows.append((f"every case | run factor {model.run_sd:.1%}", None))
    for label, column in rows:
        found = detection_delays(args.seed + (100 if column is None else column), args.histories, column)
        shares = " | ".join(f"{share:.1%}" for share in found_within(found.delays, runs))
        exact = np.mean(found.exact[found.delays <= max(runs)])
        print(f"| {label} | {shares} | {exact:.0%} |")
    counts = false_alarms(args.seed + 200, args.histories)
    print(
        f"flat 30 nights: {np.mean(counts > 0):.1%} of histories report a step on the last night "
        f"({counts.sum()} steps in {args.histories} histories)"
    )
    flagged = nightly_false_alarms(args.seed + 300, args.histories)
    print(
        f"flat 30 nights, checked every night from the 10th: {np.mean(~flagged.any(axis=1)):.1%} of histories "
        f"never report a step; {np.mean(flagged):.2%} of the nightly checks report one"
    )


def _trade_off(seed: int, histories: int, alarms: Sequence[str]) -> None:
    print(f"the goals on {histories} histories each, by the alarm thresholds (case, run factor)")
    print("| case alarm | run alarm | one case, 3 nights | every case, 5 nights | flat, never | checks reporting |")
    print("| --- | --- | --- | --- | --- | --- |")
    for pair in alarms:
        case, run = (float(t) for t in pair.split(","))
        rates = goal_rates(seed, histories, dataclasses.replace(RULES["time"], case_alarm=case, run_alarm=run))
        print(
            f"| {case} | {run} | {rates.one_case:.1%} | {rates.every_case:.1%} | "
            f"{rates.flat_quiet:.1%} | {rates.per_night:.2%} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
