"""The ``meddpm-bench`` command: its options and the run (:mod:`~meddpm.bench.cli`), its runs in
worker processes and A/B against a revision (:mod:`~meddpm.bench.processes`), the extra measurements
after the timed rounds (:mod:`~meddpm.bench.extras`), the RAM check of a CPU run
(:mod:`~meddpm.bench.host_ram`) and its report lines on stdout (:mod:`~meddpm.bench.output`). A top room beside
the suite, the reports and the history: it may import the verdict rules, the reports, the history and
everything below (measure, run, model, data, the plumbing); nothing imports it but ``python -m meddpm``.
"""
