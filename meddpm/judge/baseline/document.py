"""A baseline file's JSON document to its dataclasses and back: every field read strictly, written in a stable order."""

from __future__ import annotations

import re
from dataclasses import asdict
from functools import partial
from typing import Any

from meddpm.judge.baseline.model import (
    OLD_SCHEMAS,
    PROVENANCES,
    SCHEMA,
    BaselineFile,
    CaseBaseline,
    CountRange,
    Expectation,
    FoldedRows,
    NcuBaseline,
    Noise,
    SamplingBudget,
    StoredProfile,
    StoredRow,
    Tolerances,
)
from meddpm.judge.baseline.reader import (
    Invalid,
    field_names,
    integer,
    json_list,
    mapping,
    number,
    numbers,
    object_with_keys,
    one_of,
    optional_integer,
    optional_number,
    required_fields,
    short,
    subfield,
    text,
)
from meddpm.measure.profiling.kernel_mix import GROUPS
from meddpm.versioned.loader import Kind

_RATIO_FIELDS = ("median", "q1", "q3", "min", "max")


def _tolerances(value: Any, where: str) -> Tolerances:
    d = object_with_keys(value, where, field_names(Tolerances))
    return Tolerances(**{k: number(v, f"{where}.{k}") for k, v in d.items()})


def _noise(value: Any, where: str) -> Noise:
    d = object_with_keys(value, where, field_names(Noise))
    return Noise(
        between_process_rel=optional_number(d.get("between_process_rel"), f"{where}.between_process_rel"),
        between_run_rel=optional_number(d.get("between_run_rel"), f"{where}.between_run_rel"),
        between_run_source=text(d.get("between_run_source", ""), f"{where}.between_run_source"),
    )


def _counts(value: Any, where: str) -> dict[str, CountRange]:
    """A case's counts: ``{"launches": {"min": ..., "max": ...}, ...}``, whole numbers."""
    ranges = {}
    for name, spread in mapping(value, where).items():
        at = f"{where}[{name!r}]"
        d = object_with_keys(spread, at, field_names(CountRange), field_names(CountRange))
        ranges[str(name)] = CountRange(min=integer(d["min"], f"{at}.min"), max=integer(d["max"], f"{at}.max"))
    return ranges


_PROFILE = ("processes", "floor", "rows", "folded", "folded_keys", "module_bytes")
_DIGESTS = re.compile(r"([0-9a-f]{5}( |$))*")
ROW_COLUMNS = ("name", "label", "category", "module", "op", "calls", "ms")
FOLDED_COLUMNS = ("category", "module", "rows", "calls", "ms")


def _per_process(value: Any, where: str, *, processes: int, read: Any) -> tuple[Any, ...]:
    """One figure per saving process, each read by ``read``."""
    values = json_list(value, where)
    if len(values) != processes:
        raise Invalid(f"{where} with {len(values)} value(s), which must hold one per process ({processes})")
    return tuple(read(x, f"{where}[{i}]") for i, x in enumerate(values))


def _table(value: Any, where: str, cls: type, readers: dict[str, Any]) -> tuple[Any, ...]:
    """Rows stored as lists, one value per column, each read by its column's reader into ``cls``."""
    rows = []
    for i, row in enumerate(json_list(value, where)):
        at, values = f"{where}[{i}]", json_list(row, f"{where}[{i}]")
        if len(values) != len(readers):
            raise Invalid(f"{at} with {len(values)} value(s), which must be [{', '.join(readers)}]")
        rows.append(cls(**{c: read(v, f"{at}.{c}") for (c, read), v in zip(readers.items(), values)}))
    return tuple(rows)


