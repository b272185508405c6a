"""Where an iteration's time goes: Nsight Compute counters (:mod:`~meddpm.measure.profiling.ncu`, metric names per
GPU family in :mod:`~meddpm.measure.profiling.ncu_metrics`, the profiled process
:mod:`~meddpm.measure.profiling.profiled_step`) and the kernel mix by category
(:mod:`~meddpm.measure.profiling.kernel_mix`)."""
