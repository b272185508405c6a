"""The ``meddpm-bench`` command: its options and the run (:mod:`~meddpm.bench.cli`), its runs in
worker processes and A/B against a revision (:mod:`~meddpm.bench.processes`), the extra measurements
after the timed rounds (:mod:`~meddpm.bench.extras`), the bisection (:mod:`~meddpm.bench.bisect`, measured by
:mod:`~meddpm.bench.walk`) and the nightly's alarm (:mod:`~meddpm.bench.alarm`), the RAM check of a CPU run
(:mod:`~meddpm.bench.host_ram`) and its report lines on stdout (:mod:`~meddpm.bench.output`). A top room beside
the suite, the reports and the history: it may import the verdict rules, the reports, the history and
everything below (measure, run, model, data, the plumbing); nothing imports it: it is run (``meddpm-bench``,
``python -m meddpm``, ``python -m meddpm.bench.alarm``).
"""

from meddpm.measure.machine.cache_root import keep_own_bytecode
from meddpm.measure.machine.read_ahead import read_stack_ahead

# Every way into this room (meddpm-bench, python -m meddpm, python -m meddpm.bench.alarm) imports this package before
# any of its modules imports torch, so here a process keeps its bytecode in the compile cache, as the suite's
# conftest.py does and the workers do, and starts reading the GPU stack ahead: without it a `fast` process spent
# half its start compiling torch's sources to bytecode where the image forbids writing it (docs/ci.md).
keep_own_bytecode()
read_stack_ahead()