def _profile(value: Any, where: str) -> StoredProfile:
    """A case's compact profile: its rows as ``[name, label, category, module, op, calls, ms]``, calls and ms one
    value per process; the folded rows as ``[category, module, rows, calls, ms]`` and their keys' digests; the bytes per
    module type."""
    d = object_with_keys(value, where, _PROFILE, _PROFILE)
    processes = integer(d["processes"], f"{where}.processes")
    if processes < 1:
        raise Invalid(f"{where}.processes = {processes}, which must be 1 or more")
    calls = partial(_per_process, processes=processes, read=integer)
    ms = partial(_per_process, processes=processes, read=number)
    group = partial(one_of, choices=GROUPS)
    rows = _table(
        d["rows"], f"{where}.rows", StoredRow, dict(zip(ROW_COLUMNS, (text, text, group, text, text, calls, ms)))
    )
    folded = _table(
        d["folded"], f"{where}.folded", FoldedRows, dict(zip(FOLDED_COLUMNS, (group, text, integer, calls, ms)))
    )
    held = mapping(d["module_bytes"], f"{where}.module_bytes")
    folded_keys = text(d["folded_keys"], f"{where}.folded_keys")
    if not _DIGESTS.fullmatch(folded_keys):
        rule = "which must be digests of 5 hex digits, one space apart"
        raise Invalid(f"{where}.folded_keys = {short(folded_keys)}, {rule}")
    return StoredProfile(
        processes=processes,
        floor=number(d["floor"], f"{where}.floor"),
        rows=rows,
        folded=folded,
        module_bytes={
            str(k): _per_process(v, f"{where}.module_bytes[{k!r}]", processes=processes, read=integer)
            for k, v in held.items()
        },
        folded_keys=folded_keys,
    )


def profile_to_json(profile: StoredProfile) -> dict[str, Any]:
    """The JSON object of a stored profile: each row a list (one line in the file)."""
    return {
        "processes": profile.processes,
        "floor": profile.floor,
        "rows": [[r.name, r.label, r.category, r.module, r.op, list(r.calls), list(r.ms)] for r in profile.rows],
        "folded": [[f.category, f.module, f.rows, list(f.calls), list(f.ms)] for f in profile.folded],
        "folded_keys": profile.folded_keys,
        "module_bytes": {k: list(v) for k, v in profile.module_bytes.items()},
    }


def _case(key: str, value: Any) -> CaseBaseline:
    where = f"cases[{key!r}]"
    d = object_with_keys(value, where, field_names(CaseBaseline), required_fields(CaseBaseline))
    at = partial(subfield, where)
    samples = numbers(d["samples_ms"], at("samples_ms"))
    if not samples:
        raise Invalid(f"{at('samples_ms')} = [], which must hold the case's samples")
    case = CaseBaseline(
        preset=text(d["preset"], at("preset")),
        combo=text(d["combo"], at("combo")),
        batch_size=integer(d["batch_size"], at("batch_size")),
        provenance=one_of(d["provenance"], at("provenance"), PROVENANCES),
        samples_ms=samples,
        median_ms=number(d["median_ms"], at("median_ms")),
        iqr_ms=number(d["iqr_ms"], at("iqr_ms")),
        min_ms=number(d["min_ms"], at("min_ms")),
        peak_allocated_bytes=optional_integer(d["peak_allocated_bytes"], at("peak_allocated_bytes")),
        peak_reserved_bytes=optional_integer(d["peak_reserved_bytes"], at("peak_reserved_bytes")),
        energy_j_per_iter=optional_number(d["energy_j_per_iter"], at("energy_j_per_iter")),
        energy_samples_j=numbers(d["energy_samples_j"], at("energy_samples_j")),
        tflops=number(d["tflops"], at("tflops")),
        environment=mapping(d["environment"], at("environment")),
        tolerances=None if d.get("tolerances") is None else _tolerances(d["tolerances"], at("tolerances")),
        world_size=integer(d.get("world_size", 1), at("world_size")),
        process_medians_ms=numbers(d.get("process_medians_ms", []), at("process_medians_ms")),
        noise=Noise() if d.get("noise") is None else _noise(d["noise"], at("noise")),
        energy_method=text(d.get("energy_method", ""), at("energy_method")),
        energy_quantisation=optional_number(d.get("energy_quantisation"), at("energy_quantisation")),
        energy_replicates_j=numbers(d.get("energy_replicates_j", []), at("energy_replicates_j")),
        counts=_counts(d.get("counts", {}), at("counts")),
        profile=None if d.get("profile") is None else _profile(d["profile"], at("profile")),
    )
    if str(case.key) != key:
        raise Invalid(f"{where} describing {case.key}", f"name it {str(case.key)!r} or correct its fields")
    return case


