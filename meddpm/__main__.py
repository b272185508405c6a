"""``python -m meddpm`` is ``meddpm-bench``."""

import sys

from meddpm.cli import main

sys.exit(main())
