"""Reading a Prometheus scrape with prometheus_client's own text parser."""

from __future__ import annotations

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
