"""The model: :class:`~meddpm.model.config.ModelConfig` and its presets, the 3D U-Net denoiser
(:mod:`~meddpm.model.unet`, its building blocks in :mod:`~meddpm.model.nn`) and the Gaussian
diffusion around it (:mod:`~meddpm.model.diffusion`), written to read like the paper. It imports
nothing of ``meddpm`` but :mod:`meddpm.errors` and :mod:`meddpm.kernels` (the ``fast`` combo's
kernels, which its modules switch to when a combo says so), and every other room may import it.
"""
