"""Judging, with no pytest in it: the architecture keys and peaks (:mod:`~meddpm.judge.arch`), the baseline files
with their tolerances and expectations (:mod:`~meddpm.judge.baseline`), the rules of a verdict
(:mod:`~meddpm.judge.verdict`) and the A/B verdicts of a campaign against a revision (:mod:`~meddpm.judge.ab`).
The suite, the bench and the history use it; it may import the measuring room (its statistics and energy figures),
the workload's names and the plumbing.
"""
