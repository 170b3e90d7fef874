"""``python -m cl_suites.cli``: the ``cl-suites`` command."""

import sys

from cl_suites.cli import main

sys.exit(main())
