"""The routing table and upstream URLs: pure functions against golden tables."""

from __future__ import annotations

import pytest

from userland.proxy.rules.routing import (
    TemplateRoute,
    build_routes,
    lost_to,
    request_host,
    route_for,
    upstream_url,
)

IDE = TemplateRoute("classroom", "vscode", 8080, host="ide.example.edu")
PMA = TemplateRoute("classroom", "pma", 80, host="pma.example.edu")
NOTE = TemplateRoute("classroom", "notebook", 8888, path_prefix="/nb/")
NOTE_DEEP = TemplateRoute("classroom", "notebook-gpu", 8888, path_prefix="/nb/gpu/")
ROOT_PREFIX = TemplateRoute("other", "everything", 80, path_prefix="/")
HOST_AND_PREFIX = TemplateRoute("classroom", "sql", 80, host="userland.example.edu", path_prefix="/sql/")
TABLE = build_routes([IDE, PMA, NOTE, NOTE_DEEP, HOST_AND_PREFIX])

GOLDEN = [
    ("ide.example.edu", "/", IDE),
    ("ide.example.edu", "/nb/x", IDE),  # a host route owns every path on its host
    ("pma.example.edu", "/index.php", PMA),
    ("userland.example.edu", "/nb/", NOTE),
    ("userland.example.edu", "/nb", NOTE),
    ("userland.example.edu", "/nb/lab?x=1", NOTE),
    ("userland.example.edu", "/nb/gpu/", NOTE_DEEP),  # longest prefix wins
    ("userland.example.edu", "/nb/gpu", NOTE_DEEP),
    ("userland.example.edu", "/nbextra", None),  # never a partial segment
    ("userland.example.edu", "/sql/", HOST_AND_PREFIX),
    ("anything.example.edu", "/nb/x", NOTE),
    ("anything.example.edu", "/sql/", None),  # host+prefix only on its host
    ("userland.example.edu", "/", None),
    ("unknown.example.edu", "/", None),
]


@pytest.mark.parametrize(("host", "path", "expected"), GOLDEN)
def test_route_for_golden(host: str, path: str, expected: TemplateRoute | None) -> None:
    assert route_for(host, path, TABLE) == expected


def test_root_prefix_catches_all_hosts_without_a_host_route() -> None:
    table = build_routes([IDE, ROOT_PREFIX])
    assert route_for("ide.example.edu", "/x", table) == IDE
    assert route_for("else.example.edu", "/x", table) == ROOT_PREFIX


def test_conflicting_templates_resolve_to_the_older_and_the_newer_is_not_routed() -> None:
    older = TemplateRoute("b-ns", "ide", 80, host="ide.example.edu", created="2026-01-01T00:00:00Z",
                          display_name="IDE")
    newer = TemplateRoute("a-ns", "ide", 80, host="ide.example.edu", created="2026-01-02T00:00:00Z")
    notes = TemplateRoute("a-ns", "notes", 80, host="notes.example.edu", created="2026-01-02T00:00:00Z")
    for order in ([older, newer, notes], [notes, newer, older]):
        table = build_routes(order)
        assert route_for("ide.example.edu", "/", table) == older
        assert table.routed_out == (newer,)
        assert [c.other for c in table.collisions["b-ns/ide"]] == ["a-ns/ide"]
        assert lost_to(older, table) == (newer,) and lost_to(notes, table) == ()


def test_the_platform_host_is_never_a_template_route() -> None:
    mine = TemplateRoute("c", "ide", 80, host="userland.example.edu")
    table = build_routes([mine, IDE], platform_host="userland.example.edu")
    assert route_for("userland.example.edu", "/", table) is None
    assert table.routed_out == (mine,) and table.hosts == {"ide.example.edu"}


def test_hosts_lists_every_template_host() -> None:
    assert TABLE.hosts == {"ide.example.edu", "pma.example.edu", "userland.example.edu"}


@pytest.mark.parametrize(("header", "host"), [
    ("IDE.Example.EDU", "ide.example.edu"),
    ("ide.example.edu:8443", "ide.example.edu"),
    ("ide.example.edu.", "ide.example.edu"),
    ("[::1]:8080", "[::1]"),
    ("", ""),
    (None, ""),
])
def test_request_host(header: str | None, host: str) -> None:
    assert request_host(header) == host


def test_upstream_url_dns_mode_uses_the_service_name_and_ignores_the_annotation() -> None:
    url = upstream_url("dns", service="vscode-alice-svc", namespace="classroom", port=8080,
                       cluster_domain="cluster.local", annotation="http://127.0.0.1:1")
    assert url == "http://vscode-alice-svc.classroom.svc.cluster.local:8080"


def test_upstream_url_dns_mode_custom_cluster_domain() -> None:
    url = upstream_url("dns", service="s", namespace="n", port=1, cluster_domain="k8s.example",
                       annotation=None)
    assert url == "http://s.n.svc.k8s.example:1"


@pytest.mark.parametrize(("annotation", "expected"), [
    ("http://127.0.0.1:40123", "http://127.0.0.1:40123"),
    ("http://127.0.0.1:40123/", "http://127.0.0.1:40123"),
    (None, None),  # the local runner has not written it yet: not ready
    ("", None),
    ("file:///etc/passwd", None),
])
def test_upstream_url_local_mode_uses_only_the_annotation(annotation: str | None, expected: str | None
                                                           ) -> None:
    url = upstream_url("local", service="s", namespace="n", port=8080, cluster_domain="cluster.local",
                       annotation=annotation)
    assert url == expected
