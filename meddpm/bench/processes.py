"""``meddpm-bench --processes N``, ``--compare-to REV``, ``--compare-python`` and ``--compare-env``: measuring in
worker processes.

One process's rounds share its CUDA context, its cuDNN and Inductor autotuning and the card's
state, so they are not independent; the process is. With ``--processes N`` every combo is
measured in N fresh processes and the table gains each combo's process medians and their
spread. With ``--compare-to REV`` the working tree and REV (checked out in a temporary git
worktree) run in alternating processes, and each combo gets the A/B verdict of the suite's
``--compare-to``: the ratio with its interval, the p-value over process medians, the smallest
change the run could see, and "regression" only when the slowdown is significant and beyond
the threshold that the run's own between-process spread sets. ``--compare-python PATH`` and
``--compare-env NAME=VALUE`` run side B (the working tree, or REV) under another interpreter or with
more environment variables; each side's interpreter and versions are printed above the verdicts.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from meddpm.bench.output import say
from meddpm.errors import UserError
from meddpm.history.last_good import check_known, compare_to_last_good
from meddpm.history.last_good_run import LastGood
from meddpm.judge.ab import AbCase, ab_cases, side_names
from meddpm.judge.baseline import CaseKey, Tolerances
from meddpm.judge.verdict import Verdict
from meddpm.measure.campaign.inputs import MAX_PROCESSES, detectable_target, process_count, revision
from meddpm.measure.campaign.protocol import MeasuringCampaign, Progress, Source
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.measure.processes.campaign import AB_PROCESSES, ProcessCampaign
from meddpm.measure.processes.revision import check_sides, sources
from meddpm.measure.processes.sides import OtherSide, interpreter, legend, parse_env, sides_line
from meddpm.measure.statistics.compare import between_process_spread
from meddpm.model.config import ModelConfig
from meddpm.report.explanation import explanation_lines, first_line
from meddpm.report.outlying import outlying_processes, process_cards
from meddpm.report.tables import format_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options :func:`plan` reads: how many processes, and what an A/B run sets against the tree."""
    parser.add_argument(
        "--processes",
        type=int,
        help="measure every combo in N fresh processes (each its own CUDA context, autotuning and compilation) "
        f"and show the spread of their medians (default: 1, or {AB_PROCESSES} a side with --compare-to; "
        f"at most {MAX_PROCESSES})",
    )
    parser.add_argument(
        "--until-detectable",
        type=float,
        metavar="SHARE",
        help="A/B: from 2 processes a side on, stop measuring a combo once its A/B could flag a slowdown of SHARE "
        "(0.01: 1 %%), so the processes of --processes (now the most a side) go to the noisy combos",
    )
    parser.add_argument(
        "--compare-to",
        metavar="REV",
        help="A/B: measure git revision REV and the working tree in alternating processes; per combo the ratio, "
        "its interval, p and the smallest change this run could see; exit 1 on a significant slowdown; "
        "last-good: the commit of the newest good bench run of this architecture in the history (--history), "
        "and per combo whether the code or the machine moved",
    )
    parser.add_argument(
        "--compare-python",
        metavar="PATH",
        help="A/B: run side B (the working tree, or REV with --compare-to) with this Python interpreter, e.g. "
        "another venv's with another torch, CUDA or cuDNN; it runs this tree's harness and needs torch",
    )
    parser.add_argument(
        "--compare-env",
        action="append",
        metavar="NAME=VALUE",
        help="A/B: run side B (the working tree, or REV with --compare-to) with this environment variable too; "
        "repeatable",
    )


@dataclass(frozen=True)
class ProcessPlan:
    """How many processes, against which revision (None: the working tree), and what side B runs under."""

    processes: int
    compare_to: str | None
    other: OtherSide = OtherSide()
    last_good: LastGood | None = None  # the history's run whose commit compare_to is (--compare-to=last-good)
    until_detectable: float | None = None  # --until-detectable: an A/B combo stops once this is detectable

    @property
    def ab(self) -> bool:
        """Whether this is an A/B run: against a revision, another interpreter or another environment."""
        return self.compare_to is not None or self.other.given

    @property
    def active(self) -> bool:
        """Whether the bench measures in worker processes rather than in its own."""
        return self.processes > 1 or self.ab


