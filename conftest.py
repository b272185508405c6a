"""Root conftest: the suite's pytest plugin (markers, options, GPU and architecture selection),
and pytester for the plugin's own tests.

Before the plugin imports torch, a process told not to write bytecode keeps it in the compile cache
(:mod:`meddpm.measure.machine.cache_root`): torch, Dynamo and Inductor are then read, not compiled, by the next run.
On a GPU machine the GPU stack's files start being read into the page cache at the same time
(:mod:`meddpm.measure.machine.read_ahead`).
"""

from meddpm.measure.machine.cache_root import keep_own_bytecode
from meddpm.measure.machine.read_ahead import read_stack_ahead

keep_own_bytecode()
read_stack_ahead()

pytest_plugins = ["meddpm.suite.plugin", "pytester"]
