"""``blackops keys generate|rotate``, ``blackops verify-receipt``, and the signing parts of
``journal checkpoint``, ``journal consistency`` and ``op receipt`` (docs/audit.md)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blackops.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    Commands,
    acting,
    add_common,
    cli_actor,
    emit,
    strict_json,
)
from domain.errors import InvalidRequest

if TYPE_CHECKING:
    from blackops.audit.checkpoints import CheckpointService
    from journal.locator import StoreLocation
    from journal.store import EventStore
    from replay.notes import SigningKey, VerifierKey
    from replay.verify import SeenLines


def register(commands: Commands) -> None:
    keys = commands.add_parser("keys", help="checkpoint signing keys (C2SP note keys)")
    key_commands = keys.add_subparsers(dest="keys", required=True)
    generate = key_commands.add_parser(
        "generate", help="write a new Ed25519 signing key (mode 0600), print its verifier key"
    )
    generate.add_argument("--name", required=True, help="the log's origin, e.g. example.com/log")
    generate.add_argument("--output", required=True, help="private key file to create")
    generate.add_argument("--json", action="store_true", help="print exactly one JSON document")
    generate.set_defaults(handler=cmd_keys_generate)

    rotate = key_commands.add_parser(
        "rotate",
        help="journal a rotation: the old and new verifier keys, signed with both keys",
    )
    add_common(rotate, app=False)
    acting(rotate)
    rotate.add_argument("--signing-key", required=True, help="the current (old) key file")
    rotate.add_argument("--new-key", required=True, help="the new key file (keys generate)")
    rotate.set_defaults(handler=cmd_keys_rotate)

    verify = commands.add_parser(
        "verify-receipt", help="check a receipt offline against the log's verifier key"
    )
    verify.add_argument("file", help="a receipt JSON file ({entry, index, proof}), - for stdin")
    verify.add_argument(
        "--key",
        required=True,
        action="append",
        help="the log's verifier key (text or file; a witness's cosignature key counts as "
        "--witness-key); repeatable",
    )
    witness_key_option(verify)
    verify.add_argument("--json", action="store_true", help="print exactly one JSON document")
    verify.set_defaults(handler=cmd_verify_receipt)


def witness_key_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--witness-key", action="append", default=[], metavar="K",
        help="a witness whose cosignature the checkpoint must carry (verifier key text or "
        "file); repeatable: a log that signs a fork shows each reader its own tree, and "
        "only a witness every reader requires sees both",
    )  # fmt: skip


def log_and_witness_keys(
    keys: Sequence[str], witness_keys: Sequence[str]
) -> tuple[list[VerifierKey], list[VerifierKey]]:
    """The log keys and the required witnesses' keys of ``--key`` and ``--witness-key``. A
    witness's cosignature key (type 0x04) given as ``--key`` is required as a witness: it
    was silently taken as a log key that signs nothing, and a forked checkpoint verified
    with it given (found by a defect hunt against the operator, stop 37)."""
    from blackops.audit.keys import parse_verifier_key
    from replay.notes import COSIGNATURE_KEY

    given = [parse_verifier_key(text) for text in keys]
    log_keys = [key for key in given if key.key_type != COSIGNATURE_KEY]
    witnesses = [key for key in given if key.key_type == COSIGNATURE_KEY]
    witnesses += [parse_verifier_key(text, "--witness-key") for text in witness_keys]
    return log_keys, witnesses


def signing_key_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--signing-key",
        default=os.environ.get("BLACKOPS_SIGNING_KEY"),
        help="checkpoint signing key file (default: $BLACKOPS_SIGNING_KEY)",
    )


def signing_key_of(args: argparse.Namespace, *, dev: bool) -> tuple[SigningKey | None, Path | None]:
    """``--signing-key`` / ``$BLACKOPS_SIGNING_KEY``; else (``dev``) the development key in
    the state dir, created on first start; else the development key if it exists."""
    from blackops.audit.keys import load_or_create_dev_key, read_signing_key
    from blackops.cli.devtoken import state_dir

    chosen = getattr(args, "signing_key", None)
    if chosen:
        return read_signing_key(chosen), Path(chosen)
    if dev:
        try:
            key, path, _ = load_or_create_dev_key(state_dir())
        except OSError as error:  # a state dir that is a file, a folder not writable
            raise InvalidRequest(
                f"cannot keep the development signing key in {state_dir()}: {error.strerror}"
            ) from None
        return key, path
    existing = state_dir() / "signing-key"
    if existing.exists():
        return read_signing_key(existing), existing
    return None, None


def checkpoint_service(
    store: EventStore, args: argparse.Namespace, *, dev: bool = False
) -> CheckpointService:
    from blackops.audit.checkpoints import CheckpointService
    from blackops.runtime import SystemClock
    from blackops.witness.cosigned import CosignatureBook

    key, path = signing_key_of(args, dev=dev)
    if path is not None and not getattr(args, "signing_key", None):  # the development key
        saved = dev_checkpoint_path(path, store.location)
        service = CheckpointService(store, key, SystemClock(), state_path=saved)
    else:
        service = CheckpointService(store, key, SystemClock(), key_path=path)
    # Receipts and exports carry the cosignatures the witnesses gave any process (A22).
    service.kept_cosignatures = CosignatureBook(store, read_only=True).lines
    return service


def dev_checkpoint_path(key_path: Path, location: StoreLocation) -> Path | None:
    """Where the development key's last checkpoint is saved: one file per journal. One
    state dir serves every store its commands name (the default journal, then another
    ``--store``); a single ``signing-key.checkpoint`` was the first journal's, and the
    second one's signer refused for ever as if its history had been rewritten (found by a
    defect hunt). The journal is named by where it lives (a SQLite file's real path; a
    PostgreSQL host, port, database and schema); ``memory://`` is new in every process:
    nothing saved."""
    import hashlib

    if location.kind == "memory":
        return None
    if location.kind == "sqlite":
        where = "sqlite:" + os.path.realpath(location.settings["SQLITE_DBNAME"])
    else:
        s = location.settings
        where = (
            f"postgresql://{s['POSTGRES_HOST']}:{s['POSTGRES_PORT']}/{s['POSTGRES_DBNAME']}"
            f"?schema={s['POSTGRES_SCHEMA']}"
        )
    tag = hashlib.sha256(where.encode()).hexdigest()[:16]
    return key_path.with_name(f"{key_path.name}.{tag}.checkpoint")


def cmd_keys_generate(args: argparse.Namespace) -> int:
    from blackops.audit.keys import generate, write_signing_key

    key = generate(args.name)
    write_signing_key(args.output, key)
    verifier = key.verifier()
    body = {"name": key.name, "verifierKey": verifier.encode(), "keyId": key.key_id.hex()}
    emit(body, args.json, lambda: verifier.encode())
    return EXIT_OK


def cmd_keys_rotate(args: argparse.Namespace) -> int:
    from blackops.audit.checkpoints import rotate_key
    from blackops.audit.keys import read_signing_key
    from blackops.runtime import SystemClock
    from journal.store import EventStore

    old, new = read_signing_key(args.signing_key), read_signing_key(args.new_key)
    if old.name != new.name:
        raise InvalidRequest("the new key must carry the same name (the log's origin)")
    if old == new:
        raise InvalidRequest("the new key is the old key")
    with EventStore(args.store, create=False) as store:
        done = rotate_key(store, old, new, actor=cli_actor(args), clock=SystemClock())
    emit(done, args.json, lambda: f"rotated: {done['old']} -> {done['new']}")
    return EXIT_OK


def cmd_journal_checkpoint(args: argparse.Namespace) -> int:
    """Sign a checkpoint now (even if nothing is new) and print the signed note."""
    from journal.store import EventStore
    from replay.notes import Checkpoint

    with EventStore(args.store, create=False) as store:
        service = checkpoint_service(store, args)
        if service.key is None:
            raise InvalidRequest(
                "no signing key: give --signing-key FILE or set BLACKOPS_SIGNING_KEY "
                "(blackops keys generate makes one)"
            )
        note = service.sign(force=True)
    assert note is not None
    checkpoint = Checkpoint.parse(note.split("\n\n")[0] + "\n")
    body = {
        "note": note,
        "origin": checkpoint.origin,
        "treeSize": checkpoint.size,
        "root": checkpoint.root.hex(),
    }
    emit(body, args.json, lambda: note.rstrip("\n"))
    return EXIT_OK


def cmd_journal_consistency(args: argparse.Namespace) -> int:
    """The RFC 6962 consistency proof between two tree sizes, one base64 hash a line."""
    from blackops.audit.tree import JournalTree
    from journal.store import EventStore

    with EventStore(args.store, create=False) as store:
        tree = JournalTree(store)
        tree.sync()
        path = proof_lines(tree, args.old_size, args.new_size)
    body = {"from": args.old_size, "to": args.new_size, "proof": path}
    emit(body, args.json, lambda: "\n".join(path) if path else "")
    return EXIT_OK


def proof_lines(tree: Any, old_size: int, new_size: int) -> list[str]:
    import base64

    if not 0 < old_size <= new_size:
        raise InvalidRequest("sizes must satisfy 0 < FROM <= TO")
    if new_size > tree.size:
        raise InvalidRequest(f"the tree has {tree.size} leaves, fewer than {new_size}")
    return [base64.b64encode(h).decode() for h in tree.consistency(old_size, new_size)]


def cmd_op_receipt(args: argparse.Namespace) -> int:
    from blackops.audit.receipts import OPERATION_TERMINAL, receipt_for, terminal_position
    from blackops.cli.common import reads_of
    from journal.store import EventStore

    with EventStore(args.store, create=False) as store:  # first: a missing journal is not made
        reads = reads_of(args)
        position = args.position
        if position is None:
            position = terminal_position(reads.events(args.operation_id), OPERATION_TERMINAL)
        else:
            allowed = {int(e["position"]) for e in reads.events(args.operation_id)}
            if position not in allowed:
                raise InvalidRequest(f"position {position} is not an event of {args.operation_id}")
        receipt = receipt_for(checkpoint_service(store, args), position)
    emit(receipt, args.json, lambda: receipt_text(receipt))
    return EXIT_OK


def receipt_text(receipt: dict[str, Any]) -> str:
    from blackops.jsonbody import render_json

    return render_json(receipt).decode()


def cmd_verify_receipt(args: argparse.Namespace) -> int:
    """Exit 0 only when the receipt verifies: signature, leaf, audit path."""
    from blackops.input_files import open_input, read_stream_at_most
    from blackops.jsonbody import MAX_RAW_BYTES
    from replay.receipts import ReceiptError, verify_receipt

    keys, witnesses = log_and_witness_keys(args.key, args.witness_key)
    try:
        with open_input(args.file) as source:
            raw = read_stream_at_most(source, MAX_RAW_BYTES, args.file)
    except OSError as error:
        raise InvalidRequest(f"cannot read {args.file}: {error.strerror}") from None
    # Strictly: a receipt with a key twice would say one thing to this reader and another
    # to a reader that keeps the first.
    document = strict_json(raw, f"{args.file} is not a JSON receipt")
    try:
        checkpoint = verify_receipt(document, keys, witnesses)
    except ReceiptError as error:
        problem = f"{error.code}: {error}"
        body = {"ok": False, "problem": error.code, "message": str(error)}
        emit(body, args.json, lambda: f"NOT VERIFIED: {problem}")
        return EXIT_ERROR
    body = {
        "ok": True,
        "index": document["index"],
        "origin": checkpoint.origin,
        "treeSize": checkpoint.size,
        "root": checkpoint.root.hex(),
    }
    emit(
        body,
        args.json,
        lambda: (
            f"verified: leaf {document['index']} is in {checkpoint.origin} at tree size "
            f"{checkpoint.size}"
        ),
    )
    return EXIT_OK


def check_signed_export(
    seen: SeenLines, manifest: Any, keys: list[str], report: Any, witness_keys: Sequence[str] = ()
) -> None:
    """``verify --jsonl FILE --key K [--witness-key W]``: the lines `verify_export` read
    (``seen``: the file is not read twice) are in a tree the log signed (and every witness
    named cosigned); a problem is added to ``report`` (kind ``signature``) when they are
    not."""
    from replay.receipts import ReceiptError, verify_signed_export
    from replay.verify import Problem, purged_by_lines

    verifiers, witnesses = log_and_witness_keys(keys, witness_keys)
    found = list(zip(seen.positions, seen.leaves, strict=True))
    try:
        checkpoint = verify_signed_export(found, manifest, verifiers, witnesses)
    except ReceiptError as error:
        first = found[0][0] if found else 0
        report.problems.append(Problem("signature", first, f"{error.code}: {error}"))
        return
    report.tree_heads_checked += 1 if checkpoint.size else 0
    hidden = [position for position, _ in manifest["attestation"]["hidden"]]  # checked above
    purged = purged_by_lines(seen)
    accounted = sum(1 for position in hidden if position in purged)
    report.hidden_leaves = {"purged": accounted, "unaccounted": len(hidden) - accounted}
