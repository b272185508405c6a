"""Measuring, by job: the interleaved campaign (:mod:`~meddpm.measure.campaign`), statistics
(:mod:`~meddpm.measure.statistics`), energy (:mod:`~meddpm.measure.energy`), the machine's clocks and
facts (:mod:`~meddpm.measure.machine`), profiling (:mod:`~meddpm.measure.profiling`) and measuring in
worker processes and against revisions (:mod:`~meddpm.measure.processes`). It may import
:mod:`meddpm.run`, :mod:`meddpm.model`, :mod:`meddpm.data` and the plumbing; never the verdicts, the
suite, the bench, the reports or the history.
"""
