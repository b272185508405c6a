"""The A/B verdicts of a campaign that measured two sources: the working tree against a git revision.

One loop for the suite's ``--compare-to`` and ``meddpm-bench --compare-to``: every combo's working-tree
process medians (the first source) against the revision's (the second), judged by
:func:`~meddpm.judge.verdict.judge_ab` with the case's tolerances (docs/statistics.md).
"""

from __future__ import annotations

from collections.abc import Callable

from meddpm.judge.baseline import CaseKey, Tolerances
from meddpm.judge.verdict import Verdict, judge_ab
from meddpm.measure.campaign.protocol import MeasuringCampaign


def ab_verdicts(
    campaign: MeasuringCampaign, tolerances: Callable[[CaseKey], Tolerances] = lambda key: Tolerances()
) -> dict[str, Verdict]:
    """Each combo's A/B time verdict, by combo in the order measured; ``tolerances`` gives a case's own."""
    if len(campaign.sources) != 2:
        raise ValueError(f"an A/B verdict needs two sources (--compare-to), not {len(campaign.sources)}")
    tree, rev = campaign.sources
    candidates, references = campaign.measurements(tree), campaign.measurements(rev)
    verdicts = {}
    for combo, runs in candidates.items():
        key = CaseKey(campaign.config.name, combo, campaign.batch_size)
        reference = references[combo].process_medians_ms if combo in references else []
        verdicts[combo] = judge_ab(
            f"{key} {tree.label} vs {rev.label}", runs.process_medians_ms, reference, tolerances(key)
        )
    return verdicts
