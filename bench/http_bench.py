"""Submits over HTTP beside the floor, same run, same client (figures printed, never asserted).

Named ``http_bench.py``, not ``http.py``: a module called ``http`` in this folder would shadow
the standard library's ``http`` package whenever the folder is on ``sys.path``.

Per store (SQLite, PostgreSQL) it starts two servers on 127.0.0.1, each on a fresh store:

  ours    ``blackops serve --app bench.operations:WORKER_APP`` (its in-process worker on, as a
          user runs it), POST /v1/spaces/{space}/operations/bench.noop with
          ``Prefer: respond-async`` (Deferred, 202) or without (Inline, 200);
  floor   bench/http_floor.py: the same route in a minimal FastAPI app that inserts one row and
          commits (one transaction per request), on the same uvicorn settings.

and drives both with one bounded ``httpx.AsyncClient`` (at most C connections, C concurrent
requesters) at C = 1, 8, 32, interleaved per C so that machine noise hits both alike. Each cell
runs ``--seconds`` after a short warm-up; every answer must have the expected status (else the
cell is reported failed). Ratio = ours / floor in req/s.

``--ref DIR`` also serves ours from another checkout (``git worktree add --detach DIR main``),
on its own fresh store, in the same interleaving: before and after in one run (its rows say
``ref``; ratios are to the same floor).

Each row also gives each server's CPU per request (utime + stime of the whole process from
``/proc``, Linux only), the figure that holds on a shared machine. ``--threads`` breaks it
down by thread (named through ``py-spy dump`` when py-spy is installed; else by thread id,
the event loop being the main thread).

Usage: .venv/bin/python bench/http_bench.py [--stores sqlite,postgresql] [--clients 1,8,32]
       [--seconds 4] [--modes deferred,inline] [--no-worker] [--ref DIR] [--threads]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.append(str(Path(__file__).resolve().parent))

import httpx
from benchstores import Stores

ROOT = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).with_name("blackops")
TYPE = "bench.noop"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"port {port} never opened")


def wait_line(path: Path, process: subprocess.Popen[bytes], timeout: float = 60) -> str:
    """The first whole line ``path`` gets (serve listens before it prints its document)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text()
        if text.endswith("\n"):
            return text.splitlines()[0]
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        time.sleep(0.02)
    raise RuntimeError(f"{path} got no line")


class Server:
    def __init__(self, url: str, headers: dict[str, str], process: subprocess.Popen[bytes]):
        self.url, self.headers, self.process = url, headers, process
        self.cpu: tuple[dict[int, int], dict[int, int]] = ({}, {})

    def cpu_ms(self, requests: int) -> float | None:
        """The whole process's CPU per request in the last drive."""
        before, after = self.cpu
        if not after or not requests:
            return None
        spent = sum(after.values()) - sum(before.get(tid, 0) for tid in after)
        return round(spent * TICK_MS / requests, 3)


@contextmanager
def ours(
    store: str,
    home: Path,
    worker: bool = True,
    options: tuple[str, ...] = (),
    ref: Path | None = None,
) -> Iterator[Server]:
    """``blackops serve`` of the bench app on ``store`` (``options`` are more serve options),
    from the checkout ``ref`` instead of this one when given."""
    port = free_port()
    env = {**os.environ, "BLACKOPS_HOME": str(home)}
    if ref is not None:  # ahead of the editable install of this checkout
        env["PYTHONPATH"] = os.pathsep.join([str(ref), *filter(None, [env.get("PYTHONPATH")])])
    command = [str(CLI), "serve", "--app", "bench.operations:WORKER_APP", "--store", store]
    command += ["--port", str(port), "--json", *([] if worker else ["--no-worker"]), *options]
    out = home / f"serve-{port}.json"
    with out.open("wb") as stdout:
        process = subprocess.Popen(
            command, cwd=ref or ROOT, env=env, stdout=stdout, stderr=subprocess.DEVNULL
        )
    try:
        wait_port(port, process)
        started = json.loads(wait_line(out, process))
        url = f"http://127.0.0.1:{port}/v1/spaces/{started['space']}/operations/{TYPE}"
        yield Server(url, {"Authorization": f"Bearer {started['adminToken']}"}, process)
    finally:
        stop(process)


@contextmanager
def floor(store: str) -> Iterator[Server]:
    port = free_port()
    env = {**os.environ, "FLOOR_STORE": store}
    script = str(Path(__file__).with_name("http_floor.py"))
    process = subprocess.Popen(
        [sys.executable, script, str(port)], env=env, stderr=subprocess.DEVNULL
    )
    try:
        wait_port(port, process)
        yield Server(f"http://127.0.0.1:{port}/v1/spaces/s/operations/{TYPE}", {}, process)
    finally:
        stop(process)


def thread_cpu(pid: int) -> dict[int, int]:
    """CPU clock ticks (utime + stime) of each thread of ``pid`` so far ({} off Linux)."""
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        found[int(tid)] = int(fields[11]) + int(fields[12])
    return found


TICK_MS = 1000 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 10.0
SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


def thread_names(pid: int) -> dict[int, str]:
    """Thread id -> Python thread name, through ``py-spy dump`` (empty without py-spy)."""
    try:
        dump = subprocess.run([SPY, "dump", "-p", str(pid)], capture_output=True, text=True)
    except OSError:
        return {}
    names = {}
    for tid, name in re.findall(r'^Thread (\d+) \([a-z]+\): "(.*)"', dump.stdout, re.M):
        # One row per kind of thread: no worker ids, no pool numbers.
        names[int(tid)] = re.sub(r"(_\d+)$", " (pool)", re.sub(r"-[^ ]*:[0-9a-f]+", "", name))
    return names


