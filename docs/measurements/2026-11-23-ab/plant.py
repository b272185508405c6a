"""Plant a slowdown in this checkout: K extra in-place passes over a 256 MiB GPU buffer per training
iteration (HBM work queued on the device after the optimizer step, not a sleep on the host).

Usage: python plant.py K  (run from the repository root; edits the training step in place: meddpm/run/train.py,
or meddpm/train.py in a checkout from before meddpm/ was grouped into rooms).
The cost of one pass is measured apart by calibrate.py, on the same card, in the same command.
"""

import sys
from pathlib import Path

passes = int(sys.argv[1])
train = next(p for p in (Path("meddpm/run/train.py"), Path("meddpm/train.py")) if p.is_file())
source = train.read_text()
marker = "        self.step_count += 1\n"
assert marker in source and "_planted(" not in source, "plant.py runs once, on an unplanted checkout"
source = source.replace(marker, f"        _planted(self.device, {passes})\n" + marker, 1)
source += '''

_PLANT_BUFFERS: dict = {}


def _planted(device, passes: int) -> None:
    """The planted slowdown (docs/measurements/2026-11-23-ab/plant.py)."""
    if device.type != "cuda":
        return
    buffer = _PLANT_BUFFERS.setdefault(str(device), torch.ones(64 * 2**20, device=device))
    for _ in range(passes):
        buffer.mul_(1.0)
'''
train.write_text(source)
print(f"planted {passes} passes per iteration into {train}")
