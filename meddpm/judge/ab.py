"""The A/B verdicts of a campaign that measured two sources: the working tree against a git revision, or against
itself under another interpreter or environment.

One loop for the suite's and ``meddpm-bench``'s ``--compare-to``, ``--compare-python`` and ``--compare-env``: every
combo's working-tree process medians (the first source, side A) against side B's (the second), judged by
:func:`~meddpm.judge.verdict.judge_ab` with the case's tolerances (docs/statistics.md); the energy per iteration
of each side's first process against the other's, where they measured it (side B's may be carried from the last good
run, :class:`~meddpm.measure.campaign.result.CarriedEnergy`); each side's per-process peak memory,
allocated and reserved, against the other's (:func:`~meddpm.judge.verdict.judge_memory_ab`); its counts against
the revision's spread over its processes (:func:`~meddpm.judge.counts.judge_counts`); and where a verdict
flags the case, the profiled iteration of each side's first process set against the other's
(:func:`~meddpm.judge.explain.explain`, docs/explain.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from meddpm.judge.baseline import CaseKey, Tolerances
from meddpm.judge.counts import count_ranges, judge_counts
from meddpm.judge.explain import ExplainRow, explain, flagged, memory_rows
from meddpm.judge.verdict import MEMORY_METRICS, Verdict, judge_ab, judge_energy_change, judge_memory_ab
from meddpm.measure.campaign.protocol import MeasuringCampaign, Source
from meddpm.measure.campaign.result import ComboRuns


@dataclass(frozen=True)
class AbCase:
    """One combo's A/B: its time, peak memory, energy and counts verdicts and, where flagged, what moved (A: the
    working tree)."""

    time: Verdict
    counts: tuple[Verdict, ...]
    explain: tuple[ExplainRow, ...] = ()
    energy: Verdict | None = None  # None where neither side measured energy
    memory: tuple[Verdict, ...] = ()  # peak allocated, then reserved; none where neither side could read a peak

    @property
    def verdicts(self) -> list[Verdict]:
        """The time verdict, the memory verdicts, the energy verdict where there is one, then the counts'."""
        return [self.time, *self.memory, *([self.energy] if self.energy else []), *self.counts]

    @property
    def failed(self) -> bool:
        """Whether any verdict fails the case."""
        return any(v.failed for v in self.verdicts)


def ab_cases(
    campaign: MeasuringCampaign, tolerances: Callable[[CaseKey], Tolerances] = lambda key: Tolerances()
) -> dict[str, AbCase]:
    """Each combo's A/B, by combo in the order measured; ``tolerances`` gives a case's own."""
    if len(campaign.sources) != 2:
        options = "--compare-to, --compare-python, --compare-env"
        raise ValueError(f"an A/B verdict needs two sources ({options}), not {len(campaign.sources)}")
    tree, rev = campaign.sources
    candidates, references = campaign.measurements(tree), campaign.measurements(rev)
    names = side_names(tree, rev)
    cases = {}
    for combo, runs in candidates.items():
        key = CaseKey(campaign.config.name, combo, campaign.batch_size)
        reference = references.get(combo, ComboRuns())
        subject = str(key)
        tol = tolerances(key)
        time = judge_ab(subject, runs.process_medians_ms, reference.process_medians_ms, tol)
        energy = None
        # Each side's first process measured it, or side B carried it from the last good run.
        if runs.energy_blocks or reference.energy_blocks or reference.energy_source:
            energy = judge_energy_change(subject, runs.energy, reference.energy, tol.energy_rel)
            energy = replace(energy, reference_source=reference.energy_source)
        memory = tuple(
            judge_memory_ab(subject, metric, runs.process_peaks(kind), reference.process_peaks(kind), tol)
            for metric, kind in MEMORY_METRICS.items()
            if runs.process_peaks(kind) or reference.process_peaks(kind)
        )
        counts = tuple(judge_counts(subject, runs.run_counts, count_ranges(reference.run_counts)))
        moved = flagged([time, *memory, *counts]) and runs.profile_rows and reference.profile_rows
        rows = tuple(explanation(runs, reference)) if moved else ()
        cases[combo] = AbCase(
            named(time, names),
            tuple(named(v, names) for v in counts),
            rows,
            None if energy is None else named(energy, names),
            tuple(named(v, names) for v in memory),
        )
    return cases


def side_names(a: Source, b: Source) -> tuple[str, str]:
    """The short names an A/B's lines call its sides by: the sources' own ("this tree", "main"), or "A" and "B"
    where they share one (this tree against itself under another interpreter); the run's legend defines them."""
    names = (a.name or "A", b.name or "B")
    return names if names[0] != names[1] else ("A", "B")


def named(verdict: Verdict, names: tuple[str, str]) -> Verdict:
    """``verdict`` as an A/B verdict whose sides are called ``names``."""
    return replace(verdict, sides=names)


def explanation(runs: ComboRuns, reference: ComboRuns) -> list[ExplainRow]:
    """What moved from side B's processes to side A's: the rows by module type, group and name, then the bytes each
    module type's forward left allocated (docs/explain.md)."""
    rows = explain(runs.run_profiles, reference.run_profiles)
    return rows + memory_rows(runs.run_module_bytes, reference.run_module_bytes)


def ab_verdicts(
    campaign: MeasuringCampaign, tolerances: Callable[[CaseKey], Tolerances] = lambda key: Tolerances()
) -> dict[str, Verdict]:
    """Each combo's A/B time verdict (of :func:`ab_cases`), by combo in the order measured."""
    return {combo: case.time for combo, case in ab_cases(campaign, tolerances).items()}
