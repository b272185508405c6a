"""Achieved DRAM bandwidth of every Triton kernel of one fast training iteration (H200, Nsight Compute).

``ncu-triton-kernels.csv`` came from
``ncu --clock-control none --nvtx --nvtx-include meddpm_step --kernel-name regex:triton
--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw
--print-units base python3 -m meddpm.measure.profiled_step --preset paper --combo fast --warmup 2``
(columns kept: the kernel and the three metrics). Run as ``python3 ncu_bandwidth.py``.
"""

from pathlib import Path

import pandas as pd

kernels = pd.read_csv(Path(__file__).with_name("ncu-triton-kernels.csv"))
kernels["ms"] = kernels["gpu__time_duration.sum"] / 1e6
kernels["GB"] = (kernels["dram__bytes_read.sum"] + kernels["dram__bytes_write.sum"]) / 1e9
kernels["TB/s"] = kernels["GB"] / kernels["ms"]
kernels["duration"] = pd.cut(kernels["ms"], [0, 0.05, 0.2, 100], labels=["< 0.05 ms", "0.05-0.2 ms", "> 0.2 ms"])
by_size = kernels.groupby("duration", observed=True).agg(kernels=("ms", "size"), ms=("ms", "sum"), GB=("GB", "sum"))
by_size.loc["all"] = by_size.sum()
by_size["TB/s"] = by_size["GB"] / by_size["ms"]
print(by_size.round(2).to_string(), end="\n\n")
top = kernels.sort_values("ms", ascending=False).head(20)
top = top.assign(kernel=top["Kernel Name"].str.slice(0, 80))[["kernel", "ms", "GB", "TB/s"]]
print(top.round(3).to_string(index=False))
