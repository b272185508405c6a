"""Step changes in the history's series, using the structure of the noise we measure.

Between machine starts every case of a run moves together (a run factor with a spread of about
1.2 %, docs/statistics.md), while the cases of one run differ by only 0.1-1 %. So, per architecture
and metric, on the logarithm of each value:

1. the run factor is the median over the run's cases of each case's deviation from its own level
   (a median, so one case's step does not move it; runs with fewer than three cases have none);
2. a case's series is its deviation minus the run factor: what is left is the case's own noise,
   and a step of that one case;
3. the run factor's own series carries a step of every case at once (a driver, a library, the code
   under all of them), with the machine-start noise that no normalisation can remove.

Each series is checked in two ways. The history's steps, both ways: binary segmentation (``ruptures.Binseg``,
L2 cost) keeps a split while its standardised difference of means exceeds a threshold, with the noise estimated
from the series itself, shrunk towards the measured noise where the series is short (p-values from Student's t).
The regression alarm, one way, on the runs since the last step: raised when the first few runs from some run on
(three for a case, five for the run factor), and every run since, stand a one-sided z-test against the level
before, with the measured noise as the noise unless the series shows more (:func:`find_regression`). Each step
is reported with its size, its z and p-value, the size it had to pass, and the run (and commit) where it
started. The thresholds are calibrated by simulation (:mod:`meddpm.history.simulation`, docs/history.md).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import ruptures
from scipy import stats

from meddpm.history.series import METRICS, EnvironmentChange, environment_changes

ALL_CASES = "all cases"


@dataclass(frozen=True)
class Rule:
    """How one metric's series are judged: the noise measured, the smallest step worth reporting, the thresholds."""

    min_step: float  # the smallest relative step worth reporting
    case_sd: float  # the noisiest case's own noise once the run factor is out (relative)
    run_sd: float  # the run factor's noise: the spread between machine starts (relative)
    # Segmentation of the whole history, both ways: the standardised step a split must exceed.
    case_threshold: float = 5.0
    run_threshold: float = 5.0
    # The regression alarm on the newest runs, one way: the z its first runs after the step must reach.
    case_alarm: float = 2.9
    run_alarm: float = 3.2


# Time: up to 1 % for a case once the run factor is out, 1.2 % between machine starts (docs/statistics.md).
# Peak memory barely moves between runs. Energy follows the power cap, which moves between machine
# starts (docs/energy.md). Steps below 1 % (3 % for energy) are within what the suite's own verdicts call noise;
# TFLOP/s is flops over time, so its steps are the time steps. The thresholds are calibrated by the
# simulation (docs/history.md): see there for the trade-off between finding a step soon and false alarms.
RULES = {
    "time": Rule(min_step=0.01, case_sd=0.01, run_sd=0.012),
    "memory": Rule(min_step=0.01, case_sd=0.002, run_sd=0.002),
    "energy": Rule(min_step=0.03, case_sd=0.01, run_sd=0.02),
}
MIN_SEGMENT = 2  # runs on each side of a step: one odd night is an outlier, not a step
PRIOR_WEIGHT = 10  # the prior noise counts as this many runs' worth of evidence
MIN_CASES_FOR_FACTOR = 3  # a median of fewer cases is not robust to one of them stepping
# The regression alarm: runs a step must have persisted before it is raised (the goals' delays: a step of
# one case within 3 nights, of every case within 5) and runs of the level it is measured against.
CASE_NIGHTS = 3
RUN_NIGHTS = 5
MIN_BEFORE = 5
NOISE_CONFIDENCE = 0.95  # the series raises the floor only by what it shows with this confidence


@dataclass(frozen=True)
class Split:
    """A step in one series of log values: where the new segment starts and how it differs."""

    index: int  # position (in the series given) of the first value after the step
    shift: float  # mean log value after minus before
    z: float
    p_value: float
    before: float  # mean log value of the segment before
    after: float  # ... and after
    latest: float  # mean log value of the series' last segment: has it recovered since?
    start: int  # position of the first value of the segment before
    end: int  # position after the last value of the segment after
    needed: float = 0.0  # the shift (log) a step here had to pass: the test's threshold, or the smallest step


