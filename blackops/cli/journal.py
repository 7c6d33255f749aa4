"""``blackops journal export|checkpoint|schema``, ``blackops verify`` and ``blackops replay``: the
journal as Observed JSONL, its integrity, and observers fed from it."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import stat
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from blackops.cli import audit
from blackops.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Closable,
    Commands,
    acting,
    add_common,
    cli_actor,
    emit,
    flush_stdout,
    strict_json,
    write_stdout,
)
from domain.errors import InvalidRequest


def register(commands: Commands) -> None:
    journal = commands.add_parser("journal", help="the canonical journal")
    journal_commands = journal.add_subparsers(dest="journal", required=True)
    export = journal_commands.add_parser("export", help="write Observed JSONL (OL-11)")
    add_common(export, app=False)
    export.add_argument("--after", type=int, default=0, help="start after this position")
    export.add_argument("--follow", action="store_true", help="keep writing new events")
    export.add_argument("--output", help="file to write (default: stdout)")
    export.add_argument("--manifest", help="manifest file (default: OUTPUT.manifest.json)")
    export.add_argument(
        "--no-manifest", action="store_true", help="a plain stream: no manifest, not recorded"
    )
    export.add_argument("--until", type=int, help="stop at this position")
    export.add_argument("--actor", help="principal id recorded as the exporter (default: $USER)")
    audit.signing_key_option(export)
    export.set_defaults(handler=cmd_journal_export)

    checkpoint = journal_commands.add_parser(
        "checkpoint", help="sign a checkpoint of the journal's tree now and print the note"
    )
    add_common(checkpoint, app=False)
    acting(checkpoint)
    audit.signing_key_option(checkpoint)
    checkpoint.set_defaults(handler=audit.cmd_journal_checkpoint)

    consistency = journal_commands.add_parser(
        "consistency", help="RFC 6962 consistency proof FROM -> TO (one base64 hash a line)"
    )
    add_common(consistency, app=False)
    consistency.add_argument("old_size", metavar="FROM", type=int)
    consistency.add_argument("new_size", metavar="TO", type=int)
    consistency.set_defaults(handler=audit.cmd_journal_consistency)

    schema = journal_commands.add_parser(
        "schema", help="print the JSON Schema of an Observed JSONL line"
    )
    # --json as on every command: the schema is one JSON document either way.
    schema.add_argument("--json", action="store_true", help="print exactly one JSON document")
    schema.set_defaults(handler=cmd_journal_schema)

    verify = commands.add_parser("verify", help="check the journal's integrity (exit 0 = ok)")
    add_common(verify, app=False)
    verify.add_argument("--jsonl", help="verify an exported file offline instead")
    verify.add_argument("--manifest", help="its manifest (default: JSONL.manifest.json)")
    verify.add_argument(
        "--key",
        action="append",
        help="with --jsonl: the log's verifier key (text or file); the manifest's signed "
        "checkpoint must cover the lines (repeatable)",
    )
    audit.witness_key_option(verify)
    verify.set_defaults(handler=cmd_verify)

    replay = commands.add_parser(
        "replay",
        help="feed Observed JSONL to an observer; with --check, run recorded workflow "
        "histories through new code",
    )
    add_common(replay, app=False)
    replay.add_argument("file", nargs="?", help="an Observed JSONL file, or - for stdin")
    replay.add_argument(
        "--follow",
        metavar="URL",
        help="a server's live stream instead of a file: its base URL (with --space for one "
        "Space) or a .../journal/stream URL",
    )
    replay.add_argument("--token", help="bearer token for --follow (default: $BLACKOPS_TOKEN)")
    replay.add_argument("--space", help="with --follow: that Space's stream")
    replay.add_argument("--observer", help="module:attr (callable or .observe)")
    replay.add_argument("--from", dest="after", type=int, default=0, help="resume after N")
    replay.add_argument("--on-duplicate", choices=("stop", "skip"), default="stop")
    replay.add_argument("--state", help="file keeping the last delivered position")
    replay.set_defaults(handler=cmd_replay)
    from blackops.cli.replay_check import check_flags

    check_flags(replay)


def cmd_journal_export(args: argparse.Namespace) -> int:
    """Observed JSONL on stdout or ``--output``, with a manifest, recorded in the journal.

    Progress on a terminal; Ctrl-C ends ``--follow`` (the manifest is written then).
    """
    from blackops.cli.progress import progress
    from blackops.jsonbody import render_json
    from blackops.runtime import SystemClock
    from journal.store import EventStore
    from replay.custody import export_with_manifest
    from replay.export import export_journal

    if args.after < 0:
        raise InvalidRequest("--after must be a position >= 0")
    if args.until is not None and args.until < args.after:
        raise InvalidRequest(f"--until {args.until} is before --after {args.after}")
    if args.json and not args.output:
        raise InvalidRequest("--json needs --output: stdout carries the JSONL")
    if args.json and _same_file(args.output, None) and not _same_file(args.output, os.devnull):
        # --output /dev/stdout (or the file stdout goes to): the lines and the summary
        # document would share stdout (found by a defect hunt, stop 35).
        raise InvalidRequest(
            f"--json needs an --output other than stdout: {args.output} is where stdout "
            "goes, and it carries the JSONL"
        )
    if args.manifest and args.no_manifest:
        raise InvalidRequest("--manifest and --no-manifest contradict each other")
    manifest_path = args.manifest or (f"{args.output}.manifest.json" if args.output else None)
    if args.no_manifest:  # a plain stream, to a file too: no manifest, not recorded
        manifest_path = None
    elif manifest_path is None:
        raise InvalidRequest(
            "an export to stdout needs --manifest FILE (or --no-manifest for a plain stream)"
        )
    # Everything that can fail is tried before the export records itself (P34): the files'
    # folders, the signing key; an export is whole and recorded, or absent.
    # A finished one-shot export replaces --output whole: it is written beside it first, so
    # an export that fails (a journal that no longer verifies) or is interrupted leaves no
    # partial file to be mistaken for a whole one. --follow writes the file itself, for
    # readers who follow; so does an export to a pipe or a device (see _replaced).
    partial = final = None
    if args.output is not None:
        final = None if args.follow else _replaced(args.output)
        if final is None:
            _check_writable("--output", args.output)
        else:  # its folder takes the .partial
            partial = f"{final}.partial"
            _check_writable("--output", final, beside=partial)
    if manifest_path is not None:
        _check_writable("--manifest", manifest_path)
        if _same_file(manifest_path, args.output):
            raise InvalidRequest("the manifest would overwrite the exported lines: name another")
    store = EventStore(args.store, create=False)
    try:
        signer = audit.checkpoint_service(store, args) if manifest_path is not None else None
        # Never over the journal or its signer's files: --output naming the database
        # replaced the journal with its own export (found by a defect hunt, stop 38).
        kept = [*store.location.sqlite_files, *(signer.files if signer is not None else ())]
        if getattr(args, "signing_key", None):  # named, even where no manifest is signed
            kept.append(args.signing_key)
        for flag, target in (("--output", final or args.output), ("--manifest", manifest_path)):
            if target is not None and any(_same_file(target, str(file)) for file in kept):
                raise InvalidRequest(
                    f"{flag} {target} is a file of the journal or its signer: an export never "
                    "writes over one (name another)"
                )
    except BaseException:
        store.close()
        raise
    stop = threading.Event()
    # SIGINT and SIGTERM end --follow cleanly (the manifest is written then) and interrupt
    # a one-shot export at its next page: nothing is written (no file, no manifest) and
    # nothing is recorded. The handlers this process had are restored afterwards.
    signalled: list[int] = []

    opening = [False]  # opening a pipe or a device for writing

    def on_signal(number: int, _frame: object) -> None:
        signalled.append(number)
        stop.set()
        if opening[0]:  # a FIFO nobody reads yet blocks open() for ever: end it there
            raise _Interrupted

    previous = {number: signal.signal(number, on_signal) for number in _STOPPING}
    body: dict[str, Any] = {"output": args.output, "manifest": manifest_path}
    written: bytes | None = None  # the manifest's bytes, once the export is recorded
    try:
        opening[0] = args.output is not None and partial is None
        target = _open_output(partial or args.output) if args.output else sys.stdout.buffer
        opening[0] = False
        try:
            with progress("exporting") as draw:
                report = draw if args.follow else _interruptible(draw, stop)
                if manifest_path is None:
                    summary = export_journal(
                        store, target, after=args.after, follow=args.follow, stop=stop,
                        progress=report, until=args.until,
                    )  # fmt: skip
                    body.update(count=summary.count, lastPosition=summary.last_position)
                else:
                    from blackops.audit.exports import attest

                    assert signer is not None
                    # Attested before the export is recorded: one the signer refuses
                    # (journal_rewritten) leaves no record of an export that is not there.
                    signs = None if signer.key is None else (lambda m: attest(signer, m))
                    manifest = export_with_manifest(
                        store, target, actor=cli_actor(args), clock=SystemClock(),
                        after=args.after, follow=args.follow, stop=stop, progress=report,
                        output_name=args.output, until=args.until, attest=signs,
                    )  # fmt: skip
                    written = render_json(manifest) + b"\n"  # once the file is in place
                    body.update(
                        count=manifest["count"],
                        lastPosition=manifest["lastPosition"],
                        root=manifest["root"],
                        custody=manifest["custody"],
                    )
        except BaseException:
            if partial is not None:
                # A write that failed (a full disk, a file too large) fails the close's
                # flush too: the partial file is removed all the same (it was left behind,
                # with a traceback; found by a defect hunt, stop 40).
                with contextlib.suppress(OSError):
                    target.close()
                os.remove(partial)
            raise
        finally:
            if args.output:
                target.close()
        if partial is not None and final is not None:
            os.replace(partial, final)
        if written is not None and manifest_path is not None:
            # Recorded, and the lines are in place: a manifest that fails now (a full disk)
            # is said as it is, the lines and the record kept.
            try:
                with open(manifest_path, "wb") as out:
                    out.write(written)
            except OSError as error:
                raise InvalidRequest(
                    f"the manifest {manifest_path} could not be written ({error.strerror}); "
                    f"the export is recorded at position {body['custody']['position']}"
                    + (f" and its lines are in {args.output}" if args.output else "")
                ) from None
    except _Interrupted:
        if partial is not None:
            said = "nothing written, nothing recorded"
        elif args.output:  # a pipe or a device: written straight
            said = f"{args.output} took any lines before it; no manifest, nothing recorded"
        else:  # the pages before it already went to stdout
            said = "stdout holds the lines before it; no manifest, nothing recorded"
        sys.stderr.write(f"blackops: export interrupted: {said}\n")
        return 128 + signalled[0] if signalled else EXIT_INTERRUPTED  # 130 SIGINT, 143 SIGTERM
    except BrokenPipeError:
        # The reader of stdout went away (`| head`): stop as a Unix tool does, quietly with
        # SIGPIPE's status; only a lost manifest is worth a line.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        if manifest_path is not None:
            sys.stderr.write("blackops: the reader closed stdout: no manifest, nothing recorded\n")
        return EXIT_BROKEN_PIPE
    except OSError as error:  # the lines could not be written (or put in place)
        where = args.output or "stdout"
        if "custody" in body:  # recorded: only the rename of the whole file failed
            position = body["custody"]["position"]
            said = f"the export is recorded at position {position}; its lines are in {partial}"
        elif partial is not None:
            said = "nothing written, nothing recorded"
        else:
            said = f"{where} took any lines before it; no manifest, nothing recorded"
        raise InvalidRequest(f"cannot write {where} ({error.strerror or error}): {said}") from None
    finally:
        for number, handler in previous.items():  # first: a failing close must not skip it
            signal.signal(number, handler)
        store.close()
    if args.json:
        emit(body, True, str)
    elif args.output:
        sys.stderr.write(f"{body['count']} events written to {args.output}\n")
    return EXIT_OK


def _check_writable(flag: str, path: str, *, beside: str | None = None) -> None:
    """``path`` can be written as a file: not a folder nor a broken link; an existing regular
    file opens for writing (tried without truncating it), a pipe or a device is taken as it
    is (trying would use it up), a new file is created and removed again (its folder is
    writable and its name not too long). ``beside``: the file written next to it first,
    then renamed over it; that one is tried too, so its folder must be writable even when
    ``path`` exists."""
    if os.path.isdir(path):
        raise InvalidRequest(f"{flag} {path} is a folder: name a file")
    if os.path.lexists(path) and not os.path.exists(path):
        raise InvalidRequest(f"{flag} {path} is a link to nothing")
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.exists(path) and beside is None:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return  # a pipe or a device (/dev/stdout): opening it to try would use it up
        try:
            open(path, "ab").close()  # only tried: nothing is truncated
        except OSError as error:
            raise InvalidRequest(f"{flag} {path}: cannot write it ({error.strerror})") from None
        return
    if not os.path.isdir(folder):
        raise InvalidRequest(f"{flag} {path}: no folder {folder}")
    if not os.access(folder, os.W_OK):
        raise InvalidRequest(f"{flag} {path}: the folder {folder} is not writable")
    # Tried, not reasoned about: a name too long for the file system (NAME_MAX counts the
    # ".manifest.json" or ".partial" added to a name that fits), a read-only mount. Checking
    # the folder only let such an export record itself and then fail (found by a defect
    # hunt, stop 35).
    if beside is not None:
        _try_create(flag, path, beside)
    if not os.path.exists(path):
        _try_create(flag, path, path)


def _try_create(flag: str, path: str, name: str) -> None:
    """Create ``name`` (written for ``flag`` ``path``) and remove it again; one that exists
    already must be a file that opens for writing."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if os.path.isdir(name):
            raise InvalidRequest(f"{flag} {path}: {name} is a folder") from None
        if not os.path.exists(name):
            raise InvalidRequest(f"{flag} {path}: {name} is a link to nothing") from None
        if stat.S_ISREG(os.stat(name).st_mode):
            try:
                open(name, "ab").close()  # only tried: nothing is truncated
            except OSError as error:
                raise InvalidRequest(
                    f"{flag} {path}: cannot write {name} ({error.strerror})"
                ) from None
        elif name != path:  # a pipe or device where a temporary goes: it hung the export,
            # then was renamed onto the output (found by review, stop 35)
            raise InvalidRequest(f"{flag} {path}: {name} is not a regular file") from None
        return
    except OSError as error:
        shown = path if name == path else f"{path}: {name}"
        raise InvalidRequest(f"{flag} {shown}: cannot create it ({error.strerror})") from None
    os.close(fd)
    os.remove(name)


