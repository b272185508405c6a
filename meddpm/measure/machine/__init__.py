"""The machine a measurement runs on: per-iteration clocks (:mod:`~meddpm.measure.machine.timing`), NVML readings
(:mod:`~meddpm.measure.machine.nvml`), the recorded environment (:mod:`~meddpm.measure.machine.environment`) and the
RAM a CPU run needs (:mod:`~meddpm.measure.machine.host_memory`). ``timing`` and ``nvml`` import nothing of
``meddpm``."""
