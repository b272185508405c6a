"""A case's profile kept with its stored baseline, compact enough to review, and a run explained against it.

``--save-baseline`` keeps, per case, the profiled iteration of each saving process
(:class:`~meddpm.judge.baseline.StoredProfile`, docs/explain.md): rows are summed over the instances of a module type
(what the roll-up and the rows of :func:`~meddpm.judge.explain.explain` compare: name, label, group, module type,
operator), a row is kept when it holds at least :data:`FLOOR` of the iteration's time (the :data:`MAX_ROWS` that
hold most; the stored floor then says what the first row left out held), and the others are folded per group and
module type, so the totals of every group, module type and process stay whole. Long kernel names are cut and end in a
digest of the full one (:func:`stored_name`): rows are matched by it.

Each folded row leaves a digest of its key (:func:`digest`, 5 hex digits), so a run explained against the profile by
:func:`explain_stored` folds exactly the rows the baseline folded: a row the baseline kept stays, a row whose digest
is among the folded ones is folded into its group, and any other row is new (``appeared``), however small. Then this
run's processes (side A) are set against the stored ones (side B) by :func:`~meddpm.judge.explain.explain`.
"""

from __future__ import annotations

import hashlib
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from meddpm.judge.baseline import FoldedRows, StoredProfile, StoredRow
from meddpm.judge.explain import ExplainRow, Runs, explain, module_type, top
from meddpm.measure.profiling.iteration import ProfileRow
from meddpm.measure.profiling.names import match_key
from meddpm.measure.profiling.scopes import OUTSIDE

FLOOR = 0.005  # a row under 0.5 % of the iteration's time is folded
MAX_ROWS = 20  # and at most 20 rows are kept: a few KiB a case (docs/explain.md)
NAME_CHARS = 64  # a longer name is cut to 48 characters and a digest of 12
FOLDED = "(rows under the floor)"  # the name of the folded rows of a group and module type
_Key = tuple[str, str, str, str, str]  # name, label, category, module type, operator


def stored_name(name: str) -> str:
    """The name a row is matched by in a stored profile: :func:`match_key`, cut with a digest where it is long."""
    key = match_key(name)
    if len(key) <= NAME_CHARS:
        return key
    return f"{key[:48]}...{hashlib.blake2b(key.encode(), digest_size=6).hexdigest()}"


def digest(key: tuple[str, ...]) -> str:
    """A row key's digest of 5 hex digits: what a stored profile keeps of each row it folded (a new row takes a folded
    one's digest once in 3500 where 300 rows are folded)."""
    return hashlib.blake2b("\t".join(key).encode(), digest_size=3).hexdigest()[:5]


def type_scope(kind: str) -> str:
    """A module scope whose :func:`module_type` is ``kind``: the stored rows' module."""
    if kind == OUTSIDE:
        return ""
    return "Optimizer.step" if kind == "optimizer" else f"{kind} modules ({kind})"


def compact_profile(runs: Runs, module_bytes: Sequence[Mapping[str, int]]) -> StoredProfile:
    """The profile to store of a case's processes (each one's profiled rows and the bytes its modules kept)."""
    per_process = [_by_key(rows) for rows in runs]
    keys = sorted({k for p in per_process for k in p})
    score = {k: statistics.median(_ms_share(p, k) for p in per_process) for k in keys}
    ranked = sorted((k for k in keys if score[k] >= FLOOR), key=lambda k: (-score[k], k))
    kept = ranked[:MAX_ROWS]
    floor = FLOOR if len(ranked) <= MAX_ROWS else score[ranked[MAX_ROWS]]  # what the first row left out held
    rows = tuple(
        StoredRow(*k, calls=tuple(p.get(k, (0, 0.0))[0] for p in per_process),
                  ms=tuple(_rounded(p.get(k, (0, 0.0))[1]) for p in per_process))
        for k in kept
    )  # fmt: skip
    folded = defaultdict(list)
    left = set(keys) - set(kept)
    for k in left:
        folded[(k[2], k[3])].append(k)
    return StoredProfile(
        processes=len(runs),
        floor=_rounded(floor),
        rows=rows,
        folded=tuple(
            FoldedRows(
                group,
                kind,
                len(ks),
                tuple(sum(p.get(k, (0, 0.0))[0] for k in ks) for p in per_process),
                tuple(_rounded(sum(p.get(k, (0, 0.0))[1] for k in ks)) for p in per_process),
            )
            for (group, kind), ks in sorted(folded.items())
        ),
        module_bytes=_bytes_by_type(module_bytes) if len(module_bytes) == len(runs) else {},
        folded_keys=" ".join(sorted({digest(k) for k in left})),
    )


