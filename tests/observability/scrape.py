"""Reading a Prometheus scrape with prometheus_client's own text parser, and a
`blackops worker` process serving its ``--metrics-port``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str, token: str | None) -> tuple[int, str, Samples]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(url, headers=headers, timeout=30)
    samples: Samples = {}
    if response.status_code == 200:
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return response.status_code, response.text, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value (0 when absent: a counter nobody has moved yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


METRICS_TOKEN = "metrics-secret"


def metrics_worker(
    folder: Path, app: str, store_url: str, port: int, log: Path, *flags: str
) -> subprocess.Popen[bytes]:
    """``blackops worker --app APP`` on ``store_url`` with ``--metrics-port PORT`` (token
    `METRICS_TOKEN`), run in ``folder`` (its modules importable) and logging to ``log``."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(folder),
           str(root)]), "BLACKOPS_METRICS_TOKEN": METRICS_TOKEN, "BLACKOPS_DEV_TOKEN": "",
           "BLACKOPS_HOME": str(folder / "home")}  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "blackops", "worker", "--app", app, "--store", store_url,
             "--metrics-port", str(port), "--poll-seconds", "0.05", *flags],
            cwd=folder, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
