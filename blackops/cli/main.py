"""The ``blackops`` command (python-contract §5): serve, worker, op, wf, journal, verify,
replay, retention, projections; and the control plane (docs/resources.md): space,
principal, token, worker, version, deploy, deployment, workflow.

Exit status: 0 success (an operation ``completed``), 1 an error with a taxonomy
code, 2 usage, 3 the operation was rejected, 4 the operation failed. ``--json``
prints exactly one JSON document on stdout, errors included.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from blackops.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    OPENED,
    StdoutFailed,
    flush_stdout,
    json_line,
    record_interrupt,
    write_stdout,
)

#: Every command, in the order ``--help`` lists them: the module of ``blackops.cli`` that
#: registers it (with its neighbours) and its line in ``--help``. A command imports and
#: builds only its own module's parsers, ``--help`` none (building every parser took about
#: half of ``blackops --help``). tests/cli/test_start_up_imports.py pins this table to what
#: the modules register.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("serve", "HTTP API on uvicorn"),
    "worker": ("serve", "run a worker process; worker create|list: Worker resources"),
    "demo": ("demo", "a short tour: operations, a retry, a workflow, a verified journal"),
    "op": ("operations", "operations"),
    "projections": ("operations", "read models built from the journal"),
    "wf": ("instances", "workflow instances"),
    "space": ("access", "Spaces (tenants)"),
    "principal": ("access", "principals and their roles per Space"),
    "token": ("access", "bearer tokens (kept only as hashes)"),
    "version": ("deploy", "Versions: immutable, content-addressed code of a Worker"),
    "deploy": ("deploy", "upload a folder, verify it, optionally promote it to 100%%"),
    "deployment": ("deploy", "a Worker's Deployment: which Versions, by weight"),
    "workflow": ("workflow_resources", "Workflow resources (create/get/replace/delete)"),
    "journal": ("journal", "the canonical journal"),
    "verify": ("journal", "check the journal's integrity (exit 0 = ok)"),
    "replay": (
        "journal",
        "feed Observed JSONL to an observer; with --check, run recorded workflow histories "
        "through new code",
    ),
    "hold": ("retention", "keep an operation whatever its retention"),
    "release": ("retention", "end a hold (privileged)"),
    "purge": ("retention", "purge what is past retention (OL-10)"),
    "keys": ("audit", "checkpoint signing keys (C2SP note keys)"),
    "verify-receipt": ("audit", "check a receipt offline against the log's verifier key"),
    "witness": ("witness", "run a C2SP tlog-witness for a log"),
    "audit": ("witness", "the auditor's monitor"),
}


def group(name: str) -> ModuleType:
    """The module of ``blackops.cli`` named ``name`` (one with ``register(commands)``)."""
    return importlib.import_module(f"blackops.cli.{name}")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, keeping the last usage error's words (its subparsers are of
    this class too): `_main` writes them as the ``--json`` document."""

    refusal: str | None = None

    def error(self, message: str) -> NoReturn:
        _Parser.refusal = message
        super().error(message)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or (``command``) of that command's module only: the
    others are listed by name and help, as ``--help`` shows them, and take no arguments."""
    parser = _Parser(prog="blackops", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    chosen = COMMANDS[command][0] if command in COMMANDS else None
    registered: set[str] = set()
    for name, (module, line) in COMMANDS.items():
        if command is None or module == chosen:
            if module not in registered:
                registered.add(module)
                group(module).register(commands)
        else:
            commands.add_parser(name, help=line)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    previous = signal.getsignal(signal.SIGINT)
    # Not under a host that chose its own (``python -m blackops`` installs it first).
    if previous is signal.default_int_handler:
        signal.signal(signal.SIGINT, record_interrupt)
    if sys.stdout is None:  # started with stdout closed (`>&-`): what it says goes nowhere
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (the process's own stdout)
    try:
        code = _main(argv)
        flush_stdout()  # here, not at exit: a reader gone is found below
        return code
    except BrokenPipeError:
        # The reader of stdout went away (`| head`): quietly, SIGPIPE's status, as
        # `journal export` does (P34); /dev/null on stdout: no flush error at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except StdoutFailed as failed:
        # A full disk or a device that fails: one line, not a traceback (found by a defect
        # hunt, stop 40); /dev/null on stdout, so exit has nothing left to flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.stderr.write(f"blackops: invalid_request: {failed}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:  # before a command runs (its imports, its parser): as in one
        sys.stderr.write("blackops: interrupted\n")
        return EXIT_INTERRUPTED
    finally:
        if previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous)


def _main(argv: Sequence[str] | None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    command = next((word for word in words if not word.startswith("-")), "")
    _Parser.refusal = None
    try:
        # Only the command's own parsers (none for ``--help`` or an unknown command).
        args = build_parser(command if command in COMMANDS else "").parse_args(words)
    except SystemExit as usage:  # --help, a usage error: what was printed is flushed in main
        if usage.code == EXIT_USAGE and _Parser.refusal is not None and "--json" in words:
            # --json: one document, errors included (P16); argparse's lines stay on stderr
            # (a usage error printed none: found by a spec review, stop 36).
            from domain.errors import InvalidRequest

            write_stdout(json_line(InvalidRequest(_Parser.refusal).to_body()) + "\n")
        flush_stdout()
        raise
    from domain.errors import BlackOpsError

    try:
        code: int = args.handler(args)
    except BlackOpsError as error:
        if getattr(args, "json", False):
            write_stdout(json_line(error.to_body()) + "\n")
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
