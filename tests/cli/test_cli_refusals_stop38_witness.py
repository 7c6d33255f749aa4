"""``witness serve`` and ``audit watch`` refuse what they cannot work with before they begin,
as one ``invalid_request`` document (exit 1) under ``--json``, not a traceback or a retry
for ever (found by a defect hunt, stop 38): a port out of range, one in use, a host that does
not resolve, a state folder that is a file or cannot be made; a watch's interval that is not
a positive finite number, a ``--url`` that is not http(s)://host, a state file it cannot
save (T7: the monitor's own file is ``invalid_request``, not an unreadable log)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_refusals import refused, run_in

from blackops import Application
from replay.notes import SigningKey


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    key = SigningKey.generate("w.example")
    (tmp_path / "w.key").write_text(key.encode() + "\n")
    (tmp_path / "log.pub").write_text(SigningKey.generate("example.com/log").verifier().encode())
    (tmp_path / "a-file").write_text("")
    return tmp_path


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--port", "-1"], "--port must be from 0 to 65535"),
        (["--port", "70000"], "--port must be from 0 to 65535"),
        (["--port", "{busy}"], "cannot listen on 127.0.0.1:"),
        (["--port", "0", "--host", "999.1.1.1"], "cannot listen on 999.1.1.1:0"),
        (["--port", "0", "--state", "a-file"], "--state a-file: cannot keep"),
        (["--port", "0", "--state", "/proc/nope"], "--state /proc/nope: cannot keep"),
    ],
    ids=["negative-port", "port-too-big", "port-in-use", "bad-host", "state-is-a-file",
         "state-cannot-be-made"],
)  # fmt: skip
def test_witness_serve_refuses_what_it_cannot_start_with(
    keys: Path, busy_port: int, extra: list[str], says: str
) -> None:
    argv = ["witness", "serve", "--key", "w.key", "--log", "log.pub", "--json"]
    done = run_in(keys, *argv, *[a.replace("{busy}", str(busy_port)) for a in extra])
    assert says in refused(done)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--interval", "-1"], "--interval must be"),
        (["--interval", "nan"], "--interval must be"),
        (["--interval", "0"], "--interval must be"),
        (["--cosignature-grace", "inf"], "--cosignature-grace must be"),
        (["--url", "http://[::1"], "base URL must be http(s)://"),
        (["--url", "ftp://x"], "base URL must be http(s)://"),
        (["--state", "/proc/nope/state.json"], "cannot be saved"),
    ],
    ids=["negative-interval", "nan-interval", "zero-interval", "infinite-grace",
         "malformed-url", "ftp-url", "unsavable-state"],
)  # fmt: skip
def test_audit_watch_refuses_what_it_cannot_work_with(
    keys: Path, extra: list[str], says: str
) -> None:
    """With ``--follow``: each was a traceback after the first check, or retried for ever."""
    store = f"sqlite:///{keys}/j.sqlite3"
    app = Application(store)
    app.operation("t.ok")(lambda ctx, params: {})
    app.run("t.ok", {}, actor="a", tenant="default")
    app.close()
    log_key = keys / "log.key"
    signer = SigningKey.generate("example.com/log")
    log_key.write_text(signer.encode() + "\n")
    (keys / "log.pub").write_text(signer.verifier().encode())
    signed = run_in(keys, "journal", "checkpoint", "--store", store, "--signing-key", "log.key")
    assert signed.returncode == 0, signed.stderr
    source = [] if "--url" in extra else ["--store", store]
    state = [] if "--state" in extra else ["--state", "st.json"]
    try:
        done = run_in(keys, "audit", "watch", "--key", "log.pub", "--follow", "--json",
                      "--cosignature-grace", "0", *source, *state, *extra)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("still running: retried for ever")
    assert says in refused(done)


def test_witness_serve_keeps_its_state_in_the_state_dir_by_default(keys: Path) -> None:
    """``$BLACKOPS_HOME/witness`` as every other default (H13), not ``./.blackops/witness``
    whatever the state dir (found by a defect hunt, stop 38)."""
    import json
    import os
    import signal
    import sys

    from cli_processes import ROOT

    home = keys / "home"
    env = {**os.environ, "BLACKOPS_HOME": str(home), "PYTHONPATH": str(ROOT)}
    served = subprocess.Popen(
        [sys.executable, "-m", "blackops", "witness", "serve", "--key", "w.key", "--log",
         "log.pub", "--port", "0", "--json"],
        cwd=keys, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert served.stdout is not None
        started = json.loads(served.stdout.readline())
    finally:
        served.send_signal(signal.SIGINT)
        served.communicate(timeout=30)
    assert started["state"] == str(home / "witness")
    assert (home / "witness").is_dir() and not (keys / ".blackops").exists()
