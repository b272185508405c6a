"""Statistics of timings: summary figures of samples (:mod:`~meddpm.measure.statistics.descriptive`) and the
comparison of two sets of process medians (:mod:`~meddpm.measure.statistics.compare`)."""
