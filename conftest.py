"""Root conftest: the suite's pytest plugin (markers, options, GPU and architecture selection)."""

pytest_plugins = ["meddpm.suite.plugin"]
