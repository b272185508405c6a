"""The ``fast`` combo's kernels: the same functions as the model's reference ops, computed faster.

One module per kernel family: :mod:`~meddpm.kernels.normalization` (GroupNorm that keeps the
layout, its written-out backward, fused with SiLU), :mod:`~meddpm.kernels.convolution` (biases added
apart, a thin convolution tap by tap), :mod:`~meddpm.kernels.upsampling` (separable trilinear
upsampling), :mod:`~meddpm.kernels.concatenation` (the decoder's joins along channels, whose gradients reach
each part dense) and :mod:`~meddpm.kernels.few_channel_convolution` (the first convolution's two Triton kernels,
on a GPU only); each module's docstring says what it replaces, why, and which tests check it against
the reference op. :mod:`~meddpm.kernels.operators` makes the kernels with a written-out backward
custom operators, which Dynamo records as one call and Inductor still fuses, and the Triton kernels opaque ones.
:mod:`~meddpm.kernels.common` holds the few tensor helpers (layout, compute dtype, per-channel
broadcasting) that the kernels share and the model uses too.

The rule: the kernels are functions, and the model chooses them. The modules that hold a combo's
switches (:class:`~meddpm.model.nn.GroupNorm32`, :class:`~meddpm.model.nn.Conv3d`, ...; set by
:meth:`~meddpm.run.combos.Combo.configure`) live in :mod:`meddpm.model` and call a kernel when their
switch is on. This room is the bottom layer: it imports ``torch`` and nothing of ``meddpm`` outside
it, so the dependency points one way, model -> kernels, and shared helpers sit in
:mod:`~meddpm.kernels.common` because the lower room is the one place both can import without a cycle.
"""