def _expectation(i: int, value: Any) -> Expectation:
    where = f"expectations[{i}]"
    d = object_with_keys(value, where, field_names(Expectation), required_fields(Expectation))
    at = partial(subfield, where)
    reference = d["reference"]
    e = Expectation(
        preset=text(d["preset"], at("preset")),
        metric=text(d["metric"], at("metric")),
        combo=text(d["combo"], at("combo")),
        reference=None if reference is None else text(reference, at("reference")),
        provenance=one_of(d["provenance"], at("provenance"), PROVENANCES),
        source=text(d["source"], at("source")),
        max=optional_number(d.get("max"), at("max")),
        min=optional_number(d.get("min"), at("min")),
        world_size=integer(d.get("world_size", 1), at("world_size")),
    )
    if e.max is None and e.min is None:
        raise Invalid(f"{where} ({e.describe()}) with neither min nor max", "give it a bound, or remove it")
    return e


def _ncu(key: str, value: Any) -> NcuBaseline:
    where = f"ncu[{key!r}]"
    d = object_with_keys(value, where, field_names(NcuBaseline), field_names(NcuBaseline))
    at = partial(subfield, where)
    entry = NcuBaseline(
        preset=text(d["preset"], at("preset")),
        combo=text(d["combo"], at("combo")),
        batch_size=integer(d["batch_size"], at("batch_size")),
        provenance=one_of(d["provenance"], at("provenance"), PROVENANCES),
        totals={str(k): number(v, f"{at('totals')}.{k}") for k, v in mapping(d["totals"], at("totals")).items()},
        ncu_version=text(d["ncu_version"], at("ncu_version")),
        replay=text(d["replay"], at("replay")),
        clock_control=text(d["clock_control"], at("clock_control")),
        groups=[text(g, f"{at('groups')}[{i}]") for i, g in enumerate(json_list(d["groups"], at("groups")))],
        environment=mapping(d["environment"], at("environment")),
    )
    if str(entry.key) != key:
        raise Invalid(f"{where} describing {entry.key}", f"name it {str(entry.key)!r} or correct its fields")
    return entry


def _ratios(value: Any) -> dict[str, dict[str, dict[str, float]]]:
    """The saving run's interleaved ratios: ``{"preset/bN": {"combo/baseline": {"median": ..., ...}}}``."""
    table = {}
    for group, by_name in mapping(value, "ratios").items():
        where = f"ratios[{group!r}]"
        table[group] = {
            name: {
                stat: number(x, f"{where}[{name!r}].{stat}")
                for stat, x in object_with_keys(figures, f"{where}[{name!r}]", _RATIO_FIELDS).items()
            }
            for name, figures in mapping(by_name, where).items()
        }
    return table


_TOP = ("schema", "arch", "description", "tolerances", "expectations", "cases", "ratios", "ncu", "sampling")


def _sampling(key: str, value: Any) -> SamplingBudget:
    where = f"sampling[{key!r}]"
    d = object_with_keys(value, where, field_names(SamplingBudget), required_fields(SamplingBudget))
    at = partial(subfield, where)
    budget = SamplingBudget(
        preset=text(d["preset"], at("preset")),
        combo=text(d["combo"], at("combo")),
        batch_size=integer(d["batch_size"], at("batch_size")),
        budget_s=number(d["budget_s"], at("budget_s")),
        provenance=one_of(d["provenance"], at("provenance"), PROVENANCES),
        source=text(d["source"], at("source")),
        measured_s=numbers(d.get("measured_s", []), at("measured_s")),
    )
    if budget.key != key:
        raise Invalid(f"{where} describing {budget.key}", f"name it {budget.key!r} or correct its fields")
    return budget


