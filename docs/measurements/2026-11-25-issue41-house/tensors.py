"""Fixed-seed training tensors of the tiny preset on the CPU, from the public API only, for a before/after check.

Usage: ``PYTHONPATH=<tree> python tensors.py OUT.pt`` with each tree, then ``python tensors.py --compare A.pt B.pt``:
per combo three training iterations (forward, L1 loss, backward, Adam), the losses and every parameter after them.
The public API is the same in both trees (``meddpm.ModelConfig``, ``COMBOS``, ``TrainStep``), so one script serves both.
"""

import sys

import torch

COMBOS_ON_CPU = ("baseline", "opt1", "opt2", "opt12", "amp_bf16")  # fast compiles for minutes on a CPU


def tensors() -> dict[str, torch.Tensor]:
    import meddpm

    out = {}
    for name in COMBOS_ON_CPU:
        torch.manual_seed(0)
        step = meddpm.TrainStep(meddpm.ModelConfig.preset("tiny"), meddpm.get_combo(name), 1, torch.device("cpu"))
        for i in range(3):
            out[f"{name}/loss{i}"] = step().detach().clone()
        for pname, p in step.model.named_parameters():
            out[f"{name}/{pname}"] = p.detach().clone()
    return out


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        a, b = torch.load(sys.argv[2]), torch.load(sys.argv[3])
        differ = [k for k in a if k not in b or not torch.equal(a[k], b[k])]
        print(f"{len(a)} tensors compared with torch.equal, {len(differ)} differ{': ' if differ else ''}{differ[:5]}")
        sys.exit(1 if differ or a.keys() != b.keys() else 0)
    torch.save(tensors(), sys.argv[1])
