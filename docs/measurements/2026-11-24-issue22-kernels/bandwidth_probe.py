"""Issue 22: every Triton kernel of `fast` with Inductor's own byte count and its bandwidth.

Run with TORCHINDUCTOR_PROFILE=1 and TORCHINDUCTOR_PROFILE_OUTPUT=FILE (and a fresh
TORCHINDUCTOR_CACHE_DIR: the setting changes the generated code). Inductor then benchmarks each
Triton kernel once, the first time it is called, and appends one table per compiled graph call to
FILE (milliseconds, the bytes Inductor counts as the kernel's inputs and outputs, GB/s). After the
first call the kernels are no longer launched, so the values computed are garbage: this measures
kernels, nothing else.

  sample : one reverse step of the paper preset (the sampling graph)
  train  : one training iteration without CUDA graphs (the forward and the backward graph)
"""

import argparse
import dataclasses
import os

import torch

from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo
from meddpm.run.sampling import Sampler
from meddpm.run.train import TrainStep


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("phase", choices=["train", "sample"])
    args = p.parse_args()
    assert os.environ.get("TORCHINDUCTOR_PROFILE") == "1", "set TORCHINDUCTOR_PROFILE=1"
    # With a profile output file, PyTorch 2.11 also runs the generated module's benchmark harness at
    # compile time, which fails there (benchmark_compiled_module() missing 'args'); the tables do not need it.
    torch._inductor.config.benchmark_harness = False
    device = torch.device("cuda", 0)
    combo = dataclasses.replace(get_combo("fast"), cuda_graphs=False)
    torch.manual_seed(0)
    if args.phase == "sample":
        Sampler(ModelConfig.preset("paper"), combo, device)(steps=1)
    else:
        TrainStep(ModelConfig.preset("paper"), combo, 1, device)()
    torch.cuda.synchronize()
    print("done", args.phase, flush=True)


if __name__ == "__main__":
    main()
