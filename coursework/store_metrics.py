"""The assignment store's figures as Prometheus text (served at the store's /metrics): how full its
volume is, and what each course keeps against its quota (docs/metrics.md; the alert
UserlandStoreVolumeFilling and its runbook read them)."""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from userland.coursework.store_files import StoreFiles


class _StoreCollector:
    def __init__(self, files: StoreFiles, outcomes: dict[tuple[str, str, str], int]) -> None:
        self.files = files
        self.outcomes = outcomes

    def collect(self) -> list[Metric]:
        disk = os.statvfs(self.files.root)
        size = GaugeMetricFamily("userland_store_volume_size_bytes",
                                 "Bytes of the store's volume (its file system).")
        size.add_metric([], disk.f_blocks * disk.f_frsize)
        free = GaugeMetricFamily("userland_store_volume_free_bytes",
                                 "Bytes of the store's volume still free for the store to write.")
        free.add_metric([], disk.f_bavail * disk.f_frsize)
        courses = GaugeMetricFamily("userland_store_course_bytes",
                                    "Bytes a course keeps in the store (deleted assignments included until "
                                    "they are removed).", labels=["namespace"])
        for namespace in sorted({ref.namespace for ref in self.files.refs()}):
            courses.add_metric([namespace], self.files.course_usage(namespace))
        quota = GaugeMetricFamily("userland_store_course_quota_bytes",
                                  "Bytes each course may keep in the store (0: no quota).")
        quota.add_metric([], self.files.quotas.course)
        results = CounterMetricFamily(
            "userland_grading_results_total",
            "Gradings recorded by this store process, by course, kind (grade; check: Check my work) and "
            "outcome (graded, or the reason: TimedOut, OutOfMemory, NoResults, ResultsTooLarge, "
            "ResultsInvalid, GraderFailed)", labels=["course", "kind", "outcome"])
        for (course, kind, outcome), count in sorted(self.outcomes.items()):
            results.add_metric([course, kind, outcome], count)
        return [size, free, courses, quota, results]


def metrics_text(files: StoreFiles, outcomes: dict[tuple[str, str, str], int] | None = None) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StoreCollector(files, outcomes or {}))  # type: ignore[arg-type]
    return generate_latest(registry).decode()
