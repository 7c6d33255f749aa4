"""``blackops hold``, ``release`` and ``purge`` (OL-10, DW-RET-1): retention from the shell."""

from __future__ import annotations

import argparse

from blackops.cli.common import EXIT_OK, Commands, acting, add_common, app_of, cli_actor, emit


def register(commands: Commands) -> None:
    for name, handler, summary in (
        ("hold", cmd_hold, "keep an operation whatever its retention"),
        ("release", cmd_release, "end a hold (privileged)"),
    ):
        retention = commands.add_parser(name, help=summary)
        add_common(retention)
        retention.add_argument("operation_id")
        retention.add_argument("--reason", required=True)
        acting(retention)
        retention.set_defaults(handler=handler)

    purge = commands.add_parser("purge", help="purge what is past retention (OL-10)")
    add_common(purge)
    purge.add_argument("--dry-run", action="store_true", help="list what would go")
    purge.add_argument(
        "--operation",
        metavar="OPERATION_ID",
        help="purge this terminal, unheld operation now, whatever its retention (a "
        "privileged actor; give the --reason)",
    )
    purge.add_argument("--reason", default=None, help="why (default: retention)")
    acting(purge)
    purge.set_defaults(handler=cmd_purge)


def cmd_hold(args: argparse.Namespace) -> int:
    application = app_of(args)
    hold = application.hold(args.operation_id, reason=args.reason, actor=cli_actor(args))
    emit({"operationId": args.operation_id, "hold": hold}, args.json, lambda: "held")
    return EXIT_OK


def cmd_release(args: argparse.Namespace) -> int:
    application = app_of(args)
    application.release(args.operation_id, reason=args.reason, actor=cli_actor(args))
    emit({"operationId": args.operation_id, "released": True}, args.json, lambda: "released")
    return EXIT_OK


def cmd_purge(args: argparse.Namespace) -> int:
    """Retention is the --app's (its Application and operation types' Retention)."""
    application = app_of(args)
    if args.operation is not None:
        if args.reason is None:  # an explicit purge says why, in the tombstone
            from domain.errors import InvalidRequest

            raise InvalidRequest("purge --operation needs a --reason")
        report = application.purge_operation(
            args.operation, actor=cli_actor(args), reason=args.reason, dry_run=args.dry_run
        )
    else:
        report = application.purge(
            actor=cli_actor(args), reason=args.reason or "retention", dry_run=args.dry_run
        )

    def human() -> str:
        verb = "would purge" if report.dry_run else "purged"
        lines = [f"{verb} {i.what} {i.operation_id} (due {i.due_at})" for i in report.items]
        lines += [f"held, kept: {operation_id}" for operation_id in report.held]
        lines += [
            f"{verb} workflow instance {i['workflow']}/{i['id']} ({i['status']}, due {i['dueAt']})"
            for i in report.instances
        ]
        return "\n".join(lines) or "nothing is due"

    emit(report.to_dict(), args.json, human)
    return EXIT_OK
