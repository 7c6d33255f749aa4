"""The CLI starts fast: ``--help`` and the read commands import neither FastAPI nor uvicorn
nor the control plane nor the application nor the metrics and tracing libraries (command
modules import what a command needs when it runs). Checked in a fresh interpreter by what
lands in ``sys.modules``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = (
    "fastapi",
    "uvicorn",
    "blackops.control",
    "blackops.application",
    "blackops.http",
    "prometheus_client",
    "opentelemetry",
    "blackops.observability.metrics",
)


def loaded_after(argv: list[str], cwd: Path, prefixes: tuple[str, ...] | str = HEAVY) -> list[str]:
    probe = (
        "import sys, contextlib, io, json\n"
        "from blackops.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        main({argv!r})\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=cwd
    )
    found: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_help_imports_nothing_heavy(tmp_path: Path) -> None:
    assert loaded_after(["--help"], tmp_path) == []
    assert loaded_after(["op", "--help"], tmp_path) == []


@pytest.mark.parametrize("command", ["status", "events", "outcome"])
def test_reading_an_operation_imports_nothing_heavy(tmp_path: Path, command: str) -> None:
    from blackops import Application

    store = f"sqlite:///{tmp_path}/j.sqlite3"
    with Application(store) as app:
        app.operation("t.echo")(lambda ctx, params: params)
        operation_id = app.submit("t.echo", {}, actor="t", tenant="acme")
    assert loaded_after(["op", command, operation_id, "--json", "--store", store], tmp_path) == []


def test_the_probe_sees_a_heavy_import(tmp_path: Path) -> None:
    """The check can fail: a command that needs the application (purge applies its
    retention policies) does import it, and the probe reports that."""
    store = f"sqlite:///{tmp_path}/j.sqlite3"
    found = loaded_after(["purge", "--dry-run", "--store", store, "--json"], tmp_path)
    assert "blackops.application" in found


def test_help_and_each_command_build_only_their_own_parsers(tmp_path: Path) -> None:
    """``--help`` imports no command module; a command, only its own (building every
    parser was about half of ``blackops --help``)."""
    assert loaded_after(["--help"], tmp_path, "blackops.cli.") == [
        "blackops.cli.common",
        "blackops.cli.main",
    ]
    op = loaded_after(["op", "--help"], tmp_path, "blackops.cli.")
    assert "blackops.cli.operations" in op and "blackops.cli.serve" not in op


def test_the_command_table_is_what_the_modules_register() -> None:
    """``main.COMMANDS`` (names, order, help lines, modules) against every module's
    ``register``, and ``blackops --help`` against the parser of every command."""
    import argparse

    from blackops.cli import main

    registered: dict[str, tuple[str, str]] = {}
    for module in dict.fromkeys(module for module, _ in main.COMMANDS.values()):
        parser = argparse.ArgumentParser(prog="blackops")
        commands = parser.add_subparsers(dest="command", required=True)
        main.group(module).register(commands)
        for action in commands._choices_actions:
            registered[action.dest] = (module, str(action.help))
    assert list(registered.items()) == list(main.COMMANDS.items())
    assert main.build_parser("").format_help() == main.build_parser().format_help()


WORKER_START = """
import argparse, json, sys
from blackops.application import Application
from blackops.cli.serve import start_signer
from blackops.cli.witness import start_witnesses
app = Application(sys.argv[1])
args = argparse.Namespace(checkpoint_seconds=0, signing_key=None, witness=[])
service, _ = start_signer(app, args, dev=sys.argv[2] == "dev")
start_witnesses(service, args, publish=False)
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("cryptography", "httpx")))))
"""


@pytest.mark.parametrize("dev", [False, True])
def test_a_worker_that_signs_and_pushes_nothing_loads_no_crypto_or_http_client(
    tmp_path: Path, dev: bool
) -> None:
    """`blackops worker` without a signing key or --witness starts its checkpoint service
    and witness pusher as no-ops: they imported cryptography and httpx (with its rich and
    pygments) anyway, 13 MB of the worker's 51 MB resident. With the development key
    (`serve`, dev) it signs, so cryptography is loaded: the probe sees it."""
    store = f"sqlite:///{tmp_path}/j.sqlite3"
    done = subprocess.run(
        [sys.executable, "-c", WORKER_START, store, "dev" if dev else "worker"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
        env={**os.environ, "BLACKOPS_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    assert not any(m.startswith("httpx") for m in loaded)
    assert any(m.startswith("cryptography") for m in loaded) is dev, loaded


SIGINT_PROBE = """
import runpy, signal, sys
import blackops.cli.main as entry
sys.argv = ["blackops", "--help"]
def spy(argv=None):
    handler = signal.getsignal(signal.SIGINT)
    print("ignored" if handler == signal.SIG_IGN else getattr(handler, "__name__", handler))
    return 0
entry.main = spy
try:
    runpy.run_module("blackops", run_name="__main__")
except SystemExit:
    pass
"""


@pytest.mark.parametrize("ignored", [False, True])
def test_python_m_blackops_records_ctrl_c_unless_its_host_chose_otherwise(
    tmp_path: Path, ignored: bool
) -> None:
    """`python -m blackops` records a Ctrl-C from its first import (a KeyboardInterrupt
    swallowed while the command loads still stops serve); a host that started it with
    SIGINT ignored (`cmd &` in a script) keeps that choice (it was overridden: found by
    review, stop 35)."""
    import signal

    def ignore() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    done = subprocess.run(
        [sys.executable, "-c", SIGINT_PROBE], capture_output=True, text=True, check=True,
        cwd=Path(__file__).resolve().parents[2], preexec_fn=ignore if ignored else None,
    )  # fmt: skip
    handler = done.stdout.strip().splitlines()[-1]
    assert handler == ("ignored" if ignored else "record_interrupt"), handler
