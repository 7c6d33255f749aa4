"""``blackops witness serve|key`` (run a C2SP tlog-witness) and ``blackops audit watch`` (the
auditor's monitor); docs/audit.md, "Witnesses and monitors"."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from blackops.cli.common import EXIT_OK, Commands, emit
from blackops.input_files import KEY_FILE_BYTES, read_text_at_most

if TYPE_CHECKING:
    from blackops.audit.checkpoints import CheckpointService
    from blackops.witness.push import WitnessPusher, WitnessTarget
    from replay.notes import SigningKey, VerifierKey


def register(commands: Commands) -> None:
    witness = commands.add_parser("witness", help="run a C2SP tlog-witness for a log")
    actions = witness.add_subparsers(dest="witness_command", required=True)
    serve = actions.add_parser("serve", help="serve POST /add-checkpoint")
    serve.add_argument("--key", required=True, help="the witness's private key file")
    serve.add_argument(
        "--log", action="append", required=True, metavar="VERIFIER_KEY",
        help="a log's verifier key (text, or a file holding it); repeatable",
    )  # fmt: skip
    serve.add_argument(
        "--state", type=Path, help="state directory (default $BLACKOPS_HOME/witness)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8081)
    serve.add_argument("--json", action="store_true", help="print exactly one JSON document")
    serve.set_defaults(handler=cmd_serve)
    key = actions.add_parser("key", help="print the cosignature verifier key of a key file")
    key.add_argument("--key", required=True, help="the witness's private key file")
    key.add_argument("--json", action="store_true", help="print exactly one JSON document")
    key.set_defaults(handler=cmd_key)
    generate = actions.add_parser("generate-key", help="write a new witness key (type 0x04)")
    generate.add_argument("--name", required=True, help="the witness's name, e.g. w1.example")
    generate.add_argument("--output", required=True, type=Path)
    generate.add_argument("--json", action="store_true", help="print exactly one JSON document")
    generate.set_defaults(handler=cmd_generate)

    audit = commands.add_parser("audit", help="the auditor's monitor")
    audit_actions = audit.add_subparsers(dest="audit_command", required=True)
    watch = audit_actions.add_parser(
        "watch", help="check the log's checkpoint against the one saved last time"
    )
    source = watch.add_mutually_exclusive_group(required=True)
    source.add_argument("--url", help="the service's base URL (GET /v1/checkpoint)")
    source.add_argument("--store", help="the journal store URL (direct read)")
    watch.add_argument("--key", required=True, help="the log's verifier key (text or file)")
    watch.add_argument("--state", required=True, type=Path, help="the monitor's state file")
    watch.add_argument(
        "--witness-key", action="append", default=[], metavar="K",
        help="a witness whose cosignature is required (verifier key text or file); repeatable",
    )  # fmt: skip
    watch.add_argument("--token", help="bearer token for --url ($BLACKOPS_TOKEN)")
    watch.add_argument("--follow", action="store_true", help="keep watching")
    watch.add_argument("--interval", type=float, default=5.0, help="seconds between checks")
    watch.add_argument(
        "--cosignature-grace", type=float, default=30.0, metavar="SECONDS",
        help="wait this long for a young checkpoint's required cosignatures (default 30)",
    )  # fmt: skip
    watch.add_argument("--json", action="store_true", help="one JSON document per check")
    watch.set_defaults(handler=cmd_watch)


def _verifier(value: str, flag: str) -> VerifierKey:
    from blackops.audit.keys import parse_verifier_key

    return parse_verifier_key(value, flag)


def _signing_key(path: str) -> SigningKey:
    from domain.errors import InvalidRequest
    from replay.notes import NoteError, SigningKey

    try:
        return SigningKey.parse(read_text_at_most(path, KEY_FILE_BYTES))
    except (NoteError, OSError, UnicodeDecodeError) as error:  # as `keys rotate` reads keys
        raise InvalidRequest(f"{path} is not a private key file: {error}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    from blackops.cli.devtoken import state_dir
    from blackops.witness.server import Witness, describe, make_server
    from blackops.witness.state import WitnessState
    from domain.errors import InvalidRequest

    if not 0 <= args.port <= 65535:
        raise InvalidRequest(f"--port must be from 0 to 65535, not {args.port}")
    # Before any folder is made.
    key, logs = _signing_key(args.key), [_verifier(v, "--log") for v in args.log]
    # In the state dir ($BLACKOPS_HOME, else ./.blackops) as every other default (H13).
    state = Path(args.state or state_dir() / "witness")
    try:
        kept = WitnessState(state)
    except OSError as error:  # a file in its place, a folder that cannot be made
        raise InvalidRequest(
            f"--state {state}: cannot keep the witness's state there ({error.strerror})"
        ) from None
    witness = Witness(key, logs, kept)
    try:
        server = make_server(witness, args.host, args.port)
    except OSError as error:  # in use, not this host's address, a name that does not resolve
        # The start-up refusals are one line and one --json document, as serve's (P16);
        # they were tracebacks (found by a defect hunt, stop 38).
        raise InvalidRequest(
            f"cannot listen on {args.host}:{args.port}: {error.strerror or error}"
        ) from None
    url = f"http://{args.host}:{server.server_address[1]}"
    info = describe(witness, url)
    emit(
        dict(info),
        args.json,
        lambda: (
            f"BlackOps witness {info['name']} at {url}/add-checkpoint\n"
            f"  verifier key {info['verifierKey']}\n"
            f"  logs         {', '.join(info['logs'])}\n"
            f"  state        {info['state']}"
        ),
    )
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return EXIT_OK


def cmd_key(args: argparse.Namespace) -> int:
    from replay.cosignature import cosigner_key

    key = cosigner_key(_signing_key(args.key))
    verifier = key.verifier()
    document = {"name": key.name, "verifierKey": verifier.encode(), "keyId": key.key_id.hex()}
    emit(document, args.json, lambda: verifier.encode())
    return EXIT_OK


def cmd_generate(args: argparse.Namespace) -> int:
    """As ``keys generate``, with its checks and its writing: a name no key may carry (one
    not UTF-8, from a non-UTF-8 argv) and an --output that cannot be created are
    ``invalid_request`` (they were tracebacks: found by a defect hunt, stop 35)."""
    from blackops.audit.keys import write_signing_key
    from domain.errors import InvalidRequest
    from replay.notes import COSIGNATURE_KEY, NoteError, SigningKey, valid_key_name

    if not valid_key_name(args.name):
        raise InvalidRequest("a key name is non-empty, without spaces or '+' (e.g. w1.example)")
    try:
        key = SigningKey.generate(args.name, COSIGNATURE_KEY)
    except NoteError as error:
        raise InvalidRequest(str(error)) from None
    write_signing_key(args.output, key)  # never over an existing file; mode 0600
    verifier = key.verifier()
    document = {"name": key.name, "verifierKey": verifier.encode(), "keyId": key.key_id.hex()}
    emit(document, args.json, lambda: verifier.encode())
    return EXIT_OK


def cmd_watch(args: argparse.Namespace) -> int:
    import math

    from blackops.witness.monitor import run_watch
    from domain.errors import InvalidRequest

    # A usage error before the first check: a negative or NaN interval failed after it,
    # with a traceback (found by a defect hunt, stop 38).
    if not 0 < args.interval < math.inf:
        raise InvalidRequest("--interval must be a finite number of seconds above 0")
    if not 0 <= args.cosignature_grace < math.inf:
        raise InvalidRequest("--cosignature-grace must be a finite number of seconds, 0 or more")
    witnesses = [_verifier(k, "--witness-key") for k in args.witness_key]
    return run_watch(args, _verifier(args.key, "--key"), witnesses)


def witness_options(parser: argparse.ArgumentParser) -> None:
    """``--witness URL=VERIFIER_KEY`` on ``serve`` and ``worker`` (decisions T6)."""
    parser.add_argument(
        "--witness", action="append", default=[], metavar="URL=VERIFIER_KEY",
        help="push each signed checkpoint to this C2SP witness; repeatable",
    )  # fmt: skip


def start_witnesses(
    checkpoints: CheckpointService, args: argparse.Namespace, *, publish: bool
) -> WitnessPusher | None:
    """The pusher of this process: with ``--witness``, or (``publish``: the HTTP server) to
    publish the cosignatures another process collected. None when there is nothing to do."""
    if not args.witness and not publish:
        return None  # before the imports: the pusher's HTTP client is ~7 MB resident
    from blackops.witness.service import start_witnessing

    targets = witness_targets(args)
    if not targets and not publish:
        return None
    return start_witnessing(checkpoints, targets)


def witness_targets(args: argparse.Namespace) -> list[WitnessTarget]:
    """The ``--witness`` targets; ``invalid_request`` for one that is not URL=VERIFIER_KEY
    (checked before ``serve`` or ``worker`` creates anything)."""
    if not args.witness:
        return []  # before the import: the pusher's HTTP client is ~7 MB resident
    from blackops.witness.push import WitnessTarget
    from domain.errors import InvalidRequest

    try:
        return [WitnessTarget.parse(text) for text in args.witness]
    except ValueError as error:
        raise InvalidRequest(f"--witness: {error}") from None
