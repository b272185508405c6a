"""The regression suite's pytest plugin (:mod:`~meddpm.suite.plugin`) and one session's parts, composed by
:class:`~meddpm.suite.session.SuiteRun`: the plan (:mod:`~meddpm.suite.cases`), measuring, judging (by the rules
of :mod:`~meddpm.suite.verdict`), the results files (:mod:`~meddpm.suite.records`) and saving; beside them the
options, architectures, baseline files and the Markdown summary. A top room: it may import the reports, the
history and everything below; the bench imports its verdict rules and the history its architecture keys.
"""
