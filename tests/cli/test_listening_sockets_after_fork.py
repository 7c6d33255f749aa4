"""A process's listening sockets are not carried by the executors it forks: ``serve``'s
HTTP socket was (found by review, stop 36), so once uvicorn closed it the kernel still
accepted connections in the executors' copy, which nobody answered until the drain ended.
A worker's ``--metrics-port`` already was not (tests/observability). And a host that is no
name is refused as every other bad ``--metrics-host``, not with a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_processes import ROOT
from served import blackops_serve


def _listening_inode(port: int) -> str:
    """The inode of the socket listening on ``port`` (IPv4), from /proc/net/tcp."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # 0A: LISTEN
            return fields[9]
    raise AssertionError(f"nothing listens on {port}")


def _socket_inodes(pid: int) -> set[str]:
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[len("socket:[") : -1])
    return found


def _children(pid: int) -> list[int]:
    tasks = Path(f"/proc/{pid}/task")
    return [
        int(child) for task in tasks.iterdir() for child in (task / "children").read_text().split()
    ]


def test_serves_executors_do_not_hold_its_listening_socket(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with blackops_serve(f"sqlite:///{tmp_path}/j.sqlite3", home) as served:
        port = int(served.url.rsplit(":", 1)[1])
        listening = _listening_inode(port)
        assert listening in _socket_inodes(served.process.pid)
        deadline = time.monotonic() + 60
        while not (executors := _children(served.process.pid)):  # forked as the runner starts
            assert time.monotonic() < deadline, "no executor was forked"
            time.sleep(0.1)
        for executor in executors:
            assert listening not in _socket_inodes(executor), executor


@pytest.mark.parametrize("host", ["\u00e9" * 70, "a\udcffb"])  # IDNA cannot encode; no UTF-8
@pytest.mark.parametrize(
    "flags",
    [
        ["worker", "--metrics-port", "0", "--metrics-token", "t", "--metrics-host"],
        ["serve", "--port", "0", "--host"],
    ],
)
def test_a_host_that_is_no_name_is_refused(tmp_path: Path, flags: list[str], host: str) -> None:
    env = {**os.environ, "BLACKOPS_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "blackops", *flags, host, "--json",
         "--store", f"sqlite:///{tmp_path}/j.db"],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "invalid_request"
    assert not (tmp_path / "j.db").exists()
