"""What every command shares: exit codes, ``--json`` output, the application a command acts
on, who acts, and the flags every command takes. Light at import time: the product is
imported when a command runs, not when the parser is built."""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from blackops.application import Application
    from blackops.operations.reads import OperationReads
    from domain.context import Actor

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_REJECTED, EXIT_FAILED = 0, 1, 2, 3, 4
#: Stopped by Ctrl-C (or an interrupted one-shot export): the shell's status for SIGINT.
EXIT_INTERRUPTED = 130
#: The reader of stdout closed it: the shell's status for a writer stopped by SIGPIPE.
EXIT_BROKEN_PIPE = 141
#: A Ctrl-C (SIGINT) came while the command was loading: the KeyboardInterrupt it raises
#: can be swallowed (raised inside a finaliser, "Exception ignored"), and `serve` then ran
#: on for ever (found by CI, stop 34); `serve` and `worker` read this as a stop asked.
INTERRUPTED: list[bool] = []


def record_interrupt(signum: int, frame: object) -> None:
    """SIGINT's handler while the CLI runs: Python's own, plus a record that outlives a
    KeyboardInterrupt swallowed where it was raised."""
    INTERRUPTED.append(True)
    raise KeyboardInterrupt


RESULT_EXIT = {"completed": EXIT_OK, "rejected": EXIT_REJECTED, "failed": EXIT_FAILED}
#: The subparsers of a command group.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class Closable(Protocol):
    def close(self) -> None: ...


#: What a command opened (applications, runtimes); ``main`` closes them when it returns.
OPENED: list[Closable] = []


def emit(document: Any, as_json: bool, human: Callable[[], str]) -> None:
    """``--json``: exactly one JSON document on stdout; else the human lines."""
    write_stdout(json_line(document) + "\n" if as_json else human() + "\n")


class StdoutFailed(Exception):
    """stdout cannot be written (a full disk, a device that fails): ``main`` says so in one
    line. A reader gone (``BrokenPipeError``) is not this: it ends quietly."""

    def __init__(self, error: OSError) -> None:
        super().__init__(f"cannot write stdout ({error.strerror or error})")


@contextlib.contextmanager
def _stdout_failures() -> Iterator[None]:
    """An error of stdout's is `StdoutFailed`; a reader gone stays `BrokenPipeError`."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as error:
        raise StdoutFailed(error) from None


def write_stdout(text: str | bytes) -> None:
    """Write ``text`` (bytes: as they are) on stdout; an error of stdout's is `StdoutFailed`."""
    with _stdout_failures():
        if isinstance(text, bytes):
            sys.stdout.buffer.write(text)
        else:
            sys.stdout.write(text)


def flush_stdout() -> None:
    with _stdout_failures():
        sys.stdout.flush()


def json_line(document: Any) -> str:
    """``document`` as one line of compact JSON. Text that is no Unicode (a file name of
    non-UTF-8 bytes, which Python reads with surrogateescape) is spelled out as ``\\udXXX``,
    as HTTP answers spell it in messages: such a document could not be written, so an
    error's own answer raised a traceback and a finished export was reported as failed
    (found by a defect hunt, stop 35)."""
    from blackops.jsonbody import render_json
    from domain.errors import BlackOpsError

    try:
        return render_json(document).decode()
    except BlackOpsError:  # canonical_json's refusal of a lone surrogate
        return render_json(_spelled_out(document)).decode()


def _spelled_out(value: Any) -> Any:
    from domain.json_text import scalar_text

    if isinstance(value, str):
        return scalar_text(value)
    if isinstance(value, dict):
        return {_spelled_out(key): _spelled_out(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_spelled_out(item) for item in value]
    return value


def app_of(args: argparse.Namespace) -> Application:
    """The ``--app`` application (or a bare one), pointed at ``--store`` if given."""
    from blackops.application import Application
    from blackops.cli.loading import load_application

    target = getattr(args, "app", None) or os.environ.get("BLACKOPS_APP")
    application = load_application(target) if target else Application()
    if args.store:
        application.use_store(args.store)
    OPENED.append(application)
    return application


def reads_of(args: argparse.Namespace) -> Application | OperationReads:
    """What an operation read needs: the ``--app`` application if one is named (its
    types may matter, e.g. an outcome model); else the store alone, without building an
    application (a read command starts in a fraction of the time)."""
    if getattr(args, "app", None) or os.environ.get("BLACKOPS_APP"):
        return app_of(args)
    from blackops.operations.reads import OperationReads
    from blackops.runtime import Runtime

    runtime = Runtime(args.store)
    OPENED.append(runtime)
    return OperationReads(runtime)


def store_app(args: argparse.Namespace) -> Application:
    """A bare application on ``--store`` (or ``$BLACKOPS_STORE``): the control plane
    needs no ``--app``; direct store access is a trusted operator."""
    from blackops.application import Application

    application = Application()
    if args.store:
        application.use_store(args.store)
    OPENED.append(application)
    return application


def cli_actor(args: argparse.Namespace) -> Actor:
    """Direct store access is a trusted operator: ``--actor``, else ``$USER``, else cli."""
    from domain.context import Actor

    chosen = getattr(args, "actor", None)
    if not chosen:
        try:
            chosen = getpass.getuser()
        except (OSError, KeyError):
            chosen = None
    return Actor(chosen or "cli", "cli")


def add_common(parser: argparse.ArgumentParser, *, app: bool = True, nested: bool = False) -> None:
    """``--store`` and ``--json`` on every command; ``--app`` where the app matters.

    ``nested``: a subcommand of a command that takes them too (``worker --store S create``):
    left out, they must not be set, or argparse's subparser overwrites what was given to the
    command with its own defaults (the Worker was created in the default journal and
    ``--json`` was lost; found by a defect hunt, stop 40)."""
    unset: dict[str, Any] = {"default": argparse.SUPPRESS} if nested else {}
    parser.add_argument(
        "--store", help="journal store URL (default: $BLACKOPS_STORE or SQLite)", **unset
    )
    parser.add_argument(
        "--json", action="store_true", help="print exactly one JSON document", **unset
    )
    if app:
        parser.add_argument("--app", help="module:attr of a blackops.Application ($BLACKOPS_APP)")


def acting(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--actor", help="principal id recorded as the actor (default: $USER)")


def strict_json(raw: bytes, refused: str, *, limited: bool = True) -> Any:
    """A file's (or stdin's) bytes as one JSON value, read as strictly as a request body
    (`blackops.jsonbody.parse_value`: no key twice, no NaN, no deeper than documents; at
    most a request body's size unless ``limited`` is false). A refusal is
    ``invalid_request``: ``refused`` (what the input is not), then why."""
    from blackops.jsonbody import MAX_RAW_BYTES, parse_value
    from domain.documents import DocumentError
    from domain.errors import InvalidRequest

    try:
        return parse_value(raw, max_bytes=MAX_RAW_BYTES if limited else None)
    except DocumentError as error:
        raise InvalidRequest(f"{refused}: {error.message}") from None


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86_400:
        raise argparse.ArgumentTypeError("must be a number of seconds above 0, at most 86400")
    return value
