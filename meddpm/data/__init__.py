"""Training data: synthetic phantoms (always available) and NIfTI pairs (optional extra)."""

from meddpm.data.phantom import one_hot_mask, phantom_batch, phantom_labels

__all__ = ["one_hot_mask", "phantom_batch", "phantom_labels"]
