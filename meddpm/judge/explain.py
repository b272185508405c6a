"""What moved in a flagged case: side A's profiled iterations against side B's, row by row.

A flagged case (a failed verdict, or a regression that does not fail) gets rows of the kernels (GPU) or
aten operators (CPU) of one profiled iteration per process (:mod:`meddpm.measure.profiling.iteration`). A is
the side judged (the working tree, this run), B its reference (the revision, the stored baseline). Each side's
figure of a row is the median over its processes; rows are matched by :func:`~meddpm.measure.profiling.names.
match_key` and label, so an Inductor kernel renumbered by another compile is one row. The levels:

- ``module``: one per module type (``Conv3d``, ``GroupNorm32``), the roll-up an explanation opens with, its
  ``detail`` the largest change of calls in words ("35 more float32 elementwise kernels");
- ``category``: one per group of :data:`~meddpm.measure.profiling.kernel_mix.GROUPS`;
- ``name``: one per kernel or operator with its short name (``label``), the modules (``module``) and aten
  operator (``op``) where it moved;
- ``memory``: one per module type, the bytes its forward left allocated (saved activations), only in
  :func:`memory_rows`;
- ``count``: against a stored baseline without a profile, the counts (B the nearest value of the spread).

A row is ``shown`` when it moved beyond what the sides' own processes vary by: its calls lie outside the other
side's range, or its time moved by more than the spread of its processes on either side, :data:`FLOOR_REL`
of its own time and :data:`FLOOR_ITERATION` of the iteration's (docs/explain.md). Within each level, rows
whose calls changed come first, then the largest time moved.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from meddpm.judge.baseline import CountRange
from meddpm.judge.verdict import Verdict
from meddpm.measure.profiling.iteration import LAUNCHES, ProfileRow
from meddpm.measure.profiling.kernel_mix import GROUPS
from meddpm.measure.profiling.names import match_key
from meddpm.measure.profiling.scopes import OUTSIDE

FLOOR_REL = 0.02  # a time-only move under 2 % of the row's own time is not shown (a convolution's 0.4 % is noise)
FLOOR_ITERATION = 0.0005  # nor one under 0.05 % of the iteration's time
_TYPE = re.compile(r" \((\w+)\)$")
_DTYPES = ("bfloat16", "float16", "float32", "float64", "int64", "int32", "bool", "uint8", "int8")

Runs = Sequence[Sequence[ProfileRow]]  # one side: the profiled rows of each of its processes


@dataclass(frozen=True)
class ExplainRow:
    """One row of a flagged case: calls (or bytes) and time on side A and side B, and where it ran."""

    level: str  # "module", "category", "name", "memory" or "count"
    name: str
    category: str
    count_a: int
    count_b: int
    ms_a: float | None
    ms_b: float | None
    label: str = ""  # the short name: "mul float32", a module type, a count
    module: str = ""  # the module(s) where it moved most
    op: str = ""  # the aten operator(s) that launched it
    shown: bool = True  # moved beyond the sides' own variation
    detail: str = ""  # a module type's largest change of calls, in words

    @property
    def change(self) -> str:
        """ "appeared" (only in A), "vanished" (only in B), "calls" (both, other counts) or "time" (same calls)."""
        if self.count_b == 0 and self.count_a:
            return "appeared"
        if self.count_a == 0 and self.count_b:
            return "vanished"
        return "calls" if self.count_a != self.count_b else "time"

    @property
    def ms_moved(self) -> float:
        """Milliseconds A - B."""
        return (self.ms_a or 0.0) - (self.ms_b or 0.0)

    @property
    def movement(self) -> tuple[bool, float, int]:
        """Sort key: changed calls first, then the larger time moved, then the larger change of calls."""
        return (self.count_a == self.count_b, -abs(self.ms_moved), -abs(self.count_a - self.count_b))

    def as_dict(self) -> dict[str, Any]:
        """The row for JSON, with its change."""
        return {**asdict(self), "change": self.change}


def flagged(verdicts: Iterable[Verdict]) -> bool:
    """Whether a case's verdicts call for an explanation: one fails, or one says regression."""
    return any(v.failed or v.outcome == "regression" for v in verdicts)


def module_type(module: str) -> str:
    """``output_blocks.3.0.out_layers.2 (Conv3d)`` -> ``Conv3d``; the optimizer's scope -> ``optimizer``."""
    if module.startswith("Optimizer."):
        return "optimizer"
    found = _TYPE.search(module)
    return found.group(1) if found else OUTSIDE


