"""torch's profiler, opened without the lines it prints of its own: every profile of the package goes through here.

Kineto prints "USDT: ... profiler_start" and "profiler_stop" on stderr for every profile on a CPU, at the highest of
its levels: only a level above them (read when the profiler first starts) keeps stderr for our lines; a level the
user set stays. And some PyTorch releases warn on a process's first profile that events are cleared "at the end of
each cycle", though a profile without a schedule has one cycle (pytorch/pytorch#180387): nothing a user of ours can
act on. Other warnings pass.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any

_NO_CYCLES_WARNING = "Warning: Profiler clears events at the end of each cycle"


@contextlib.contextmanager
def quiet_profile(**kwargs: Any) -> Iterator[Any]:
    """``torch.profiler.profile(**kwargs)`` as a context, without Kineto's start and stop lines or the false cycles
    warning; yields the profiler."""
    from torch.profiler import profile  # imported by a run that profiles, not by every run that imports this

    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NO_CYCLES_WARNING)
        with profile(**kwargs) as prof:
            yield prof
