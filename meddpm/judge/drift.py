"""Code or machine: an A/B against the last good commit set beside the last good run's own figures.

A nightly run measures the working tree (A) and the last good run's commit (B) in alternating processes
on this machine now. Three ratios then tell a code change from a change of machine or software:

- the A/B (A now / B now, judged by its verdict): only the code differs, so a move here is the code's;
- A now / the last good run's median: what a comparison with stored figures sees, code and machine together;
- B now / the last good run's median: the same commit measured again on another machine start, so a move
  here is the machine's or its software's (driver, PyTorch, CUDA, cuDNN, card, clocks, power cap).

The last good run's environment, set beside this run's, names what differs (docs/history.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from meddpm.judge.verdict import UNDER_THRESHOLD, Verdict

# What a run's environment records that can move a measurement without the code changing (the card's power
# cap and top SM clock among them: another clock state is another machine).
ENVIRONMENT_FIELDS = (
    "gpu_name",
    "gpu_uuid",
    "driver",
    "torch",
    "cuda",
    "cudnn",
    "python",
    "power_limit_w",
    "sm_clock_max_mhz",
)
CODE = "code"
DRIFT = "machine or environment drift"
BOTH = "code, and machine or environment drift"
UNCHANGED = "unchanged"
NOT_MEASURED = "not measured in the last good run"
INCONCLUSIVE = "inconclusive (the A/B saw no change, its commit measured as before, yet this tree moved)"


def environment_differences(then: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """``"driver 570.86 -> 580.159"`` for each field of :data:`ENVIRONMENT_FIELDS` both environments recorded
    that differs."""
    return [
        f"{name} {then[name]} -> {now[name]}"
        for name in ENVIRONMENT_FIELDS
        if then.get(name) is not None and now.get(name) is not None and str(then[name]) != str(now[name])
    ]


@dataclass(frozen=True)
class Attribution:
    """What moved one case: the code, the machine (or its software), both, or nothing."""

    case: str
    cause: str
    ab_ratio: float | None  # A now / B now
    against_last_run: float | None  # A now / the last good run's median
    same_code: float | None  # B now / the last good run's median
    tolerance: float  # beyond this the comparison with the last run's figures counts as moved
    differences: tuple[str, ...] = ()

    def line(self) -> str:
        """One line: the cause, the three ratios and what differs from the last good run."""
        ratios = ", ".join(
            f"{label} {_ratio(value)}"
            for label, value in (
                ("A/B", self.ab_ratio),
                ("vs last good run", self.against_last_run),
                ("its commit again", self.same_code),
            )
        )
        differs = "; ".join(self.differences) if self.differences else "no recorded difference"
        tail = f" [{differs}]" if self.cause in (DRIFT, BOTH) else ""
        return f"{self.case}: {self.cause} ({ratios}){tail}"

    def as_dict(self) -> dict[str, Any]:
        """The attribution as results files keep it."""
        return {
            "cause": self.cause,
            "ab_ratio": self.ab_ratio,
            "against_last_run": self.against_last_run,
            "same_code": self.same_code,
            "tolerance": self.tolerance,
            "differences": list(self.differences),
        }


def attribute(
    case: str, ab: Verdict, last_run_median_ms: float | None, tolerance: float, differences: Sequence[str] = ()
) -> Attribution:
    """The cause of whatever moved ``case``, from its A/B verdict (``now``: A's median, ``baseline``: B's) and
    the last good run's median of it; a comparison with that median has moved beyond ``tolerance`` (relative)."""
    a_now, b_now = ab.now, ab.baseline
    ab_ratio = a_now / b_now if a_now and b_now else None
    against = a_now / last_run_median_ms if a_now and last_run_median_ms else None
    same = b_now / last_run_median_ms if b_now and last_run_median_ms else None
    code_moved = ab.outcome in ("regression", "improvement", *UNDER_THRESHOLD)
    # Only the last good commit measured again tells of the machine: against the last run, this tree moves
    # with the code and the machine together.
    machine_moved = _moved(same, tolerance)
    if against is None:
        cause = CODE if code_moved else NOT_MEASURED
    elif code_moved:
        cause = BOTH if machine_moved else CODE
    elif machine_moved:
        cause = DRIFT
    else:
        cause = INCONCLUSIVE if _moved(against, tolerance) else UNCHANGED
    return Attribution(case, cause, ab_ratio, against, same, tolerance, tuple(differences))


def _moved(ratio: float | None, tolerance: float) -> bool:
    return ratio is not None and math.isfinite(ratio) and abs(ratio - 1) > tolerance


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