def _replaced(output: str) -> str | None:
    """The file a finished one-shot export replaces (its ``.partial`` is renamed onto it):
    ``output`` when it is a regular file or not there yet; a link's target (the link
    stays a link). None for a pipe or a device, written straight as ``--follow`` writes:
    replacing one (a consumer's FIFO, ``/dev/stdout`` as root) destroyed it and wrote a
    file its reader never saw (found by a defect hunt)."""
    try:
        found = os.lstat(output)
    except FileNotFoundError:
        return output
    if stat.S_ISLNK(found.st_mode):
        try:
            target = os.stat(output)
        except OSError:  # a link to nothing: refused by _check_writable
            return output
        # A link to a pipe or a device (/dev/stdout -> /proc/self/fd/1) is written straight;
        # realpath could not name a pipe's target anyway.
        return os.path.realpath(output) if stat.S_ISREG(target.st_mode) else None
    return output if stat.S_ISREG(found.st_mode) else None


def _same_file(path: str, output: str | None) -> bool:
    """Is ``path`` the file the lines go to (``output``, or stdout without one)?"""
    try:
        found = os.stat(path)
        lines = os.stat(output) if output is not None else os.fstat(sys.stdout.fileno())
    except (OSError, ValueError):  # not there yet, or no stdout
        return output is not None and os.path.abspath(path) == os.path.abspath(output)
    return (found.st_dev, found.st_ino) == (lines.st_dev, lines.st_ino)


