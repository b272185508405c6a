"""Where a `fast` process's main thread spent its start, from py-spy's speedscope file (100 Hz, idle frames kept):

    python docs/measurements/2026-11-28-issue51-carried/ready/spy_split.py FILE.speedscope.json.xz [SECONDS]

Counts the samples of the main thread (the one with the most) up to its first frame inside a CUDA graph's replay
(the first timed round, or SECONDS of samples if given): in all, compiling Python source to bytecode, reading
files to import them, and inside an import at all. py-spy's own seconds are samples, not the wall clock (it
falls behind at times), so the shares matter more than the sums.
"""

import json
import lzma
import sys


def main() -> None:
    with lzma.open(sys.argv[1]) as f:
        profile = json.load(f)
    limit = float(sys.argv[2]) if len(sys.argv) > 2 else None
    frames = profile["shared"]["frames"]
    main_thread = max(profile["profiles"], key=lambda p: len(p["samples"]))
    seconds = {"in all": 0.0, "compiling source": 0.0, "reading source files": 0.0, "inside imports": 0.0}
    for stack, weight in zip(main_thread["samples"], main_thread["weights"]):
        names = [frames[i]["name"] for i in stack]
        if (limit is None and "CUDAGraph.replay" in names) or (limit is not None and seconds["in all"] >= limit):
            break
        seconds["in all"] += weight
        if "SourceLoader.source_to_code" in names:
            seconds["compiling source"] += weight
        if "FileLoader.get_data" in names:
            seconds["reading source files"] += weight
        if "_find_and_load" in names:
            seconds["inside imports"] += weight
    print("  ".join(f"{name} {value:.1f} s" for name, value in seconds.items()))


if __name__ == "__main__":
    main()
