"""``blackops space|principal|token ...``: Spaces, principals with roles, bearer tokens (kept
only as hashes), straight on the store (a trusted operator)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from blackops.cli.common import EXIT_OK, Commands, acting, add_common, cli_actor, emit, store_app
from blackops.cli.serve import DEV_SPACE

if TYPE_CHECKING:
    from blackops.application import Application
    from domain.context import Actor


def register(commands: Commands) -> None:
    def group(name: str, summary: str) -> Commands:
        parser = commands.add_parser(name, help=summary)
        return parser.add_subparsers(dest=name, required=True)

    def command(
        within: Commands,
        name: str,
        summary: str,
        handler: Callable[..., int],
        *,
        space: bool = False,
        actor: bool = False,
    ) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = within.add_parser(name, help=summary)
        add_common(parser, app=False)
        if space:
            parser.add_argument("--space", required=True, help="the Space")
        if actor:
            acting(parser)
        parser.set_defaults(handler=handler)
        return parser

    spaces = group("space", "Spaces (tenants)")
    create = command(spaces, "create", "create a Space", cmd_space_create, actor=True)
    create.add_argument("name")
    command(spaces, "list", "every Space", cmd_space_list)

    principals = group("principal", "principals and their roles per Space")
    create = command(principals, "create", "create a principal", cmd_principal_create, actor=True)
    create.add_argument("id")
    create.add_argument("--system", action="store_true", help="every Space, the whole journal")
    grant = command(
        principals, "grant", "give a role in a Space", cmd_principal_grant, space=True, actor=True
    )
    grant.add_argument("id")
    grant.add_argument("--role", required=True, help="reader, operator, deployer or admin")
    revoke = command(
        principals, "revoke", "take the role away", cmd_principal_revoke, space=True, actor=True
    )
    revoke.add_argument("id")
    command(principals, "list", "principals with a role", cmd_principal_list, space=True)

    tokens = group("token", "bearer tokens (kept only as hashes)")
    issue = command(tokens, "issue", "issue a token: printed once", cmd_token_issue, actor=True)
    issue.add_argument("id", help="the principal")
    issue.add_argument("--label", help="what the token is for")
    revoke = command(tokens, "revoke", "revoke a token", cmd_token_revoke, actor=True)
    revoke.add_argument("id", help="the principal")
    revoke.add_argument("token_id", help="the token id (16 hex digits)")


def _spaceless(application: Application, actor: Actor) -> dict[str, Any]:
    """The context of an access change that belongs to no Space (a principal, a token):
    no Space's journal lines show it."""
    return {**application.access_context(actor, DEV_SPACE), "tenant": None}


def cmd_space_create(args: argparse.Namespace) -> int:
    application = store_app(args)
    ctx = application.access_context(cli_actor(args), args.name)
    space = application.access.create_space(args.name, ctx)
    emit(space, args.json, lambda: f"space {space['name']} created")
    return EXIT_OK


def cmd_space_list(args: argparse.Namespace) -> int:
    names = store_app(args).access.spaces()
    emit({"items": [{"name": n} for n in names]}, args.json, lambda: "\n".join(names))
    return EXIT_OK


def _principal_line(record: dict[str, Any]) -> str:
    roles = ", ".join(f"{space}={role}" for space, role in record["roles"].items())
    system = " (system)" if record["system"] else ""
    return f"{record['id']}{system}: {roles or 'no roles'}"


def cmd_principal_create(args: argparse.Namespace) -> int:
    application = store_app(args)
    ctx = _spaceless(application, cli_actor(args))
    record = application.access.create_principal(args.id, ctx, system=args.system)
    emit(record, args.json, lambda: _principal_line(record))
    return EXIT_OK


def cmd_principal_grant(args: argparse.Namespace) -> int:
    application = store_app(args)
    ctx = application.access_context(cli_actor(args), args.space)
    record = application.access.grant(args.id, args.space, args.role, ctx)
    emit(record, args.json, lambda: _principal_line(record))
    return EXIT_OK


def cmd_principal_revoke(args: argparse.Namespace) -> int:
    application = store_app(args)
    ctx = application.access_context(cli_actor(args), args.space)
    record = application.access.revoke(args.id, args.space, ctx)
    emit(record, args.json, lambda: _principal_line(record))
    return EXIT_OK


def cmd_principal_list(args: argparse.Namespace) -> int:
    items = store_app(args).access.principals(args.space)
    lines = [f"{row['id']:<32} {row['role']}" for row in items]
    emit({"items": items}, args.json, lambda: "\n".join(lines) or "no principals")
    return EXIT_OK


def cmd_token_issue(args: argparse.Namespace) -> int:
    """The plaintext is printed here, once; the journal keeps only its hash."""
    application = store_app(args)
    ctx = _spaceless(application, cli_actor(args))
    token, record = application.access.issue_token(args.id, ctx, label=args.label)
    if not args.json:
        sys.stderr.write(
            f"token {record['tokenId']} of {args.id} (shown once; only its hash is kept)\n"
        )
    emit({**record, "token": token}, args.json, lambda: token)
    return EXIT_OK


def cmd_token_revoke(args: argparse.Namespace) -> int:
    application = store_app(args)
    ctx = _spaceless(application, cli_actor(args))
    record = application.access.revoke_token(args.id, args.token_id, ctx)
    emit(record, args.json, lambda: f"token {args.token_id} of {args.id} revoked")
    return EXIT_OK
