"""A scratch git history for bisection: 16 commits after a base, two of them realistic one-line regressions.

    python docs/measurements/2026-11-26-issue42-bisect/make_history.py DEST [--eager COMBO:FIELD]

DEST gets a copy of this tree's package (meddpm/, pyproject.toml) committed as ``c00``, then
commits ``c01`` .. ``c16`` (tagged so), each a change a team makes every day: a note in NOTES.md, or a
comment in the workload. Two are regressions in the workload's combo table:

- ``c11``: a regression of the eager combos, one of :data:`REGRESSIONS` (``--eager``, default
  ``swish_in_resblocks``: the SiLU after each residual block's second GroupNorm written as
  ``x * sigmoid(x)``, two kernels and a saved tensor where there was one op: a fusion undone), or
  COMBO:FIELD turned on in the combo table;
- ``c14``: ``fast``'s first convolution goes back to cuDNN (``input_conv_by_taps`` off: a kernel choice).
"""

import argparse
import re
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve()
TREE = HERE.parents[3]
EAGER_AT, FAST_AT, LAST = 11, 14, 16
# subject, then (file, text, replacement) edits: the model-code regressions (probe_model.py measures the first two)
REGRESSIONS = {
    "silu_written_out": (
        "model: SiLU written out after GroupNorm",
        (
            "meddpm/model/nn.py",
            "        return F.silu(super().forward(x))\n",
            "        h = super().forward(x)\n        return h * torch.sigmoid(h)\n",
        ),
    ),
    "emb_contiguous": (
        "model: the timestep embedding made contiguous before it is added",
        ("meddpm/model/unet.py", "[:, :, None, None, None]\n", "[:, :, None, None, None].expand_as(h).contiguous()\n"),
    ),
    # Half of silu_written_out: only the second activation of each residual block, as a Swish module.
    "swish_in_resblocks": (
        "model: a Swish module after each residual block's second GroupNorm",
        (
            "meddpm/model/unet.py",
            "            GroupNormSiLU(groups, ch_out),\n            nn.Dropout(dropout),\n",
            "            GroupNorm32(groups, ch_out),\n            Swish(),\n            nn.Dropout(dropout),\n",
        ),
        (
            "meddpm/model/unet.py",
            "class ResBlock(nn.Module):\n",
            "class Swish(nn.Module):\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
            "        return x * torch.sigmoid(x)\n\n\nclass ResBlock(nn.Module):\n",
        ),
    ),
}


def git(dest: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=dest, check=True, capture_output=True)


def commit(dest: Path, number: int, subject: str) -> None:
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", subject)
    git(dest, "tag", f"c{number:02d}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dest", type=Path)
    p.add_argument("--eager", default="swish_in_resblocks", help=f"one of {sorted(REGRESSIONS)}, or COMBO:FIELD")
    args = p.parse_args()
    dest = args.dest
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    shutil.copytree(TREE / "meddpm", dest / "meddpm", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(TREE / "pyproject.toml", dest)
    (dest / ".gitignore").write_text("__pycache__/\n")
    (dest / "NOTES.md").write_text("# Notes\n")
    git(dest, "init", "-q")
    git(dest, "config", "user.email", "bisect@scratch")
    git(dest, "config", "user.name", "scratch")
    commit(dest, 0, "c00: the tree as measured")
    combos = dest / "meddpm" / "run" / "combos.py"
    for n in range(1, LAST + 1):
        if n == EAGER_AT and args.eager in REGRESSIONS:
            subject, *edits = REGRESSIONS[args.eager]
            for name, old, new in edits:
                text = (dest / name).read_text()
                assert text.count(old) == 1, f"{old!r} is not once in {name}"
                (dest / name).write_text(text.replace(old, new))
            commit(dest, n, f"c{n:02d}: {subject}")
        elif n == EAGER_AT:
            combo, field = args.eager.split(":")
            text = combos.read_text()
            line = re.search(rf'        Combo\("{combo}", "[^"]*"(, [a-z0-9_]+=[^,)]+)*\),\n', text)
            assert line is not None, f"no one-line Combo({combo!r}, ...) in combos.py"
            combos.write_text(text.replace(line.group(0), line.group(0)[:-3] + f", {field}=True),\n"))
            commit(dest, n, f"c{n:02d}: combos: {combo} turns {field} on, as fast does")
        elif n == FAST_AT:
            text = combos.read_text()
            assert text.count("input_conv_by_taps=True,") == 1
            combos.write_text(text.replace("input_conv_by_taps=True,", "input_conv_by_taps=False,"))
            commit(dest, n, f"c{n:02d}: combos: fast's first convolution back to cuDNN")
        elif n % 3 == 0:
            unet = dest / "meddpm" / "model" / "unet.py"
            unet.write_text(unet.read_text() + f"\n# Reviewed in pass {n}: the U-Net follows the paper's figure.\n")
            commit(dest, n, f"c{n:02d}: model: a comment")
        else:
            with (dest / "NOTES.md").open("a") as notes:
                notes.write(f"- note {n}\n")
            commit(dest, n, f"c{n:02d}: notes")
    print(subprocess.run(["git", "log", "--oneline"], cwd=dest, capture_output=True, text=True).stdout)


if __name__ == "__main__":
    main()
