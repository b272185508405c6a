"""Running the model: the combos (how it runs, never what it computes), one training iteration,
reverse-diffusion sampling and data-parallel training under ``torchrun``. It imports
:mod:`meddpm.model`, :mod:`meddpm.data` and the plumbing (:mod:`meddpm.errors`), plus two leaf
clocks of :mod:`meddpm.measure` (``timing`` and ``nvml``, which import nothing of ``meddpm``);
never the campaign, the suite, the bench, the reports or the history.
"""
