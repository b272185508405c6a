"""Whether a CPU run of the bench fits in the RAM available, checked before anything is built."""

from __future__ import annotations

from collections.abc import Sequence

from meddpm.errors import UserError
from meddpm.measure.machine.host_memory import host_memory_needed
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo

GIB = 2**30


def check_ram(config: ModelConfig, combos: Sequence[str], batch: int, ddp_processes: int) -> None:
    """Refuse a CPU run that cannot fit in the RAM available, before building anything."""
    available = available_memory()
    if available is None:
        return  # Not Linux and no psutil: the campaign's out-of-memory error still tells.
    need = host_memory_needed(config, [get_combo(n) for n in combos], batch, ddp_processes=ddp_processes)
    if need > available:
        ddp = f" and DDP on {ddp_processes} processes" if ddp_processes else ""
        raise UserError(
            f"preset {config.name!r} at batch size {batch} with combos {', '.join(combos)}{ddp} needs at least "
            f"{need / GIB:.1f} GiB of RAM, but {available / GIB:.1f} GiB is available; "
            "use a smaller preset (tiny) or batch, fewer combos, or a GPU"
        )


def available_memory() -> int | None:
    """Bytes of RAM available to a new allocation (free plus reclaimable cache), or None if unknown."""
    try:
        import psutil  # optional, not a dependency: it knows every platform's figure
    except ImportError:
        psutil = None
    if psutil is not None:
        return int(psutil.virtual_memory().available)
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        return int(fields["MemAvailable"].split()[0]) * 1024  # in KiB
    except (OSError, KeyError, ValueError):
        return None
