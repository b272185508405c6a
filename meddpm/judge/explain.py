"""What moved in a flagged case: side A's profiled iteration against side B's, row by row.

A flagged case (a failed verdict, or a regression that does not fail) gets rows of the kernels (GPU) or
aten operators (CPU) of one profiled iteration per side (:mod:`meddpm.measure.profiling.iteration`):
one per group of :data:`~meddpm.measure.profiling.kernel_mix.GROUPS` (``level`` "category") and one per
name (``level`` "name"), each with calls and milliseconds per side. A is the side judged (the working
tree, this run), B its reference (the revision, the stored baseline). Rows whose calls changed come
first, the largest time moved first within each part: a changed count is deterministic, a time on a busy
machine is not. Against a stored baseline, which keeps counts and no rows, the rows are the counts
(``level`` "count"), B the nearest value of the stored spread (docs/explain.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from meddpm.judge.baseline import CountRange
from meddpm.judge.verdict import Verdict
from meddpm.measure.profiling.iteration import LAUNCHES, ProfileRow
from meddpm.measure.profiling.kernel_mix import GROUPS


@dataclass(frozen=True)
class ExplainRow:
    """One kernel, operator, group or count of a flagged case: calls and time on side A and side B."""

    level: str  # "category", "name" or "count"
    name: str
    category: str
    count_a: int
    count_b: int
    ms_a: float | None
    ms_b: float | None

    @property
    def change(self) -> str:
        """ "appeared" (only in A), "vanished" (only in B), "calls" (both, other counts) or "time" (same calls)."""
        if self.count_b == 0 and self.count_a:
            return "appeared"
        if self.count_a == 0 and self.count_b:
            return "vanished"
        return "calls" if self.count_a != self.count_b else "time"

    @property
    def movement(self) -> tuple[bool, float, int]:
        """Sort key: changed calls first, then the larger time moved, then the larger change of calls."""
        ms = abs((self.ms_a or 0.0) - (self.ms_b or 0.0))
        return (self.count_a == self.count_b, -ms, -abs(self.count_a - self.count_b))

    def as_dict(self) -> dict[str, Any]:
        """The row for JSON, with its change."""
        return {**asdict(self), "change": self.change}


def flagged(verdicts: Iterable[Verdict]) -> bool:
    """Whether a case's verdicts call for an explanation: one fails, or one says regression."""
    return any(v.failed or v.outcome == "regression" for v in verdicts)


def explain(rows_a: Sequence[ProfileRow], rows_b: Sequence[ProfileRow]) -> list[ExplainRow]:
    """Side A's rows against side B's: the groups, then every name, each part sorted by movement."""
    by_group = [
        _row(
            "category",
            group,
            group,
            [r for r in rows_a if r.category == group],
            [r for r in rows_b if r.category == group],
        )
        for group in GROUPS
    ]
    names = dict.fromkeys([r.name for r in rows_a] + [r.name for r in rows_b])
    by_name = [
        _row(
            "name",
            name,
            _category(name, rows_a, rows_b),
            [r for r in rows_a if r.name == name],
            [r for r in rows_b if r.name == name],
        )
        for name in names
    ]
    present = [r for r in by_group if r.count_a or r.count_b]
    return sorted(present, key=lambda r: r.movement) + sorted(by_name, key=lambda r: r.movement)


def explain_counts(now: Mapping[str, int], stored: Mapping[str, CountRange]) -> list[ExplainRow]:
    """Counts against a stored spread (a baseline keeps no rows): changed ones first, then by how far."""
    rows = [
        ExplainRow("count", key, _count_category(key), now[key], spread.nearest(now[key]), None, None)
        for key, spread in stored.items()
        if key in now
    ]
    return sorted(rows, key=lambda r: r.movement)


def _row(level: str, name: str, category: str, a: Sequence[ProfileRow], b: Sequence[ProfileRow]) -> ExplainRow:
    return ExplainRow(level, name, category, sum(r.count for r in a), sum(r.count for r in b), _ms(a), _ms(b))


def _ms(rows: Sequence[ProfileRow]) -> float:
    return round(sum(r.ms for r in rows), 4)


def _category(name: str, rows_a: Sequence[ProfileRow], rows_b: Sequence[ProfileRow]) -> str:
    return next(r.category for r in [*rows_a, *rows_b] if r.name == name)


def _count_category(key: str) -> str:
    """``launches.convolution`` -> ``convolution``; the totals (launches, bytes, FLOPs) -> ``all``."""
    return key.removeprefix(f"{LAUNCHES}.") if key.startswith(f"{LAUNCHES}.") else "all"