def find_steps(x: np.ndarray, prior_sd: float, threshold: float, min_step: float) -> list[Split]:
    """Steps in ``x`` (log values) larger than ``min_step`` (relative) and ``threshold`` noise units."""
    n = len(x)
    if n < 2 * MIN_SEGMENT:
        return []
    diffs = np.diff(x)
    # First guess from successive differences (a step moves one of them only), then from the segments.
    data_sd = 1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2)
    dof = n - 1
    algo = ruptures.Binseg(custom_cost=_SquaredDeviation(), min_size=MIN_SEGMENT, jump=1).fit(x)
    breaks: list[int] | None = None
    for _ in range(3):
        sd = _shrunk(data_sd, dof, prior_sd)
        found = algo.predict(pen=(threshold * sd) ** 2)
        if found == breaks:
            break
        breaks = found
        segments = np.split(x, breaks[:-1])
        dof = n - len(segments)
        data_sd = math.sqrt(sum(float(((s - s.mean()) ** 2).sum()) for s in segments) / dof) if dof else prior_sd
    sd = _shrunk(data_sd, dof, prior_sd)
    bounds = _placed([0, *breaks], x)
    latest = float(x[bounds[-2] :].mean())
    splits = []
    for i in range(1, len(bounds) - 1):
        left, right = x[bounds[i - 1] : bounds[i]], x[bounds[i] : bounds[i + 1]]
        shift = float(right.mean() - left.mean())
        if abs(math.expm1(shift)) < min_step:
            continue
        z = shift / (sd * math.sqrt(1 / len(left) + 1 / len(right)))
        p = float(2 * stats.t.sf(abs(z), dof + PRIOR_WEIGHT))
        needed = max(math.log1p(min_step), threshold * shift / z)
        edges = (bounds[i - 1], bounds[i + 1])
        splits.append(Split(bounds[i], shift, z, p, float(left.mean()), float(right.mean()), latest, *edges, needed))
    return splits


def find_regression(x: np.ndarray, floor_sd: float, nights: int, threshold: float, min_step: float) -> Split | None:
    """A rise at the end of ``x`` (log values, flat until the rise): the regression alarm on the newest runs.

    A run qualifies as the start when the ``nights`` runs from it, and every run since, are above the mean
    of the runs before it (at least ``MIN_BEFORE``) by ``min_step`` and by ``threshold`` standard errors.
    The noise is ``floor_sd`` (the measured noise: a z-test, not a t with a short series' estimate) unless
    the runs before show more with ``NOISE_CONFIDENCE``. Of the qualifying runs, the one whose ``nights``
    stand highest holds the step; it is placed where it fits best within them (the largest z of every run
    since), with at least ``MIN_SEGMENT`` runs after it.
    """
    n = len(x)
    sums = np.concatenate([[0.0], np.cumsum(x)]).tolist()
    squares = np.concatenate([[0.0], np.cumsum(np.square(x))]).tolist()
    since: dict[int, Split] = {}  # per start: the step of every run since it, where that is min_step or more
    first: dict[int, float] = {}  # per qualifying start: the z of its first nights
    for s in range(MIN_BEFORE, n - MIN_SEGMENT + 1):
        level = sums[s] / s
        sd = max(floor_sd, math.sqrt(max(0.0, squares[s] - s * level * level) / (s - 1)) * _noise_bound(s - 1))
        shift = (sums[n] - sums[s]) / (n - s) - level
        if math.expm1(shift) < min_step:
            continue
        z = shift / (sd * math.sqrt(1 / (n - s) + 1 / s))
        needed = max(math.log1p(min_step), threshold * shift / z)
        since[s] = Split(s, shift, z, float(stats.norm.sf(z)), level, level + shift, level + shift, 0, n, needed)
        if s <= n - nights and z >= threshold:
            window = (sums[s + nights] - sums[s]) / nights - level
            z_window = window / (sd * math.sqrt(1 / nights + 1 / s))
            if z_window >= threshold and math.expm1(window) >= min_step:
                first[s] = z_window
    if not first:
        return None
    held = max(first, key=first.__getitem__)
    return max((since[j] for j in range(held, held + nights) if j in since), key=lambda split: split.z)


@functools.cache
def _noise_bound(dof: int) -> float:
    """The factor that turns a noise estimate with ``dof`` into its lower ``NOISE_CONFIDENCE`` bound."""
    return math.sqrt(dof / stats.chi2.ppf(NOISE_CONFIDENCE, dof))


