"""The ``meddpm-bench`` command: its options and output (:mod:`~meddpm.bench.cli`) and its runs in
worker processes and A/B against a revision (:mod:`~meddpm.bench.processes`). A top room beside
the suite, the reports and the history: it may import the verdict rules, the reports, the history and
everything below (measure, run, model, data, the plumbing); nothing imports it but ``python -m meddpm``.
"""
