"""Measuring: timing with CUDA events, derived statistics, NVML energy and model FLOPs."""