def explain(runs_a: Runs, runs_b: Runs, name_key: Callable[[str], str] = match_key) -> list[ExplainRow]:
    """Side A's processes against side B's: module types, groups, then every kernel or operator, by movement.

    ``name_key``: the name two rows are matched by (with their label); a stored profile's is cut where long."""
    total = statistics.median(sum(r.ms for r in rows) for rows in [*runs_a, *runs_b]) if runs_a or runs_b else 0.0
    judge = _Judge(total)
    by_type = _level("module", runs_a, runs_b, lambda r: module_type(r.module), judge)
    by_type = [replace_detail(row, _detail(row.name, runs_a, runs_b)) for row in by_type]
    by_group = [r for r in _level("category", runs_a, runs_b, lambda r: r.category, judge) if r.count_a or r.count_b]
    by_group.sort(key=lambda r: GROUPS.index(r.name))
    by_name = _level("name", runs_a, runs_b, lambda r: f"{name_key(r.name)}\t{r.label}", judge)
    return [*sorted(by_type, key=lambda r: r.movement), *sorted(by_group, key=lambda r: r.movement),
            *sorted(_distinct(by_name), key=lambda r: r.movement)]  # fmt: skip


def memory_rows(bytes_a: Sequence[Mapping[str, int]], bytes_b: Sequence[Mapping[str, int]]) -> list[ExplainRow]:
    """Per module type, the bytes its forward left allocated (saved activations, output) on each side, the median
    over processes; the most grown first, each naming the module that grew most. For a peak-memory verdict."""
    types = {module_type(m) for side in (*bytes_a, *bytes_b) for m in side}
    rows = []
    for kind in types:
        a = _median_of([sum(v for m, v in run.items() if module_type(m) == kind) for run in bytes_a])
        b = _median_of([sum(v for m, v in run.items() if module_type(m) == kind) for run in bytes_b])
        grown = top(
            {m: _median_of([r.get(m, 0) for r in bytes_a]) - _median_of([r.get(m, 0) for r in bytes_b])
             for side in (*bytes_a, *bytes_b) for m in side if module_type(m) == kind}
        )  # fmt: skip
        rows.append(ExplainRow("memory", kind, "memory", round(a), round(b), None, None, kind, grown, shown=a != b))
    return sorted(rows, key=lambda r: -(r.count_a - r.count_b))


def explain_counts(now: Mapping[str, int], stored: Mapping[str, CountRange]) -> list[ExplainRow]:
    """Counts against a stored spread (a baseline keeps no rows): changed ones first, then by how far."""
    rows = [
        ExplainRow(
            "count",
            key,
            _count_category(key),
            now[key],
            spread.nearest(now[key]),
            None,
            None,
            key,
            shown=now[key] != spread.nearest(now[key]),
        )  # fmt: skip
        for key, spread in stored.items()
        if key in now
    ]
    return sorted(rows, key=lambda r: r.movement)


