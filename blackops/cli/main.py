"""The ``blackops`` command (python-contract §5): serve, worker, op, wf, journal, verify,
replay, retention, projections; and the control plane (docs/resources.md): space,
principal, token, worker, version, deploy, deployment, workflow.

Exit status: 0 success (an operation ``completed``), 1 an error with a taxonomy
code, 2 usage, 3 the operation was rejected, 4 the operation failed. ``--json``
prints exactly one JSON document on stdout, errors included.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from blackops.cli import (
    access,
    audit,
    deploy,
    instances,
    journal,
    operations,
    retention,
    serve,
    witness,
    workflow_resources,
)
from blackops.cli.common import EXIT_ERROR, EXIT_INTERRUPTED, OPENED
from blackops.cli.journal import EXIT_BROKEN_PIPE

#: Each group registers its own commands, in the order ``--help`` lists them.
GROUPS = (
    serve, operations, instances, access, deploy, workflow_resources, journal, retention, audit,
    witness,
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="blackops", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, not at exit: a reader gone is found below
        return code
    except BrokenPipeError:
        # The reader of stdout went away (`| head`): quietly, SIGPIPE's status, as
        # `journal export` does (P34); /dev/null on stdout: no flush error at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit:  # --help, a usage error: what was printed is flushed in main's try
        sys.stdout.flush()
        raise
    from domain.errors import BlackOpsError

    try:
        code: int = args.handler(args)
    except BlackOpsError as error:
        if getattr(args, "json", False):
            import orjson

            sys.stdout.write(orjson.dumps(error.to_body()).decode() + "\n")
        else:
            detail = getattr(error, "detail", "")  # the operator may see the driver's words
            suffix = f" ({detail.strip()})" if detail else ""
            sys.stderr.write(f"blackops: {error.code}: {error.message}{suffix}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:  # Ctrl-C: a line, not a traceback; the shell's status for it
        sys.stderr.write("blackops: interrupted\n")
        return EXIT_INTERRUPTED
    finally:
        while OPENED:
            OPENED.pop().close()
    return code


if __name__ == "__main__":
    sys.exit(main())