def _placed(bounds: list[int], x: np.ndarray) -> list[int]:
    """Each step moved to where it fits best; a step that would then have one run after it waits for the next.

    The search allows no one-run segment (one odd night is not a step), so a step whose first slow run
    is the latest one is found a run early; moved, it waits for its second run before it is reported,
    rather than naming the commit before the one that made it. Elsewhere a step stays where the search
    put it when moving it would leave a one-run segment.
    """
    cost = _SquaredDeviation().fit(x)
    placed = list(bounds)
    pending = []
    for i in range(1, len(placed) - 1):
        start, end = placed[i - 1], placed[i + 1]
        best = min(range(start + 1, end), key=lambda j: cost.error(start, j) + cost.error(j, end))
        if best - start >= MIN_SEGMENT and end - best >= MIN_SEGMENT:
            placed[i] = best
        elif end == len(x) and end - best < MIN_SEGMENT:
            pending.append(placed[i])
    return [b for b in placed if b not in pending]


class _SquaredDeviation(ruptures.base.BaseCost):
    """ruptures' L2 cost (squared deviation from the segment mean) from cumulative sums.

    ruptures' own CostL2 takes a variance per candidate segment; this gives the same numbers in
    constant time, which makes the simulations that calibrate the thresholds 50 times faster.
    """

    model = "l2_cumulative"
    min_size = 1

    def fit(self, signal: np.ndarray) -> _SquaredDeviation:
        values = np.asarray(signal, dtype=float).reshape(len(signal))
        self.signal = values.reshape(-1, 1)  # ruptures reads the length from it
        self._sums = np.concatenate([[0.0], np.cumsum(values)]).tolist()
        self._squares = np.concatenate([[0.0], np.cumsum(values**2)]).tolist()
        return self

    def error(self, start: int, end: int) -> float:
        total = self._sums[end] - self._sums[start]
        return max(0.0, self._squares[end] - self._squares[start] - total * total / (end - start))


def _shrunk(data_sd: float, dof: int, prior_sd: float) -> float:
    """The series' noise estimate pulled towards the measured noise, the more the fewer runs it has."""
    return math.sqrt((PRIOR_WEIGHT * prior_sd**2 + dof * data_sd**2) / (PRIOR_WEIGHT + dof))


@dataclass(frozen=True)
class MatrixSteps:
    """Steps found in a (runs x cases) matrix of log values; every index is a row of the matrix."""

    run_factor: list[Split]
    cases: dict[int, list[Split]]
    factor: np.ndarray  # each run's factor (log; NaN where it has none): what each case's series is judged less


def matrix_steps(logs: np.ndarray, rule: Rule) -> MatrixSteps:
    """Steps of the run factor and of each case (columns) in ``logs`` (rows: runs, oldest first; NaN: missing)."""
    cases = range(logs.shape[1])
    factor = _run_factor(logs - np.nanmedian(logs, axis=0))
    case_steps = {c: _case_steps(logs[:, c], factor, rule) for c in cases}
    # Again, with each case's level taken per segment, so that a case's own steps bias the run factor nothing.
    factor = _run_factor(logs - np.column_stack([_segment_levels(logs[:, c], case_steps[c]) for c in cases]))
    case_steps = {c: _case_steps(logs[:, c], factor, rule) for c in cases}
    defined = np.flatnonzero(~np.isnan(factor))
    found = series_steps(factor[defined], rule.run_sd, rule.run_threshold, RUN_NIGHTS, rule.run_alarm, rule.min_step)
    return MatrixSteps(run_factor=[_at(split, defined) for split in found], cases=case_steps, factor=factor)


def series_steps(x: np.ndarray, sd: float, threshold: float, nights: int, alarm: float, min_step: float) -> list[Split]:
    """The history's steps (:func:`find_steps`), and a regression at its end (:func:`find_regression`) if any.

    A last step whose newest run is back at the level before it (:func:`returned`) keeps that run out of its
    level after, and has recovered.
    """
    splits = find_steps(x, sd, threshold, min_step)
    start = splits[-1].index if splits else 0
    newest = find_regression(x[start:], sd, nights, alarm, min_step)
    if newest is not None:
        newest = dataclasses.replace(newest, index=start + newest.index, start=start + newest.start, end=len(x))
        splits = [*(dataclasses.replace(s, latest=newest.after) for s in splits), newest]
    if splits and returned(x, splits[-1], sd, alarm, min_step):
        last = splits[-1]
        after = float(x[last.index : len(x) - 1].mean())
        back = float(x[-1])
        splits = [dataclasses.replace(s, latest=back) for s in splits[:-1]]
        splits.append(dataclasses.replace(last, shift=after - last.before, after=after, latest=back, end=len(x) - 1))
    return splits


