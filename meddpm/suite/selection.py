"""What a session measures: the combos its selected training cases need, and nothing else.

``-k``, markers and ``--combos`` select test items; the interleaved campaign of a (device, preset, batch) then
measures the combos of the selected items that read it (those marked ``training``), not every combo of the
preset. A ratio that is checked (its architecture stores an expectation for it) needs its reference combo
too, which is measured where ``--combos`` allows it, with one line saying why. A session whose selection
reads no campaign builds no model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from meddpm.suite.cases import CPU, PerfCase, RatioCase

CampaignKey = tuple[str, str, int]  # ("cuda" or "cpu", preset, batch size)


def campaign_key(on_gpu: bool, preset: str, batch_size: int) -> CampaignKey:
    """The key of the campaign that measures a case of this device, preset and batch size."""
    return ("cuda" if on_gpu else CPU, preset, batch_size)


def selected_combos(
    cases: Iterable[PerfCase | RatioCase],
    allowed: Callable[[bool], Sequence[str]],
    checked: Callable[[RatioCase], bool],
) -> tuple[dict[CampaignKey, list[str]], list[str]]:
    """The combos each campaign measures for ``cases``, in ``allowed``'s order, and a line for each reference
    measured only because a checked ratio needs it.

    ``allowed(on_gpu)`` is what ``--combos`` permits on that device; ``checked(ratio)`` whether the ratio's
    expectation exists (an unchecked ratio skips without reading the campaign).
    """
    wanted: dict[CampaignKey, set[str]] = {}
    references: dict[CampaignKey, dict[str, list[str]]] = {}
    for case in cases:
        if isinstance(case, PerfCase):
            wanted.setdefault(campaign_key(case.on_gpu, case.preset, case.batch_size), set()).add(case.combo)
        elif checked(case):
            key = campaign_key(True, case.preset, case.batch_size)
            wanted.setdefault(key, set()).add(case.combo)
            references.setdefault(key, {}).setdefault(case.reference, []).append(f"{case.combo}/{case.reference}")
    notes = []
    for key, needed in references.items():
        for reference, ratios in needed.items():
            if reference not in wanted[key] and reference in allowed(key[0] != CPU):
                wanted[key].add(reference)
                notes.append(f"measuring {reference} too: the expectation of {', '.join(ratios)} needs it")
    selection = {key: [c for c in allowed(key[0] != CPU) if c in combos] for key, combos in wanted.items()}
    return selection, notes
