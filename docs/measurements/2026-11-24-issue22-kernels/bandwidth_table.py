"""Summarise a TORCHINDUCTOR_PROFILE_OUTPUT file written by bandwidth_probe.py.

Per compiled graph (the first table written for it): kernels by duration class, their time, bytes
and bandwidth, the time they would take at REF TB/s, and the kernels that lose the most against it.
Usage: python3 bandwidth_table.py FILE [REF_TBPS=4.0] [TOP=25]
"""

import re
import sys

LINE = re.compile(r"^\s*([\d.]+)ms\s+([\d.]+) GB\s+([\d.]+)GB/s\s+([\d.]+)%\s+(\S+)")


def tables(path: str) -> dict[str, list[tuple[float, float, str]]]:
    out: dict[str, list[tuple[float, float, str]]] = {}
    current = None
    for line in open(path):
        if line.startswith("TRITON KERNELS BANDWIDTH INFO"):
            name = line.strip().split("(", 1)[1].rstrip(")")
            current = None if name in out else out.setdefault(name, [])
        elif current is not None and (m := LINE.match(line)):
            current.append((float(m.group(1)), float(m.group(2)), m.group(5)))
    return out


def main() -> None:
    path = sys.argv[1]
    ref = float(sys.argv[2]) if len(sys.argv) > 2 else 4.0
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 25
    for graph, rows in tables(path).items():
        print(
            f"== {graph.rsplit('/', 1)[-1]}: {len(rows)} kernels, {sum(r[0] for r in rows):.2f} ms, "
            f"{sum(r[1] for r in rows):.1f} GB; at {ref} TB/s {sum(r[1] for r in rows) / ref:.2f} ms"
        )
        print(f"{'class':>14} {'n':>4} {'ms':>7} {'GB':>6} {'TB/s':>5} {'ms@ref':>7}")
        for lo, hi, label in ((0.2, 1e9, "> 0.2 ms"), (0.05, 0.2, "0.05-0.2 ms"), (0, 0.05, "< 0.05 ms")):
            sel = [r for r in rows if lo <= r[0] < hi]
            ms, gb = sum(r[0] for r in sel), sum(r[1] for r in sel)
            print(f"{label:>14} {len(sel):>4} {ms:7.2f} {gb:6.1f} {gb / ms if ms else 0:5.2f} {gb / ref:7.2f}")
        print(f"top {top} by time lost against {ref} TB/s: ms, GB, TB/s, lost ms, kernel")
        for ms, gb, name in sorted(rows, key=lambda r: r[0] - r[1] / ref, reverse=True)[:top]:
            print(f"  {ms:7.3f} {gb:7.3f} {gb / ms:5.2f} {ms - gb / ref:6.3f} {name}")


if __name__ == "__main__":
    main()