_ROLES = {
    "MainThread": "event loop (main)",
    "AnyIO worker thread": "request threads (AnyIO)",
    "blackops": "worker coordinator",
    "blackops (pool)": "worker handlers",
    "blackops-workflows": "workflow runner",
}


def cpu_by_thread(
    pid: int, before: dict[int, int], after: dict[int, int], requests: float
) -> dict[str, float]:
    """ms of CPU per request of each kind of thread between two ``thread_cpu`` readings."""
    names = thread_names(pid)
    spent: dict[str, float] = {}
    for tid, ticks in after.items():
        name = names.get(tid, "event loop (main)" if tid == pid else f"thread {tid}")
        name = _ROLES.get(name, name)
        spent[name] = spent.get(name, 0.0) + (ticks - before.get(tid, 0)) * TICK_MS / requests
    return {k: round(v, 3) for k, v in sorted(spent.items(), key=lambda kv: -kv[1]) if v}


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


async def drive(
    server: Server, clients: int, seconds: float, deferred: bool
) -> tuple[float, float, str]:
    """req/s, p50 ms, and a failure ('' if none) for ``clients`` concurrent requesters;
    ``server.cpu`` is then its threads' CPU before and after the measured part."""
    headers = dict(server.headers)
    expected = 202 if deferred else 200
    if deferred:
        headers["Prefer"] = "respond-async"
    latencies: list[float] = []
    failures: list[str] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def one(n: int) -> float:
            start = time.perf_counter()
            try:
                answer = await client.post(server.url, headers=headers, content=b'{"n":%d}' % n)
            except httpx.TransportError as error:  # a dropped connection fails the cell only
                failures.append(f"{type(error).__name__}: {error}")
                return time.perf_counter() - start
            if answer.status_code != expected:
                failures.append(f"{answer.status_code} {answer.text[:200]}")
            return time.perf_counter() - start

        async def loop(until: float, record: bool) -> None:
            n = 0
            while time.perf_counter() < until:
                took = await one(n)
                n += 1
                if record:
                    latencies.append(took)

        await asyncio.gather(*(loop(time.perf_counter() + 0.5, False) for _ in range(clients)))
        before = thread_cpu(server.process.pid)
        start = time.perf_counter()
        await asyncio.gather(*(loop(start + seconds, True) for _ in range(clients)))
        took = time.perf_counter() - start
        server.cpu = (before, thread_cpu(server.process.pid))
    p50 = statistics.median(latencies) * 1000 if latencies else float("nan")
    return len(latencies) / took, p50, "; ".join(failures[:3])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--modes", default="deferred,inline")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument(
        "--no-worker",
        action="store_true",
        help="serve ours without its in-process worker (the request path alone: on SQLite "
        "the worker's claim and end commits share the one write lock with the submits)",
    )
    parser.add_argument("--ref", type=Path, help="also serve ours from this checkout")
    parser.add_argument(
        "--threads", action="store_true", help="also each server's CPU per request by thread"
    )
    args = parser.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    modes = args.modes.split(",")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        stores = Stores(Path(tmp), "http")
        for kind in args.stores.split(","):
            with ExitStack() as stack:
                url = stack.enter_context(stores.fresh(kind))
                mine = stack.enter_context(ours(url, Path(tmp), worker=not args.no_worker))
                servers = [("", mine)]
                if args.ref is not None:
                    ref_url = stack.enter_context(stores.fresh(kind))
                    served = ours(ref_url, Path(tmp), worker=not args.no_worker, ref=args.ref)
                    servers.insert(0, ("ref ", stack.enter_context(served)))
                low = stack.enter_context(floor(stack.enter_context(stores.fresh(kind))))
                for c in clients:
                    base, base_p50, why = asyncio.run(drive(low, c, args.seconds, True))
                    if why:
                        print(f"floor {kind} c={c} failed: {why}", file=sys.stderr)
                    base_n = round(base * args.seconds)
                    base_cpu = low.cpu_ms(base_n)
                    if args.threads:
                        threads = cpu_by_thread(low.process.pid, *low.cpu, base_n)
                        print(json.dumps({"floor": kind, "clients": c, "threads": threads}),
                              file=sys.stderr)  # fmt: skip
                    for mode, (tag, server) in [(m, s) for m in modes for s in servers]:
                        rate, p50, why = asyncio.run(
                            drive(server, c, args.seconds, mode == "deferred")
                        )
                        n = round(rate * args.seconds)
                        row = {
                            "store": kind, "mode": tag + mode, "clients": c,
                            "ours_req_s": round(rate, 1), "ours_p50_ms": round(p50, 2),
                            "floor_req_s": round(base, 1), "floor_p50_ms": round(base_p50, 2),
                            "ratio": round(rate / base, 2) if base else None,
                            "ours_cpu_ms": server.cpu_ms(n), "floor_cpu_ms": base_cpu,
                            "failed": why or None, "load": round(os.getloadavg()[0], 1),
                        }  # fmt: skip
                        if args.threads:
                            row["threads"] = cpu_by_thread(server.process.pid, *server.cpu, n)
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr, flush=True)
    print(
        "| store | mode | clients | ours req/s | p50 ms | floor req/s | p50 ms | ratio "
        "| ours CPU ms/req | floor CPU ms/req | load |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        failed = " (FAILED)" if r["failed"] else ""
        print(
            f"| {r['store']} | {r['mode']} | {r['clients']} | {r['ours_req_s']}{failed} | "
            f"{r['ours_p50_ms']} | {r['floor_req_s']} | {r['floor_p50_ms']} | {r['ratio']} | "
            f"{r['ours_cpu_ms']} | {r['floor_cpu_ms']} | {r['load']} |"
        )


if __name__ == "__main__":
    main()
