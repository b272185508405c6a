"""Hypothesis profiles for the suite: 'ci' (CPU, fast, derandomised) and 'nightly' (GPU, larger).

Choose one with ``--hypothesis-profile nightly`` or ``HYPOTHESIS_PROFILE=nightly``.
"""

import os

from hypothesis import HealthCheck, settings

_common = dict(deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=6, derandomize=True, **_common)
settings.register_profile("nightly", max_examples=40, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
