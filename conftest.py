"""Root conftest: the suite's pytest plugin (markers, options, GPU and architecture selection),
and pytester for the plugin's own tests."""

pytest_plugins = ["meddpm.suite.plugin", "pytester"]