def shown_share(rows: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """The milliseconds A - B of the shown rows by name, and of all of them (the iteration's difference)."""
    names = [r for r in rows if r["level"] == "name"]
    moved = [(r["ms_a"] or 0.0) - (r["ms_b"] or 0.0) for r in names]
    return sum(m for m, r in zip(moved, names) if r["shown"]), sum(moved)


def replace_detail(row: ExplainRow, detail: str) -> ExplainRow:
    """``row`` with its ``detail``."""
    return ExplainRow(**{**asdict(row), "detail": detail})


class _Judge:
    """Whether a row moved beyond the processes' own variation and the floors."""

    def __init__(self, iteration_ms: float):
        self.iteration_ms = iteration_ms

    def __call__(self, counts: tuple[list[int], list[int]], ms: tuple[list[float], list[float]]) -> bool:
        (ca, cb), (ma, mb) = counts, ms
        if min(ca) > max(cb) or max(ca) < min(cb):
            return True
        moved = abs(statistics.median(ma) - statistics.median(mb))
        noise = max(max(ma) - min(ma), max(mb) - min(mb))
        floor = max(FLOOR_REL * max(statistics.median(ma), statistics.median(mb)), FLOOR_ITERATION * self.iteration_ms)
        return moved > max(noise, floor)


def _level(level: str, runs_a: Runs, runs_b: Runs, key: Callable[[ProfileRow], str], judge: _Judge) -> list[ExplainRow]:
    """One row per key: each side's per-process calls and milliseconds, their medians, where it moved most."""
    per_a, per_b = _per_process(runs_a, key), _per_process(runs_b, key)
    samples: dict[str, ProfileRow] = {}
    firsts: dict[str, list[tuple[int, ProfileRow]]] = defaultdict(list)  # the first processes' rows, signed
    for sign, runs in ((1, runs_a), (-1, runs_b)):
        for i, rows in enumerate(runs):
            for r in rows:
                samples.setdefault(key(r), r)
                if i == 0:
                    firsts[key(r)].append((sign, r))
    found = []
    for k, sample in samples.items():
        ca, cb = [p.get(k, (0, 0.0))[0] for p in per_a] or [0], [p.get(k, (0, 0.0))[0] for p in per_b] or [0]
        ma, mb = [p.get(k, (0, 0.0))[1] for p in per_a] or [0.0], [p.get(k, (0, 0.0))[1] for p in per_b] or [0.0]
        named = level == "name"
        modules, ops = _where(firsts[k]) if named else ({}, {})
        found.append(
            ExplainRow(
                level, sample.name if named else k, sample.category if named else k,
                round(_median_of(ca)), round(_median_of(cb)), round(_median_of(ma), 4), round(_median_of(mb), 4),
                (sample.label or sample.name) if named else k, top(modules), top(ops), judge((ca, cb), (ma, mb)),
            )
        )  # fmt: skip
    return found


def _per_process(runs: Runs, key: Callable[[ProfileRow], str]) -> list[dict[str, tuple[int, float]]]:
    found = []
    for rows in runs:
        calls: dict[str, int] = defaultdict(int)
        ms: dict[str, float] = defaultdict(float)
        for r in rows:
            calls[key(r)] += r.count
            ms[key(r)] += r.ms
        found.append({k: (calls[k], ms[k]) for k in calls})
    return found


def _where(signed: Sequence[tuple[int, ProfileRow]]) -> tuple[dict[str, float], dict[str, float]]:
    """How far each module, and each operator, moved a row (first processes, A minus B): calls weigh most."""
    modules: dict[str, float] = defaultdict(float)
    ops: dict[str, float] = defaultdict(float)
    for sign, r in signed:
        modules[r.module or OUTSIDE] += sign * (r.count * 1e6 + r.ms)
        ops[r.op] += sign * (r.count * 1e6 + r.ms)
    return modules, ops


def top(moved: Mapping[str, float], n: int = 2) -> str:
    """The ``n`` keys that moved most, and how many more moved."""
    ranked = [k for k, v in sorted(moved.items(), key=lambda kv: -abs(kv[1])) if v and k]
    more = f" +{len(ranked) - n} more" if len(ranked) > n else ""
    return ", ".join(ranked[:n]) + more


def _detail(kind: str, runs_a: Runs, runs_b: Runs) -> str:
    """A module type's change of precision where it has one ("70 elementwise kernels in float32 instead of
    bfloat16"), else its largest change of calls by dtype and group ("35 more float32 elementwise kernels")."""
    moved: dict[tuple[str, str, str], int] = defaultdict(int)
    for sign, runs in ((1, runs_a), (-1, runs_b)):
        for r in runs[0] if runs else []:
            if module_type(r.module) == kind:
                dtype = next((d for d in _DTYPES if d in r.label.split()), "")
                unit = "aten calls" if r.name.startswith("aten::") else "kernels"
                moved[(dtype, r.category, unit)] += sign * r.count
    if not any(moved.values()):
        return ""
    (dtype, group, unit), n = max(moved.items(), key=lambda kv: abs(kv[1]))
    shift = _precision_shift(moved, abs(n))
    if shift:
        return shift
    return " ".join(p for p in (str(abs(n)), "more" if n > 0 else "fewer", dtype, group, unit) if p)


def _precision_shift(moved: Mapping[tuple[str, str, str], int], largest: int) -> str:
    """Calls of one group that moved from one dtype to another, as many each way within a quarter, and at least
    half the module type's largest change: the precision its work runs in changed, where a time or memory move
    most often starts (an output no longer cast back, an op run outside autocast)."""
    for (dtype, group, unit), n in sorted(moved.items(), key=lambda kv: -kv[1]):
        if n <= 0 or not dtype or 2 * n < largest:
            continue
        for (other, group_b, unit_b), m in moved.items():
            if (group_b, unit_b) == (group, unit) and other and other != dtype and m < 0 and 4 * abs(n + m) <= n:
                return f"{n} {group} {unit} in {dtype} instead of {other}"
    return ""


def _distinct(rows: list[ExplainRow]) -> list[ExplainRow]:
    """Rows that share a short name get the kernel template that tells them apart: ``mul float32 [<4>]``."""
    seen: dict[str, int] = defaultdict(int)
    for r in rows:
        seen[r.label] += 1
    out = []
    for r in rows:
        if seen[r.label] > 1:
            flavour = re.search(r"(\w+<\d+)", r.name)
            tag = f"{flavour.group(1)}>" if flavour else r.name[:40]
            r = ExplainRow(**{**asdict(r), "label": f"{r.label} [{tag}]"})
        out.append(r)
    return out


def _median_of(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def _count_category(key: str) -> str:
    """``launches.convolution`` -> ``convolution``; the totals (launches, bytes, FLOPs) -> ``all``."""
    return key.removeprefix(f"{LAUNCHES}.") if key.startswith(f"{LAUNCHES}.") else "all"
