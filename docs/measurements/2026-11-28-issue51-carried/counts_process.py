"""One counts process of `fast` per commit named, as a bisection's halving runs it where the ends' counts differ
(meddpm.bench.walk.Walk.counts_of: one fresh process, one timed round, no energy, the card not warmed, the
iteration profiled): each commit's counts and the process's seconds, then how the first and last commits' counts
would place each of the others.

    python docs/measurements/2026-11-28-issue51-carried/counts_process.py REPO COMMIT...  (on a GPU)

REPO: a scratch repository of ../2026-11-27-issue51-alarm/night_history.py; its workloads are driven by this tree's
harness, as a bisection drives them, with the compile cache that MEDDPM_COMPILE_CACHE names.
"""

import subprocess
import sys
from pathlib import Path

import torch

from meddpm.bench.walk import Bisection, Walk
from meddpm.judge.bisection import Commit, side_by_counts
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.model.config import ModelConfig


def main() -> None:
    repo, names = Path(sys.argv[1]), sys.argv[2:]
    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    job = Bisection(ModelConfig.preset("paper"), "fast", device, 1, CampaignSettings(), 3)
    counted = {}
    with Walk(job, repo, Path("/tmp/counts-unused.json"), print) as walk:
        for name in names:
            sha = subprocess.run(["git", "-C", str(repo), "rev-parse", name], capture_output=True, text=True).stdout
            counts, seconds = walk.counts_of(Commit(sha.strip(), name), f"counts of {name}")
            counted[name] = counts
            print(f"{name}: {seconds:.1f} s, counts {counts}", flush=True)
    good, bad = counted[names[0]], counted[names[-1]]
    for name in names[1:-1]:
        print(f"{name} placed against {names[0]} and {names[-1]}: {side_by_counts(counted[name], good, bad)}")


if __name__ == "__main__":
    main()
