"""Measuring: timing with CUDA events, derived statistics, NVML energy and model FLOPs; the
in-process training campaign (:mod:`~meddpm.measure.campaign`), the worker process of
process-level and A/B runs (:mod:`~meddpm.measure.worker`) and numerical parity
(:mod:`~meddpm.measure.parity`). It may import :mod:`meddpm.run`, :mod:`meddpm.model`,
:mod:`meddpm.data` and the plumbing; never the suite, the bench, the reports or the history.
"""
