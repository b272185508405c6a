"""The whole-sample confirmation of a sampling estimate, run on a GPU: `fast`'s sample on the paper preset estimated
three ways, each line its SamplingResult.describe() and the seconds it took.

    python docs/measurements/2026-11-28-issue51-final/whole_sample.py

1. plain: the suite's estimate, judged against its 5 s budget (pairs agree: an estimate);
2. stalled: every timed call gets a planted stall of 0-20 ms of GPU sleep before its steps, so the pairs never agree
   within 1 %, and the limit is 3 s, under the slowest pair's reading: the estimate must be replaced by a whole
   sample (SamplingResult.replaced_estimate_s set, timed_steps == steps);
3. whole: the full 250-step sample timed as time_sampling does, to set beside both.
"""

import random
import time

import torch

from meddpm.measure.campaign.sampling import estimate_sampling, time_sampling
from meddpm.measure.machine.timing import time_synchronized
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo

CYCLES_PER_MS = 1.98e6  # the H200's top SM clock, 1980 MHz: a stall's length only roughly
rng = random.Random(0)


def stalled(fn, device):
    def with_a_stall():
        torch.cuda._sleep(int(rng.uniform(0.0, 20.0) * CYCLES_PER_MS))
        fn()

    return time_synchronized(with_a_stall, device)


def main() -> None:
    device = torch.device("cuda")
    config, combo = ModelConfig.preset("paper"), get_combo("fast")
    for name, kwargs in (("plain", {"limit_s": 5.0}), ("stalled", {"limit_s": 3.0, "clock": stalled})):
        t0 = time.perf_counter()
        result = estimate_sampling(config, combo, device, **kwargs)
        took = time.perf_counter() - t0
        pairs = [round(x, 3) for x in result.pair_ms_per_step]
        replaced = f"replaced {result.replaced_estimate_s:.3f} s"
        print(f"{name}: {result.describe()}; timed_steps {result.timed_steps}, {replaced}, pairs {pairs}; {took:.1f} s")
    t0 = time.perf_counter()
    whole = time_sampling(config, combo, device)
    print(f"whole: {whole.describe()}; took {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
