"""The regression suite's pytest plugin (:mod:`~meddpm.suite.plugin`) and one session's parts, composed by
:class:`~meddpm.suite.session.SuiteRun`: the plan (:mod:`~meddpm.suite.cases`), measuring, judging (by the rules
of :mod:`meddpm.judge`), the results files (:mod:`~meddpm.suite.records`) and saving; beside them the options and
the Markdown summary. A top room: it may import the verdict rules, the reports, the history, parity and everything
below; nothing imports it.
"""
