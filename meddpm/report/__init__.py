"""Reporting results: tables (:mod:`~meddpm.report.tables`), the kernel-mix chart
(:mod:`~meddpm.report.plots`) and the power and clock chart (:mod:`~meddpm.report.power_plot`).
A top room beside the suite, the bench and the history: it reads what :mod:`meddpm.measure` and
:mod:`meddpm.run` produce and may import them and the model below; it imports no other top room.
"""