def plan(
    processes: int | None,
    compare_to: str | None,
    *,
    kernel_mix: bool,
    sample: bool,
    gpus: int,
    compare_python: str | None = None,
    compare_env: Sequence[str] | None = None,
    history: str | None = None,
    arch: str = "cpu",
    until_detectable: float | None = None,
) -> ProcessPlan:
    """The process plan of the options given, checked now: a bad REV or interpreter is one line, not minutes later.

    ``compare_to`` :data:`~meddpm.history.last_good.LAST_GOOD` is the commit of the last good bench run on ``arch``
    in ``history`` (the database as ``--history`` gives it)."""
    compare_to = revision(compare_to)
    other = OtherSide(interpreter(compare_python), parse_env(compare_env))
    ab = "--compare-to" if compare_to is not None else "--compare-python/--compare-env" if other.given else None
    count = process_count("--processes", processes, ab)
    last_good = compare_to_last_good(compare_to, history, arch, "bench", count)
    compare_to = last_good.commit if last_good else compare_to
    stop_at = detectable_target("--until-detectable", until_detectable, ab)
    result = ProcessPlan(count, compare_to, other, last_good, stop_at)
    if result.active and kernel_mix:
        raise UserError("--kernel-mix profiles the models of this process; drop it or --processes/--compare-to")
    if ab is not None and (sample or gpus):
        extra = "--sample" if sample else "--gpus"
        raise UserError(f"{extra} would measure the working tree only; run it without {ab}")
    if last_good is not None:
        check_known(last_good)
    if ab is not None:  # the slowest check last: it drives side B's workload once
        check_sides(compare_to, other)
    return result


@contextlib.contextmanager
def campaign(
    process_plan: ProcessPlan,
    config: ModelConfig,
    combos: Sequence[str],
    device: torch.device,
    batch_size: int,
    settings: CampaignSettings,
) -> Iterator[ProcessCampaign]:
    """The process campaign of ``process_plan``; REV's worktree exists while the block runs."""
    with sources(process_plan.compare_to, process_plan.other) as measured:
        yield ProcessCampaign(
            config,
            combos,
            device,
            batch_size=batch_size,
            settings=settings,
            processes=process_plan.processes,
            sources=measured,
            until_detectable=process_plan.until_detectable,
        )


def log_progress(prog: str) -> Callable[[Progress], None]:
    """A progress callback printing one line per finished process (each takes a while)."""

    def log(p: Progress) -> None:
        print(f"{prog}: process {p.done}/{p.total} ({p.combo}) done: {p.detail}", file=sys.stderr, flush=True)

    return log


def spread_table(campaign: MeasuringCampaign) -> pd.DataFrame:
    """Per combo of the first source: each process's median and the between-process spread."""
    rows = []
    for combo, runs in campaign.measurements().items():
        medians = runs.process_medians_ms
        spread = between_process_spread(medians)
        rows.append(
            {
                "combo": combo,
                "processes": len(medians),
                "ms/iter": float(np.median(medians)),  # the median of the process medians
                "process medians ms": " ".join(f"{m:.4g}" for m in medians),
                "between-process spread": "n/a" if spread is None else f"{spread:.2%}",
            }
        )
    return pd.DataFrame(rows).set_index("combo")


def process_medians(campaign: MeasuringCampaign) -> dict[str, dict[str, list[float]]]:
    """Each source's process medians (ms) by combo, for the results file; empty for processes yet to run."""
    return {
        s.label: {combo: runs.process_medians_ms for combo, runs in campaign.measurements(s).items()}
        for s in campaign.sources
    }


def ab_table(cases: dict[str, AbCase], sources: Sequence[Source]) -> pd.DataFrame:
    """One row per combo: both medians, the ratio and its interval, p, threshold, detectable change, verdict, each
    side's peak memory (allocated, reserved) with its verdict, and where both sides measured it, the energy change
    and its verdict."""
    a, b = side_names(*sources)
    rows = []
    for combo, case in cases.items():
        v, c = case.time, case.time.comparison
        row = {
            "combo": combo,
            "processes": f"{len(c.candidate_ms)}+{len(c.reference_ms)}",
            f"{b} ms": v.baseline,
            f"{a} ms": v.now,
            "ratio": f"{c.ratio:.4f}",
            f"{c.confidence:.0%} interval": "n/a" if not c.testable else f"[{c.ci_low:.4f}, {c.ci_high:.4f}]",
            "p (slower)": "n/a" if not c.testable else f"{c.p_slower:.2g}",
            "threshold": f"{v.tolerance:.2%}",
            "detectable": f"{v.detectable:.2%}",
            "verdict": v.outcome,
        }
        for m in case.memory:
            row[f"{m.metric} GiB"] = (
                "n/a" if m.baseline is None or m.now is None else f"{m.baseline:.2f} -> {m.now:.2f}"
            )
            row[f"{m.metric} verdict"] = m.outcome
        if case.energy is not None:
            e = case.energy
            row["energy"] = "n/a" if e.change is None else f"{e.change:+.1%}"
            row["energy verdict"] = e.outcome
        rows.append(row)
    return pd.DataFrame(rows).set_index("combo")


