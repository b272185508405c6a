"""Seconds of a py-spy raw profile's main thread under chosen functions (inclusive), and the top frames.

Usage: python3 spy_table.py PROFILE.spy.txt RATE_HZ (run.sh writes NAME.spy-table.txt beside each profile)
"""

import collections
import re
import sys

WATCH = {  # label: a regex one frame of the stack must match
    "import torch/meddpm": r"^<module> \(compile_probe\.py:(1[0-9]|2[0-4])\)",
    "model built (TrainStep.__init__)": r"^TrainStep\.__init__",
    "first iterations (3)": r"^main \(compile_probe\.py:4[4-6]\)",
    "Dynamo frame (tracing and the forward compile)": r"^InstructionTranslatorBase\.run ",
    "Dynamo tracing of autograd.Functions": r"^AutogradFunctionVariable\.call_apply",
    "AOTAutograd (all)": r"^create_aot_dispatcher_function",
    "AOT joint graph trace": r"^aot_dispatch_autograd_graph|^_create_graph",
    "partitioner": r"^min_cut_rematerialization_partition",
    "Inductor forward compile": r"^fw_compiler_base",
    "Inductor backward compile (lazy)": r"^bw_compiler",
    "GraphLowering.run": r"^GraphLowering\.run ",
    "Scheduler.__init__": r"^Scheduler\.__init__",
    "Scheduler.codegen": r"^Scheduler\.codegen",
    "FX graph cache load/save": r"^FxGraphCache\.|^_load_with_key|^FxGraphCache\._save",
    "AOTAutograd cache": r"^AOTAutogradCache\.",
    "async_compile wait": r"^AsyncCompile\.wait",
    "Triton kernel load/precompile in parent": (
        r"^CachingAutotuner\.precompile|^TritonCompileResult\.make_launcher|^StaticallyLaunchedCudaKernel"
    ),
    "autotune benchmarking": r"^CachingAutotuner\.benchmark_all_configs|^CachingAutotuner\.autotune_to_one_config",
    "compiled module run (first call)": r"^call \(/tmp/ind-",
    "convolution (cuDNN, incl. benchmark)": r"^convolution \(|^_convolution|conv3d",
    "CUDA graph record": r"^CUDAGraphNode\.record|^CUDAGraphTreeManager\.record_function",
    "CUDA graph warm-up": r"^CUDAGraphTreeManager\.run_eager|^CUDAWarmupNode\.run",
}


def main() -> None:
    path, rate = sys.argv[1], float(sys.argv[2])
    inclusive = collections.Counter()
    frames_incl = collections.Counter()
    total = 0
    for line in open(path):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        frames = stack.split(";")
        if not frames[0].startswith("thread") or "MainThread" not in frames[0]:
            continue
        n = int(count)
        total += n
        names = [re.sub(r" \((?:/[^)]*/)?(?:site-packages/)?", " (", f) for f in frames[1:]]
        for label, pattern in WATCH.items():
            if any(re.search(pattern, f) for f in names):
                inclusive[label] += n
        for f in set(re.sub(r":\d+\)$", ")", f) for f in names):
            frames_incl[f] += n
    print(f"main thread: {total / rate:.1f} s")
    for label in WATCH:
        print(f"  {label:45s} {inclusive[label] / rate:7.1f} s")
    print("top functions (inclusive):")
    for f, n in frames_incl.most_common(90):
        print(f"  {n / rate:7.1f} s  {f[:150]}")


if __name__ == "__main__":
    main()
