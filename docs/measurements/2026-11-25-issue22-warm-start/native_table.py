"""Seconds of a py-spy ``--native`` raw profile under one Python frame, by native function (inclusive).

Usage: python3 native_table.py PROFILE.spy.txt[.gz] RATE_HZ [FRAME_REGEX]
FRAME_REGEX (default: Inductor's CUDA graph warm-up run, where a warm process first calls cuDNN) picks
the samples; below it, each native frame's samples are counted once per stack.
"""

import collections
import gzip
import re
import sys


def main() -> None:
    path, rate = sys.argv[1], float(sys.argv[2])
    pattern = re.compile(sys.argv[3] if len(sys.argv) > 3 else r"^CUDAWarmupNode\.run ")
    opener = gzip.open if path.endswith(".gz") else open
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    with opener(path, "rt") as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            frames = stack.split(";")[1:]
            hits = [i for i, frame in enumerate(frames) if pattern.search(frame)]
            if not hits:
                continue
            n = int(count)
            total += n
            below = {re.sub(r" \(.*\)$", "", frame)[:110] for frame in frames[hits[0] + 1 :]}
            for name in below:
                inclusive[name] += n
    print(f"samples under {pattern.pattern}: {total / rate:.1f} s")
    for name, n in inclusive.most_common(45):
        print(f"{n / rate:7.2f} s  {name}")


if __name__ == "__main__":
    main()