def report(
    campaign: ProcessCampaign, processes: int, extras: dict[str, object], last_good: LastGood | None = None
) -> int:
    """Print the process medians and, for an A/B run, each side's interpreter and the verdicts; 1 if side A is
    slower. Against ``last_good``'s commit, also whether the code or the machine moved each combo."""
    say(f"per-process medians ({campaign.sources[0].label}):")
    say(format_table(spread_table(campaign)))
    extras["process_medians_ms"] = process_medians(campaign)
    cards = {combo: process_cards(campaign, combo) for combo in campaign.combos}
    extras["process_cards"] = cards
    apart = [sentence for combo, combo_cards in cards.items() for sentence in outlying_processes(combo, combo_cards)]
    if len(campaign.sources) == 1:
        for sentence in apart:
            say(sentence)
        return 0
    cases = ab_cases(campaign)
    verdicts = {combo: case.time for combo, case in cases.items()}
    tree, rev = campaign.sources
    most = " at most (a combo stopped once its detectable change was reached)" if campaign.until_detectable else ""
    say(f"A/B, {processes} processes a side{most}: {legend([tree.label, rev.label])}")
    say(sides_line(campaign.sides()))
    say(format_table(ab_table(cases, campaign.sources)))
    for sentence in apart:  # after the legend, which names the sides
        say(sentence)
    extras["comparisons"] = {
        combo: {"outcome": v.outcome, "threshold": v.tolerance, **v.comparison.as_dict()}
        for combo, v in verdicts.items()
    }
    memory = {combo: [v.figures() for v in case.memory] for combo, case in cases.items() if case.memory}
    if memory:
        extras["memory_comparisons"] = memory
    energy = {combo: case.energy for combo, case in cases.items() if case.energy is not None}
    if energy:
        extras["energy_comparisons"] = {combo: v.figures() for combo, v in energy.items()}
    for combo, case in cases.items():  # a flagged combo's one line, what else moved, and its rows (docs/explain.md)
        if case.explain:
            say(opening_line(combo, case))
        for moved in (v for v in case.verdicts[1:] if v.outcome in ("regression", "improvement")):
            say(moved.message())
        for line in explanation_lines([r.as_dict() for r in case.explain], markdown=False):
            say(line)
    extras["explain"] = {combo: [r.as_dict() for r in case.explain] for combo, case in cases.items() if case.explain}
    if last_good is not None:
        extras["last_good"] = last_good.as_dict()
        extras["attributions"] = attributions(campaign, verdicts, last_good)
    worse = [combo for combo, case in cases.items() if case.failed]
    if worse:
        say(f"worse than {rev.label}: {', '.join(worse)}")
    return 1 if worse else 0


def opening_line(combo: str, case: AbCase) -> str:
    """The one line a flagged combo opens with: its time change and interval, its peak memory change where that
    failed it, and the module type that moved most (:func:`~meddpm.report.explanation.first_line`)."""
    c = case.time.comparison
    time = (c.change, c.ci_low - 1, c.ci_high - 1) if c is not None and c.testable else None
    memory = next((v.change for v in case.memory if v.metric == "peak memory" and v.outcome == "regression"), None)
    return first_line(combo, time, memory, [r.as_dict() for r in case.explain])


def attributions(
    campaign: ProcessCampaign, verdicts: dict[str, Verdict], last_good: LastGood
) -> dict[str, dict[str, object]]:
    """Print, and return by combo, whether the code or the machine moved each combo (meddpm.judge.drift)."""
    now = (campaign.sides() or [{}])[0].get("environment") or {}
    say(f"code or machine, against {last_good.describe()} (docs/history.md):")
    found = {}
    for combo, verdict in verdicts.items():
        key = str(CaseKey(campaign.config.name, combo, campaign.batch_size))
        attribution = last_good.attribution(key, verdict, Tolerances().time_rel, now)
        say(f"  {attribution.line()}")
        found[combo] = attribution.as_dict()
    return found