def _open_output(path: str) -> Any:
    try:
        return open(path, "wb")  # closed by the caller
    except OSError as error:
        raise InvalidRequest(f"cannot write {path}: {error.strerror}") from None


#: The signals that stop an export (--follow: cleanly; otherwise: interrupted).
_STOPPING = (signal.SIGINT, signal.SIGTERM)


class _Interrupted(Exception):
    """A one-shot export stopped before its end (raised between pages)."""


def _interruptible(draw: Callable[[int, int | None], None], stop: threading.Event) -> Any:
    """``draw``, called after each page, that first ends the export once ``stop`` is set: a
    page boundary, before the export is recorded, so an interrupted export records nothing."""

    def report(position: int, last: int | None) -> None:
        if stop.is_set():
            raise _Interrupted
        draw(position, last)

    return report


def cmd_journal_schema(args: argparse.Namespace) -> int:
    """The published schema, byte for byte the file the package ships (and the HTTP API
    serves at ``/v1/schemas/observed-line.json``)."""
    from replay.schema import observed_line_schema_bytes

    write_stdout(observed_line_schema_bytes())
    flush_stdout()
    return EXIT_OK


#: A manifest holds every exported leaf (~80 bytes a line): 13 million lines fit in this.
MANIFEST_MAX_BYTES = 1 << 30


