"""A scratch repository for a nightly that bisects its own alarm: the project at ``c00``, four commits a night
holds, one of them a regression of ``fast``.

    python docs/measurements/2026-11-27-issue51-alarm/night_history.py DEST

DEST gets this tree's package, suite and baselines (meddpm/, perf_tests/, baselines/, conftest.py,
pyproject.toml) committed as ``c00`` on branch ``main``, then ``c01`` .. ``c04``: notes, comments, and at ``c03``
``fast``'s first convolution back to cuDNN (``input_conv_by_taps`` off; 3.5 % slower on an H200 in
docs/measurements/2026-11-26-issue42-bisect). PLANT_AT and LAST in the environment move the plant and the last
commit (a longer night: LAST=8 PLANT_AT=5). PLANT_PASSES=K plants a smaller slowdown instead: K extra passes over a
256 MiB GPU buffer each training step (../2026-11-23-ab/plant.py; a pass measured 0.1317 ms on an H200 and 0.1833 ms
on an H100 in ../2026-11-24-fast-ab, so K=5 is about 1.4 % of `fast`'s 46-48 ms on an H200 and K=4 about 1.5 % of its
50 ms on an H100; not yet run as a night's plant).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

TREE = Path(__file__).resolve().parents[3]
PLANT_AT, LAST = int(os.environ.get("PLANT_AT", 3)), int(os.environ.get("LAST", 4))
PLANT_PASSES = int(os.environ.get("PLANT_PASSES", 0))  # 0: the cuDNN convolution instead


def git(dest: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=dest, check=True, capture_output=True)


def commit(dest: Path, number: int, subject: str) -> None:
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", f"c{number:02d}: {subject}")
    git(dest, "tag", f"c{number:02d}")


def main() -> None:
    dest = Path(sys.argv[1])
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for folder in ("meddpm", "perf_tests", "baselines"):
        shutil.copytree(TREE / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy(TREE / name, dest)
    (dest / ".gitignore").write_text("__pycache__/\nperf-results/\n")
    (dest / "NOTES.md").write_text("# Notes\n")
    git(dest, "init", "-q", "-b", "main")
    git(dest, "config", "user.email", "night@scratch")
    git(dest, "config", "user.name", "scratch")
    commit(dest, 0, "the tree as measured")
    combos = dest / "meddpm" / "run" / "combos.py"
    for n in range(1, LAST + 1):
        if n == PLANT_AT and PLANT_PASSES:
            plant = TREE / "docs" / "measurements" / "2026-11-23-ab" / "plant.py"
            subprocess.run([sys.executable, str(plant), str(PLANT_PASSES)], cwd=dest, check=True, capture_output=True)
            commit(dest, n, f"train: {PLANT_PASSES} more passes over a buffer each step")
        elif n == PLANT_AT:
            text = combos.read_text()
            assert text.count("input_conv_by_taps=True,") == 1
            combos.write_text(text.replace("input_conv_by_taps=True,", "input_conv_by_taps=False,"))
            commit(dest, n, "combos: fast's first convolution back to cuDNN")
        elif n % 2:
            with (dest / "NOTES.md").open("a") as notes:
                notes.write(f"- note {n}\n")
            commit(dest, n, "notes")
        else:
            unet = dest / "meddpm" / "model" / "unet.py"
            unet.write_text(unet.read_text() + f"\n# Reviewed in pass {n}: the U-Net follows the paper's figure.\n")
            commit(dest, n, "model: a comment")
    print(subprocess.run(["git", "log", "--oneline"], cwd=dest, capture_output=True, text=True).stdout)


if __name__ == "__main__":
    main()
