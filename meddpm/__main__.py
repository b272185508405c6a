"""``python -m meddpm`` is ``meddpm-bench``."""

import sys

from meddpm.bench.cli import main

sys.exit(main())