def read_manifest(path: str) -> bytes:
    """An export's manifest, at most `MANIFEST_MAX_BYTES` (a device such as /dev/zero never
    ends: it filled memory; found by a defect hunt, stop 40), refused as soon as its first
    byte that is not white space is no ``{``."""
    from blackops.input_files import read_stream_at_most

    too_large = (
        f"{path} is larger than {MANIFEST_MAX_BYTES} bytes, the most a manifest may be (about "
        "13 million lines): verify such a journal as several --after/--until exports"
    )
    with open(path, "rb") as source:
        head: list[bytes] = []  # white space before the document, kept as it was
        size = 0
        while chunk := source.read(1 << 16):
            head.append(chunk)
            size += len(chunk)
            if size > MANIFEST_MAX_BYTES:
                raise InvalidRequest(too_large)
            if chunk.strip():
                break
        if not (head and head[-1].lstrip().startswith(b"{")):  # at once, not after a GiB
            raise InvalidRequest(f"{path} is not a JSON manifest: it is no JSON object")
        try:
            rest = read_stream_at_most(source, MANIFEST_MAX_BYTES - size, path)
        except MemoryError:
            raise InvalidRequest(f"{path} is too large to read as a manifest") from None
        except OSError as error:
            if error.errno != errno.EFBIG:
                raise
            raise InvalidRequest(too_large) from None
    return b"".join(head) + rest


