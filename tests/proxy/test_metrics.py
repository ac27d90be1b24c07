"""The gateway's metrics text (proxy/metrics.py), read back with Prometheus' own parser."""

from __future__ import annotations

from tests.support.metrics import Samples, parse
from userland.proxy.metrics import GatewayMetrics


def samples(metrics: GatewayMetrics) -> Samples:
    return parse(metrics.render().decode())


def test_requests_by_class_and_the_latency_histogram() -> None:
    metrics = GatewayMetrics("w1")
    for status, seconds in ((200, 0.0004), (200, 0.001), (302, 0.003), (404, 0.02), (502, 45.0)):
        metrics.observe(status, seconds)
    metrics.observe(101, 600.0, latency=False)  # a WebSocket: counted, not a latency
    metrics.observe(0, 0.1)  # no status class: not counted by class
    found = samples(metrics)

    def requests(code: str) -> float:
        return found[("userland_gateway_requests_total", (("code_class", code), ("worker", "w1")))]

    assert [requests(c) for c in ("1xx", "2xx", "3xx", "4xx", "5xx")] == [1, 2, 1, 1, 1]

    def bucket(le: str) -> float:
        return found[("userland_gateway_request_duration_seconds_bucket", (("le", le), ("worker", "w1")))]

    # Cumulative, each bound inclusive (0.001 counts in le="0.001").
    assert [bucket(le) for le in ("0.001", "0.005", "0.025", "0.1", "30.0", "+Inf")] == [2, 3, 4, 5, 5, 6]
    count = found[("userland_gateway_request_duration_seconds_count", (("worker", "w1"),))]
    total = found[("userland_gateway_request_duration_seconds_sum", (("worker", "w1"),))]
    assert count == 6 and abs(total - 45.1244) < 1e-9


def test_websockets_and_upstream_errors() -> None:
    metrics = GatewayMetrics("w2")
    metrics.websocket_opened()
    metrics.websocket_opened()
    metrics.websocket_closed()
    metrics.upstream_error("refused")
    found = samples(metrics)
    assert found[("userland_gateway_websockets_active", (("worker", "w2"),))] == 1
    assert found[("userland_gateway_upstream_errors_total", (("kind", "refused"), ("worker", "w2")))] == 1


def test_every_upstream_error_kind_has_its_series_from_the_start() -> None:
    import re
    from pathlib import Path

    from userland.proxy.metrics import UPSTREAM_ERROR_KINDS

    proxy = Path(__file__).resolve().parents[2] / "proxy"
    raised = {kind for path in proxy.glob("*.py")
              for kind in re.findall(r'UpstreamError\("(\w+)"', path.read_text())}
    assert raised and raised <= set(UPSTREAM_ERROR_KINDS)
    found = samples(GatewayMetrics("w3"))
    for kind in UPSTREAM_ERROR_KINDS:
        assert found[("userland_gateway_upstream_errors_total", (("kind", kind), ("worker", "w3")))] == 0
