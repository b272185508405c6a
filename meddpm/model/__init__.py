"""The model: :class:`~meddpm.model.config.ModelConfig` and its presets, the 3D U-Net denoiser
(:mod:`~meddpm.model.unet`) and the Gaussian diffusion around it (:mod:`~meddpm.model.diffusion`),
written to read like the paper. The bottom layer: it imports nothing of ``meddpm`` but
:mod:`meddpm.errors`, and every other room may import it.
"""
