"""``python -m meddpm.measure.processes.worker``: one measuring process, the unit of process-level replication.

The suite and ``meddpm-bench`` start several of these (``--perf-processes`` / ``--processes``),
each with a fresh CUDA context, cuDNN plans and Inductor compilation, and judge the spread of
their medians. Every worker runs this tree's harness; ``--workload TREE`` names the tree whose
workload it measures (the working tree, or a revision extracted for an A/B run or a bisection:
:mod:`meddpm.measure.processes.workload`). ``--check`` only drives that workload once, as the
harness does (one iteration of the tiny preset on the CPU), and says whether it can. ``--job-on-stdin`` imports,
then waits for the measuring arguments as one JSON list on stdin (none: it ends), so that a campaign can start it
during the turn before its own; such a worker then also waits on stdin for the GPU to be its own before its first
iteration, and says on stdout when its results are written (:mod:`meddpm.measure.processes.launch`). The worker
and its JSON (schema ``meddpm-worker/2``) are a protocol inside one tree only.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from meddpm.measure.processes.launch import JOB_ON_STDIN
from meddpm.measure.processes.workload import use_workload

WORKER_SCHEMA = "meddpm-worker/2"
# The check's exit status when the workload cannot be driven (its last line on stderr says why).
UNDRIVABLE = 3


def main(argv: Sequence[str] | None = None) -> int:
    """Choose the workload, then measure it (or only check it with ``--check``)."""
    choice = argparse.ArgumentParser(add_help=False)
    choice.add_argument("--workload", type=Path, required=True, help="the tree whose meddpm/ workload to measure")
    choice.add_argument("--check", action="store_true", help="only import the workload and say if it can be driven")
    choice.add_argument(JOB_ON_STDIN, action="store_true", help="import, then read the job's arguments from stdin")
    chosen, rest = choice.parse_known_args(argv)
    use_workload(chosen.workload)
    try:
        # Imported only now: the measuring code imports the workload, which must come from --workload.
        from meddpm.measure.processes import measuring_process

        if chosen.check:
            measuring_process.drive_once()
            return 0
    except Exception as exc:  # whatever a revision's code raises under this harness: it cannot drive it
        print(f"WorkloadError: {type(exc).__name__}: {exc}", file=sys.stderr)
        return UNDRIVABLE
    if chosen.job_on_stdin:
        measuring_process.import_ahead()
        line = sys.stdin.readline()
        if not line:  # no job: the run ended before this process's turn
            return 0
        rest = [*rest, *json.loads(line)]
    return measuring_process.main(rest, schema=WORKER_SCHEMA, handed_over=chosen.job_on_stdin)


if __name__ == "__main__":
    sys.exit(main())