def returned(x: np.ndarray, split: Split, sd: float, alarm: float, min_step: float) -> bool:
    """Whether the newest run of ``x``, after the last step ``split``, is back at the level before the step.

    Segments need ``MIN_SEGMENT`` runs, so one run back at the old level joins the step's segment and drags
    its mean half-way: a step that has already recovered (or one odd run) would read as open, at a level no
    run measured.
    The run counts as back when it lies within ``min_step`` of the level before and below the step's other
    runs by ``alarm`` noise units: beyond the noise, as the alarm itself asks of a rise.
    """
    rest = x[split.index : len(x) - 1]
    if split.end != len(x) or not len(rest) or split.shift <= 0:
        return False
    drop = float(rest.mean() - x[-1])
    return math.expm1(x[-1] - split.before) < min_step and drop >= alarm * sd * math.sqrt(1 + 1 / len(rest))


def _run_factor(deviations: np.ndarray) -> np.ndarray:
    counts = np.sum(~np.isnan(deviations), axis=1)
    factor = np.full(len(deviations), np.nan)
    enough = counts >= MIN_CASES_FOR_FACTOR
    factor[enough] = np.nanmedian(deviations[enough], axis=1)
    return factor


def _case_steps(values: np.ndarray, factor: np.ndarray, rule: Rule) -> list[Split]:
    """Steps of one case: its values less the run factor, or as they are where a run has no factor."""
    present = np.flatnonzero(~np.isnan(values))
    corrected = values - np.nan_to_num(factor)
    # Runs without a factor still carry the machine-start noise.
    sd = rule.case_sd if not np.isnan(factor[present]).any() else math.hypot(rule.case_sd, rule.run_sd)
    found = series_steps(corrected[present], sd, rule.case_threshold, CASE_NIGHTS, rule.case_alarm, rule.min_step)
    return [_at(split, present) for split in found]


def _segment_levels(values: np.ndarray, splits: list[Split]) -> np.ndarray:
    """The case's median log value within each of its segments, per run."""
    bounds = [0, *(s.index for s in splits), len(values)]
    out = np.empty(len(values))
    for start, end in zip(bounds, bounds[1:]):
        part = values[start:end]
        out[start:end] = np.nanmedian(part) if np.any(~np.isnan(part)) else np.nan
    return out


def _at(split: Split, positions: np.ndarray) -> Split:
    """``split`` with its positions moved from the series' to the matrix's rows."""
    return dataclasses.replace(
        split,
        index=int(positions[split.index]),
        start=int(positions[split.start]),
        end=int(positions[split.end - 1]) + 1,
    )


@dataclass(frozen=True)
class Step:
    """A step change in one (architecture, case, metric) series, or in every case (``ALL_CASES``)."""

    arch: str
    case: str
    metric: str
    run_id: int  # the first run after the step
    started_at: datetime.datetime
    commit: str  # the first commit after the step
    change: float  # relative: after / before - 1 (for ALL_CASES, of the run factor)
    # The medians the runs measured before and after, in the metric's unit (None for ALL_CASES: a factor has none)
    before: float | None
    after: float | None
    z: float
    p_value: float
    runs_since: int  # the case's own runs from the first after the step to the latest, both counted
    open: bool  # a regression that has not recovered: a later step has not brought the series back
    environment: tuple[str, ...]  # what changed in the environment at that run
    good_commit: str  # the commit of the case's last run before the step
    bisect_case: str  # the case a bisection measures: this one, or for ALL_CASES one of them
    threshold: float = 0.0  # relative: the size a step had to pass here to be reported (the test's, or the smallest)
    note: str | None = None  # an open regression acknowledged as known and expected: why (meddpm.history.acks)
    noted_at: datetime.datetime | None = None  # when it was acknowledged, UTC

    @property
    def failing(self) -> bool:
        """An open regression that nobody has acknowledged: what ``check`` fails on."""
        return self.open and self.note is None

    @property
    def regression(self) -> bool:
        """Every tracked metric is better lower: slower, more memory, more energy."""
        return self.change > 0

    @property
    def unit(self) -> str:
        """The unit of the levels."""
        return METRICS[self.metric].unit

    def describe(self) -> str:
        """One line: where, what, how much, how sure, since when."""
        levels = f" ({self.before:.4g} -> {self.after:.4g} {self.unit})" if self.before is not None else ""
        env = f"; environment: {', '.join(self.environment)}" if self.environment else ""
        return (
            f"{self.arch} {self.case} {self.metric} {self.change:+.1%}{levels}, p={self.p_value:.2g}, "
            f"from commit {self.commit[:12]} ({self.started_at:%Y-%m-%d %H:%M}, {self.runs_since} run(s) ago){env}"
        )

    def triage(self) -> str:
        """The step's commit range (last good..first bad) and the command that bisects it, or why there is none."""
        if self.case == ALL_CASES and self.environment:
            # Every case moved at once, at the run where the software or the card changed: the commits between
            # the two runs would all measure alike on the new environment, so a bisection would find nothing.
            return (
                f"no commit range to bisect: every case moved where the environment changed "
                f"({', '.join(self.environment)}); measure the last good commit on the new environment to confirm"
            )
        good, bad = _revision(self.good_commit), _revision(self.commit)
        if good is None or bad is None:
            return f"no commit range to bisect: a commit is unknown ({self.good_commit[:12]}..{self.commit[:12]})"
        dirty = " (a side had uncommitted changes)" if DIRTY in self.good_commit + self.commit else ""
        if good == bad:
            return f"no commit range to bisect: both sides measured commit {good}{dirty}"
        preset, combo = self.bisect_case.split("/")[:2]
        bisect = f"meddpm-bench --bisect {good}..{bad} --combos {combo} --preset {preset}"
        return f"commits {good}..{bad}{dirty}; bisect: {bisect}"


