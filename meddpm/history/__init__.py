"""Performance history: a results database, change-point detection on its series, a static dashboard.

``meddpm-history`` (:mod:`meddpm.history.cli`) is the command line; the suite's ``--history`` and
``meddpm-bench --history`` append their runs through :mod:`meddpm.history.store`.
"""
