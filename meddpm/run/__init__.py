"""Running the model: the combos (how it runs, never what it computes), one training iteration,
reverse-diffusion sampling and data-parallel training under ``torchrun`` (the launcher and the gradient
sync). A workload room: it imports :mod:`meddpm.model`, :mod:`meddpm.kernels`, :mod:`meddpm.data` and
the plumbing (:mod:`meddpm.errors`); nothing of the harness, not even its clocks (docs/design.md,
"Workload and harness").
"""
