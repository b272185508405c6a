"""Usage: python3 energy_table.py RESULTS_JSON... : per run and combo, the energy figure and what its block cost.

Reads the suite's results.json (or .json.gz); prints one Markdown row per case with an energy block.
"""

import gzip
import json
import sys


def load(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


print("| run | combo | J/iter | bound | spread | W | soak s | settled | °C | windows s | block s | energy verdict |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for path in sys.argv[1:]:
    for case in load(path)["cases"]:
        for block in case.get("energy_blocks", []):
            soak, windows = block.get("soak") or {}, block["windows"]
            gpu_s = sum(w["gpu_s"] for w in windows)
            verdict = next((v for v in case.get("verdicts", []) if "energy" in str(v).lower()), "")
            print(
                f"| {path} | {case['combo']} | {case['energy_j_per_iter']:.2f} | {case['energy_quantisation']:.2%} "
                f"| {case['energy_spread']:.2%} | {case['mean_power_w']:.0f} | {soak.get('seconds', 0):.1f} "
                f"| {soak.get('settled')} | {soak.get('start_c')} -> {soak.get('end_c')} | {gpu_s:.2f} "
                f"| {soak.get('seconds', 0) + gpu_s:.1f} | {str(verdict)[:90]} |"
            )
