"""Judging, with no pytest in it: the architecture keys and peaks (:mod:`~meddpm.judge.arch`), the baseline files
with their tolerances and expectations (:mod:`~meddpm.judge.baseline`) and the rules of a verdict
(:mod:`~meddpm.judge.verdict`). The suite, the bench and the history use it; it may import the measuring room (its
statistics and energy figures), the workload's names and the plumbing.
"""
