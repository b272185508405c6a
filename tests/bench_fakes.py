"""A stand-in for the bench's campaign, shared by the tests that run ``meddpm-bench`` (in pytest, through
the ``fake_bench`` fixture of tests/conftest.py, or in a subprocess that imports this module)."""

from __future__ import annotations

from meddpm.measure.campaign.interleaved import ComboResult
from meddpm.measure.campaign.time_split import TimeSplit


class FakeCampaign:
    """A campaign that measures nothing: 10 ms per round for every combo."""

    def __init__(self, config, combos, device, *, batch_size, settings):
        self.config, self.combos, self.batch_size, self.settings = config, combos, batch_size, settings
        self.time_split = TimeSplit({"measuring": 0.01 * settings.min_rounds * len(combos)})

    def run(self, on_progress=None):
        return {
            c.name: ComboResult(
                preset=self.config.name,
                combo=c.name,
                batch_size=self.batch_size,
                volume=self.config.volume,
                math_precision=c.math_precision,
                samples_ms=[10.0] * self.settings.min_rounds,
                warmup_ms=[],
                setup_s=0.1,
                flops_per_iter=10**9,
                rel_iqr_target=self.settings.rel_iqr_target,
            )
            for c in self.combos
        }

    def close(self) -> None:
        """Nothing to free."""
