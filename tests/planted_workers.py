"""An A/B whose worker processes are planted: a real :class:`ProcessCampaign` of the tiny preset on the CPU, each of
whose processes returns what the test says, so the campaign's pairing, pooling and reporting run on known figures."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from meddpm.measure.campaign.protocol import Source
from meddpm.measure.campaign.result import ComboResult
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.measure.processes.campaign import ProcessCampaign
from meddpm.model.config import ModelConfig


def planted_ab(
    tmp_path: Path, combos: Sequence[str], processes: int, result: Callable[[str, int, str], ComboResult]
) -> ProcessCampaign:
    """The A/B of ``combos``, ``processes`` a side, run: ``result(side, i, combo)`` is what side ``side``'s process
    ``i`` (from 0) reports for ``combo``; side "A" is the working tree (abc), "B" the revision HEAD (def)."""
    tree, rev = Source("working tree (abc)", tmp_path, "abc"), Source("HEAD (def)", tmp_path, "def")
    campaign = ProcessCampaign(
        ModelConfig.preset("tiny"),
        list(combos),
        torch.device("cpu"),
        batch_size=1,
        settings=CampaignSettings(),
        processes=processes,
        sources=[tree, rev],
    )
    seen = {"A": 0, "B": 0}

    def worker(source: Source, combos: list[str], settings: CampaignSettings) -> list[ComboResult]:
        side = "A" if source is tree else "B"
        i = seen[side]
        seen[side] += 1
        return [result(side, i, c) for c in combos]

    campaign._run_worker = worker  # type: ignore[method-assign]
    campaign.run()
    return campaign