def cmd_verify(args: argparse.Namespace) -> int:
    """Exit 0 only when everything verifies (python-contract §5)."""
    from journal.store import EventStore
    from replay.observed import ObservedLineError, read_lines
    from replay.verify import SeenLines, verify_export, verify_store

    if (args.key or args.witness_key) and not args.jsonl:
        raise InvalidRequest("--key goes with --jsonl (a live journal is checked directly)")
    if args.witness_key and not args.key:
        raise InvalidRequest("--witness-key goes with --key (the log's key)")
    if args.jsonl:
        manifest_path = args.manifest or f"{args.jsonl}.manifest.json"
        try:
            # Strictly (no key twice): the manifest is what every line is checked against;
            # its size grows with the journal (a leaf is ~80 bytes: 13 million lines a GiB).
            refused = f"{manifest_path} is not a JSON manifest"
            manifest = strict_json(read_manifest(manifest_path), refused, limited=False)
            seen = SeenLines() if args.key else None  # the signed check's, in the same pass
            with open(args.jsonl, "rb") as lines:
                report = verify_export(read_lines(lines), manifest, seen)
            if report.ok and seen is not None:
                audit.check_signed_export(seen, manifest, args.key, report, args.witness_key)
        except OSError as unreadable:
            raise InvalidRequest(
                f"cannot read {unreadable.filename}: {unreadable.strerror}"
            ) from None
        except ObservedLineError as bad:
            raise InvalidRequest(f"{args.jsonl}: {bad}") from None
    else:
        with EventStore(args.store, create=False) as store:
            report = verify_store(store)
    body = report.to_dict()

    def human() -> str:
        if report.ok:
            size = report.tree_size
            said = f"verified: {report.events} events, tree size {size}, root {report.root}"
            hidden = report.hidden_leaves or {}
            if hidden.get("purged"):
                said += f"; {hidden['purged']} purged events of the range, as its tombstones say"
            if hidden.get("unaccounted"):
                said += (
                    f"; {hidden['unaccounted']} more events of the range are not in the file "
                    "(another Space's, or taken out: in the signed log, but hashes only, so "
                    "nothing about them is verified)"
                )
            return said
        first = report.problems[0]
        return f"NOT VERIFIED: {first.kind} at position {first.position}: {first.message}"

    emit(body, args.json, human)
    return EXIT_OK if report.ok else EXIT_ERROR


