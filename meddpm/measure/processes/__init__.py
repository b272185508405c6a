"""Measuring in fresh processes, the unit of a verdict: the process campaign and A/B order
(:mod:`~meddpm.measure.processes.campaign`), the measuring process (:mod:`~meddpm.measure.processes.worker`) and
the code each side measures, the working tree or a git revision (:mod:`~meddpm.measure.processes.revision`), and
data-parallel training measured on N processes started by torchrun (:mod:`~meddpm.measure.processes.ddp`)."""
