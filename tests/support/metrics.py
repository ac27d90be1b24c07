"""Reading a /metrics page as Prometheus reads it (prometheus_client's own parser): every sample
by name and labels, and one sample's value."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    """The sample `name{labels}` (labels exactly these), 0 when absent (as a counter not yet
    incremented reads)."""
    return found.get((name, tuple(sorted(labels.items()))), 0.0)
