"""``python -m blackops``: the ``blackops`` command."""

import signal
import sys

try:
    # SIGINT is recorded from here on: a Ctrl-C while the command's modules load raises a
    # KeyboardInterrupt that can be swallowed (inside a finaliser), and `serve` then ran on
    # for ever (CI, stop 34); `serve` and `worker` read the record as a stop asked.
    from blackops.cli.common import record_interrupt

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not one a host chose
        signal.signal(signal.SIGINT, record_interrupt)
    from blackops.cli.main import main
except KeyboardInterrupt:  # Ctrl-C while the command loads: as once it runs (P16)
    sys.stderr.write("blackops: interrupted\n")
    sys.exit(130)

sys.exit(main())
