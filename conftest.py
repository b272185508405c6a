"""Root conftest: the suite's pytest plugin (markers, options, GPU and architecture selection),
and pytester for the plugin's own tests.

Before the plugin imports torch, a process told not to write bytecode keeps it in the compile cache
(:mod:`meddpm.measure.machine.cache_root`): torch, Dynamo and Inductor are then read, not compiled, by the next run.
"""

from meddpm.measure.machine.cache_root import keep_own_bytecode

keep_own_bytecode()

pytest_plugins = ["meddpm.suite.plugin", "pytester"]