def stored_runs(profile: StoredProfile) -> list[list[ProfileRow]]:
    """The stored profile as each saving process's rows, the folded ones one row per group."""
    return [
        [ProfileRow(r.name, r.category, r.calls[p], r.ms[p], type_scope(r.module), r.op, r.label)
         for r in profile.rows if r.calls[p] or r.ms[p]]
        + [_folded(f.category, f.module, f.calls[p], f.ms[p]) for f in profile.folded]
        for p in range(profile.processes)
    ]  # fmt: skip


def explain_stored(runs: Runs, module_bytes: Sequence[Mapping[str, int]], profile: StoredProfile) -> list[ExplainRow]:
    """What moved from the stored profile (side B) to this run's processes (side A): the rows of
    :func:`~meddpm.judge.explain.explain`, then the bytes each module type's forward kept."""
    rows = explain(_folded_like(runs, profile), stored_runs(profile), name_key=stored_name)
    return rows + _memory(module_bytes, profile.module_bytes)


def _folded_like(runs: Runs, profile: StoredProfile) -> list[list[ProfileRow]]:
    """This run's rows, each folded into its group where the baseline folded its row, else kept: where the
    baseline kept the row too, under its module type's scope as the baseline has it, so that the two sides' calls
    meet in the same "where" (instances against a type never cancel, and the type would be named for a move of
    another type's instances); a row the baseline has not keeps its instances."""
    stored = {(r.name, r.label, r.category, r.module, r.op) for r in profile.rows}
    folded_keys = set(profile.folded_keys.split())
    keys = {_key(r) for rows in runs for r in rows}
    keep = {k for k in keys if k in stored or digest(k) not in folded_keys}
    out = []
    for rows in runs:
        folded: dict[tuple[str, str], list[ProfileRow]] = defaultdict(list)
        kept = []
        for r in rows:
            if _key(r) in stored:
                kept.append(replace(r, module=type_scope(module_type(r.module))))
            elif _key(r) in keep:
                kept.append(r)
            else:
                folded[(r.category, module_type(r.module))].append(r)
        kept += [_folded(*where, sum(r.count for r in rs), sum(r.ms for r in rs)) for where, rs in folded.items()]
        out.append(kept)
    return out


def _memory(bytes_a: Sequence[Mapping[str, int]], stored: Mapping[str, Sequence[int]]) -> list[ExplainRow]:
    """Per module type, the bytes its forward kept in this run and in the baseline (medians over processes); the
    baseline keeps types only, so ``module`` names the instances where this run keeps most."""
    if not bytes_a or not stored:  # one side measured none (a compiled step has no module scopes)
        return []
    now = _bytes_by_type(bytes_a)
    rows = []
    for kind in sorted(set(now) | set(stored)):
        a = statistics.median(now.get(kind) or [0])
        b = statistics.median(stored.get(kind) or [0])
        where = {m: statistics.median([run.get(m, 0) for run in bytes_a]) for run in bytes_a for m in run
                 if module_type(m) == kind}  # fmt: skip
        shown = a != b
        rows.append(ExplainRow("memory", kind, "memory", round(a), round(b), None, None, kind, top(where), shown=shown))
    return sorted(rows, key=lambda r: -(r.count_a - r.count_b))


def _folded(group: str, kind: str, calls: int, ms: float) -> ProfileRow:
    """The folded rows of one group and module type as one row."""
    return ProfileRow(FOLDED, group, calls, ms, type_scope(kind), "", f"{group} rows under the floor")


def _key(r: ProfileRow) -> _Key:
    return (stored_name(r.name), r.label, r.category, module_type(r.module), r.op)


def _by_key(rows: Sequence[ProfileRow]) -> dict[_Key, tuple[int, float]]:
    """One process's rows summed over the instances of each module type."""
    summed: dict[_Key, tuple[int, float]] = {}
    for r in rows:
        calls, ms = summed.get(_key(r), (0, 0.0))
        summed[_key(r)] = (calls + r.count, ms + r.ms)
    return summed


def _ms_share(process: Mapping[_Key, tuple[int, float]], key: _Key) -> float:
    """The row's share of the process's milliseconds."""
    total = sum(m for _, m in process.values())
    return process.get(key, (0, 0.0))[1] / total if total else 0.0


def _bytes_by_type(module_bytes: Sequence[Mapping[str, int]]) -> dict[str, tuple[int, ...]]:
    kinds = sorted({module_type(m) for run in module_bytes for m in run})
    return {
        kind: tuple(sum(v for m, v in run.items() if module_type(m) == kind) for run in module_bytes) for kind in kinds
    }


def _rounded(ms: float) -> float:
    """Four significant digits: 0.05 % at most, far under the 2 % a row must move to be shown."""
    return float(f"{ms:.4g}")
