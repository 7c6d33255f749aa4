"""``python -m blackops``: the ``blackops`` command."""

import sys

from blackops.cli.main import main

sys.exit(main())
