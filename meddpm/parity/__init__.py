"""Numerical parity between layouts and precisions: a faster combo must compute the same function.

:mod:`~meddpm.parity.cases` (cases, sides, pairs and their comparison), :mod:`~meddpm.parity.bounds`
(the measured bounds, shipped as package data, and their calibration, ``python -m meddpm.parity
calibrate``), :mod:`~meddpm.parity.ddp` (one data-parallel iteration, run by torchrun, against one
process on the whole batch). A harness room: it runs the workload (:mod:`meddpm.model`,
:mod:`meddpm.run`, :mod:`meddpm.data`) and the plumbing; nothing of the measuring, judging or
reporting rooms.
"""
