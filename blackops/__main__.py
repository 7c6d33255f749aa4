"""``python -m blackops``: the ``blackops`` command."""

import sys

try:
    from blackops.cli.main import main
except KeyboardInterrupt:  # Ctrl-C while the command loads: as once it runs (P16)
    sys.stderr.write("blackops: interrupted\n")
    sys.exit(130)

sys.exit(main())