def cmd_replay(args: argparse.Namespace) -> int:
    from pathlib import Path

    from blackops.cli.loading import load_object
    from blackops.cli.progress import progress
    from journal.backend_common import MAX_POSITION
    from replay.observed import ObservedEvent, ObservedLineError, read_lines
    from replay.replayer import (
        Observer,
        OnDuplicate,
        ReplayStopped,
        StateNotSaved,
        deliver_to,
        read_state,
        replay,
        state_temporary,
    )

    if args.check:
        from blackops.cli.replay_check import cmd_replay_check

        return cmd_replay_check(args)
    if args.observer is None:
        raise InvalidRequest("replay needs --observer (or --check)")
    if (args.file is None) == (args.follow is None):
        raise InvalidRequest("replay needs a FILE (or -) or --follow URL, not both")
    if args.follow is None and (args.token or args.space):
        raise InvalidRequest("--token and --space go with --follow")
    target = load_object(args.observer, "--observer")
    if isinstance(target, type):
        target = target()  # a class: one fresh observer
    if not isinstance(target, Observer) and not callable(target):
        raise InvalidRequest(f"{args.observer} is neither callable nor has observe(event)")
    if not 0 <= args.after <= MAX_POSITION:
        raise InvalidRequest(f"--from must be a position from 0 to {MAX_POSITION}")
    state = Path(args.state) if args.state else None
    saved = 0
    if state is not None:  # before anything is delivered: its position must be keepable
        # saved as .tmp, then renamed: both names are tried
        _check_writable("--state", str(state), beside=str(state_temporary(state)))
        try:
            saved = read_state(state)
        except ValueError as unreadable:
            raise InvalidRequest(f"--state: {unreadable}") from None
    after = max(args.after, saved)
    failures: list[tuple[int, BaseException]] = []

    def observe(event: ObservedEvent) -> object:
        try:
            return deliver(event)
        except KeyboardInterrupt:  # the user's Ctrl-C, not the observer's failure (P16)
            raise
        except BaseException as error:  # SystemExit, CancelledError too: one document (P16)
            failures.append((event.position, error))
            raise

    deliver = deliver_to(target)
    source: Iterable[bytes]
    opened: Closable  # closed however the replay ends
    checkpoint_every = 1000
    if args.follow is not None:
        from blackops.cli.follow import FollowedStream

        source = opened = FollowedStream(args.follow, args.token, args.space, after)
        checkpoint_every = 100  # a live stream may run for ever: save the position often
    else:
        from blackops.input_files import open_input

        try:
            opened = open_input(args.file)
        except OSError as unreadable:
            raise InvalidRequest(f"cannot read {args.file}: {unreadable.strerror}") from None
        source = read_lines(opened)  # each line at most an event's longest
    on_duplicate: OnDuplicate = "skip" if args.on_duplicate == "skip" else "stop"
    try:
        with progress("replaying") as report:
            result = replay(
                source, observe, after=after, on_duplicate=on_duplicate,
                state_file=state, checkpoint_every=checkpoint_every,
                progress=lambda position: report(position, None),
            )  # fmt: skip
    except ReplayStopped as stopped:
        message = str(stopped)
        body = {**stopped.report.to_dict(), "stopped": message}
        emit(body, args.json, lambda: f"replay stopped: {message}")
        return EXIT_ERROR
    except ObservedLineError as bad:
        raise InvalidRequest(str(bad)) from None
    except StateNotSaved as unsaved:  # a full disk, a folder put where it goes meanwhile
        raise InvalidRequest(f"--state: {unsaved}") from None
    except BaseException as raised:
        if not failures or isinstance(raised, KeyboardInterrupt):
            raise
        position, error = failures[0]
        # The observer's own failure: named in one line (its message may be anything; the
        # state file, when given, keeps the last event it took).
        message = f"the observer raised {type(error).__name__} at position {position}: {error}"
        emit(
            {"stopped": message, "position": position},
            args.json,
            lambda: f"replay stopped: {message}",
        )
        return EXIT_ERROR
    finally:
        opened.close()
    emit(
        result.to_dict(),
        args.json,
        lambda: f"{result.delivered} events delivered, last position {result.last_position}",
    )
    return EXIT_OK