def from_dict(data: dict[str, Any]) -> BaselineFile:
    """The file's document, of the current version (:data:`BASELINE` upgrades an older one)."""
    d = object_with_keys(data, "the file", _TOP, ("schema", "arch"))
    return BaselineFile(
        arch=text(d["arch"], "arch"),
        description=text(d.get("description", ""), "description"),
        tolerances=_tolerances(d.get("tolerances", {}), "tolerances"),
        expectations=tuple(
            _expectation(i, e) for i, e in enumerate(json_list(d.get("expectations", []), "expectations"))
        ),
        cases={k: _case(k, v) for k, v in mapping(d.get("cases", {}), "cases").items()},
        ratios=_ratios(d.get("ratios", {})),
        ncu={k: _ncu(k, v) for k, v in mapping(d.get("ncu", {}), "ncu").items()},
        sampling={k: _sampling(k, v) for k, v in mapping(d.get("sampling", {}), "sampling").items()},
    )


def baseline_1_to_2(document: dict[str, Any]) -> dict[str, Any]:
    """Version 2 added each case's per-process medians and measured noise, both optional: a version-1
    document is a version-2 one without them (its cases are judged by rounds, as before)."""
    return document


def baseline_2_to_3(document: dict[str, Any]) -> dict[str, Any]:
    """Version 3 added absolute expectations (``"reference": null``); a version-2 file has none, so a null
    reference in one is a mistake to refuse, not a bound to read."""
    expectations = document.get("expectations")
    for i, e in enumerate(expectations if isinstance(expectations, list) else []):
        if isinstance(e, dict) and "reference" in e and e["reference"] is None:
            raise Invalid(
                f"expectations[{i}].reference = null (an absolute bound), which {OLD_SCHEMAS[2]} and later read",
                f'set "schema" to "{SCHEMA}"',
            )
    return document


def baseline_3_to_4(document: dict[str, Any]) -> dict[str, Any]:
    """Version 4 added each case's deterministic counts, optional: a version-3 file has none, so counts in
    one are a mistake to refuse (its cases are judged without a counts gate until saved again)."""
    cases = document.get("cases")
    for key, case in cases.items() if isinstance(cases, dict) else []:
        if isinstance(case, dict) and "counts" in case:
            where = f"cases[{key!r}].counts"
            raise Invalid(f"{where}, which {OLD_SCHEMAS[3]} and later read", f'set "schema" to "{SCHEMA}"')
    return document


def baseline_4_to_5(document: dict[str, Any]) -> dict[str, Any]:
    """Version 5 added each case's compact profile, optional: a version-4 file has none, so a profile in one is a
    mistake to refuse (its failures are explained by counts until the case is saved again)."""
    cases = document.get("cases")
    for key, case in cases.items() if isinstance(cases, dict) else []:
        if isinstance(case, dict) and "profile" in case:
            raise Invalid(f"cases[{key!r}].profile, which {SCHEMA} and later read", f'set "schema" to "{SCHEMA}"')
    return document


BASELINE = Kind(
    family="meddpm-baseline",
    versions=(*OLD_SCHEMAS, SCHEMA),
    steps={
        OLD_SCHEMAS[0]: baseline_1_to_2,
        OLD_SCHEMAS[1]: baseline_2_to_3,
        OLD_SCHEMAS[2]: baseline_3_to_4,
        OLD_SCHEMAS[3]: baseline_4_to_5,
    },
    noun="baseline file",
    fix="restore it from version control or re-create it with --save-baseline",
    newer_fix="re-create it with --save-baseline (see baselines/README.md), or use the meddpm-perf that wrote it",
)


def to_dict(baseline: BaselineFile) -> dict[str, Any]:
    """The JSON document of ``baseline`` (keys in a stable, reviewable order)."""
    cases = {}
    for key, case in baseline.cases.items():
        d = asdict(case)
        if d["tolerances"] is None:
            del d["tolerances"]
        if not d["counts"]:  # none profiled (a data-parallel case, or saved before counts): nothing to store
            del d["counts"]
        if case.profile is None:
            del d["profile"]
        else:
            d["profile"] = profile_to_json(case.profile)
        cases[key] = d
    return {
        "schema": SCHEMA,
        "arch": baseline.arch,
        "description": baseline.description,
        "tolerances": asdict(baseline.tolerances),
        "expectations": [asdict(e) for e in baseline.expectations],
        "cases": cases,
        "ratios": baseline.ratios,
        "ncu": {key: asdict(entry) for key, entry in baseline.ncu.items()},
        "sampling": {key: asdict(entry) for key, entry in baseline.sampling.items()},
    }
