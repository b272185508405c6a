"""Per-architecture baseline files (``baselines/<arch>.json``): schema, loading and atomic saving.

Schema ``meddpm-baseline/5`` (documented in ``baselines/README.md``)::

    {
      "schema": "meddpm-baseline/5",
      "arch": "h200",
      "tolerances": {"time_rel": 0.05, "memory_rel": 0.02, "energy_rel": 0.10, "alpha": 0.01},
      "expectations": [{"preset": "paper", "metric": "time", "combo": "opt1", "reference": "baseline",
                        "max": 0.25, "min": null, "provenance": "measured", "source": "..."},
                       {"preset": "paper", "metric": "ncu:tensor_pipe_pct", "combo": "opt1", "reference": null,
                        "min": 7.81, "max": null, "provenance": "paper", "source": "..."}],
      "cases": {"paper/opt1/b1": {"preset": ..., "combo": ..., "batch_size": ..., "provenance": "measured",
                                   "samples_ms": [...], "median_ms": ..., "energy_samples_j": [...], ...,
                                   "process_medians_ms": [...], "noise": {"between_process_rel": ...,
                                   "between_run_rel": ..., "between_run_source": "..."},
                                   "counts": {"launches": {"min": ..., "max": ...},
                                              "launches.convolution": {...}, "bytes_allocated": {...}, ...},
                                   "profile": {"processes": 3, "floor": 0.005,
                                               "rows": [[name, label, category, module type, op, [calls...],
                                                         [ms...]], ...],
                                               "folded": [[category, rows, [calls...], [ms...]], ...],
                                               "module_bytes": {"Conv3d": [bytes...], ...}},
                                   "environment": {...}}},
      "ratios": {"paper/b1": {"opt1/baseline": {"median": ..., "q1": ..., "q3": ...}}},
      "ncu": {"paper/opt1/b1": {"provenance": "measured", "totals": {"sm_cycles": ..., ...},
                                "ncu_version": ..., "replay": "range", "clock_control": "none", ...}}
    }

Expectations on Nsight Compute figures name the metric ``ncu:<key>`` (e.g. ``ncu:sm_cycles``,
keys in :mod:`meddpm.measure.profiling.ncu_metrics`); ``ncu`` keeps the measured per-iteration totals.

Version 2 added each case's per-process medians (the unit of its time verdict) and its measured
noise; a version-1 file is read with neither (its cases are judged as before, by rounds).
Version 3 added absolute expectations (``"reference": null``: a bound on the combo's own figure);
a version-1 or 2 file is read with none (its ``reference: null`` is refused).
Version 4 added each case's ``counts``: the spread (min and max over the saving run's processes) of its
profiled iteration's launches in all and per group, bytes allocated and FLOPs, which gate every run
(docs/explain.md); a version-1 to 3 file is read as version 4 with no counts (its cases are not gated on
counts until saved again) and may not hold them.
Version 5 added each case's compact ``profile``: per saving process, the calls and milliseconds of its profiled
iteration's rows summed per module type, those under a floor folded per group, and the bytes each module type's
forward kept (:mod:`meddpm.judge.stored_profile`); a failure against the case is explained by rows, as an A/B is.
A version-1 to 4 file is read as version 5 with no profiles (failures explained by counts until saved again) and
may not hold them. An older file is written back as the current version by
the next save. Every key is checked: an unknown one is refused,
naming the nearest known key, rather than ignored.

Energy is stored with the method it came from (``energy_method``), its counter bound
(``energy_quantisation``) and its replicates (``energy_replicates_j``, J/iter per window or per
process); see ``docs/energy.md``. Cases saved before that have none of the three, and their
``energy_samples_j`` are single-iteration reads of the counter (often 0): their energy is
reported as not comparable until the case is saved again. New saves leave ``energy_samples_j`` empty.

``tolerances`` may be overridden per case. ``ratios`` records the interleaved ratios of the
run that saved the cases, for reviewers; verdicts use ``expectations``. Files are written
with lists of numbers on one line, so a baseline change reads well in a pull request.

The package: :mod:`~meddpm.judge.baseline.model` (the dataclasses), :mod:`~meddpm.judge.baseline.reader` (strict
readers of JSON values, for any document), :mod:`~meddpm.judge.baseline.document` (the file's JSON document read
and written), :mod:`~meddpm.judge.baseline.checks` (the figures no verdict can use) and
:mod:`~meddpm.judge.baseline.store` (paths, loading, atomic and locked saving).
"""

from meddpm.judge.baseline.checks import validate
from meddpm.judge.baseline.document import to_dict
from meddpm.judge.baseline.model import (
    OLD_SCHEMAS,
    PROVENANCES,
    SCHEMA,
    BaselineError,
    BaselineFile,
    CaseBaseline,
    CaseKey,
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
from meddpm.judge.baseline.store import baseline_path, dumps_reviewable, load_baseline, save_baseline, update_baseline

__all__ = [
    "OLD_SCHEMAS",
    "PROVENANCES",
    "SCHEMA",
    "BaselineError",
    "BaselineFile",
    "CaseBaseline",
    "CaseKey",
    "CountRange",
    "Expectation",
    "FoldedRows",
    "NcuBaseline",
    "Noise",
    "SamplingBudget",
    "StoredProfile",
    "StoredRow",
    "Tolerances",
    "baseline_path",
    "dumps_reviewable",
    "load_baseline",
    "save_baseline",
    "to_dict",
    "update_baseline",
    "validate",
]