DIRTY = "+dirty"


def _revision(commit: str) -> str | None:
    """A stored commit as git names it (12 digits, without the mark of a dirty tree); None where unknown."""
    revision = commit.removesuffix(DIRTY)
    return revision[:12] if revision and revision != "unknown" else None


def series_table(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One architecture's ``metric`` as the detector reads it: a row per run (oldest first), a column per case."""
    table = rows.pivot_table(index="run_id", columns="case", values=metric, aggfunc="first", sort=False)
    runs = rows.drop_duplicates("run_id")["run_id"]
    return table.reindex(index=runs).where(table > 0).dropna(how="all").dropna(axis=1, how="all")


def detect(frame: pd.DataFrame) -> list[Step]:
    """Every step in ``frame`` (see :func:`meddpm.history.series.case_frame`), per architecture and metric."""
    env_by_run: dict[int, list[EnvironmentChange]] = {}
    for change in environment_changes(frame):
        env_by_run.setdefault(change.run_id, []).append(change)
    found = []
    for arch, rows in frame.groupby("arch", sort=True):
        runs = rows.drop_duplicates("run_id").set_index("run_id")
        for metric, rule in RULES.items():
            table = series_table(rows, metric)
            if table.empty:
                continue
            result = matrix_steps(np.log(table.to_numpy(dtype=float)), rule)
            series = [(ALL_CASES, split) for split in result.run_factor]
            series += [(str(table.columns[c]), s) for c, splits in result.cases.items() for s in splits]
            for case, split in series:
                run_id = int(table.index[split.index])
                run = runs.loc[run_id]
                values = table.iloc[:, 0] if case == ALL_CASES else table[case]
                before, after = values.iloc[split.start : split.index], values.iloc[split.index : split.end]
                # The case's own runs: a run that measured other cases only is no run of this one.
                since = len(table) - split.index if case == ALL_CASES else int(values.iloc[split.index :].count())
                good_run = int(before.index[-1] if case == ALL_CASES else before.dropna().index[-1])
                recovered = math.expm1(split.latest - split.before) < rule.min_step
                levels = None if case == ALL_CASES else (float(before.median()), float(after.median()))
                change = math.expm1(split.shift) if levels is None else levels[1] / levels[0] - 1
                found.append(
                    Step(
                        arch=str(arch),
                        case=case,
                        metric=metric,
                        run_id=run_id,
                        started_at=run["started_at"],
                        commit=str(run["commit"]),
                        change=change,
                        before=None if levels is None else levels[0],
                        after=None if levels is None else levels[1],
                        z=split.z,
                        p_value=split.p_value,
                        threshold=math.expm1(split.needed),
                        runs_since=since,
                        open=change >= rule.min_step and not recovered,
                        environment=tuple(c.describe() for c in env_by_run.get(run_id, [])),
                        good_commit=str(runs.loc[good_run, "commit"]),
                        bisect_case=str(table.columns[0]) if case == ALL_CASES else case,
                    )
                )
    return found
